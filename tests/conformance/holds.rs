//! The scenarios of counted and multi-key holds, places in line and the lock's own
//! deadline (docs/conformance.md), which every library must pass as it passes the
//! others: a stock of 3 with five callers, crossing key sets, strict FIFO across keys,
//! a capacity that disagrees, places, an indeterminate multi-key hold resolved as one,
//! a leader killed under counted load, and the deadline in the library's idiom.

use std::collections::HashMap;
use std::time::Duration;

use super::common::{eventually, start_server, ServerProcess, TOKEN};
use super::driver::{Driver, Launch, Outcome, Settings};
use super::scenarios::{failover_rounds, Scenario};

const S: Duration = Duration::from_secs(1);

pub const ALL: &[Scenario] = &[
    ("holds: a stock of 3, five callers", stock_of_three),
    ("holds: {a, b} and {b, a} at once, all or nothing", crossing_keys),
    ("holds: strict FIFO across keys", strict_fifo),
    ("holds: bad holds refused, a capacity naming both numbers", refusals),
    ("holds: places in line reported and decreasing", places),
    ("holds: indeterminate multi-key hold resolved as one", indeterminate_hold),
    ("holds: leader killed under counted load, no over-grant", failover_counted),
    ("the lock's own deadline in the library's idiom", deadline),
];

fn driver(launch: &Launch, addrs: &str, owner: &str) -> Driver {
    let settings = Settings { addrs, token: TOKEN, owner, tls_ca: None, cluster_name: None };
    Driver::start(launch, owner, &settings).unwrap_or_else(|e| panic!("{e}"))
}

/// `[capacity, in_use, holds, waiters]` of a `pool` outcome.
fn pool_of(o: &Outcome) -> [u32; 4] {
    assert_eq!(o.word, "pool", "{}", o.line);
    let n = |i: usize| o.args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("{}", o.line));
    [n(0), n(1), n(2), n(3)]
}

/// Waits until the pool `key` reads `want` through `d` (a fact, not a sleep).
fn wait_for_pool(d: &mut Driver, key: &str, want: [u32; 4]) {
    let mut last = [0; 4];
    let mut n = 0;
    let seen = eventually(20 * S, || {
        n += 1;
        last = pool_of(&d.call(&format!("pool p{n} {key}"), 10 * S));
        last == want
    });
    assert!(seen, "{key} never read {want:?} (capacity, in use, holds, waiters); last {last:?}");
}

/// The keys of a granted hold, as a sorted list of `KEY:COUNT:CAPACITY`.
fn keys_of(o: &Outcome) -> Vec<String> {
    let mut keys: Vec<String> = o
        .fields
        .get("keys")
        .unwrap_or_else(|| panic!("no keys= in {:?}", o.line))
        .split(',')
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys
}

/// The most holds inside at once, from (at grant, at release) intervals: the driver's
/// instants lie inside the server's, so this never counts more than were held.
fn most_at_once(intervals: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = intervals.iter().flat_map(|&(g, r)| [(g, 1), (r, -1)]).collect();
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut inside, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        inside += d;
        most = most.max(inside);
    }
    most as usize
}

fn released(o: &Outcome) -> bool {
    o.word == "released"
}

/// Five callers on one client want 1 of a stock of 3: the first three are granted at
/// once, the other two wait, in their order, for a release each; never more than three
/// inside; tokens increase in the order of the grants.
fn stock_of_three(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let mut d = driver(launch, &addr, "stock");
    let mut look = driver(launch, &addr, "look");
    let mut grants: HashMap<usize, Outcome> = HashMap::new();
    for i in 0..5 {
        d.send(&format!("hold s{i} 30 20 0 stock:1:3"));
        let (in_use, waiters) = ((i as u32 + 1).min(3), (i as u32).saturating_sub(2));
        wait_for_pool(&mut look, "stock", [3, in_use, in_use, waiters]);
        if i < 3 {
            grants.insert(i, d.outcome(&format!("s{i}"), 10 * S));
        }
    }
    let mut intervals = Vec::new();
    for (first, waiter) in [(0, 3), (1, 4)] {
        let r = d.call(&format!("release s{first}"), 10 * S);
        assert!(released(&r), "{}", r.line);
        let g = d.outcome(&format!("s{waiter}"), 20 * S);
        intervals.push((grants[&first].at(), r.at()));
        grants.insert(waiter, g);
        if waiter == 3 {
            // s4 still waits: one permit came free and the first waiter took it.
            wait_for_pool(&mut look, "stock", [3, 3, 3, 1]);
        }
    }
    for i in [2, 3, 4] {
        let r = d.call(&format!("release s{i}"), 10 * S);
        assert!(released(&r), "{}", r.line);
        intervals.push((grants[&i].at(), r.at()));
    }
    let mut last = 0;
    for i in 0..5 {
        let g = &grants[&i];
        assert_eq!(g.word, "granted", "s{i}: {}", g.line);
        assert_eq!(keys_of(g), ["stock:1:3"], "{}", g.line);
        assert!(g.token() > last, "s{i}: token {} after {last}", g.token());
        last = g.token();
    }
    assert!(most_at_once(&intervals) <= 3, "more than 3 inside: {intervals:?}");
    wait_for_pool(&mut look, "stock", [0, 0, 0, 0]);
}

