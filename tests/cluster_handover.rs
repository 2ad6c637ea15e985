//! Planned hand-over of leadership on real processes (docs/operations.md): `admin
//! transfer-leader`, SIGTERM to the leader, and what clients under load see meanwhile.
//!
//! The checks here use bounds far above what a hand-over takes (it is a round trip or
//! two) but below an election timeout (2 s by default): a hand-over that failed and fell
//! back to an election would miss them. The figures in docs/operations.md come from the
//! ignored `measure_*` tests: `cargo test --release --test cluster_handover -- --ignored
//! --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::load::{load_average, Load};
use common::*;
use ticketing::proto::frame::{ErrorCode, Request, Response};

fn node_index(cluster: &Cluster, leader_text: &str) -> usize {
    // leader=ID@ADDR
    let line = leader_text.lines().find_map(|l| l.strip_prefix("leader=")).expect("a leader= line");
    let (id, addr) = line.split_once('@').expect("ID@ADDR");
    let index = id.parse::<usize>().unwrap() - 1;
    assert_eq!(addr, cluster.addr(index).to_string());
    index
}

#[test]
fn admin_transfer_leader_hands_leadership_to_the_named_voter_or_the_one_it_chooses() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut l = connect(cluster.addr(leader));
    let held = granted_token(&l.call(1, &acquire("kept", "a", 200, 0)));
    drop(l);
    let follower = (leader + 1) % 3;
    // A follower redirects to the leader.
    match operator(cluster.addr(follower)).call(1, &Request::TransferLeader { target: None }) {
        Response::Moved { leader: addr } => assert_eq!(addr, cluster.addr(leader).to_string()),
        other => panic!("a follower answered {other:?}"),
    }
    // Not a voter: refused with the reason, nothing changes.
    match operator(cluster.addr(leader)).call(2, &Request::TransferLeader { target: Some(99) }) {
        Response::Error { code: ErrorCode::Refused, message } => assert!(message.contains("99"), "{message}"),
        other => panic!("a transfer to a non-voter got {other:?}"),
    }
    // To a named voter: answered once it leads, well inside an election timeout.
    let target = (leader + 2) % 3;
    let started = Instant::now();
    let answer =
        operator(cluster.addr(leader)).call(3, &Request::TransferLeader { target: Some(target as u64 + 1) });
    let took = started.elapsed();
    let Response::Status { text } = answer else { panic!("transfer: {answer:?}") };
    assert_eq!(node_index(&cluster, &text), target);
    assert!(took < Duration::from_millis(1000), "the hand-over took {took:?}");
    assert_eq!(cluster.wait_leader(Duration::from_secs(2)), target);
    // Without a target: the leader picks a caught-up voter.
    let answer = operator(cluster.addr(target)).call(4, &Request::TransferLeader { target: None });
    let Response::Status { text } = answer else { panic!("transfer: {answer:?}") };
    let next = node_index(&cluster, &text);
    assert_ne!(next, target);
    // To itself: nothing to do, answered at once.
    let answer =
        operator(cluster.addr(next)).call(5, &Request::TransferLeader { target: Some(next as u64 + 1) });
    let Response::Status { text } = answer else { panic!("transfer: {answer:?}") };
    assert_eq!(node_index(&cluster, &text), next);
    // The state came along: the lock is held with its token, tokens go on rising.
    let mut n = connect(cluster.addr(cluster.wait_leader(Duration::from_secs(2))));
    match n.call(1, &Request::Query { key: "kept".into() }) {
        Response::Holder { token, .. } => assert_eq!(token, held),
        other => panic!("{other:?}"),
    }
    assert!(granted_token(&n.call(2, &acquire("fresh", "b", 5, 0))) > held);
}

#[test]
fn cli_transfer_leader_prints_the_new_leader() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let target = (leader + 1) % 3;
    let out = std::process::Command::new(bin())
        .args(["admin", "transfer-leader", &(target + 1).to_string()])
        .env_clear()
        .env("TICKETING_ADDRS", cluster.addrs().join(","))
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), format!("leader {}@{}", target + 1, cluster.addr(target)));
    assert_eq!(cluster.wait_leader(Duration::from_secs(2)), target);
}

#[test]
fn requests_during_transfers_wait_and_none_is_failed_or_indeterminate() {
    let cluster = Cluster::start(3, &[]);
    let mut leader = cluster.wait_leader(Duration::from_secs(15));
    let load = Load::start(cluster.addrs(), 4);
    load.wait_flowing(Duration::from_secs(10));
    for round in 0..3 {
        let from = Instant::now();
        let answer = operator(cluster.addr(leader)).call(1, &Request::TransferLeader { target: None });
        let Response::Status { text } = answer else { panic!("round {round}: {answer:?}") };
        let next = node_index(&cluster, &text);
        assert_ne!(next, leader);
        leader = next;
        std::thread::sleep(Duration::from_millis(700));
        let seen = load.seen(from, Instant::now());
        println!("transfer {round}: {seen:?}");
        assert!(seen.grants > 0, "round {round}: {seen:?}");
        assert_eq!(seen.indeterminate, 0, "round {round}: {seen:?}");
        assert!(seen.other.is_empty(), "round {round}: {seen:?}");
        assert!(seen.longest_gap < Duration::from_millis(1000), "round {round}: {seen:?}");
    }
    load.stop();
}

