//! What a bench worker counts: the kinds of error, its own tally, and the figures it
//! shares with the progress printer while the run goes on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::histogram::Histogram;
use crate::client::{AcquireError, ReleaseError};

/// Error kinds, counted separately.
pub(super) const KINDS: [&str; 11] = [
    "busy",
    "timeout",
    "not_leader",
    "invalid",
    "overloaded",
    "unavailable",
    "indeterminate",
    "not_holder",
    "release_unconfirmed",
    "release_queue_full",
    "release_invalid",
];

pub(super) fn acquire_kind(e: &AcquireError) -> usize {
    match e {
        AcquireError::Busy => 0,
        AcquireError::Timeout => 1,
        AcquireError::NotLeader { .. } => 2,
        AcquireError::Invalid(_) => 3,
        AcquireError::Overloaded => 4,
        AcquireError::Unavailable { .. } => 5,
        // The bench never cancels.
        AcquireError::Indeterminate(_) | AcquireError::Cancelled | AcquireError::Forked(_) => 6,
    }
}

pub(super) fn release_kind(e: &ReleaseError) -> usize {
    match e {
        // The bench never cancels.
        ReleaseError::Unconfirmed
        | ReleaseError::Unavailable { .. }
        | ReleaseError::Cancelled
        | ReleaseError::Forked(_) => 8,
        ReleaseError::QueueFull => 9,
        ReleaseError::Invalid(_) => 10,
    }
}

/// One worker's figures.
pub(super) struct Tally {
    pub(super) latency: Histogram,
    pub(super) grants: u64,
    pub(super) pairs: u64,
    pub(super) errors: [u64; KINDS.len()],
}

/// Figures shared with the progress printer.
#[derive(Default)]
pub(super) struct Live {
    pub(super) pairs: AtomicU64,
    pub(super) grants: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) finished: AtomicU64,
    /// The first message of each error kind: the report names the causes.
    pub(super) causes: [OnceLock<String>; KINDS.len()],
    /// A mistake that trying again cannot fix (the secret, TLS, a certificate): every
    /// worker stops, and so does the run.
    pub(super) fatal: OnceLock<String>,
}

impl Live {
    /// Counts an error of `kind` (in the report's figures when `record`).
    pub(super) fn error(
        &self,
        tally: &mut Tally,
        kind: usize,
        record: bool,
        message: impl FnOnce() -> String,
    ) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if record {
            tally.errors[kind] += 1;
        }
        if self.causes[kind].get().is_none() {
            let _ = self.causes[kind].set(message());
        }
    }

    /// An acquire's error: counted; a lasting one stops the run. True when it did.
    pub(super) fn acquire_failed(&self, tally: &mut Tally, e: &AcquireError, record: bool) -> bool {
        self.error(tally, acquire_kind(e), record, || e.to_string());
        let lasting = matches!(e, AcquireError::Unavailable { lasting: true, .. });
        if lasting {
            let _ = self.fatal.set(e.to_string());
        }
        lasting
    }
}
