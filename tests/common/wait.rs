//! Waiting for a condition in the tests: the one polling loop with a bound.

use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it holds or `limit` passes; its last answer.
pub fn eventually(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        // sleep: the poll interval.
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}