/// Two callers ask for {a, b} and {b, a} at once, ten times: both are granted every
/// time (no deadlock), each with both keys under one token, one after the other; while
/// one holds, the other holds neither key.
fn crossing_keys(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let (mut x, mut y) = (driver(launch, &addr, "cross-x"), driver(launch, &addr, "cross-y"));
    let mut look = driver(launch, &addr, "look");
    for round in 0..10 {
        x.send(&format!("hold x{round} 30 20 0 a:1:1 b:1:1"));
        y.send(&format!("hold y{round} 30 20 0 b:1:1 a:1:1"));
        // Whichever comes first holds both keys; the other waits holding neither.
        let (first, second, g1, second_name) = loop {
            if let Some(o) = x.poll(Duration::from_millis(20)) {
                break (&mut x, &mut y, o, format!("y{round}"));
            }
            if let Some(o) = y.poll(Duration::from_millis(20)) {
                break (&mut y, &mut x, o, format!("x{round}"));
            }
        };
        assert_eq!(g1.word, "granted", "{}", g1.line);
        assert_eq!(keys_of(&g1), ["a:1:1", "b:1:1"], "{}", g1.line);
        wait_for_pool(&mut look, "a", [1, 1, 1, 1]);
        wait_for_pool(&mut look, "b", [1, 1, 1, 1]);
        let r1 = first.call(&format!("release {}", g1.name), 10 * S);
        assert!(released(&r1), "{}", r1.line);
        let g2 = second.outcome(&second_name, 20 * S);
        assert_eq!(g2.word, "granted", "{}", g2.line);
        assert_eq!(keys_of(&g2), ["a:1:1", "b:1:1"], "{}", g2.line);
        assert!(g2.token() > g1.token() && g2.at() > r1.at(), "{} then {}", g1.line, g2.line);
        assert!(released(&second.call(&format!("release {second_name}"), 10 * S)));
    }
}

/// A later request that would fit waits behind an earlier one naming the same key: h
/// holds a; w1 asks for {a, b} and waits (b stays free: it holds nothing); w2 asks for
/// b alone and waits behind w1 though b is free; h's release grants w1 both, w1's
/// release grants w2.
fn strict_fifo(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let mut d = driver(launch, &addr, "fifo");
    let mut look = driver(launch, &addr, "look");
    let h = d.call("hold h 30 0 0 fa:1:1", 10 * S);
    assert_eq!(h.word, "granted", "{}", h.line);
    d.send("hold w1 30 20 0 fa:1:1 fb:1:1");
    wait_for_pool(&mut look, "fb", [1, 0, 0, 1]);
    d.send("hold w2 30 20 0 fb:1:1");
    wait_for_pool(&mut look, "fb", [1, 0, 0, 2]);
    assert!(d.poll(Duration::from_millis(200)).is_none(), "nothing granted while w1 waits for fa");
    assert!(released(&d.call("release h", 10 * S)));
    let w1 = d.outcome("w1", 20 * S);
    assert_eq!(w1.word, "granted", "{}", w1.line);
    assert_eq!(keys_of(&w1), ["fa:1:1", "fb:1:1"]);
    wait_for_pool(&mut look, "fb", [1, 1, 1, 1]);
    assert!(released(&d.call("release w1", 10 * S)));
    let w2 = d.outcome("w2", 20 * S);
    assert_eq!(w2.word, "granted", "{}", w2.line);
    assert!(w2.token() > w1.token());
    assert!(released(&d.call("release w2", 10 * S)));
}

