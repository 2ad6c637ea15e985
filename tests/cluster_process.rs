//! Real `ticketing` processes as a 3- and 5-node cluster on 127.0.0.x (docs/operations.md, docs/raft.md).

mod common;

use std::time::{Duration, Instant};

use common::children::{Within, CLI};
use common::facts_cluster::{eventually_some, wait_waiters};
use common::*;
use ticketing::proto::frame::{Request, Response};

#[test]
fn three_nodes_elect_a_leader_grant_and_redirect() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    assert_eq!(l.welcome.role, b'L');
    assert_ne!(l.welcome.domain, 0, "the first leader records a fencing domain");
    let token = granted_token(&l.call(2, &acquire("seat", "a", 30, 0)));
    // A follower does not execute: M with the leader's client address.
    let follower = (leader + 1) % 3;
    // A follower learns the domain once it applies the entry that records it: its
    // commit index may lag the leader's by the commit-notice delay (20 ms, docs/raft.md
    // "Commit propagation") and its lock table gathers news for 10 ms.
    let mut f = welcome_with_domain(cluster.addr(follower));
    assert_eq!(f.welcome.role, b'F');
    assert_eq!(f.welcome.leader, cluster.addr(leader).to_string());
    assert_eq!(f.welcome.domain, l.welcome.domain);
    assert_eq!(
        f.call(1, &acquire("seat", "b", 30, 0)),
        Response::Moved { leader: cluster.addr(leader).to_string() }
    );
    // STATUS is answered by every node.
    let s = status_map(&mut f, 2);
    assert_eq!(s["role"], "follower");
    assert_eq!(s["leader"], cluster.addr(leader).to_string());
    assert_eq!(s["voters"].split(',').count(), 3);
    // Hand-off works through the log: a waiter queued behind "a" gets the key when
    // "a" releases it.
    let mut w = connect(cluster.addr(leader));
    w.send(1, &acquire("seat", "w", 30, 20_000));
    assert!(
        wait_waiters(cluster.addr(leader), "seat", 1, Duration::from_secs(10)),
        "the waiter never queued behind the holder on the leader"
    );
    match l.call(3, &Request::Query { key: "seat".into() }) {
        Response::Holder { owner, token: held, waiters, .. } => {
            assert_eq!((owner.as_str(), held, waiters), ("a", token, 1), "the waiter waits on a's hold")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(l.call(4, &release("seat", "a", token)), Response::Released);
    let (id, g) = w.recv();
    assert_eq!(id, 1);
    let handed = granted_token(&g);
    assert!(handed > token, "the handed-off token {handed} is above the released {token}");
    match l.call(5, &Request::Query { key: "seat".into() }) {
        Response::Holder { owner, token, waiters, .. } => {
            assert_eq!((owner.as_str(), token, waiters), ("w", handed, 0), "the waiter holds the key")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn leader_kill_fails_over_and_locks_and_tokens_survive() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    let held = granted_token(&l.call(1, &acquire("long", "keeper", 120, 0)));
    let mut last = held;
    for i in 0..20u32 {
        let t = granted_token(&l.call(10 + 2 * i, &acquire("k", "o", 5, 0)));
        assert!(t > last);
        last = t;
        assert_eq!(l.call(11 + 2 * i, &release("k", "o", t)), Response::Released);
    }
    drop(l);
    let killed_at = Instant::now();
    cluster.kill(leader);
    let next = cluster.wait_leader(Duration::from_secs(15));
    let failover = killed_at.elapsed();
    assert_ne!(next, leader);
    eprintln!("failover took {failover:?}");
    let mut n = connect(cluster.addr(next));
    // The long lock survived with its token, and its lease restarted in full.
    match n.call(1, &Request::Query { key: "long".into() }) {
        Response::Holder { token, owner, remaining_ms, .. } => {
            assert_eq!((token, owner.as_str()), (held, "keeper"));
            assert!(remaining_ms > 110_000, "lease restarted with its full length: {remaining_ms}");
        }
        other => panic!("{other:?}"),
    }
    // Tokens keep growing across the leader change.
    let t = granted_token(&n.call(2, &acquire("k", "o", 5, 0)));
    assert!(t > last, "token {t} after failover is not above {last}");
    assert_eq!(n.call(3, &acquire("long", "thief", 5, 0)), Response::Busy);
}

#[test]
fn an_isolated_minority_never_grants() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    // Pause both followers: the leader is now a minority of one.
    for &i in &others {
        cluster.signal(i, "-STOP");
    }
    let mut l = connect(cluster.addr(leader));
    l.stream.set_read_timeout(Some(Duration::from_secs(12))).unwrap();
    l.send(1, &acquire("x", "o", 5, 0));
    let (id, r) = l.recv();
    assert_eq!(id, 1);
    assert!(
        matches!(r, Response::Unknown | Response::Moved { .. }),
        "a leader without a majority answered {r:?}"
    );
    for &i in &others {
        cluster.signal(i, "-CONT");
    }
    let leader = cluster.wait_leader(Duration::from_secs(20));
    let mut l = connect(cluster.addr(leader));
    // Whatever happened to request 1, the key is usable again.
    match l.call(1, &Request::Query { key: "x".into() }) {
        Response::Free | Response::Holder { .. } => {}
        other => panic!("{other:?}"),
    }
    cluster.kill(0);
}

#[test]
fn five_nodes_survive_two_failures() {
    let mut cluster = Cluster::start(5, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    let held = granted_token(&l.call(1, &acquire("five", "a", 120, 0)));
    drop(l);
    // Kill the leader and one follower: three of five remain, a majority.
    let follower = (leader + 1) % 5;
    cluster.kill(leader);
    cluster.kill(follower);
    let next = cluster.wait_leader(Duration::from_secs(20));
    let mut n = connect(cluster.addr(next));
    match n.call(1, &Request::Query { key: "five".into() }) {
        Response::Holder { token, .. } => assert_eq!(token, held),
        other => panic!("{other:?}"),
    }
    let t = granted_token(&n.call(2, &acquire("other", "b", 5, 0)));
    assert!(t > held);
    let s = status_map(&mut n, 3);
    assert_eq!(s["voters"].split(',').count(), 5);
    assert_eq!(s["role"], "leader");
}

#[test]
fn a_paused_leader_is_replaced_and_its_late_answers_are_safe() {
    let cluster = Cluster::start(3, &[]);
    let old = cluster.wait_leader(Duration::from_secs(15));
    let mut o = connect(cluster.addr(old));
    o.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let held = granted_token(&o.call(1, &acquire("p", "first", 60, 0)));
    cluster.signal(old, "-STOP");
    // A request sent to the paused leader sits in its socket.
    o.send(2, &acquire("q", "stale", 60, 0));
    let new = eventually_some(Duration::from_secs(20), || {
        (0..3)
            .filter(|i| *i != old)
            .find(|i| connect_with(cluster.addr(*i), TOKEN).is_ok_and(|c| c.welcome.role == b'L'))
    })
    .expect("no new leader while the old one is paused");
    // Wait until the new leader serves, then take "q" there.
    let q_token = eventually_some(Duration::from_secs(10), || {
        let mut n = connect(cluster.addr(new));
        match n.call(1, &acquire("q", "new-side", 60, 0)) {
            Response::Granted { token, .. } => Some(token),
            Response::Moved { .. } | Response::Error { .. } => None,
            other => panic!("{other:?}"),
        }
    })
    .expect("the new leader never granted \"q\"");
    assert!(q_token > held);
    let mut n = connect(cluster.addr(new));
    n.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    cluster.signal(old, "-CONT");
    // The old leader's answer to request 2: never a grant of a key the new side holds.
    let (id, r) = o.recv();
    assert_eq!(id, 2);
    assert!(
        matches!(r, Response::Moved { .. } | Response::Unknown | Response::Busy),
        "the deposed leader answered {r:?}"
    );
    // "p" is still held with its token on the new leader.
    match n.call(2, &Request::Query { key: "p".into() }) {
        Response::Holder { token, owner, .. } => {
            assert_eq!((token, owner.as_str()), (held, "first"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_crashed_node_restarted_under_its_old_id_exits_2() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let victim = (leader + 1) % 3;
    cluster.kill(victim);
    let addr = cluster.addr(victim).to_string();
    let mut again = cluster.spawn(victim as u64 + 1, &addr, "new", &[]);
    assert_eq!(again.exit_code_within(Duration::from_secs(15), "the restarted node"), Some(2));
    // Its last lines may still be on their way from its standard error.
    again.wait_log(
        Duration::from_secs(5),
        "the exit message telling the operator to replace the node",
        |l| l.contains("new NodeId"),
    );
    // The rest of the cluster still serves.
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    granted_token(&l.call(1, &acquire("after", "o", 5, 0)));
}

/// A node started with `new` after its cluster formed cannot tell whether it ran before
/// (and lost its vote and log) or not: it must not take part, and says how to replace it.
///
/// The late nodes start at planned addresses too: the whole of it runs again on new
/// ports when one of its nodes found its address taken.
#[test]
fn a_founding_node_that_finds_the_domain_formed_exits_2() {
    ports::with_fresh_ports("two founders, a late one and a stranger", a_late_founder_and_a_stranger);
}

fn a_late_founder_and_a_stranger() -> Result<(), String> {
    let port = free_port_pair();
    let peers: String = (1..=3).map(|i| format!("{i}@127.0.0.{i}:{port}")).collect::<Vec<_>>().join(",");
    let mut cluster = Cluster { port, nodes: Vec::new(), peers };
    for i in 1..=2u64 {
        let node = cluster.try_spawn(i, &format!("127.0.0.{i}:{port}"), "new", &[])?;
        cluster.nodes.push(Some(node));
    }
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    granted_token(&l.call(1, &acquire("before", "o", 60, 0)));
    // Formed: both nodes know the domain. (A follower learns it when it applies the
    // entry, tens of ms after the leader: a founding node whose first contact is that
    // follower before then still founds with it, docs/operations.md.)
    for i in 0..2 {
        assert_ne!(welcome_with_domain(cluster.addr(i)).welcome.domain, 0, "node {i} knows the domain");
    }
    let mut late = cluster.try_spawn(3, &format!("127.0.0.3:{port}"), "new", &[])?;
    assert_eq!(late.exit_code_within(Duration::from_secs(15), "the late founding node"), Some(2));
    late.wait_log(Duration::from_secs(5), "the exit message naming the variable and the cause", |l| {
        l.contains("TICKETING_CLUSTER_STATE") && l.contains("already exists")
    });
    // The two founders go on serving, the lock intact.
    match l.call(2, &Request::Query { key: "before".into() }) {
        Response::Holder { owner, .. } => assert_eq!(owner, "o"),
        other => panic!("{other:?}"),
    }
    // A `new` node that is no member of that cluster but lists its nodes as peers is
    // refused by them; their answer still says a domain exists, so it exits 2 too.
    let stranger_peers = format!("1@127.0.0.1:{port},2@127.0.0.2:{port},9@127.0.0.9:{port}");
    let mut stranger = cluster.try_spawn(
        9,
        &format!("127.0.0.9:{port}"),
        "new",
        &[("TICKETING_CLUSTER_PEERS", &stranger_peers)],
    )?;
    assert_eq!(stranger.exit_code_within(Duration::from_secs(15), "the stranger"), Some(2));
    stranger
        .wait_log(Duration::from_secs(5), "the stranger's exit message", |l| l.contains("already exists"));
    Ok(())
}

#[test]
fn cli_status_with_one_address_shows_every_node() {
    let cluster = Cluster::start(3, &[]);
    cluster.wait_leader(Duration::from_secs(15));
    let out = std::process::Command::new(bin())
        .args(["status", "--addr", &cluster.addr(0).to_string()])
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .output_within(CLI);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}");
    for i in 0..3 {
        assert!(table.contains(&cluster.addr(i).to_string()), "{table}");
    }
    let roles: Vec<&str> = table.lines().skip(1).filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert_eq!(roles.iter().filter(|r| **r == "leader").count(), 1, "{table}");
}

#[test]
fn a_node_with_the_wrong_peer_secret_is_kept_out() {
    let (mut cluster, _) = Cluster::start_each(3, |i, _| {
        let secret = if i == 3 { "a-different-peer-secret" } else { "the-right-peer-secret-00" };
        vec![("TICKETING_PEER_AUTH_TOKEN".to_string(), secret.to_string())]
    });
    let leader = cluster.wait_leader(Duration::from_secs(15));
    assert_ne!(leader, 2, "the outsider cannot lead");
    let mut l = connect(cluster.addr(leader));
    granted_token(&l.call(1, &acquire("k", "o", 5, 0)));
    // The outsider never joins: once its peers refused its secret it stops, naming the
    // variable to fix (a node left running would look healthy to its supervisor).
    let outsider = cluster.nodes[2].as_mut().unwrap();
    outsider.wait_log(Duration::from_secs(20), "the outsider naming its secret", |l| {
        l.contains("TICKETING_PEER_AUTH_TOKEN")
    });
    assert_eq!(outsider.wait_exit(Duration::from_secs(20)), Some(2), "the outsider exits 2");
    let leader_node = cluster.nodes[leader].as_ref().unwrap();
    leader_node.wait_log(Duration::from_secs(10), "the leader about the refused peer", |l| {
        l.contains("peer authentication failed")
    });
}

/// A connection to `addr` whose WELCOME shows a fencing domain, trying for up to 2 s:
/// a follower learns the domain once it applies the entry that records it (its commit
/// index may lag the leader's by the commit-notice delay, 20 ms, docs/raft.md "Commit
/// propagation", and its lock table gathers news for 10 ms). The last one if none does.
fn welcome_with_domain(addr: std::net::SocketAddr) -> Raw {
    let with_domain = || Some(connect(addr)).filter(|c| c.welcome.domain != 0);
    eventually_some(Duration::from_secs(2), with_domain).unwrap_or_else(|| connect(addr))
}
