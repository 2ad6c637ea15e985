//! What the client has recorded of fencing domains beyond each address's own: the domain
//! of locks it may still hold, the last disagreement it said, and how long requests wait
//! for the seeds (the rules are in `domains.rs`).

use std::time::{Duration, Instant};

/// Requests of a client without a cluster name wait at most this long after a seed is
/// added for it to report its domain or fail: longer than a first dial can last (the
/// connect timeout, 3 s, then the handshake's, 5 s), so the wait ends on a fact — every
/// seed reported or failed — and never lets such a client serve one cluster before a
/// slow seed of another has reported. A seed whose host is down costs it the connect
/// timeout.
pub const SEED_SETTLE_MAX: Duration = Duration::from_secs(9);

/// The same for a client given a cluster name: its dial already refuses nodes of
/// another name, so the wait only guards against two clusters sharing one name, and a
/// seed whose host is down costs it at most this.
pub const SEED_SETTLE_NAMED: Duration = Duration::from_secs(2);

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
        let settle = if named { SEED_SETTLE_NAMED } else { SEED_SETTLE_MAX };
        Domains { named, seeds_setting, name_setting, held: None, said: Vec::new(), settle }
    }

    /// Tests of other rules: requests never wait for seeds to report their domain.
    #[cfg(test)]
    pub(crate) fn without_settling(mut self) -> Domains {
        self.settle = Duration::ZERO;
        self
    }
}
