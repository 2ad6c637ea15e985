//! The fault suite (docs/safety.md): a short mixed-nemesis run of the real
//! binary in a network namespace (plain ACQUIREs, counted and multi-key holds), and
//! tests that prove the checker catches violations.
//!
//! Longer runs: `scripts/torture.sh --minutes N --seed S [--nodes 3|5]`, or
//! `TICKETING_FAULT_SECS=… TICKETING_FAULT_SEED=… cargo test --release --test fault_suite`.
//! Re-check a saved history: `TICKETING_FAULT_REPLAY=path/history.jsonl cargo test
//! --release --test fault_suite replay -- --nocapture`.

mod common;
mod faults;

use faults::checker::{self, CheckConfig};
use faults::history::{AcqOutcome, Event, Part, PoolOutcome, QueryOutcome, RelOutcome};

const S: u64 = 1_000_000;

fn grant(client: u32, key: &str, token: u64, sent: u64, received: u64, lease_s: u64) -> Event {
    Event::Acquire {
        client,
        thread: 0,
        key: key.into(),
        lease_ms: lease_s * 1000,
        wait_ms: 1000,
        invoke: sent,
        complete: received,
        outcome: AcqOutcome::Granted { token, sent, deadline: sent + lease_s * S },
    }
}

/// A granted HOLD of `parts` (key, count, capacity), sent at `sent`, G at `received`.
fn hold(
    client: u32,
    parts: &[(&str, u32, u32)],
    token: u64,
    sent: u64,
    received: u64,
    lease_s: u64,
) -> Event {
    Event::Hold {
        client,
        thread: 0,
        parts: parts.iter().map(|(k, c, cap)| Part { key: (*k).into(), count: *c, capacity: *cap }).collect(),
        lease_ms: lease_s * 1000,
        wait_ms: 1000,
        invoke: sent,
        complete: received,
        outcome: AcqOutcome::Granted { token, sent, deadline: sent + lease_s * S },
    }
}

/// A POOL read from `invoke` to `invoke` + 1 ms that saw `in_use` permits of
/// `capacity` held by the holds `tokens`.
fn pool(client: u32, key: &str, invoke: u64, capacity: u32, in_use: u32, tokens: &[u64]) -> Event {
    let outcome = PoolOutcome::Seen { capacity, in_use, holds: tokens.len() as u32, tokens: tokens.to_vec() };
    Event::Pool { client, thread: 0, key: key.into(), invoke, complete: invoke + 1000, outcome }
}

fn query(client: u32, key: &str, invoke: u64, outcome: QueryOutcome) -> Event {
    Event::Query { client, thread: 0, key: key.into(), invoke, complete: invoke + 1000, outcome }
}

fn release(client: u32, key: &str, token: u64, invoke: u64, outcome: RelOutcome) -> Event {
    Event::Release { client, thread: 0, key: key.into(), token, invoke, complete: invoke + 1000, outcome }
}

fn write(seq: u64, client: u32, key: &str, token: u64, at: u64, accepted: bool) -> Event {
    Event::Write { seq, client, thread: 0, key: key.into(), token, at, accepted, zombie: false }
}

/// A well-behaved history: hand-off on release, a lease that ran out, a stale write
/// rejected, a query after the release seeing the new holder.
fn clean_history() -> Vec<Event> {
    vec![
        grant(1, "k", 100, 0, 10_000, 2),
        write(1, 1, "k", 100, 20_000, true),
        release(1, "k", 100, S, RelOutcome::Released),
        grant(2, "k", 101, 500_000, S + 5_000, 2),
        write(2, 2, "k", 101, S + 10_000, true),
        // Client 2 stalls past its lease; client 3 gets the key after it ran out.
        grant(3, "k", 102, 2 * S, 3 * S, 2),
        write(3, 3, "k", 102, 3 * S + 1000, true),
        write(4, 2, "k", 101, 3 * S + 2000, false),
        release(2, "k", 101, 3 * S + 3000, RelOutcome::NotHolder),
        release(3, "k", 102, 3 * S + 500_000, RelOutcome::Released),
        Event::Query {
            client: 4,
            thread: 0,
            key: "k".into(),
            invoke: 4 * S,
            complete: 4 * S + 1000,
            outcome: QueryOutcome::Free,
        },
        Event::Fault {
            kind: "pause-node".into(),
            detail: "x".into(),
            start: 5 * S,
            end: 6 * S,
            healed: true,
        },
        grant(1, "j", 200, 6 * S, 7 * S, 1),
        release(1, "j", 200, 7 * S + 100, RelOutcome::Released),
    ]
}

