//! Rate-limited log lines for events an outsider can cause at will (failed
//! authentication, refused peers, dropped connections): the first one of a burst is
//! logged, the rest are counted and summed up in the next line that gets through, so
//! a flood of bad connections cannot fill the disk or drown the other lines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// One line per this many milliseconds at most, per limiter.
pub const LOG_INTERVAL_MS: u64 = 1_000;

/// A limiter for one kind of event. `const`-constructible, so it can be a `static`.
pub struct RateLimit {
    /// Milliseconds since the process epoch of the last line let through, plus one
    /// (0 = never).
    last_ms: AtomicU64,
    suppressed: AtomicU64,
    interval_ms: u64,
}

impl RateLimit {
    /// One line per second at most.
    pub const fn new() -> RateLimit {
        RateLimit::every(LOG_INTERVAL_MS)
    }

    /// One line per `interval_ms` at most (for a condition that can last for hours,
    /// such as a peer that is down: the first line says so, later ones remind).
    pub const fn every(interval_ms: u64) -> RateLimit {
        RateLimit { last_ms: AtomicU64::new(0), suppressed: AtomicU64::new(0), interval_ms }
    }

    /// `Some(n)` when a line may be logged now, `n` being how many were suppressed
    /// since the last one; `None` when this event is only counted.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(process_ms())
    }

    /// [`RateLimit::allow`] at a given time (for tests).
    pub fn allow_at(&self, now_ms: u64) -> Option<u64> {
        let stamp = now_ms + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && stamp < last + self.interval_ms {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.last_ms.compare_exchange(last, stamp, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            // Another thread logged this very moment.
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

impl RateLimit {
    /// For a line logged regardless of the limit (a new kind of event): starts a new
    /// interval now, forgetting the count of lines suppressed before it.
    pub fn restart(&self) {
        self.last_ms.store(process_ms() + 1, Ordering::Relaxed);
        self.suppressed.store(0, Ordering::Relaxed);
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::new()
    }
}

/// Text to append to a line that `n` suppressed lines preceded.
pub fn suppressed_note(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more like this not logged)")
    }
}

/// Milliseconds since the first call in this process (the limiters' clock).
pub fn process_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Logs at `warn` through `limit`: `warn_limited!(LIMIT, "fmt", args…)`.
#[macro_export]
macro_rules! warn_limited {
    ($limit:expr, $($arg:tt)+) => {
        if let Some(n) = $limit.allow() {
            log::warn!("{}{}", format_args!($($arg)+), $crate::lograte::suppressed_note(n));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_are_counted() {
        let limit = RateLimit::new();
        assert_eq!(limit.allow_at(0), Some(0));
        for t in 1..LOG_INTERVAL_MS - 1 {
            assert_eq!(limit.allow_at(t), None);
        }
        assert_eq!(limit.allow_at(LOG_INTERVAL_MS), Some(LOG_INTERVAL_MS - 2));
        assert_eq!(limit.allow_at(3 * LOG_INTERVAL_MS), Some(0));
    }
}