#[test]
fn sigterm_to_the_leader_hands_leadership_over_before_it_stops() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let load = Load::start(cluster.addrs(), 4);
    load.wait_flowing(Duration::from_secs(10));
    let from = Instant::now();
    cluster.signal(leader, "-TERM");
    let node = cluster.nodes[leader].as_mut().unwrap();
    let code = node.exit_code_within(Duration::from_secs(5), "the leader, 5 s after SIGTERM,");
    assert_eq!(code, Some(0));
    let stopped = from.elapsed();
    let log: Vec<String> = node.log.try_iter().collect();
    assert!(log.iter().any(|l| l.contains("leadership handed over")), "{log:#?}");
    cluster.nodes[leader] = None;
    let next = cluster.wait_leader(Duration::from_secs(2));
    assert_ne!(next, leader);
    std::thread::sleep(Duration::from_millis(500));
    let seen = load.seen(from, Instant::now());
    println!("SIGTERM: stopped after {stopped:?}; {seen:?}");
    load.stop();
    assert!(seen.grants > 0, "{seen:?}");
    assert_eq!(seen.indeterminate, 0, "{seen:?}");
    assert!(seen.other.is_empty(), "{seen:?}");
    assert!(seen.longest_gap < Duration::from_millis(1000), "{seen:?}");
}

/// docs/operations.md: a leader stops within an election timeout and two heartbeats of
/// SIGTERM (2 s + 2 × 200 ms by default) when it cannot hand leadership over.
const STOP_WITHOUT_HANDOVER_MAX: Duration = Duration::from_millis(2400);

#[test]
fn sigterm_to_a_leader_whose_followers_are_dead_stops_without_waiting_for_a_hand_over() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    for follower in (0..3).filter(|&i| i != leader) {
        cluster.kill(follower);
    }
    let from = Instant::now();
    cluster.signal(leader, "-TERM");
    let node = cluster.nodes[leader].as_mut().unwrap();
    let code = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status.code();
        }
        assert!(from.elapsed() < Duration::from_secs(10), "the leader did not stop within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stopped = from.elapsed();
    let log: Vec<String> = node.log.try_iter().collect();
    println!("SIGTERM with both followers dead: stopped after {stopped:?}");
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(stopped < STOP_WITHOUT_HANDOVER_MAX, "stopped after {stopped:?}: {log:#?}");
    let truthful = "no follower reachable to hand leadership to; stopping without a hand-over";
    assert!(log.iter().any(|l| l.contains(truthful)), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("handed over")), "{log:#?}");
}

/// Frozen followers (SIGSTOP) keep their links up and were heard a moment ago: the
/// leader tries a hand-over, which cannot complete; it stops once the documented wait
/// is over (plus the stop itself) and says it handed nothing over.
#[test]
fn sigterm_to_a_leader_whose_followers_are_frozen_stops_after_the_bounded_wait() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    for follower in (0..3).filter(|&i| i != leader) {
        cluster.signal(follower, "-STOP");
    }
    let from = Instant::now();
    cluster.signal(leader, "-TERM");
    let node = cluster.nodes[leader].as_mut().unwrap();
    let code = node.exit_code_within(Duration::from_secs(10), "the leader with frozen followers");
    let stopped = from.elapsed();
    let log: Vec<String> = node.log.try_iter().collect();
    println!("SIGTERM with both followers frozen: stopped after {stopped:?}");
    assert_eq!(code, Some(0), "{log:#?}");
    // The stop itself (closing connections, joining threads) takes milliseconds.
    assert!(
        stopped < STOP_WITHOUT_HANDOVER_MAX + Duration::from_millis(600),
        "stopped after {stopped:?}: {log:#?}"
    );
    let said = log.iter().find(|l| l.contains("stopping without a hand-over"));
    println!("{said:?}");
    assert!(said.is_some(), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("handed over")), "{log:#?}");
}

#[test]
fn replacing_the_leader_under_load_leaves_no_gap_of_a_second() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let new_addr = format!("127.0.0.4:{}", cluster.port);
    let mut all = cluster.addrs();
    all.push(new_addr.clone());
    let load = Load::start(all, 4);
    load.wait_flowing(Duration::from_secs(10));
    let new_node = cluster.spawn(4, &new_addr, "join", &[]);
    let from = Instant::now();
    let answer = cluster.admin_replace(leader, leader as u64 + 1, 4, &new_addr);
    assert!(matches!(answer, Response::Status { .. }), "{answer:?}");
    cluster.nodes.push(Some(new_node));
    let next = cluster.wait_leader(Duration::from_secs(5));
    assert_ne!(next, leader);
    std::thread::sleep(Duration::from_millis(700));
    let seen = load.seen(from, Instant::now());
    println!("replace the leader: {seen:?}");
    load.stop();
    assert!(seen.grants > 0, "{seen:?}");
    assert_eq!(seen.indeterminate, 0, "{seen:?}");
    assert!(seen.other.is_empty(), "{seen:?}");
    assert!(seen.longest_gap < Duration::from_millis(1000), "{seen:?}");
}

