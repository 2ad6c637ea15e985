//! The scenarios every library must pass (docs/conformance.md): each starts its own
//! servers, drives one or more driver processes of the library and checks what they
//! report. A panic fails the scenario with the drivers' transcripts.

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use super::common::{eventually, start_server, Cluster, Server, ServerProcess, TOKEN};
use super::driver::{Driver, Launch, Settings};
use super::pki::Pki;

const S: Duration = Duration::from_secs(1);

/// A named scenario.
pub type Scenario = (&'static str, fn(&Launch));

pub const ALL: &[Scenario] = &[
    ("grant, busy, timeout, query, release", grant_busy_timeout),
    ("waiters are granted in arrival order", fifo),
    ("tokens increase across grants and keys", tokens_increase),
    ("64 callers on one client at once", concurrent_callers),
    ("indeterminate on a paused server, resolved, no grant left held", indeterminate_on_a_paused_server),
    ("leader killed under load: no double grant", failover),
    ("TLS, and a wrong secret said at once", tls_and_wrong_secret),
    ("limits refused before any I/O", limits_before_io),
    ("cluster name", cluster_name),
    ("edge inputs", edge_inputs),
];

fn driver(launch: &Launch, addrs: &str, owner: &str) -> Driver {
    let settings = Settings { addrs, token: TOKEN, owner, tls_ca: None, cluster_name: None };
    Driver::start(launch, owner, &settings).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `key` has `waiters` queued, as a checker client sees it: a fact, not a
/// sleep.
fn wait_for_waiters(checker: &ticketing::client::Client, key: &str, waiters: u32) {
    assert!(
        eventually(10 * S, || checker.query(key).ok().flatten().map_or(0, |h| h.waiters) >= waiters),
        "{key} never had {waiters} waiters"
    );
}

fn wait_for_free(checker: &ticketing::client::Client, key: &str, within: Duration) {
    assert!(
        eventually(within, || matches!(checker.query(key), Ok(None))),
        "{key} still held after {within:?}"
    );
}

fn grant_busy_timeout(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let (mut a, mut b) = (driver(launch, &addr, "owner-a"), driver(launch, &addr, "owner-b"));
    let g = a.call("acquire g k 30 0", 10 * S);
    assert_eq!(g.word, "granted", "{}", g.line);
    let busy = b.call("acquire b1 k 30 0", 10 * S);
    assert_eq!((busy.word.as_str(), busy.retryable()), ("busy", false), "{}", busy.line);
    let timeout = b.call("acquire b2 k 30 0.5", 10 * S);
    assert_eq!(timeout.word, "timeout", "{}", timeout.line);
    assert!((400..5000).contains(&timeout.ms()), "a 0.5 s wait took {} ms", timeout.ms());
    let q = b.call("query q1 k", 10 * S);
    assert_eq!(
        (q.word.as_str(), q.args.first().map(String::as_str)),
        ("held", Some("owner-a")),
        "{}",
        q.line
    );
    assert_eq!(q.args[1].parse::<u64>().unwrap(), g.token());
    let r = a.call("release g", 10 * S);
    assert_eq!(r.word, "released", "{}", r.line);
    let q = b.call("query q2 k", 10 * S);
    assert_eq!(q.word, "free", "{}", q.line);
}

fn fifo(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let checker = server.client("checker");
    let mut holder = driver(launch, &addr, "holder");
    assert_eq!(holder.call("acquire h fifo 30 0", 10 * S).word, "granted");
    let mut waiters: Vec<Driver> = (0..3).map(|i| driver(launch, &addr, &format!("waiter-{i}"))).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.send(&format!("acquire w{i} fifo 30 20"));
        wait_for_waiters(&checker, "fifo", i as u32 + 1);
    }
    assert_eq!(holder.call("release h", 10 * S).word, "released");
    let mut last = 0;
    for (i, w) in waiters.iter_mut().enumerate() {
        let g = w.outcome(&format!("w{i}"), 20 * S);
        assert_eq!(g.word, "granted", "waiter {i}: {}", g.line);
        assert!(g.token() > last, "tokens go up in the order of the queue");
        last = g.token();
        assert_eq!(w.call(&format!("release w{i}"), 10 * S).word, "released");
    }
}

fn tokens_increase(launch: &Launch) {
    let server = start_server(&[]);
    let mut a = driver(launch, &server.addr.to_string(), "tokens");
    let mut last = 0;
    for i in 0..6 {
        let g = a.call(&format!("acquire t{i} key-{} 30 0", i % 3), 10 * S);
        assert_eq!(g.word, "granted", "{}", g.line);
        assert!(g.token() > last, "token {} after {last}", g.token());
        last = g.token();
        assert_eq!(a.call(&format!("release t{i}"), 10 * S).word, "released");
    }
}

fn concurrent_callers(launch: &Launch) {
    let server = start_server(&[]);
    let mut a = driver(launch, &server.addr.to_string(), "many");
    for i in 0..64 {
        a.send(&format!("acquire c{i} many-{i} 30 5"));
    }
    let mut tokens = Vec::new();
    for i in 0..64 {
        let g = a.outcome(&format!("c{i}"), 30 * S);
        assert_eq!(g.word, "granted", "{}", g.line);
        tokens.push(g.token());
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 64, "every grant has its own token");
    for i in 0..64 {
        a.send(&format!("release c{i}"));
    }
    for i in 0..64 {
        assert_eq!(a.outcome(&format!("c{i}"), 30 * S).word, "released");
    }
}

/// SIGSTOP; `signal` returns once every thread of the server is stopped.
fn pause(server: &ServerProcess) {
    assert!(server.signal("-STOP"), "the server did not stop");
}

fn indeterminate_on_a_paused_server(launch: &Launch) {
    let server = start_server(&[]);
    let checker = server.client("checker");
    let mut a = driver(launch, &server.addr.to_string(), "paused");
    assert_eq!(a.call("query q paused-1", 10 * S).word, "free", "connected first");
    for (name, key, resolve) in [("i1", "paused-1", true), ("i2", "paused-2", false)] {
        pause(&server);
        let o = a.call(&format!("acquire {name} {key} 30 1"), 30 * S);
        assert!(server.signal("-CONT"));
        assert_eq!(o.word, "indeterminate", "{}", o.line);
        assert!(!o.retryable(), "{}", o.line);
        assert!(o.message.contains("do not enter the critical section"), "{}", o.line);
        if resolve {
            let r = a.call(&format!("resolve {name} 30"), 40 * S);
            assert_eq!(r.word, "resolved", "{}", r.line);
            match r.args[0].as_str() {
                "held" => assert_eq!(a.call(&format!("release {name}"), 10 * S).word, "released"),
                "not_held" => {}
                other => panic!("resolve found {other}: {}", r.line),
            }
        }
        // Resolved or not, no grant of it is left held (the client releases it).
        wait_for_free(&checker, key, 40 * S);
    }
}

/// A grant a failover round saw: (at grant, at release, token).
pub(super) type Grant = (u64, u64, u64);

/// A 3-node cluster whose leader is killed in round 4; each round every one of three
/// drivers sends `per_driver` commands made by `command(name)` (an acquire or a hold)
/// and releases each grant at once; rounds go on until the new leader has granted six
/// times. Returns each grant's (at grant, at release, token) and the count of every other
/// outcome; an outcome a failover may not give fails the scenario.
pub(super) fn failover_rounds(
    launch: &Launch,
    owner: &str,
    per_driver: usize,
    command: impl Fn(&str) -> String,
) -> (Vec<Grant>, HashMap<String, usize>) {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(20 * S);
    let addrs = cluster.addrs().join(",");
    let mut drivers: Vec<Driver> = (0..3).map(|i| driver(launch, &addrs, &format!("{owner}-{i}"))).collect();
    let mut grants: Vec<Grant> = Vec::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    let started = Instant::now();
    let mut killed_after = None;
    for round in 0.. {
        if round == 4 {
            cluster.kill(leader);
            killed_after = Some(grants.len());
        }
        if killed_after.is_some_and(|before| grants.len() >= before + 6) {
            break;
        }
        for (i, d) in drivers.iter_mut().enumerate() {
            for j in 0..per_driver {
                d.send(&command(&format!("r{round}d{i}n{j}")));
            }
        }
        let mut open = drivers.len() * per_driver;
        while open > 0 {
            assert!(started.elapsed() < 300 * S, "the failover scenario hangs");
            for d in drivers.iter_mut() {
                let Some(o) = d.poll(Duration::from_millis(20)) else { continue };
                match o.word.as_str() {
                    "granted" => {
                        let r = d.call(&format!("release {}", o.name), 20 * S);
                        match r.word.as_str() {
                            "released" | "not_holder" | "released_or_expired" => {
                                grants.push((o.at(), r.at(), o.token()))
                            }
                            _ => *errors.entry(r.word.clone()).or_default() += 1,
                        }
                        open -= 1;
                    }
                    // What a failover may say: not executed, or not known.
                    "unavailable" | "not_leader" | "overloaded" | "indeterminate" | "timeout"
                    | "unconfirmed" => {
                        *errors.entry(o.word.clone()).or_default() += 1;
                        open -= 1;
                    }
                    other => panic!("{}: a failover answered {other}: {}", d.label, o.line),
                }
            }
        }
    }
    (grants, errors)
}

/// Three drivers ask for one key each round, through a leader's death: never two
/// holders at once, tokens increasing.
fn failover(launch: &Launch) {
    let (mut grants, errors) =
        failover_rounds(launch, "fo", 1, |name| format!("acquire {name} failover 5 15"));
    assert!(grants.len() >= 18, "only {} grants ({errors:?})", grants.len());
    grants.sort();
    for pair in grants.windows(2) {
        let ((g1, r1, t1), (g2, _, t2)) = (pair[0], pair[1]);
        assert!(
            g2 > r1,
            "two holders at once: one granted at {g1} released at {r1}, the next granted at {g2}"
        );
        assert!(t2 > t1, "token {t2} after {t1}");
    }
    eprintln!("    failover: {} grants, other outcomes {errors:?}", grants.len());
}

fn tls_and_wrong_secret(launch: &Launch) {
    let pki = Pki::new();
    let server = Server::new().tls(&pki.path("cert.pem"), &pki.path("key.pem")).start();
    let addr = server.addr.to_string();
    let ca = pki.path("ca.pem");
    let settings =
        Settings { addrs: &addr, token: TOKEN, owner: "tls", tls_ca: Some(&ca), cluster_name: None };
    let mut a = Driver::start(launch, "tls", &settings).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.call("acquire t k 30 0", 10 * S).word, "granted");
    assert_eq!(a.call("release t", 10 * S).word, "released");
    let plain = start_server(&[]);
    let plain_addr = plain.addr.to_string();
    let wrong = Settings {
        addrs: &plain_addr,
        token: "not-the-secret-0123456789",
        owner: "wrong",
        tls_ca: None,
        cluster_name: None,
    };
    let mut w = Driver::start(launch, "wrong", &wrong).unwrap_or_else(|e| panic!("{e}"));
    // A 120 s wait: a mistake taken for one that trying again could fix would be tried
    // for that long; said at once, it comes well before half of it.
    let o = w.call("acquire x k 30 120", 240 * S);
    assert_eq!((o.word.as_str(), o.retryable()), ("unavailable", false), "{}", o.line);
    assert!(o.ms() < 60_000, "a wrong secret took {} ms to say (a 120 s wait)", o.ms());
    assert!(o.message.contains("auth token"), "the message names the secret: {}", o.line);
}

