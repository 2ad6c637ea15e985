//! A lock load through the official client that records every grant and checks the
//! history afterwards: every token granted once, the tokens of a key growing in the
//! order the grants were seen, and no grant seen before the previous holder of its key
//! sent its (confirmed) release. For tests of membership changes under load.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ticketing::client::{Client, ReleaseOutcome};

use super::TOKEN;

/// One grant as a worker saw it.
#[derive(Clone, Debug)]
pub struct Grant {
    key: String,
    token: u64,
    got: Instant,
    /// When the release was sent, and whether the server confirmed it.
    released: Option<(Instant, bool)>,
}

/// A lock load through the official client: workers take keys in turn, hold them a
/// moment, give them back, and record what they saw.
pub struct Load {
    stop: Arc<AtomicBool>,
    grants: Arc<Mutex<Vec<Grant>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(addrs: Vec<String>, workers: usize, keys: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let grants = Arc::new(Mutex::new(Vec::new()));
        let client =
            Client::builder().addrs(addrs).auth_token(TOKEN).owner("checked-load").build().expect("client");
        let threads = (0..workers)
            .map(|w| {
                let (stop, grants, client) = (stop.clone(), grants.clone(), client.clone());
                std::thread::spawn(move || {
                    let mut i = w;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("seat:{}", i % keys);
                        i += 1;
                        let Ok(lock) = client.acquire(&key, Duration::from_secs(5), Duration::from_secs(1))
                        else {
                            // sleep: pacing after a failed acquire, so a worker does not spin.
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        };
                        let got = Instant::now();
                        let token = lock.token();
                        // sleep: the time the holder spends in its critical section.
                        std::thread::sleep(Duration::from_millis(3));
                        let sent = Instant::now();
                        let confirmed = matches!(lock.release(), Ok(ReleaseOutcome::Released));
                        let released = Some((sent, confirmed));
                        grants.lock().unwrap().push(Grant { key, token, got, released });
                    }
                })
            })
            .collect();
        Load { stop, grants, threads }
    }

    pub fn grants_since(&self, t: Instant) -> usize {
        self.grants.lock().unwrap().iter().filter(|g| g.got > t).count()
    }

    /// Stops the workers and checks the history: every token granted once, tokens of a
    /// key growing in the order the grants were seen, and no grant seen before the
    /// previous holder of its key sent its (confirmed) release.
    pub fn finish(self) -> Result<usize, String> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        let grants = self.grants.lock().unwrap().clone();
        let mut seen: HashMap<u64, &Grant> = HashMap::new();
        for g in &grants {
            if let Some(other) = seen.insert(g.token, g) {
                return Err(format!("token {} granted twice: {other:?} and {g:?}", g.token));
            }
        }
        let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
        for g in &grants {
            by_key.entry(&g.key).or_default().push(g);
        }
        for (key, mut list) in by_key {
            list.sort_by_key(|g| g.token);
            for pair in list.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if b.got < a.got {
                    return Err(format!(
                        "{key}: token {} was seen before the smaller token {}",
                        b.token, a.token
                    ));
                }
                if let Some((sent, true)) = a.released {
                    if b.got < sent {
                        return Err(format!(
                            "{key}: token {} was granted while token {} was still held (double grant)",
                            b.token, a.token
                        ));
                    }
                }
            }
        }
        Ok(grants.len())
    }
}