#[test]
fn checker_accepts_a_clean_history() {
    let r = checker::check(&clean_history(), &CheckConfig { run_end: 100 * S, ..CheckConfig::default() });
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.grants, r.writes_rejected, r.released), (4, 1, 3));
    assert_eq!(r.faults.get("pause-node"), Some(&1));
}

#[test]
fn checker_flags_an_overlap_a_token_going_back_and_a_stale_accepted_write() {
    let mut h = clean_history();
    // Overlap: client 5 is granted "k" at 3.2 s while client 3 (token 102, lease to
    // 4 s, released at 3.5 s) still holds it.
    h.push(grant(5, "k", 103, 3 * S + 100_000, 3 * S + 200_000, 2));
    // Token going back: an ACQUIRE invoked at 9 s, after token 200 was received at
    // 7 s, is granted token 150.
    h.push(grant(6, "j", 150, 9 * S, 9 * S + 10_000, 1));
    // A stale write accepted: token 101 accepted after token 102 had written.
    h.push(write(5, 2, "k", 101, 3 * S + 300_000, true));
    // An acknowledged release undone: token 102 seen holding after its R.
    h.push(Event::Query {
        client: 4,
        thread: 0,
        key: "k".into(),
        invoke: 3 * S + 600_000,
        complete: 3 * S + 601_000,
        outcome: QueryOutcome::Holder(102),
    });
    // A lease that ended early: token 500 (deadline 53 s), released at 51 s, answered N
    // in 1 ms. The same N after 1.5 s (a retried release) is not judged.
    h.push(grant(9, "m", 500, 50 * S, 50 * S + 100_000, 3));
    h.push(release(9, "m", 500, 51 * S, RelOutcome::NotHolder));
    h.push(grant(9, "n", 501, 60 * S, 60 * S + 100_000, 3));
    h.push(Event::Release {
        client: 9,
        thread: 0,
        key: "n".into(),
        token: 501,
        invoke: 61 * S,
        complete: 62 * S + 500_000,
        outcome: RelOutcome::NotHolder,
    });
    // No recovery: a fault healed at 20 s and no grant before the next fault, injected
    // at 25 s (after that one, the grant at 50 s is its recovery).
    h.push(Event::Fault {
        kind: "isolate-leader".into(),
        detail: "y".into(),
        start: 15 * S,
        end: 20 * S,
        healed: true,
    });
    h.push(Event::Fault {
        kind: "pause-node".into(),
        detail: "z".into(),
        start: 25 * S,
        end: 28 * S,
        healed: true,
    });
    let r = checker::check(&h, &CheckConfig { run_end: 100 * S, ..CheckConfig::default() });
    eprintln!("{}", r.render("hand-made violations"));
    assert_eq!(r.count(checker::OVERLAP), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::TOKEN_ORDER), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::STALE_WRITE), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::RELEASE_UNDONE), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::NO_RECOVERY), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::LEASE_EARLY), 1, "{:?}", r.violations);
    assert_eq!(r.early_not_holder_after_retry, 1);
}

#[test]
fn checker_flags_fifo_and_reused_tokens() {
    let mut h = clean_history();
    // Client 7 sends two ACQUIREs for "q" on its connection, 10 ms apart; the second
    // is granted first.
    h.push(grant(7, "q", 300, 30 * S, 30 * S + 500_000, 2));
    h.push(grant(7, "q", 299, 30 * S + 10_000, 30 * S + 20_000, 2));
    h.push(grant(8, "z", 300, 40 * S, 40 * S + 1000, 1));
    let r = checker::check(&h, &CheckConfig { run_end: 100 * S, ..CheckConfig::default() });
    assert!(r.count(checker::FIFO) >= 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::TOKEN_REUSED), 1, "{:?}", r.violations);
}

