//! A cluster node's [`LogLink`]: the lock table's requests go to the Raft thread over
//! its channel, one wake-up per round, and snapshots are cut here, a slice per round.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::log_link::LogLink;
use crate::messages::{Clock, ToRaft};
use crate::raft_waker::RaftWaker;
use crate::replica::{Replica, ReplicaOutput, SNAPSHOT_SLICE_SLOTS};

/// A snapshot is handed to Raft (so it can drop its log) after at least this many
/// applied entries, and then when either the entries since the last one are twice the
/// keys held (so the cost of snapshots stays proportional to the work done) or their
/// commands add up to `SNAPSHOT_LOG_BYTES` (so the log's memory stays bounded while
/// many keys are held: a million held keys would otherwise keep two million entries).
const SNAPSHOT_ENTRIES_MIN: u64 = 10_000;
/// Command bytes applied since the last snapshot that start a new one (about 100,000
/// ACQUIREs, some 25 MiB of log in memory).
const SNAPSHOT_LOG_BYTES: u64 = 8 << 20;

/// The Raft thread as the lock table's log.
pub(crate) struct RaftLink {
    tx: Sender<ToRaft>,
    waker: Arc<RaftWaker>,
    /// The applied index the last snapshot was begun at.
    snapshot_index: u64,
    /// Command bytes applied since the last snapshot began.
    log_bytes: u64,
    /// Something was sent this round: wake the Raft thread at its end.
    wake_due: bool,
}

impl RaftLink {
    pub(crate) fn new(tx: Sender<ToRaft>, waker: Arc<RaftWaker>) -> RaftLink {
        RaftLink { tx, waker, snapshot_index: 0, log_bytes: 0, wake_due: false }
    }
}

impl LogLink for RaftLink {
    fn submit(&mut self, _replica: &mut Replica, _clock: &Clock, out: &mut ReplicaOutput) {
        if out.to_log.is_empty() {
            return;
        }
        for ask in out.to_log.drain(..) {
            let _ = self.tx.send(ToRaft::Log(ask));
        }
        self.wake_due = true;
    }

    fn note_applied(&mut self, bytes: u64) {
        self.log_bytes += bytes;
    }

    /// Wakes the Raft thread once for everything this round sent it (one wake-up
    /// per round, not per command).
    fn end_round(&mut self) {
        if std::mem::take(&mut self.wake_due) {
            let _ = self.waker.wake();
        }
    }

    /// Starts a snapshot when enough has been applied since the last one, and goes on
    /// encoding the one under way: one slice of `SNAPSHOT_SLICE_SLOTS` key slots per
    /// round, so the thread never stops for long (docs/security.md §4). When done,
    /// Raft gets it and may drop its log up to the index it was begun at.
    fn maybe_snapshot(&mut self, replica: &mut Replica) {
        if !replica.snapshot_in_progress() {
            let since = replica.applied_index().saturating_sub(self.snapshot_index);
            let keys = replica.state().keys_held() as u64;
            if since < SNAPSHOT_ENTRIES_MIN || (since < 2 * keys && self.log_bytes < SNAPSHOT_LOG_BYTES) {
                return;
            }
            self.snapshot_index = replica.applied_index();
            self.log_bytes = 0;
            replica.begin_snapshot();
        }
        if let Some((index, data)) = replica.snapshot_step(SNAPSHOT_SLICE_SLOTS) {
            let _ = self.tx.send(ToRaft::Compact { index, data });
            let _ = self.waker.wake();
        }
    }
}