#[test]
fn messages_for_a_peer_without_a_link_are_dropped_and_logged() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let follower = (leader + 1) % 3;
    cluster.kill(follower);
    let node = cluster.nodes[leader].as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let wanted = format!("to node {} dropped", follower + 1);
    loop {
        let line = node.log.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        match line {
            Ok(line) if line.contains(&wanted) => break,
            Ok(_) => {}
            Err(_) => panic!("the leader did not log dropped messages for the dead node"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// `admin transfer-leader` (no target).
    Transfer,
    /// SIGTERM to the leader: it hands over, then stops.
    Sigterm,
    /// SIGKILL to the leader: what a stop cost before the hand-over (an election).
    Sigkill,
    /// `admin replace` of the leader by a new node.
    Replace,
}

/// One trial: a fresh 3-node cluster, four clients locking in a loop, then `change`.
/// Returns the longest gap between grants from the change on, the Indeterminate
/// outcomes, and the load average at the end.
fn trial(change: Change) -> (Duration, u64, f64) {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(20));
    let new_addr = format!("127.0.0.4:{}", cluster.port);
    let mut all = cluster.addrs();
    all.push(new_addr.clone());
    let load = Load::start(all, 4);
    load.wait_flowing(Duration::from_secs(10));
    let new_node = (change == Change::Replace).then(|| cluster.spawn(4, &new_addr, "join", &[]));
    std::thread::sleep(Duration::from_millis(1000));
    let from = Instant::now();
    match change {
        Change::Transfer => {
            let answer = operator(cluster.addr(leader)).call(1, &Request::TransferLeader { target: None });
            assert!(matches!(answer, Response::Status { .. }), "{answer:?}");
        }
        Change::Sigterm => cluster.signal(leader, "-TERM"),
        Change::Sigkill => cluster.kill(leader),
        Change::Replace => {
            let answer = cluster.admin_replace(leader, leader as u64 + 1, 4, &new_addr);
            assert!(matches!(answer, Response::Status { .. }), "{answer:?}");
        }
    }
    if let Some(node) = new_node {
        cluster.nodes.push(Some(node));
    }
    // Until grants flow again for a second after the change settled.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let recent = load.grants.lock().unwrap().iter().any(|(_, t)| t.elapsed() < Duration::from_millis(50));
        if recent && from.elapsed() > Duration::from_millis(1500) {
            break;
        }
        if Instant::now() > deadline {
            let status: Vec<String> = (0..cluster.nodes.len())
                .filter(|i| cluster.nodes[*i].is_some())
                .map(|i| match connect_with(cluster.addr(i), TOKEN) {
                    Ok(mut c) => format!("{:?}", status_map(&mut c, 1)),
                    Err(e) => format!("node {i}: {e}"),
                })
                .collect();
            panic!("{change:?}: grants did not resume; {:?}\n{status:#?}", load.seen(from, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let seen = load.seen(from, Instant::now());
    load.stop();
    (seen.longest_gap, seen.indeterminate, load_average())
}

/// The figures of docs/operations.md ("Handing leadership over"): 20 trials of each
/// change, alternating, on real processes with default timing. Run with
/// `cargo test --release --test cluster_handover measure_handover -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_handover_gaps() {
    let trials: usize = std::env::var("HANDOVER_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    // HANDOVER_ONLY=Sigterm (say) runs one kind.
    let only = std::env::var("HANDOVER_ONLY").ok();
    let kinds: Vec<Change> = [Change::Transfer, Change::Sigterm, Change::Sigkill, Change::Replace]
        .into_iter()
        .filter(|k| only.as_ref().is_none_or(|o| format!("{k:?}") == *o))
        .collect();
    let mut results: Vec<Vec<(Duration, u64, f64)>> = vec![Vec::new(); kinds.len()];
    for t in 0..trials {
        for (k, change) in kinds.iter().enumerate() {
            let r = trial(*change);
            println!(
                "trial {t:>2} {change:<8?} longest gap {:>7.1} ms, indeterminate {}, load {:.2}",
                r.0.as_secs_f64() * 1e3,
                r.1,
                r.2
            );
            results[k].push(r);
        }
    }
    println!("\nsummary over {trials} trials each (longest time one of 4 clients went without a grant):");
    for (k, change) in kinds.iter().enumerate() {
        let mut gaps: Vec<Duration> = results[k].iter().map(|r| r.0).collect();
        gaps.sort();
        let median = gaps[gaps.len() / 2];
        let max = gaps[gaps.len() - 1];
        let indeterminate: u64 = results[k].iter().map(|r| r.1).sum();
        let loads: Vec<f64> = results[k].iter().map(|r| r.2).collect();
        let load_min = loads.iter().cloned().fold(f64::INFINITY, f64::min);
        let load_max = loads.iter().cloned().fold(0.0, f64::max);
        println!(
            "{change:<8?} median {:>7.1} ms, max {:>7.1} ms, indeterminate {indeterminate}, load average {load_min:.2}–{load_max:.2}",
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
}
