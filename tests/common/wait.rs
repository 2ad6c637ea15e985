//! Waiting for a condition in the tests: the one polling loop with a bound.

use std::time::{Duration, Instant};

/// How often [`eventually`] and [`eventually_some`] look.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `cond` every 10 ms until it holds or `limit` passes; its last answer.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    eventually_some(limit, || cond().then_some(())).is_some()
}

/// Polls `f` every 10 ms until it gives a value or `limit` passes; the value, else
/// `None`.
pub fn eventually_some<T>(limit: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    eventually_every(limit, POLL, f)
}

/// [`eventually_some`] looking every `every`, for a look that costs (a question to
/// every node of a cluster, a CLI run, an attempt at an operation) or a wait whose
/// pace the test keeps. `f` runs at once, then every `every`, and a last time at
/// `limit` (never later than the first look after it).
pub fn eventually_every<T>(limit: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        let now = Instant::now();
        if now >= end {
            return None;
        }
        // sleep: the poll interval of this bounded wait (the one such loop of the tests).
        std::thread::sleep(every.min(end - now));
    }
}
