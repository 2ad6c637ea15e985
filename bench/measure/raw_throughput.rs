//! `scripts/measure.sh raw-throughput`: acquire+release pairs per second over raw
//! protocol connections (no client library threads), 1 and 64 connections, against a
//! standalone server and a 3-node cluster's leader. `ticketing bench` is the load
//! generator through the official client; this is the figure without it.

use std::time::{Duration, Instant};

use ticketing::proto::frame::Response;

use crate::common::{acquire, connect, granted_token, release, start_server, Cluster};

fn run_pairs(addr: std::net::SocketAddr, connections: usize, seconds: u64) -> (f64, Duration) {
    let stop = Instant::now() + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..connections)
        .map(|c| {
            std::thread::spawn(move || {
                let mut conn = connect(addr);
                let key = format!("bench-{c}");
                let mut pairs = 0u64;
                let mut id = 0u32;
                let mut latencies = Vec::new();
                while Instant::now() < stop {
                    let start = Instant::now();
                    id += 1;
                    let token = granted_token(&conn.call(id, &acquire(&key, "b", 10, 0)));
                    id += 1;
                    assert_eq!(conn.call(id, &release(&key, "b", token)), Response::Released);
                    latencies.push(start.elapsed());
                    pairs += 1;
                }
                (pairs, latencies)
            })
        })
        .collect();
    let mut total = 0;
    let mut all = Vec::new();
    for t in threads {
        let (pairs, lat) = t.join().unwrap();
        total += pairs;
        all.extend(lat);
    }
    all.sort();
    let p50 = all[all.len() / 2];
    (total as f64 / seconds as f64, p50)
}

pub fn run() {
    standalone();
    cluster();
}

fn standalone() {
    let server = start_server(&[]);
    for connections in [1, 64] {
        let (rate, p50) = run_pairs(server.addr, connections, 5);
        println!("standalone, {connections} connections: {rate:.0} pairs/s, p50 {p50:?}");
    }
}

fn cluster() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(20));
    for connections in [1, 64] {
        let (rate, p50) = run_pairs(cluster.addr(leader), connections, 5);
        println!("3-node cluster, {connections} connections: {rate:.0} pairs/s, p50 {p50:?}");
    }
}
