//! What the client has recorded of fencing domains beyond each address's own: the domain
//! of locks it may still hold, the last disagreement it said, and how long requests wait
//! for the seeds (the rules are in `domains.rs`).

use std::time::{Duration, Instant};

/// Requests wait at most this long after a seed is added for it to report its domain.
/// Why a bound: a seed whose host is down answers nothing until the connect timeout
/// (3 s), and the other seeds should serve before a short budget ends. A seed that
/// reports later is still compared, and a disagreement then stops the client.
pub const SEED_SETTLE_MAX: Duration = Duration::from_secs(2);

/// What the client knows of fencing domains beyond each slot's own.
#[derive(Debug, Default)]
pub(crate) struct Domains {
    /// The client was given a cluster name: two domains then mean two clusters that
    /// share it (the advice differs).
    pub(crate) named: bool,
    /// How the messages name the addresses' setting and the name's (the caller's words).
    pub(crate) seeds_setting: &'static str,
    pub(crate) name_setting: &'static str,
    /// The domain of the latest grant, and until when a lock from it may be held
    /// (its lease plus the commit margin, the latest of them).
    pub(super) held: Option<(u64, Instant)>,
    /// The domains of the last disagreement said in the log (said once, not at every
    /// request).
    pub(super) said: Vec<u64>,
    /// How long requests wait for a seed to report its domain ([`SEED_SETTLE_MAX`]).
    pub(super) settle: Duration,
}

impl Domains {
    pub(crate) fn new(named: bool, seeds_setting: &'static str, name_setting: &'static str) -> Domains {
        Domains { named, seeds_setting, name_setting, held: None, said: Vec::new(), settle: SEED_SETTLE_MAX }
    }

    /// Tests of other rules: requests never wait for seeds to report their domain.
    #[cfg(test)]
    pub(crate) fn without_settling(mut self) -> Domains {
        self.settle = Duration::ZERO;
        self
    }
}
