//! `ticketing top` (docs/cli.md) and the TOP KEYS request behind it (docs/protocol.md
//! §5.6), against real processes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::children::{Within, CLI};
use common::*;
use ticketing::proto::frame::HoldPart;
use ticketing::proto::{Request, Response, TopKey};

fn top_once(addr: &str) -> (Option<i32>, String, String) {
    let out = Command::new(bin())
        .args(["top", "--once", "--interval", "0.5", "--addr", addr])
        .env_remove("TICKETING_ADDRS")
        .env_remove("TICKETING_TLS_CA")
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .output_within(CLI);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Queues `waiters` ACQUIREs behind a holder of `key` on the leader, and waits until
/// they are queued; returns the connections (the waiters stay queued while they are
/// open).
fn queue_on(addr: std::net::SocketAddr, key: &str, waiters: usize) -> Vec<Raw> {
    let mut holder = connect(addr);
    assert!(granted_token(&holder.call(1, &acquire(key, "holder", 60, 0))) > 0);
    let mut conns = vec![holder];
    let mut queue = connect(addr);
    for i in 0..waiters {
        queue.send(i as u32 + 1, &acquire(key, &format!("waiter-{i}"), 10, 120_000));
    }
    assert!(
        common::facts_cluster::wait_waiters(addr, key, waiters as u32, Duration::from_secs(10)),
        "{waiters} waiters never queued on {key}"
    );
    conns.push(queue);
    conns
}

/// The KEY table of a `top` view: (key, waiters) rows in order.
fn key_rows(view: &str) -> Vec<(String, u32)> {
    view.lines()
        .skip_while(|l| !l.starts_with("KEY "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut cells = l.split_whitespace();
            Some((cells.next()?.to_owned(), cells.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn top_once_against_a_cluster_names_the_hot_key_first() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let follower = (leader + 1) % 3;
    let _warm = queue_on(cluster.addr(leader), "warm", 2);
    let _hot = queue_on(cluster.addr(leader), "hot", 5);
    let mut c = connect(cluster.addr(leader));
    assert!(granted_token(&c.call(1, &acquire("cold", "o", 60, 0))) > 0);
    // The queues are the leader's: it counts all seven ACQUIREs.
    assert_eq!(status_map(&mut c, 2)["waiters"], "7");

    // One follower's address is enough: top finds the others and the leader.
    let (code, view, err) = top_once(&cluster.addr(follower).to_string());
    assert_eq!(code, Some(0), "{view}\n{err}");
    assert!(view.contains("3 nodes, 3 answering, leader"), "{view}");
    assert_eq!(
        key_rows(&view),
        vec![("hot".to_owned(), 5), ("warm".to_owned(), 2)],
        "the hot key first, keys without waiters not at all:\n{view}"
    );
    let hot = view.lines().find(|l| l.starts_with("hot ")).unwrap();
    assert!(hot.contains(" holder "), "the holder is named: {hot}");
    for title in ["grants/s", "hand-offs/s", "lease expiries/s"] {
        assert!(view.contains(title), "{title} missing:\n{view}");
    }
    let rows: Vec<&str> = view.lines().filter(|l| l.contains(":") && l.contains("127.0.0.")).collect();
    assert_eq!(rows.len(), 3, "a row per node:\n{view}");

    // The request itself: a follower redirects, the leader answers with the order.
    let mut f = connect(cluster.addr(follower));
    match f.call(3, &Request::TopKeys { n: 10 }) {
        Response::Moved { leader: addr } => assert_eq!(addr, cluster.addr(leader).to_string()),
        other => panic!("a follower answered {other:?}"),
    }
    match c.call(4, &Request::TopKeys { n: 1 }) {
        Response::TopKeys { keys } => match keys.as_slice() {
            [TopKey { key, waiters: 5, owner, token, remaining_ms, .. }] => {
                assert_eq!((key.as_str(), owner.as_str()), ("hot", "holder"));
                assert!(*token > 0 && *remaining_ms > 50_000 && *remaining_ms <= 60_000, "{keys:?}");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn top_once_against_a_standalone_node_and_a_dead_one() {
    let server = start_server(&[]);
    let _queued = queue_on(server.addr, "only", 1);
    let (code, view, err) = top_once(&server.addr.to_string());
    assert_eq!(code, Some(0), "{view}\n{err}");
    assert!(view.contains("1 node, 1 answering"), "{view}");
    assert!(view.lines().any(|l| l.contains("standalone")), "{view}");
    assert_eq!(key_rows(&view), vec![("only".to_owned(), 1)], "{view}");
    drop(server);

    let closed = ports::closed_addr();
    let (code, view, _) = top_once(&closed.addr.to_string());
    assert_eq!(code, Some(3), "nothing answers: {view}");
    assert!(view.contains("unreachable"), "{view}");
}

/// The rows of the POOL table of a `top` view, each split into its cells.
fn pool_rows(view: &str) -> Vec<Vec<String>> {
    view.lines()
        .skip_while(|l| !l.starts_with("POOL "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn stock(owner: &str, wait_ms: u32) -> Request {
    let parts = vec![HoldPart { key: "stock".into(), count: 1, capacity: 3 }];
    Request::Hold { lease_s: 60, wait_ms, place: false, owner: owner.into(), parts }
}

/// Pools among the keys with the longest queues get a table of their own (capacity,
/// permits in use, holds, waiters, oldest wait), and the node's pooled holds and
/// permits in use are summed up; a plain key's queue is no pool.
#[test]
fn top_once_shows_the_pools_among_the_longest_queues() {
    let server = start_server(&[]);
    let mut holders: Vec<Raw> = (0..3).map(|_| connect(server.addr)).collect();
    for (i, c) in holders.iter_mut().enumerate() {
        assert!(granted_token(&c.call(1, &stock(&format!("buyer-{i}"), 0))) > 0);
    }
    let mut waiting = connect(server.addr);
    waiting.send(1, &stock("late-1", 120_000));
    waiting.send(2, &stock("late-2", 120_000));
    let waiters_of_stock = || match connect(server.addr).call(1, &Request::Pool { key: "stock".into() }) {
        Response::Pool { waiters, .. } => waiters,
        other => panic!("{other:?}"),
    };
    assert!(eventually(Duration::from_secs(10), || waiters_of_stock() == 2), "the two never queued");
    let _plain = queue_on(server.addr, "plain", 1);
    let (code, view, err) = top_once(&server.addr.to_string());
    assert_eq!(code, Some(0), "{view}\n{err}");
    assert!(view.contains("pooled holds 3   permits in use 3"), "{view}");
    assert_eq!(key_rows(&view), vec![("stock".to_owned(), 2), ("plain".to_owned(), 1)], "{view}");
    let pools = pool_rows(&view);
    assert_eq!(pools.len(), 1, "only stock is a pool:\n{view}");
    assert_eq!(pools[0][..5], ["stock", "3", "3", "3", "2"], "{view}");
}

/// A running `top` stopped by SIGTERM or SIGHUP (a kill, a closed window) ends on its
/// own, exit 0 — with a terminal, after putting it back out of raw mode — instead of
/// dying where it stands.
#[test]
fn top_stops_cleanly_on_sigterm_and_sighup() {
    let server = start_server(&[]);
    for signal in ["TERM", "HUP"] {
        let mut child = Command::new(bin())
            .args(["top", "--interval", "0.5", "--addr", &server.addr.to_string()])
            .env_remove("TICKETING_ADDRS")
            .env_remove("TICKETING_TLS_CA")
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // top catches both signals (its handlers are installed) before one is sent.
        assert!(
            eventually(Duration::from_secs(10), || catches(child.id(), 1) && catches(child.id(), 15)),
            "top never installed its SIGTERM and SIGHUP handlers"
        );
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .output_within(CLI)
            .status;
        assert!(sent.success());
        let Some(status) = eventually_some(Duration::from_secs(3), || child.try_wait().unwrap()) else {
            let _ = child.kill();
            panic!("top did not stop on SIG{signal}");
        };
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
    }
}

/// Whether process `pid` has a handler installed for signal `signo` (its SigCgt mask).
fn catches(pid: u32, signo: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signo - 1)) != 0)
}
