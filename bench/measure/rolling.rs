//! `scripts/measure.sh rolling`: a rolling restart of every voter of a 3-node cluster
//! with one standby, each voter restarted as deploy/ticketing-node.service restarts it
//! (SIGTERM; a fresh process at its address, `join`, no node id, which joins as the
//! next standby), one after the other, the next once the previous one's successor is
//! a standby; four clients lock in a loop throughout. Per trial: the total time, the
//! longest time the cluster ran with fewer than three healthy voters (a voter's process
//! gone before its standby was swapped in), the longest time one client went without a
//! grant, the Indeterminate outcomes, and the load average. ROLLING_TRIALS=N trials
//! (default 5); ROLLING_LEAVE=off runs the nodes with `TICKETING_LEAVE_ON_TERMINATE=off`
//! (the "before": each stop waits for the autopilot).

use std::time::{Duration, Instant};

use crate::common::load::{load_average, Load};
use crate::common::rolling::{Nodes, Restart};

struct Trial {
    total: Duration,
    steps: Vec<Restart>,
    longest_gap: Duration,
    indeterminate: u64,
    load: f64,
}

fn trial(leave: &str) -> Trial {
    let mut nodes = Nodes::start(3, 1, &[("TICKETING_LEAVE_ON_TERMINATE", leave)]);
    let load = Load::start(nodes.addrs(), 4);
    load.wait_flowing(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let from = Instant::now();
    let mut steps = Vec::new();
    for old in [1, 2, 3] {
        let i = nodes.live.iter().position(|m| m.id == old).expect("a founder");
        steps.push(
            nodes.restart(i, Duration::from_secs(60)).unwrap_or_else(|e| panic!("restart of {old}: {e}")),
        );
    }
    let total = from.elapsed();
    let seen = load.seen(from, Instant::now());
    load.stop();
    Trial {
        total,
        steps,
        longest_gap: seen.longest_gap,
        indeterminate: seen.indeterminate,
        load: load_average(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The figures of docs/operations.md ("Upgrading").
pub fn run() {
    let trials: usize = std::env::var("ROLLING_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let leave = std::env::var("ROLLING_LEAVE").unwrap_or_else(|_| "on".into());
    println!("TICKETING_LEAVE_ON_TERMINATE={leave}");
    let mut results = Vec::new();
    for t in 0..trials {
        let r = trial(&leave);
        let steps: Vec<String> = r
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{}: voters whole {:.1} ms, exit {:.1} ms, standby again {:.0} ms",
                    s.old,
                    ms(s.whole),
                    ms(s.exited),
                    ms(s.standby)
                )
            })
            .collect();
        let short = r.steps.iter().map(|s| s.short).max().unwrap_or_default();
        println!(
            "trial {t:>2}: total {:>6.0} ms, fewer than 3 healthy voters {:>6.1} ms, longest client gap {:>6.1} ms, \
             indeterminate {}, load {:.2}\n          {}",
            ms(r.total),
            ms(short),
            ms(r.longest_gap),
            r.indeterminate,
            r.load,
            steps.join("; ")
        );
        results.push(r);
    }
    let stat = |f: &dyn Fn(&Trial) -> Duration| {
        let mut v: Vec<Duration> = results.iter().map(f).collect();
        v.sort();
        (v[v.len() / 2], v[v.len() - 1])
    };
    let total = stat(&|r| r.total);
    let short = stat(&|r| r.steps.iter().map(|s| s.short).max().unwrap_or_default());
    let whole = stat(&|r| r.steps.iter().map(|s| s.whole).max().unwrap_or_default());
    let gap = stat(&|r| r.longest_gap);
    let loads: Vec<f64> = results.iter().map(|r| r.load).collect();
    let load_min = loads.iter().cloned().fold(f64::INFINITY, f64::min);
    let load_max = loads.iter().cloned().fold(0.0, f64::max);
    let indeterminate: u64 = results.iter().map(|r| r.indeterminate).sum();
    println!("\nsummary over {trials} rolling restarts of 3 voters (median, max):");
    println!("total                         {:>7.0} ms {:>7.0} ms", ms(total.0), ms(total.1));
    println!("fewer than 3 healthy voters   {:>7.1} ms {:>7.1} ms", ms(short.0), ms(short.1));
    println!(
        "SIGTERM to voters whole       {:>7.1} ms {:>7.1} ms (the slowest of each trial's three)",
        ms(whole.0),
        ms(whole.1)
    );
    println!("longest client gap            {:>7.1} ms {:>7.1} ms", ms(gap.0), ms(gap.1));
    println!("indeterminate outcomes {indeterminate}; load average {load_min:.2}–{load_max:.2}");
}
