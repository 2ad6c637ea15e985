//! Replacing nodes of a live cluster (docs/operations.md) with real processes.

mod common;

use std::time::Duration;

use common::children::{Within, CLI};
use common::*;
use ticketing::proto::frame::{ErrorCode, Request, Response};

/// Sends `admin replace` to `at` (following one `M`), waits for the answer.
fn replace(cluster: &Cluster, at: usize, old: u64, new: u64, addr: &str) -> Response {
    let mut c = operator(cluster.addr(at));
    c.stream.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    let req = Request::Replace { old, new, addr: addr.into() };
    match c.call(1, &req) {
        Response::Moved { leader } if !leader.is_empty() => {
            let mut l = operator(leader.parse().unwrap());
            l.stream.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
            l.call(1, &req)
        }
        other => other,
    }
}

#[test]
fn replacing_a_follower_keeps_locks_and_retires_the_old_node() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    let held = granted_token(&l.call(1, &acquire("kept", "a", 200, 0)));
    let old = (leader + 1) % 3;
    let old_id = old as u64 + 1;
    let new_addr = format!("127.0.0.4:{}", cluster.port);
    let new_node = cluster.spawn(4, &new_addr, "join", &[]);
    let answer = replace(&cluster, leader, old_id, 4, &new_addr);
    match &answer {
        Response::Status { text } => assert!(text.contains("replaced"), "{text}"),
        other => panic!("replace failed: {other:?}"),
    }
    // The old node learns it was removed and stops by itself with status 0.
    let code = cluster.nodes[old].as_mut().unwrap().wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(0), "the removed node did not stop cleanly");
    cluster.nodes[old] = None;
    cluster.nodes.push(Some(new_node));
    let mut l = connect(cluster.addr(leader));
    let s = status_map(&mut l, 2);
    let voters: Vec<&str> = s["voters"].split(',').collect();
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert!(voters.iter().any(|v| v.starts_with("4@")), "{voters:?}");
    assert!(!voters.iter().any(|v| v.starts_with(&format!("{old_id}@"))), "{voters:?}");
    // The new node has the state: its STATUS shows the held key, and a reused id is refused.
    let mut n = connect(new_addr.parse().unwrap());
    let ns = status_map(&mut n, 1);
    assert_eq!(ns["role"], "follower");
    assert_eq!(ns["keys_held"], "1");
    match replace(&cluster, leader, 4, old_id, &format!("127.0.0.9:{}", cluster.port)) {
        Response::Error { code: ErrorCode::Refused, message } => {
            assert!(message.contains("already used"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match l.call(3, &Request::Query { key: "kept".into() }) {
        Response::Holder { token, .. } => assert_eq!(token, held),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replacing_the_leader_moves_leadership_and_keeps_serving() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    let held = granted_token(&l.call(1, &acquire("kept", "a", 200, 0)));
    drop(l);
    let new_addr = format!("127.0.0.4:{}", cluster.port);
    let new_node = cluster.spawn(4, &new_addr, "join", &[]);
    let answer = replace(&cluster, leader, leader as u64 + 1, 4, &new_addr);
    assert!(matches!(answer, Response::Status { .. }), "{answer:?}");
    let code = cluster.nodes[leader].as_mut().unwrap().wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(0));
    cluster.nodes[leader] = None;
    cluster.nodes.push(Some(new_node));
    let next = cluster.wait_leader(Duration::from_secs(20));
    assert_ne!(next, leader);
    let mut n = connect(cluster.addr(next));
    match n.call(1, &Request::Query { key: "kept".into() }) {
        Response::Holder { token, .. } => assert_eq!(token, held),
        other => panic!("{other:?}"),
    }
    assert!(granted_token(&n.call(2, &acquire("fresh", "b", 5, 0))) > held);
}

#[test]
fn replace_refusals_are_clear() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let port = cluster.port;
    let refused = |old: u64, new: u64, addr: String| match replace(&cluster, leader, old, new, &addr) {
        Response::Error { code: ErrorCode::Refused, message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(refused(9, 4, format!("127.0.0.4:{port}")).contains("not a voter"));
    assert!(refused(1, 2, format!("127.0.0.4:{port}")).contains("already used"));
    // Nobody listens at 127.0.0.7: unreachable after the dial deadline.
    assert!(refused(1, 7, format!("127.0.0.7:{port}")).contains("unreachable"));
}

#[test]
fn cli_replace_while_another_node_is_paused() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let paused = (leader + 1) % 3;
    let old = (leader + 2) % 3;
    cluster.signal(paused, "-STOP");
    let new_addr = format!("127.0.0.4:{}", cluster.port);
    let new_node = cluster.spawn(4, &new_addr, "join", &[]);
    let out = std::process::Command::new(bin())
        .args(["admin", "replace", &(old + 1).to_string(), &format!("4@{new_addr}")])
        .args(["--addr", &cluster.addr(paused).to_string(), "--addr", &cluster.addr(old).to_string()])
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output_within(CLI);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("replaced") && stdout.contains("4@"), "{stdout}");
    cluster.signal(paused, "-CONT");
    let code = cluster.nodes[old].as_mut().unwrap().wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(0));
    cluster.nodes[old] = None;
    cluster.nodes.push(Some(new_node));
    // `admin members` lists the new voter set.
    let out = std::process::Command::new(bin())
        .args(["admin", "members", "--addr", &new_addr])
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output_within(CLI);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listing.lines().filter(|l| l.starts_with("voter")).count(), 3, "{listing}");
    assert!(listing.contains("voter    4@"), "{listing}");
}