/// Bad holds are `invalid`, naming what is wrong, and change nothing: a capacity other
/// than the key's (the message names both numbers), a count above the capacity, a
/// capacity of 0, a key named twice, 17 keys.
fn refusals(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let mut d = driver(launch, &addr, "refusals");
    let held = d.call("hold held 30 0 0 cap:1:3", 10 * S);
    assert_eq!(held.word, "granted", "{}", held.line);
    let o = d.call("hold m 30 0 0 cap:1:5", 10 * S);
    assert_eq!((o.word.as_str(), o.retryable()), ("invalid", false), "{}", o.line);
    assert!(o.message.contains('5') && o.message.contains("capacity 3"), "both capacities named: {}", o.line);
    let seventeen: Vec<String> = (0..17).map(|i| format!("k{i}:1:1")).collect();
    for (name, parts, words) in [
        ("over", "cnt:4:3".to_owned(), "count"),
        ("zero", "zero:1:0".to_owned(), "capacity"),
        ("twice", "tw:1:1 tw:1:1".to_owned(), "once"),
        ("many", seventeen.join(" "), "16"),
    ] {
        let o = d.call(&format!("hold {name} 30 0 0 {parts}"), 10 * S);
        assert_eq!(o.word, "invalid", "{name}: {}", o.line);
        assert!(o.message.contains(words), "{name}: the message names {words:?}: {}", o.line);
        if name == "over" {
            // The part as the library writes it: both numbers, whatever the words.
            assert!(
                o.message.contains('4') && o.message.contains('3'),
                "count and capacity named: {}",
                o.line
            );
        }
    }
    assert_eq!(pool_of(&d.call("pool p cap", 10 * S)), [3, 1, 1, 0], "nothing changed");
    assert_eq!(pool_of(&d.call("pool p2 tw", 10 * S)), [0, 0, 0, 0], "nothing held");
    assert!(released(&d.call("release held", 10 * S)));
}

/// A holder and three waiters before it: a hold asking for its place hears 3, then each
/// release moves it up — 2, 1, 0 — then it is granted; every place comes before its
/// outcome, and a hold that did not ask hears none.
fn places(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let mut d = driver(launch, &addr, "places");
    let mut look = driver(launch, &addr, "look");
    assert_eq!(d.call("hold h 30 0 0 line:1:1", 10 * S).word, "granted");
    for i in 0..3 {
        d.send(&format!("hold w{i} 30 60 0 line:1:1"));
        wait_for_pool(&mut look, "line", [1, 1, 1, i + 1]);
    }
    d.send("hold p 30 60 1 line:1:1");
    let mut seen = vec![d.place("p", 20 * S)];
    let ahead = |o: &Outcome| o.args[0].parse::<u32>().unwrap_or_else(|_| panic!("{}", o.line));
    assert_eq!(ahead(&seen[0]), 3, "{}", seen[0].line);
    for (i, holder) in ["h", "w0", "w1", "w2"].iter().enumerate() {
        assert!(released(&d.call(&format!("release {holder}"), 10 * S)), "{holder}");
        if i < 3 {
            assert_eq!(d.outcome(&format!("w{i}"), 20 * S).word, "granted");
            let place = d.place("p", 20 * S);
            assert_eq!(ahead(&place), 2 - i as u32, "{}", place.line);
            seen.push(place);
        }
    }
    let g = d.outcome("p", 20 * S);
    assert_eq!(g.word, "granted", "{}", g.line);
    for place in &seen {
        let eta: i64 = place.fields.get("eta_ms").and_then(|e| e.parse().ok()).unwrap_or(-2);
        assert!(eta >= -1, "an estimated wait: {}", place.line);
    }
    assert!(
        d.places_of("p").is_empty() && d.places_of("w0").is_empty(),
        "no place after the grant, none unasked"
    );
    assert!(released(&d.call("release p", 10 * S)));
}

/// SIGSTOP; `signal` returns once every thread of the server is stopped.
fn pause(server: &ServerProcess) {
    assert!(server.signal("-STOP"), "the server did not stop");
}

