//! A load of official clients for the tests and measurements of changes under load:
//! workers acquiring and releasing keys of their own in a loop, recording when each
//! grant arrived and every outcome that is not a grant (`NotLeader` counted apart: the
//! `M` a request may meet during a hand-over, definitive and retryable).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ticketing::client::{AcquireError, Client};

use super::wait::eventually;
use super::TOKEN;

/// Clients acquiring and releasing their own keys in a loop, recording when each grant
/// arrived (and to which client) and every outcome that is not a grant.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub grants: Arc<Mutex<Vec<(usize, Instant)>>>,
    indeterminate: Arc<AtomicU64>,
    /// `NotLeader` outcomes: (worker, whether it named a leader).
    not_leader: Arc<Mutex<Vec<(usize, bool)>>>,
    other: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What the clients saw during a window of a load.
#[derive(Debug)]
pub struct Seen {
    /// The longest time one client went without a grant.
    pub longest_gap: Duration,
    pub grants: usize,
    pub indeterminate: u64,
    /// `NotLeader` outcomes: (worker, whether it named a leader).
    pub not_leader: Vec<(usize, bool)>,
    pub other: Vec<String>,
}

impl Seen {
    /// The most `NotLeader` outcomes one worker saw.
    pub fn not_leader_per_worker(&self) -> usize {
        let mut counts = std::collections::HashMap::new();
        for (w, _) in &self.not_leader {
            *counts.entry(*w).or_insert(0) += 1;
        }
        counts.into_values().max().unwrap_or(0)
    }
}

impl Load {
    pub fn start(addrs: Vec<String>, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let grants = Arc::new(Mutex::new(Vec::new()));
        let indeterminate = Arc::new(AtomicU64::new(0));
        let other = Arc::new(Mutex::new(Vec::new()));
        let not_leader = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for w in 0..workers {
            let client = Client::builder().addrs(addrs.clone()).auth_token(TOKEN).build().unwrap();
            let (stop, grants, indeterminate, other, not_leader) =
                (stop.clone(), grants.clone(), indeterminate.clone(), other.clone(), not_leader.clone());
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    // A fresh key each time: an Indeterminate attempt cannot block the next.
                    let key = format!("w{w}-{n}");
                    match client.acquire(&key, Duration::from_secs(5), Duration::from_millis(500)) {
                        Ok(lock) => {
                            grants.lock().unwrap().push((w, Instant::now()));
                            let _ = lock.release();
                        }
                        Err(AcquireError::Indeterminate(_)) => {
                            indeterminate.fetch_add(1, Ordering::SeqCst);
                        }
                        // Redirected (the client goes to the leader it was told about),
                        // or no node to send it to.
                        Err(e @ (AcquireError::NotLeader { .. } | AcquireError::Unavailable { .. })) => {
                            if let AcquireError::NotLeader { leader } = e {
                                not_leader.lock().unwrap().push((w, leader.is_some()));
                            }
                            // sleep: pacing, so a client without a leader does not spin.
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => other.lock().unwrap().push(format!("{e:?}")),
                    }
                }
            }));
        }
        Load { stop, grants, indeterminate, not_leader, other, threads }
    }

    /// Waits until grants flow (a first one from now on).
    pub fn wait_flowing(&self, within: Duration) {
        let since = Instant::now();
        assert!(
            eventually(within, || self.grants.lock().unwrap().iter().any(|(_, t)| *t > since)),
            "the load got no grant within {within:?}"
        );
    }

    /// Waits until every client got a grant after `since` (all of them served again
    /// after a change); whether they did within `within`.
    pub fn wait_each_granted_since(&self, since: Instant, within: Duration) -> bool {
        let workers = self.threads.len();
        eventually(within, || {
            let grants = self.grants.lock().unwrap();
            (0..workers).all(|w| grants.iter().any(|(g, t)| *g == w && *t > since))
        })
    }

    /// What was seen between `from` and `to`, then forgets it (counters restart).
    pub fn seen(&self, from: Instant, to: Instant) -> Seen {
        let mut grants = self.grants.lock().unwrap();
        let workers = self.threads.len();
        let mut longest_gap = Duration::ZERO;
        let mut count = 0;
        for w in 0..workers {
            let mut times: Vec<Instant> =
                grants.iter().filter(|(g, t)| *g == w && *t >= from && *t <= to).map(|(_, t)| *t).collect();
            times.sort();
            count += times.len();
            let mut last = from;
            for t in &times {
                longest_gap = longest_gap.max(*t - last);
                last = *t;
            }
            longest_gap = longest_gap.max(to - last);
        }
        grants.clear();
        Seen {
            longest_gap,
            grants: count,
            indeterminate: self.indeterminate.swap(0, Ordering::SeqCst),
            not_leader: std::mem::take(&mut *self.not_leader.lock().unwrap()),
            other: std::mem::take(&mut *self.other.lock().unwrap()),
        }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The 1-minute load average, as /proc/loadavg says.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}