/// Counted and multi-key holds that behave: two holds of a stock of 3 (2 + 1 permits),
/// a third once the first is released, a hold of k1+k0 then a plain ACQUIRE of k0 that
/// waited for it, a hold of k1 and a permit of the stock, an indeterminate hold; reads
/// inside the windows show the holds.
fn clean_holds() -> Vec<Event> {
    let ms = S / 1000;
    vec![
        hold(1, &[("s0", 2, 3)], 100, 0, 10 * ms, 2),
        hold(2, &[("s0", 1, 3)], 110, 5 * ms, 20 * ms, 2),
        pool(1, "s0", 30 * ms, 3, 3, &[100, 110]),
        release(1, "s0", 100, 500 * ms, RelOutcome::Released),
        hold(3, &[("s0", 2, 3)], 120, 100 * ms, 550 * ms, 2),
        release(2, "s0", 110, 600 * ms, RelOutcome::Released),
        release(3, "s0", 120, 900 * ms, RelOutcome::Released),
        hold(1, &[("k1", 1, 1), ("k0", 1, 1)], 130, S, S + 10 * ms, 1),
        write(1, 1, "k0", 130, S + 20 * ms, true),
        write(2, 1, "k1", 130, S + 21 * ms, true),
        query(4, "k0", S + 100 * ms, QueryOutcome::Holder(130)),
        pool(1, "k1", S + 120 * ms, 1, 1, &[130]),
        release(1, "k1", 130, S + 300 * ms, RelOutcome::Released),
        Event::Acquire {
            client: 2,
            thread: 0,
            key: "k0".into(),
            lease_ms: 1000,
            wait_ms: 1000,
            invoke: S + 50 * ms,
            complete: S + 310 * ms,
            outcome: AcqOutcome::Granted { token: 140, sent: S + 50 * ms, deadline: 2 * S + 50 * ms },
        },
        write(3, 2, "k0", 140, S + 320 * ms, true),
        release(2, "k0", 140, S + 400 * ms, RelOutcome::Released),
        hold(3, &[("k1", 1, 1), ("s0", 1, 3)], 150, 2 * S, 2 * S + 10 * ms, 1),
        pool(3, "s0", 2 * S + 20 * ms, 3, 1, &[150]),
        release(3, "k1", 150, 2 * S + 200 * ms, RelOutcome::Released),
        query(4, "k1", 2 * S + 300 * ms, QueryOutcome::Free),
        Event::Hold {
            client: 4,
            thread: 0,
            parts: vec![
                Part { key: "k0".into(), count: 1, capacity: 1 },
                Part { key: "k1".into(), count: 1, capacity: 1 },
            ],
            lease_ms: 1000,
            wait_ms: 0,
            invoke: 3 * S,
            complete: 4 * S,
            outcome: AcqOutcome::Indeterminate("NoAnswer".into()),
        },
    ]
}

#[test]
fn checker_accepts_clean_counted_and_multi_key_holds() {
    let r = checker::check(&clean_holds(), &CheckConfig { run_end: 100 * S, ..CheckConfig::default() });
    eprintln!("{}", r.render("clean holds"));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.holds, r.hold_grants, r.hold_grants_multi), (6, 5, 2));
    assert_eq!(r.hold_indeterminate.values().sum::<u64>(), 1);
    // s0: four windows, three permits held at once (holds 100 and 110, then 110 and 120).
    assert_eq!((r.counted_windows, r.peak_permits), (4, 3));
    // The stock read at 30 ms is judged for holds 100 and 110; then k0, k1 and s0 once.
    assert_eq!(r.whole_reads, 5);
    assert_eq!(r.pool_peak_in_use, 3);
}

