//! The reconnect schedule of a connection (docs/client.md): 0.1 s, doubling, to a 3.2 s
//! ceiling, back to 0.1 s after a successful handshake.

use std::time::Duration;

/// First pause after a failed connection attempt.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest pause between two connection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_millis(3_200);

/// An endless iterator of pauses between reconnect attempts.
///
/// No jitter: the schedule is exactly the one docs/client.md names, and there are only a
/// handful of connections per client, so synchronised retries are not a concern.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { next: BACKOFF_INITIAL }
    }

    /// Starts the schedule over (after a successful handshake).
    pub fn reset(&mut self) {
        self.next = BACKOFF_INITIAL;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_ceiling_and_resets() {
        let mut backoff = Backoff::new();
        let ms: Vec<u128> = backoff.by_ref().take(8).map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 3200, 3200]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(BACKOFF_INITIAL));
    }
}
