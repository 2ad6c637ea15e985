//! What waits for a peer's link while it is being dialed.

/// Messages for a peer whose link is being dialed, encoded, in order. Bounded in
/// count, bytes and time: they wait for the dial attempt under way only (dropped
/// when it fails, or once the oldest waited half an election timeout). Why not
/// longer: replaying a backoff's worth of stale heartbeats would renew the leases of
/// a leader long gone; Raft resends what matters.
#[derive(Default)]
pub(super) struct DialQueue {
    pub(super) frames: Vec<u8>,
    pub(super) count: usize,
    pub(super) since_ms: u64,
}