/// A hold of two keys made indeterminate by a paused server: resolved, it is held as
/// one (both keys, one token) or not at all; unresolved, both keys come free again.
fn indeterminate_hold(launch: &Launch) {
    let server = start_server(&[]);
    let mut d = driver(launch, &server.addr.to_string(), "paused");
    assert_eq!(d.call("pool q ia", 10 * S).word, "pool", "connected first");
    // Both sent during one pause: i1 is resolved, i2 left to the client.
    pause(&server);
    d.send("hold i1 30 1 0 ia:1:1 ib:2:3");
    d.send("hold i2 30 1 0 ic:1:1 id:2:3");
    let outcomes = [d.outcome("i1", 30 * S), d.outcome("i2", 30 * S)];
    assert!(server.signal("-CONT"));
    for o in &outcomes {
        assert_eq!(o.word, "indeterminate", "{}", o.line);
        assert!(!o.retryable(), "{}", o.line);
    }
    let r = d.call("resolve i1 30", 40 * S);
    assert_eq!(r.word, "resolved", "{}", r.line);
    match r.args[0].as_str() {
        "held" => {
            assert_eq!(keys_of(&r), ["ia:1:1", "ib:2:3"]);
            assert_eq!(pool_of(&d.call("pool r1 ia", 10 * S))[1], 1, "both held");
            assert_eq!(pool_of(&d.call("pool r2 ib", 10 * S))[1], 2, "both held");
            assert!(released(&d.call("release i1", 10 * S)));
        }
        "not_held" => {}
        other => panic!("resolve found {other}: {}", r.line),
    }
    // Resolved or not, no part of either is left held (the client releases it whole).
    for key in ["ia", "ib", "ic", "id"] {
        wait_for_pool(&mut d, key, [0, 0, 0, 0]);
    }
}

/// Three drivers take 1 of a stock of 2 in rounds, two requests each, on a 3-node
/// cluster whose leader is killed in round 4; rounds go on until the new leader granted
/// six times. Never more than two inside at once; tokens distinct.
fn failover_counted(launch: &Launch) {
    let (grants, errors) = failover_rounds(launch, "fc", 2, |name| format!("hold {name} 5 15 0 fstock:1:2"));
    let intervals: Vec<(u64, u64)> = grants.iter().map(|&(g, r, _)| (g, r)).collect();
    let mut tokens: Vec<u64> = grants.iter().map(|&(_, _, t)| t).collect();
    assert!(intervals.len() >= 18, "only {} grants ({errors:?})", intervals.len());
    assert!(most_at_once(&intervals) <= 2, "more than 2 of a stock of 2 inside at once: {intervals:?}");
    let n = tokens.len();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "every grant its own token");
    eprintln!("    counted failover: {n} grants, other outcomes {errors:?}");
}

/// A lock of a 1 s lease: the library's deadline idiom fires at the lock's deadline,
/// which lies between the call's start plus the lease and the grant plus the lease.
fn deadline(launch: &Launch) {
    let server = start_server(&[]);
    let mut d = driver(launch, &server.addr.to_string(), "deadline");
    for (name, command) in [("a", "acquire a dl-a 1 0"), ("h", "hold h 1 0 0 dl-h:1:1 dl-i:1:2")] {
        let g = d.call(command, 10 * S);
        assert_eq!(g.word, "granted", "{}", g.line);
        let w = d.call(&format!("watch {name}"), 20 * S);
        assert_eq!(w.word, "deadline", "{}", w.line);
        let field = |k: &str| {
            w.fields.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{}", w.line))
        };
        let (at, stated) = (field("at"), field("deadline"));
        let lease = 1_000_000_000u64;
        let ms = 1_000_000u64;
        let call_start = g.at() - (g.ms() + 1) * ms;
        assert!(
            stated <= g.at() + lease + ms,
            "the deadline {stated} is after the grant {} plus the lease",
            g.at()
        );
        assert!(
            stated + 2 * ms >= call_start + lease,
            "the deadline {stated} is before the call's start plus the lease"
        );
        assert!(at + 5 * ms >= stated, "the idiom fired at {at}, before the deadline {stated}");
        let r = d.call(&format!("release {name}"), 10 * S);
        assert!(matches!(r.word.as_str(), "released" | "not_holder" | "released_or_expired"), "{}", r.line);
    }
}
