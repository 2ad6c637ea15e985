//! `scripts/measure.sh handover`: the longest time a client goes without a grant when
//! leadership changes hands (transfer, SIGTERM, replace of the leader) and, as the
//! "before", when the leader is SIGKILLed; and when it is frozen (SIGSTOP: its sockets
//! stay open, the clients must find it out). HANDOVER_TRIALS=N trials of each (default
//! 20); HANDOVER_ONLY=Sigterm (say) runs one kind.

use std::time::{Duration, Instant};

use ticketing::proto::frame::{Request, Response};

use crate::common::load::{load_average, Load};
use crate::common::{connect_with, operator, status_map, Cluster, TOKEN};

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
    /// SIGSTOP to the leader, SIGCONT once grants flow again: a failover the clients
    /// notice only by the silence (docs/client.md, "Dead connections").
    Sigstop,
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
        Change::Sigstop => cluster.signal(leader, "-STOP"),
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
    if change == Change::Sigstop {
        cluster.signal(leader, "-CONT");
    }
    (seen.longest_gap, seen.indeterminate, load_average())
}

/// The figures of docs/operations.md ("Handing leadership over"): 20 trials of each
/// change, alternating, on real processes with default timing.
pub fn run() {
    let trials: usize = std::env::var("HANDOVER_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    // HANDOVER_ONLY=Sigterm (say) runs one kind.
    let only = std::env::var("HANDOVER_ONLY").ok();
    let kinds: Vec<Change> =
        [Change::Transfer, Change::Sigterm, Change::Sigkill, Change::Replace, Change::Sigstop]
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