#[test]
fn checker_flags_over_capacity_split_holds_and_tokens_going_back_on_a_key() {
    let ms = S / 1000;
    let mut h = clean_holds();
    // Over capacity: 2 more permits of the stock of 3 at 0.3 s while holds 100 (2) and
    // 110 (1) still hold theirs; a POOL read saw the server with 4 in use.
    h.push(hold(4, &[("s0", 2, 3)], 115, 200 * ms, 300 * ms, 2));
    h.push(pool(4, "s0", 350 * ms, 3, 4, &[100, 110, 115]));
    h.push(release(4, "s0", 115, 400 * ms, RelOutcome::Released));
    // A release undone: the stock read at 0.7 s still lists hold 100, released at 0.5 s.
    h.push(pool(3, "s0", 700 * ms, 3, 3, &[100, 120]));
    // Split multi-key grants: hold 300 of a+b, but a QUERY of b inside its window finds
    // b free; hold 310 of c+d, but a POOL read of d finds another hold's token there.
    h.push(hold(5, &[("a", 1, 1), ("b", 1, 1)], 300, 10 * S, 10 * S + 10 * ms, 1));
    h.push(query(6, "b", 10 * S + 500 * ms, QueryOutcome::Free));
    h.push(hold(5, &[("c", 1, 1), ("d", 1, 1)], 310, 12 * S, 12 * S + 10 * ms, 1));
    h.push(pool(5, "d", 12 * S + 500 * ms, 1, 1, &[311]));
    // Tokens going back on key e: token 400 held e from 20.01 s to 20.5 s, then token
    // 390 (asked for before 400 was granted, so the real-time order says nothing) from 21 s.
    h.push(grant(6, "e", 400, 20 * S, 20 * S + 10 * ms, 1));
    h.push(release(6, "e", 400, 20 * S + 500 * ms, RelOutcome::Released));
    h.push(grant(7, "e", 390, 19 * S + 900 * ms, 21 * S, 2));
    h.push(release(7, "e", 390, 21 * S + 500 * ms, RelOutcome::Released));
    let r = checker::check(&h, &CheckConfig { run_end: 100 * S, ..CheckConfig::default() });
    eprintln!("{}", r.render("hand-made hold violations"));
    assert_eq!(r.count(checker::OVER_CAPACITY), 2, "{:?}", r.violations);
    assert_eq!(r.count(checker::NOT_WHOLE), 2, "{:?}", r.violations);
    assert_eq!(r.count(checker::TOKEN_KEY_ORDER), 1, "{:?}", r.violations);
    assert_eq!(r.count(checker::RELEASE_UNDONE), 1, "{:?}", r.violations);
    assert_eq!(r.violations.len(), 6, "{:?}", r.violations);
}

#[test]
fn history_lines_round_trip() {
    let mut h = clean_history();
    h.push(Event::Acquire {
        client: 1,
        thread: 2,
        key: "weird \"key\"\n".into(),
        lease_ms: 1000,
        wait_ms: 0,
        invoke: 1,
        complete: 2,
        outcome: AcqOutcome::Indeterminate("NoAnswer".into()),
    });
    h.extend(clean_holds());
    h.push(hold(1, &[("a,\"b\"", 1, 1), ("[s]", 2, 1_000_000)], 7, 1, 2, 3));
    h.push(pool(1, "[s]", 5, 0, 0, &[]));
    h.push(Event::Pool {
        client: 1,
        thread: 1,
        key: "k".into(),
        invoke: 1,
        complete: 2,
        outcome: PoolOutcome::Failed("NotLeader".into()),
    });
    for e in &h {
        assert_eq!(&Event::from_json(&e.to_json()).unwrap(), e);
    }
}

/// CI's short mixed-nemesis run (about 100 s of workload by default).
#[test]
fn mixed_nemesis_short_run() {
    let cfg = faults::RunConfig::from_env(100);
    let out = faults::run(&cfg);
    eprintln!("{}", out.text);
    assert!(out.report.grants > 50, "the workload made too little progress:\n{}", out.text);
    assert!(out.report.hold_grants_multi > 5, "too few multi-key holds were granted:\n{}", out.text);
    assert!(out.report.counted_windows > 5, "too few counted holds were granted:\n{}", out.text);
    assert!(out.report.violations.is_empty(), "{}", out.text);
}

/// CI's run over shaped peer links (about 60 s of workload by default): every message
/// between two nodes crosses a delay proxy, 20 ms ± 10 ms one way, and 200 ms ± 10 ms
/// toward the first node (a slow node); the mixed nemeses run as usual.
/// `TICKETING_FAULT_LINKS=LAT,JITTER[,SLOW]` changes the shapes.
#[test]
fn delayed_links_short_run() {
    let mut cfg = faults::RunConfig::from_env(60);
    if cfg.links.is_none() {
        cfg.links = Some(faults::parse_links("20,10,200").unwrap());
        cfg.out_dir = cfg
            .out_dir
            .with_file_name(format!("{}-links", cfg.out_dir.file_name().unwrap().to_string_lossy()));
    }
    let out = faults::run(&cfg);
    eprintln!("{}", out.text);
    assert!(out.report.grants > 30, "the workload made too little progress:\n{}", out.text);
    assert!(out.report.violations.is_empty(), "{}", out.text);
}

