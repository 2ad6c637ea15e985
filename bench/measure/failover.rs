//! `scripts/measure.sh failover`: how long after the leader's SIGKILL another node
//! leads and serves (10 trials, default timing); `scripts/measure.sh replacement`: how
//! long replacing a follower and the leader takes while a client locks in a loop, and
//! the longest time that client went without a grant.

use std::time::{Duration, Instant};

use crate::common::{Cluster, PEER_TOKEN, TOKEN};

/// Leader SIGKILL → another node says it leads and serves a QUERY. Default timing
/// (heartbeat 200 ms, election timeout uniform in [2000, 2300) ms).
pub fn failover() {
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

/// One replacement of a follower and one of the leader while a client acquires and
/// releases in a loop: how long each replacement took, and the longest time the client
/// went without a grant.
pub fn replacement() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    for replace_leader in [false, true] {
        let mut cluster = Cluster::start(3, &[]);
        let leader = cluster.wait_leader(Duration::from_secs(20));
        let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
        let new_addr = format!("127.0.0.4:{}", cluster.port);
        let mut all = addrs.clone();
        all.push(new_addr.clone());
        let client =
            ticketing::client::Client::builder().addrs(all.clone()).auth_token(TOKEN).build().unwrap();
        let admin = ticketing::client::Client::builder().addrs(all).auth_token(PEER_TOKEN).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let gaps = Arc::new(Mutex::new(Duration::ZERO));
        let worker = {
            let (stop, gaps, client) = (stop.clone(), gaps.clone(), client.clone());
            std::thread::spawn(move || {
                let mut last = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(lock) = client.acquire("m", Duration::from_secs(5), Duration::from_millis(100))
                    {
                        let now = Instant::now();
                        let mut g = gaps.lock().unwrap();
                        *g = (*g).max(now - last);
                        last = now;
                        let _ = lock.release();
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_secs(1));
        *gaps.lock().unwrap() = Duration::ZERO;
        let old = if replace_leader { leader } else { (leader + 1) % 3 };
        let _new = cluster.spawn(4, &new_addr, "join", &[]);
        let started = Instant::now();
        let report = admin.replace_member(old as u64 + 1, 4, &new_addr, Duration::from_secs(60)).unwrap();
        let took = started.elapsed();
        std::thread::sleep(Duration::from_secs(4));
        stop.store(true, Ordering::SeqCst);
        worker.join().unwrap();
        let gap = *gaps.lock().unwrap();
        println!(
            "replace {} ({}): {took:?}; longest time without a grant: {gap:?}; {}",
            old + 1,
            if replace_leader { "the leader" } else { "a follower" },
            report.trim().replace('\n', "; ")
        );
        cluster.kill(old);
    }
}
