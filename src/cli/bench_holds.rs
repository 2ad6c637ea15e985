//! The counted and multi-key scenarios of `ticketing bench` (docs/cli.md, "ticketing
//! bench"): the HOLD each of their workers makes, and the places in line it is told.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::{AcquireError, Client, Lock, Place};

/// What a worker's HOLD names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// `count` of the `capacity` permits of the one key every worker shares.
    Stock { count: u32, capacity: u32 },
    /// `keys` keys of capacity 1, the worker's own.
    Multi { keys: usize },
    /// The one hot key (capacity 1), asking for its place in line.
    Placed,
}

/// The places in line the workers were told while the run was measured. Each waiting
/// hold is told its place when it queues, then at most once a second while the place
/// changes: `later` over `waited_us` is the rate the second rule bounds by 1.
pub(super) struct Places {
    pub(super) frames: AtomicU64,
    /// Frames after a hold's first.
    pub(super) later: AtomicU64,
    /// Time the holds that asked waited for their answer, all together, in µs.
    pub(super) waited_us: AtomicU64,
    /// Frames that told a hold the place it had been told before.
    pub(super) unchanged: AtomicU64,
    /// The shortest time between two frames of one hold, in µs (`u64::MAX`: none).
    pub(super) gap_min_us: AtomicU64,
}

impl Places {
    pub(super) fn new() -> Places {
        Places {
            frames: AtomicU64::new(0),
            later: AtomicU64::new(0),
            waited_us: AtomicU64::new(0),
            unchanged: AtomicU64::new(0),
            gap_min_us: AtomicU64::new(u64::MAX),
        }
    }

    /// One frame for the hold whose previous frame (time, place) is `last`.
    fn saw(&self, last: &Mutex<Option<(Instant, u32)>>, place: Place, record: bool) {
        let now = Instant::now();
        let before = last.lock().unwrap_or_else(|e| e.into_inner()).replace((now, place.ahead));
        if !record {
            return;
        }
        self.frames.fetch_add(1, Ordering::Relaxed);
        if let Some((at, ahead)) = before {
            self.later.fetch_add(1, Ordering::Relaxed);
            if ahead == place.ahead {
                self.unchanged.fetch_add(1, Ordering::Relaxed);
            }
            self.gap_min_us.fetch_min(now.duration_since(at).as_micros() as u64, Ordering::Relaxed);
        }
    }
}

/// Makes worker `w`'s HOLD of `shape` (its keys written into `key` one by one, each
/// named `prefix-…`) and waits for its answer.
#[allow(clippy::too_many_arguments)]
pub(super) fn acquire(
    client: &Client,
    shape: Shape,
    key: &mut String,
    prefix: &str,
    w: usize,
    (lease, wait): (Duration, Duration),
    places: &Arc<Places>,
    recording: &Arc<AtomicBool>,
) -> Result<Lock, AcquireError> {
    let mut hold = client.hold(lease, wait);
    key.clear();
    // Writing to a String cannot fail.
    match shape {
        Shape::Stock { count, capacity } => {
            let _ = write!(key, "{prefix}-stock");
            hold = hold.permits(key, count, capacity);
        }
        Shape::Multi { keys } => {
            for i in 0..keys {
                key.clear();
                let _ = write!(key, "{prefix}-w{w}-m{i}");
                hold = hold.key(key);
            }
        }
        Shape::Placed => {
            let _ = write!(key, "{prefix}-hot");
            let (told, record) = (places.clone(), recording.clone());
            let last = Mutex::new(None);
            hold =
                hold.key(key).on_place(move |place| told.saw(&last, place, record.load(Ordering::Relaxed)));
            let t0 = Instant::now();
            let answer = hold.acquire();
            if recording.load(Ordering::Relaxed) {
                places.waited_us.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            return answer;
        }
    }
    hold.acquire()
}
