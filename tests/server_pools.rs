//! Counted and multi-key holds and places in line on real processes, byte by byte
//! (docs/protocol.md §5.7–5.8): a stock of N, crossing key sets, strict FIFO across keys,
//! bad input, `I` frames before the answer, and pooled holds across a leader kill and a
//! snapshot install.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use ticketing::proto::frame::{ErrorCode, HoldPart, Request, Response};
use ticketing::proto::limits::{HOLD_KEYS_MAX, REQUEST_FRAME_LEN_MAX};

fn hold(owner: &str, wait_ms: u32, place: bool, parts: &[(&str, u32, u32)]) -> Request {
    let parts =
        parts.iter().map(|&(key, count, capacity)| HoldPart { key: key.into(), count, capacity }).collect();
    Request::Hold { lease_s: 60, wait_ms, place, owner: owner.into(), parts }
}

fn pool(c: &mut Raw, id: u32, key: &str) -> (u32, u32, u32, u32) {
    match c.call(id, &Request::Pool { key: key.into() }) {
        Response::Pool { capacity, in_use, holds, waiters, .. } => (capacity, in_use, holds, waiters),
        other => panic!("POOL {key}: {other:?}"),
    }
}

fn invalid(response: Response) -> String {
    match response {
        Response::Error { code: ErrorCode::Invalid, message } => message,
        other => panic!("not E 1: {other:?}"),
    }
}

