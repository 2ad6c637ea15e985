//! `scripts/measure.sh stop`: how long a leader that cannot hand leadership over takes
//! to stop after SIGTERM, its followers dead or frozen (docs/operations.md: within an
//! election timeout and two heartbeats, 2.4 s by default); and how long a node cut off
//! from the majority (SIGSTOP to the other two) stays ready on /readyz, and how long
//! after the heal it is ready again (docs/operations.md: about an election timeout).
//! STOP_TRIALS=N trials of each (default 5). The checks of what happens are tests
//! (tests/cluster_handover.rs, tests/metrics.rs); the times are measured here.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::Cluster;

fn trials() -> usize {
    std::env::var("STOP_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(5)
}

fn summary(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{what}: min {:.3} s, median {:.3} s, max {:.3} s over {} trials",
        times[0].as_secs_f64(),
        times[times.len() / 2].as_secs_f64(),
        times[times.len() - 1].as_secs_f64(),
        times.len()
    );
}

/// SIGTERM to the leader, its followers killed (`frozen`: SIGSTOPped) first: the time
/// until it exits.
pub fn run() {
    for frozen in [false, true] {
        let what = if frozen { "followers frozen" } else { "followers dead" };
        let mut times = Vec::new();
        for trial in 0..trials() {
            let mut cluster = Cluster::start(3, &[]);
            let leader = cluster.wait_leader(Duration::from_secs(20));
            // Let followers hear a few heartbeats first.
            std::thread::sleep(Duration::from_millis(1000));
            for follower in (0..3).filter(|&i| i != leader) {
                if frozen {
                    cluster.signal(follower, "-STOP");
                } else {
                    cluster.kill(follower);
                }
            }
            let from = Instant::now();
            cluster.signal(leader, "-TERM");
            let node = cluster.nodes[leader].as_mut().unwrap();
            let code = node.exit_code_within(Duration::from_secs(60), "the leader after SIGTERM");
            let took = from.elapsed();
            assert_eq!(code, Some(0));
            println!("{what}, trial {trial}: stopped {:.3} s after SIGTERM", took.as_secs_f64());
            times.push(took);
            for follower in (0..3).filter(|&i| i != leader) {
                cluster.signal(follower, "-CONT");
            }
        }
        summary(&format!("SIGTERM to a leader, {what}"), times);
    }
}

fn readyz(addr: SocketAddr) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return 0 };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = write!(s, "GET /readyz HTTP/1.1\r\nHost: measure\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Polls /readyz every 10 ms until it answers `code`: the time that took.
fn until(addr: SocketAddr, code: u16) -> Duration {
    let from = Instant::now();
    while readyz(addr) != code {
        assert!(from.elapsed() < Duration::from_secs(60), "/readyz never answered {code}");
        std::thread::sleep(Duration::from_millis(10));
    }
    from.elapsed()
}

/// The majority frozen, then thawed: how long the lone node stays ready, and how long
/// after the heal it is ready again.
pub fn readyz_run() {
    let (mut unready, mut ready) = (Vec::new(), Vec::new());
    for trial in 0..trials() {
        let listen = |i: usize, port: u16| format!("127.0.0.{i}:{port}");
        let (cluster, metrics_port) =
            Cluster::start_each(3, |i, port| vec![("TICKETING_METRICS_LISTEN".to_string(), listen(i, port))]);
        let metrics: Vec<SocketAddr> = (1..=3).map(|i| listen(i, metrics_port).parse().unwrap()).collect();
        let leader = cluster.wait_leader(Duration::from_secs(20));
        let lone = (leader + 1) % 3;
        until(metrics[lone], 200);
        std::thread::sleep(Duration::from_millis(1000));
        let others: Vec<usize> = (0..3).filter(|i| *i != lone).collect();
        for &i in &others {
            cluster.signal(i, "-STOP");
        }
        let a = until(metrics[lone], 503);
        for &i in &others {
            cluster.signal(i, "-CONT");
        }
        let b = until(metrics[lone], 200);
        println!(
            "trial {trial}: not ready {:.3} s after the majority froze, ready {:.3} s after the heal",
            a.as_secs_f64(),
            b.as_secs_f64()
        );
        unready.push(a);
        ready.push(b);
    }
    summary("/readyz 503 after the majority froze", unready);
    summary("/readyz 200 after the heal", ready);
}