fn limits_before_io(launch: &Launch) {
    // Nothing listens there: trying it ends `unavailable` when the wait runs out, so
    // `invalid` is the check's answer, and the valid waits are 120 s: an answer well
    // before half of that came before trying the address.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut a = driver(launch, &dead, "limits");
    let long_key = "k".repeat(256);
    for (name, command) in [
        ("lease0", "acquire lease0 k 0 120".to_string()),
        ("lease251", "acquire lease251 k 251 120".to_string()),
        ("leasefrac", "acquire leasefrac k 1.5 120".to_string()),
        ("wait301", "acquire wait301 k 30 301".to_string()),
        ("longkey", format!("acquire longkey {long_key} 30 120")),
        ("qlong", format!("query qlong {long_key}")),
    ] {
        let o = a.call(&command, 240 * S);
        assert_eq!(o.word, "invalid", "{name}: {}", o.line);
        assert!(o.ms() < 60_000, "{name} took {} ms: a check before any I/O", o.ms());
    }
}

/// A server named `blue`: a driver given `blue` acquires and releases; one given `green`
/// is sent nothing — `unavailable`, not retryable, before its 20 s wait ran out (a
/// mistake trying again could fix would wait for a connection that long), naming both
/// names.
fn cluster_name(launch: &Launch) {
    let server = Server::new().env("TICKETING_CLUSTER_NAME", "blue").start();
    let addr = server.addr.to_string();
    let named = |owner: &str, name: &str| {
        let settings = Settings { addrs: &addr, token: TOKEN, owner, tls_ca: None, cluster_name: Some(name) };
        Driver::start(launch, owner, &settings).unwrap_or_else(|e| panic!("{e}"))
    };
    let mut blue = named("blue", "blue");
    let g = blue.call("acquire b named 30 0", 10 * S);
    assert_eq!(g.word, "granted", "{}", g.line);
    assert_eq!(blue.call("release b", 10 * S).word, "released");
    let mut green = named("green", "green");
    let o = green.call("acquire g named 30 20", 40 * S);
    assert_eq!((o.word.as_str(), o.retryable()), ("unavailable", false), "{}", o.line);
    assert!(o.ms() < 20_000, "the refusal waited out its 20 s wait: {}", o.line);
    assert!(o.message.contains("\"blue\"") && o.message.contains("\"green\""), "both names: {}", o.line);
    let q = blue.call("query q named", 10 * S);
    assert_eq!(q.word, "free", "the green driver sent nothing: {}", q.line);
}

