//! The Raft thread's timings and bounds: how often it keeps house, how long an
//! `admin replace` may take, how much waits for a link being dialed.

use std::time::Duration;

/// How often membership bookkeeping runs (dialers, replicated addresses).
pub(super) const HOUSEKEEPING_MS: u64 = 200;
/// A member record not yet applied is proposed again after this long.
pub(super) const RECORD_REPROPOSE_MS: u64 = 2_000;
/// `admin replace`: how long the new node may take to accept our connection…
pub(super) const ADMIN_DIAL_MS: u64 = 5_000;
/// …to catch up as a learner…
pub(super) const ADMIN_CATCH_UP_MS: u64 = 60_000;
/// …and how long the joint-consensus change may take to commit.
pub(super) const ADMIN_COMMIT_MS: u64 = 15_000;
/// A learner is caught up when it is at most this many entries behind the commit index.
pub(super) const CATCH_UP_LAG_MAX: u64 = 64;

/// Messages waiting for a link being dialed, per peer, at most…
pub const DIAL_QUEUE_MESSAGES_MAX: usize = 256;
/// …and bytes (one frame of the largest size fits).
pub const DIAL_QUEUE_BYTES_MAX: usize = crate::raft::wire::FRAME_LEN_MAX_BYTES;
/// A link to a node that is no longer wanted is kept until unused for this many
/// election timeouts (so a removed node can still be told).
pub(super) const LINGER_ELECTION_TIMEOUTS: u64 = 2;
/// Messages dropped for want of a link: logged at most once per this many ms, with
/// the count of the others.
pub(super) const DROP_LOG_MS: u64 = 10_000;

/// `admin transfer-leader` requests waiting for their answer at most; more are refused.
pub(super) const TRANSFER_WAITERS_MAX: usize = 64;

/// Shortest sleep of the loop when something is due (a guard against spinning on a
/// deadline that a turn did not consume).
pub(super) const SLEEP_MIN: Duration = Duration::from_millis(1);

/// Most proposals whose commit latency is being timed at once.
pub(super) const TIMED_PROPOSALS_MAX: usize = 1 << 16;
