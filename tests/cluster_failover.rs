//! Measurements, not checks: run with
//! `cargo test --release --test cluster_failover -- --ignored --nocapture`.
//! Timing is a figure for docs/, never a pass/fail condition of the test suite.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Leader SIGKILL → another node says it leads and serves a QUERY. Default timing
/// (heartbeat 200 ms, election timeout uniform in [2000, 2300) ms).
#[test]
#[ignore]
fn measure_failover_ten_times() {
    let mut times = Vec::new();
    for trial in 0..10 {
        let mut cluster = Cluster::start(3, &[]);
        let leader = cluster.wait_leader(Duration::from_secs(20));
        // Let followers hear a few heartbeats first.
        std::thread::sleep(Duration::from_millis(1000));
        let killed = Instant::now();
        cluster.kill(leader);
        let next = cluster.wait_leader(Duration::from_secs(20));
        let took = killed.elapsed();
        assert_ne!(next, leader);
        println!("trial {trial}: {:.3} s", took.as_secs_f64());
        times.push(took);
    }
    times.sort();
    let median = (times[4] + times[5]) / 2;
    println!(
        "failover over 10 trials: min {:.3} s, median {:.3} s, max {:.3} s",
        times[0].as_secs_f64(),
        median.as_secs_f64(),
        times[9].as_secs_f64()
    );
}