/// Re-checks a saved history (`TICKETING_FAULT_REPLAY=path`); does nothing otherwise.
#[test]
fn replay() {
    let Some(path) = std::env::var_os("TICKETING_FAULT_REPLAY") else { return };
    let events = faults::load_history(std::path::Path::new(&path)).unwrap();
    let run_end = events
        .iter()
        .map(|e| match e {
            Event::Acquire { complete, .. }
            | Event::Hold { complete, .. }
            | Event::Release { complete, .. }
            | Event::Query { complete, .. }
            | Event::Pool { complete, .. } => *complete,
            Event::Write { at, .. } => *at,
            Event::Fault { end, .. } => *end,
        })
        .max()
        .unwrap_or(0);
    let r = checker::check(&events, &CheckConfig { run_end, ..CheckConfig::default() });
    eprintln!("{}", r.render(&format!("replay of {}", std::path::Path::new(&path).display())));
    assert!(r.violations.is_empty());
}

/// The delay line itself: latency and jitter within bounds, order kept, bandwidth
/// limited, and a "lost" chunk held one retransmission timeout.
#[test]
fn delay_proxy_delays_in_order_limits_bandwidth_and_turns_loss_into_delay() {
    use faults::delay::{DelayProxy, Shape, RTO_MS};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = sink.local_addr().unwrap();
    let listen = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let shape = Shape::latency(40, 10);
    let proxy = DelayProxy::start(listen, target, shape, Shape::default(), 1).unwrap();
    let mut out = TcpStream::connect(listen).unwrap();
    out.set_nodelay(true).unwrap();
    let (mut inp, _) = sink.accept().unwrap();
    inp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // 30 one-byte messages 5 ms apart: each arrives at least 30 ms after it left (40 ±
    // 10 ms, plus scheduling, which a busy machine makes long), never before one sent
    // earlier. How late is no claim here: the deadline is the read timeout.
    let reader = {
        let mut inp = inp.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < 30 {
                let mut b = [0u8; 64];
                let n = inp.read(&mut b).unwrap();
                let at = Instant::now();
                for x in &b[..n] {
                    got.push((*x, at));
                }
            }
            got
        })
    };
    let mut sent = Vec::new();
    for i in 0..30u8 {
        sent.push(Instant::now());
        out.write_all(&[i]).unwrap();
        // sleep: paces the writes, 5 ms apart, to see each one delayed on its own.
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = reader.join().unwrap();
    for (i, (x, at)) in got.iter().enumerate() {
        assert_eq!(*x as usize, i, "order kept");
        let took = *at - sent[i];
        assert!(took >= Duration::from_millis(30), "message {i} took {took:?}");
    }
    // Delays do not add up: each chunk waits out its own latency, not also those of the
    // chunks ahead of it. Two bytes 5 ms apart through 1 s of latency: the second arrives
    // well within that second after the first (a line that held one chunk at a time would
    // deliver it a whole latency later). The bound is the test's own latency, 200× the gap.
    proxy.set_shape(Shape::latency(1000, 0), Shape::default());
    let started = Instant::now();
    let read_before = proxy.bytes_read();
    out.write_all(&[1]).unwrap();
    // The line reads two chunks: the second byte is written once it has read the first.
    assert!(
        common::eventually(Duration::from_secs(5), || proxy.bytes_read() > read_before),
        "the line never read the first byte"
    );
    out.write_all(&[2]).unwrap();
    let mut two = [0u8; 1];
    inp.read_exact(&mut two).unwrap();
    let first = Instant::now();
    assert_eq!(two[0], 1, "order kept");
    assert!(first - started >= Duration::from_millis(1000), "{:?}", first - started);
    inp.read_exact(&mut two).unwrap();
    assert_eq!(two[0], 2, "order kept");
    assert!(
        first.elapsed() < Duration::from_millis(1000),
        "the second byte waited its own latency after the first"
    );
    // Bandwidth: 64 KiB at 256 KiB/s take at least a quarter second.
    proxy.set_shape(Shape { bytes_per_s: 256 * 1024, ..Shape::default() }, Shape::default());
    let started = Instant::now();
    out.write_all(&vec![7u8; 64 * 1024]).unwrap();
    let mut left = 64 * 1024;
    let mut b = vec![0u8; 16 * 1024];
    while left > 0 {
        left -= inp.read(&mut b).unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(240), "{:?}", started.elapsed());
    // Loss: every chunk "lost" once costs one retransmission timeout.
    proxy.set_shape(Shape { loss_per_mille: 1000, ..Shape::default() }, Shape::default());
    let started = Instant::now();
    out.write_all(&[1]).unwrap();
    inp.read_exact(&mut [0u8; 1]).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(RTO_MS), "{:?}", started.elapsed());
}