#[test]
fn a_stock_of_three_with_five_callers_lets_three_in_and_the_rest_follow_in_order() {
    let server = start_server(&[]);
    let stock = [("tickets", 1, 3)];
    let mut callers: Vec<Raw> = (0..5).map(|_| connect(server.addr)).collect();
    let mut tokens = Vec::new();
    for (i, c) in callers.iter_mut().enumerate().take(3) {
        tokens.push(granted_token(&c.call(1, &hold(&format!("buyer-{i}"), 30_000, false, &stock))));
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // One after the other, so that the server takes them in this order.
    callers[3].send(1, &hold("buyer-3", 30_000, false, &stock));
    assert!(eventually(Duration::from_secs(10), || pool(&mut connect(server.addr), 1, "tickets").3 == 1));
    callers[4].send(1, &hold("buyer-4", 30_000, false, &stock));
    assert!(eventually(Duration::from_secs(10), || pool(&mut connect(server.addr), 1, "tickets").3 == 2));
    let mut watcher = connect(server.addr);
    assert_eq!(pool(&mut watcher, 1, "tickets"), (3, 3, 3, 2));
    // A release hands the permit to the first waiter, then the next.
    assert_eq!(callers[1].call(2, &release("tickets", "buyer-1", tokens[1])), Response::Released);
    let t3 = granted_token(&callers[3].recv().1);
    assert_eq!(pool(&mut watcher, 2, "tickets"), (3, 3, 3, 1), "buyer-4 still waits");
    assert_eq!(callers[0].call(2, &release("tickets", "buyer-0", tokens[0])), Response::Released);
    let t4 = granted_token(&callers[4].recv().1);
    assert!(tokens[2] < t3 && t3 < t4);
    // A v1 QUERY of the pool names its oldest hold.
    match watcher.call(3, &Request::Query { key: "tickets".into() }) {
        Response::Holder { token, owner, .. } => assert_eq!((token, owner.as_str()), (tokens[2], "buyer-2")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn crossing_key_sets_and_strict_fifo_across_keys() {
    let server = start_server(&[]);
    let (mut x, mut y, mut z) = (connect(server.addr), connect(server.addr), connect(server.addr));
    let tx = granted_token(&x.call(1, &hold("x", 0, false, &[("seat:1", 1, 1), ("seat:2", 1, 1)])));
    // y asks for them in the other order: waits, holding nothing.
    y.send(1, &hold("y", 30_000, false, &[("seat:2", 1, 1), ("seat:1", 1, 1)]));
    // z wants seat:3 and seat:2: seat:3 is free, but y is first on seat:2.
    assert!(eventually(Duration::from_secs(10), || pool(&mut connect(server.addr), 1, "seat:2").3 == 1));
    z.send(1, &hold("z", 30_000, false, &[("seat:3", 1, 1), ("seat:2", 1, 1)]));
    let mut w = connect(server.addr);
    assert!(eventually(Duration::from_secs(10), || pool(&mut connect(server.addr), 1, "seat:3").3 == 1));
    assert_eq!(pool(&mut w, 1, "seat:3"), (1, 0, 0, 1), "seat:3 stays free while z waits");
    // x's release names one key and ends the whole hold: y takes both at once.
    assert_eq!(x.call(2, &release("seat:1", "x", tx)), Response::Released);
    let ty = granted_token(&y.recv().1);
    assert_eq!(pool(&mut w, 2, "seat:1"), (1, 1, 1, 0));
    assert_eq!(y.call(2, &release("seat:2", "y", ty)), Response::Released);
    let tz = granted_token(&z.recv().1);
    assert!(tx < ty && ty < tz);
}

#[test]
fn bad_holds_are_refused_naming_the_field_and_a_v1_client_sees_no_new_frame() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    let seventeen: Vec<String> = (0..=HOLD_KEYS_MAX).map(|i| format!("k{i}")).collect();
    let parts: Vec<(&str, u32, u32)> = seventeen.iter().map(|k| (k.as_str(), 1, 1)).collect();
    assert!(invalid(c.call(1, &hold("o", 0, false, &parts))).contains("1 to 16 keys"));
    assert!(invalid(c.call(2, &hold("o", 0, false, &[("a", 1, 2), ("a", 1, 2)]))).contains("named twice"));
    assert!(invalid(c.call(3, &hold("o", 0, false, &[("a", 3, 2)]))).contains("count"));
    assert!(invalid(c.call(4, &hold("o", 0, false, &[("a", 1, 0)]))).contains("capacity"));
    assert!(invalid(c.call(5, &hold("o", 0, false, &[("a", 1, 1_000_001)]))).contains("capacity"));
    // A key of another capacity: both numbers, and nothing changed.
    granted_token(&c.call(6, &hold("o", 0, false, &[("stock", 1, 5)])));
    let message = invalid(c.call(7, &hold("p", 0, false, &[("stock", 1, 4)])));
    assert!(message.contains("says 4") && message.contains("capacity 5"), "{message}");
    let message = invalid(c.call(8, &acquire("stock", "v1", 5, 0)));
    assert!(message.contains("says 1") && message.contains("capacity 5"), "{message}");
    assert_eq!(pool(&mut c, 9, "stock"), (5, 1, 1, 0));
    // The connection stays open, and a 16-key HOLD of 255-byte keys fits its frame.
    let long: Vec<String> = (0..HOLD_KEYS_MAX).map(|i| format!("{i:0>255}")).collect();
    let parts: Vec<(&str, u32, u32)> = long.iter().map(|k| (k.as_str(), 1, 1)).collect();
    let big = hold("o", 0, false, &parts);
    let mut frame = Vec::new();
    ticketing::proto::encode_request(&mut frame, 10, &big);
    assert!(frame.len() > REQUEST_FRAME_LEN_MAX as usize + 4);
    granted_token(&c.call(10, &big));
    // A v1 conversation on another connection: only v1 frames.
    let mut v1 = connect(server.addr);
    let t = granted_token(&v1.call(1, &acquire("door", "v1", 5, 0)));
    assert!(
        matches!(v1.call(2, &Request::Query { key: "door".into() }), Response::Holder { token, .. } if token == t)
    );
    assert_eq!(v1.call(3, &release("door", "v1", t)), Response::Released);
    assert_eq!(v1.call(4, &Request::Query { key: "door".into() }), Response::Free);
    // Other requests keep their 1024-byte limit: a longer one is malformed.
    let mut long_query = vec![0, 0, 4, 1, b'Q', 0, 0, 0, 1, 0xff];
    long_query.resize(4 + 1025, b'x');
    let mut raw = connect(server.addr);
    raw.send_raw(&long_query);
    assert!(matches!(raw.recv().1, Response::Error { code: ErrorCode::Malformed, .. }));
}

#[test]
fn a_waiter_that_asks_hears_its_place_before_its_answer() {
    let server = start_server(&[]);
    let mut holder = connect(server.addr);
    let t = granted_token(&holder.call(1, &acquire("k", "holder", 60, 0)));
    let mut waiters: Vec<Raw> = (0..3).map(|_| connect(server.addr)).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.send(7, &hold(&format!("w{i}"), 60_000, true, &[("k", 1, 1)]));
        match w.recv() {
            (7, Response::InLine { ahead, .. }) => assert_eq!(ahead as usize, i),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(holder.call(2, &release("k", "holder", t)), Response::Released);
    assert!(matches!(waiters[0].recv(), (7, Response::Granted { .. })));
    // The others hear their new place (within a second), then nothing until it changes.
    for (i, w) in waiters.iter_mut().enumerate().skip(1) {
        match w.recv() {
            (7, Response::InLine { ahead, grants_per_ks }) => {
                assert_eq!(ahead as usize, i - 1);
                let _ = grants_per_ks;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn pooled_holds_survive_a_leader_kill_and_a_snapshot_install() {
    let metrics_listen = |i: usize, port: u16| format!("127.0.0.{i}:{port}");
    let (mut cluster, metrics_port) = Cluster::start_each(3, |i, port| {
        vec![("TICKETING_METRICS_LISTEN".to_string(), metrics_listen(i, port))]
    });
    let installed = |i: usize| -> f64 {
        let addr: std::net::SocketAddr = metrics_listen(i + 1, metrics_port).parse().unwrap();
        let mut s =
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("metrics port");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("ticketing_raft_snapshots_installed_total ")?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut c = connect(cluster.addr(leader));
    let t = granted_token(&c.call(1, &hold("family", 0, false, &[("seat:7", 1, 1), ("stock", 2, 10)])));
    // A follower is paused while the log runs far past it, so it can only catch up
    // from a snapshot.
    let lagging = (leader + 1) % 3;
    cluster.signal(lagging, "-STOP");
    // Every RELEASE goes through the log, even one that holds nothing (`N`).
    for round in 0..12_000u32 {
        c.send(round + 2, &release(&format!("churn:{}", round % 64), "churn", 1));
        if round % 1_000 == 999 {
            // Keep the pipeline bounded: read what was answered so far.
            for _ in 0..1_000 {
                assert_eq!(c.recv().1, Response::NotHolder);
            }
        }
    }
    cluster.signal(lagging, "-CONT");
    assert!(
        eventually(Duration::from_secs(30), || installed(lagging) >= 1.0),
        "the paused node never installed a snapshot"
    );
    // Hand leadership to the node that was paused: it serves from what it installed.
    let answer =
        operator(cluster.addr(leader)).call(1, &Request::TransferLeader { target: Some(lagging as u64 + 1) });
    assert!(matches!(answer, Response::Status { .. }), "transfer: {answer:?}");
    assert_eq!(cluster.wait_leader(Duration::from_secs(15)), lagging);
    let mut n = connect(cluster.addr(lagging));
    assert_eq!(pool(&mut n, 1, "stock"), (10, 2, 1, 0));
    match n.call(2, &Request::Query { key: "seat:7".into() }) {
        Response::Holder { token, owner, .. } => assert_eq!((token, owner.as_str()), (t, "family")),
        other => panic!("{other:?}"),
    }
    // Kill that leader too: the third node carries the hold on.
    cluster.kill(lagging);
    let next = cluster.wait_leader(Duration::from_secs(15));
    let mut m = connect(cluster.addr(next));
    assert_eq!(pool(&mut m, 1, "stock"), (10, 2, 1, 0));
    // Eight more permits fit, nine do not; the hold ends whole on release.
    assert_eq!(m.call(2, &hold("more", 0, false, &[("stock", 9, 10)])), Response::Busy);
    let t2 = granted_token(&m.call(3, &hold("more", 0, false, &[("stock", 8, 10)])));
    assert!(t2 > t);
    assert_eq!(m.call(4, &release("stock", "family", t)), Response::Released);
    assert_eq!(pool(&mut m, 5, "seat:7"), (0, 0, 0, 0));
    assert_eq!(pool(&mut m, 6, "stock"), (10, 8, 1, 0));
}

/// Resident memory of process `pid` in bytes (`VmRSS` of /proc/PID/status).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// The node's limit (`TICKETING_MAX_KEYS`, docs/configuration.md §3.6a) counts every
/// key a pooled hold or a waiting HOLD names.
const FLOOD_LIMIT: u32 = 2_000;
/// What a flood may add to the node's resident memory at that limit (measured: about
/// 2 MiB on x86-64; the margin is for the allocator's arenas and the answers queued for
/// the flooding connections).
const FLOOD_RSS_GROWTH_MAX: u64 = 32 << 20;

/// Sends `requests` on `c` in chunks (each read back before the next, so neither side's
/// buffers fill) and returns every answer that arrived: `answers(i)` of chunk `i` are
/// read, the rest of its requests wait in line unanswered.
fn flood(c: &mut Raw, requests: &[Request], answered: impl Fn(usize) -> usize) -> Vec<Response> {
    let mut out = Vec::new();
    for (i, chunk) in requests.chunks(500).enumerate() {
        for (j, r) in chunk.iter().enumerate() {
            c.send((i * 500 + j + 1) as u32, r);
        }
        for _ in 0..answered(i).min(chunk.len()) {
            out.push(c.recv().1);
        }
    }
    out
}

fn sixteen(prefix: &str, count: u32, capacity: u32) -> Vec<(String, u32, u32)> {
    (0..16).map(|i| (format!("{prefix}:{i}"), count, capacity)).collect()
}

fn hold_of(owner: &str, wait_ms: u32, parts: &[(String, u32, u32)]) -> Request {
    let parts = parts
        .iter()
        .map(|(key, count, capacity)| HoldPart { key: key.clone(), count: *count, capacity: *capacity })
        .collect();
    Request::Hold { lease_s: 60, wait_ms, place: false, owner: owner.into(), parts }
}

/// A client that floods counted holds — capacity 1 000 000 on many keys, thousands of
/// HOLDs with counts, granted and waiting — gets `E 4` once the node's limit is
/// reached, never grows the node past it (in holds, waiters or memory), and the node
/// still serves a plain ACQUIRE afterwards.
#[test]
fn a_flood_of_counted_holds_and_waiters_stops_at_the_node_limit() {
    let limit = FLOOD_LIMIT.to_string();
    let server = start_server(&[("TICKETING_MAX_KEYS", &limit)]);
    let pid = server.child.id();
    let mut probe = connect(server.addr);
    // Warm up: the node's threads and buffers as any client finds them.
    let warm: Vec<Request> = (0..500).map(|i| acquire(&format!("warm:{i}"), "w", 1, 0)).collect();
    let mut w = connect(server.addr);
    let tokens: Vec<u64> = flood(&mut w, &warm, |_| 500).iter().map(granted_token).collect();
    for (i, t) in tokens.iter().enumerate() {
        assert_eq!(w.call(1, &release(&format!("warm:{i}"), "w", *t)), Response::Released);
    }
    let before = rss_bytes(pid);
    let overloaded = |r: &Response| matches!(r, Response::Error { code: ErrorCode::Overloaded, .. });

    // Sixteen keys, all of their permits held: 16 of the limit.
    let mut a = connect(server.addr);
    let full = granted_token(&a.call(1, &hold_of("full", 0, &sixteen("full", 1_000_000, 1_000_000))));
    // Waiting HOLDs of those keys: each counts 16, so (2000 − 16) / 16 = 124 of them queue.
    let queued = (FLOOD_LIMIT as usize - 16) / 16;
    let waiting: Vec<Request> =
        (0..1_000).map(|i| hold_of(&format!("w{i}"), 120_000, &sixteen("full", 1, 1_000_000))).collect();
    let mut b = connect(server.addr);
    let answers = flood(&mut b, &waiting, |i| if i == 0 { 500 - queued } else { 500 });
    assert!(answers.iter().all(overloaded), "{:?}", answers.iter().find(|r| !overloaded(r)));
    assert_eq!(status_map(&mut probe, 1)["waiters"], queued.to_string());
    // Counted holds on many other keys, granted at once or not at all: all refused.
    let counted: Vec<Request> = (0..3_000)
        .map(|i| hold_of(&format!("c{i}"), 0, &sixteen(&format!("stock{}", i % 50), 1_000, 1_000_000)))
        .collect();
    let mut c = connect(server.addr);
    let answers = flood(&mut c, &counted, |_| 500);
    assert!(answers.iter().all(overloaded), "{:?}", answers.iter().find(|r| !overloaded(r)));
    // The waiters go: their room goes to counted holds, 124 of 16 keys each.
    drop(b);
    assert!(eventually(Duration::from_secs(10), || status_map(&mut probe, 2)["waiters"] == "0"));
    let answers = flood(&mut c, &counted, |_| 500);
    let granted = answers.iter().filter(|r| matches!(r, Response::Granted { .. })).count();
    assert_eq!((granted, answers.iter().filter(|r| overloaded(r)).count()), (queued, 3_000 - queued));
    let status = status_map(&mut probe, 3);
    assert_eq!(status["pooled_holds"], (queued + 1).to_string());
    let after = rss_bytes(pid);
    println!(
        "resident memory {before} bytes before the flood, {after} after (+{})",
        after.saturating_sub(before)
    );
    assert!(
        after <= before + FLOOD_RSS_GROWTH_MAX,
        "the flood grew the node from {before} to {after} bytes of resident memory"
    );
    // At the limit a new key is refused; once a hold ends, a plain ACQUIRE is served.
    assert!(overloaded(&probe.call(4, &acquire("plain", "p", 10, 0))));
    assert_eq!(a.call(2, &release("full:0", "full", full)), Response::Released);
    assert!(granted_token(&probe.call(5, &acquire("plain", "p", 10, 0))) > 0);
}