/// The inputs at the edges of the limits, each with the one outcome every library gives
/// (the C ABI takes a lease and a wait in nanoseconds and decides alone): a lease of
/// 1.0004, 0.9996 and 1.5 s and of 250.0004 s is refused and one of 250 s granted; a wait
/// of 0 and 300 s granted and one of 300.0004 s refused; a 255-byte key granted and a
/// 256-byte one refused; an owner holding a NUL and an empty address list refused as the
/// client's configuration (`unsupported` from a driver whose strings cannot hold a NUL:
/// C's).
fn edge_inputs(launch: &Launch) {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let mut d = driver(launch, &addr, "edges");
    let key255 = "k".repeat(255);
    let key256 = "k".repeat(256);
    for (name, key, lease, wait, granted) in [
        ("lease1.0004", "e:1", "1.0004", "0", false),
        ("lease0.9996", "e:2", "0.9996", "0", false),
        ("lease1.5", "e:3", "1.5", "0", false),
        ("lease250", "e:4", "250", "0", true),
        ("lease250.0004", "e:5", "250.0004", "0", false),
        ("wait0", "e:6", "30", "0", true),
        ("wait300", "e:7", "30", "300", true),
        ("wait300.0004", "e:8", "30", "300.0004", false),
        ("key255", key255.as_str(), "30", "0", true),
        ("key256", key256.as_str(), "30", "0", false),
    ] {
        let o = d.call(&format!("acquire {name} {key} {lease} {wait}"), 20 * S);
        let expected = if granted { "granted" } else { "invalid" };
        assert_eq!(o.word, expected, "{name}: {}", o.line);
        if granted {
            assert_eq!(d.call(&format!("release {name}"), 10 * S).word, "released", "{name}");
        }
    }
    let refused = |label: &str, addrs: &str, owner: &str, allowed: &[&str]| {
        let settings = Settings { addrs, token: TOKEN, owner, tls_ca: None, cluster_name: None };
        match Driver::start(launch, label, &settings) {
            Ok(_) => panic!("{label}: the client was built"),
            Err(line) => assert!(
                allowed.iter().any(|word| line.starts_with(&format!("{label}: {word} : "))),
                "{label}: {line}"
            ),
        }
    };
    // `\0` is the driver protocol's NUL (an environment variable cannot hold one).
    refused("nul-owner", &addr, "sell\\0er", &["config-error", "unsupported"]);
    refused("no-address", "", "edges", &["config-error"]);
}
