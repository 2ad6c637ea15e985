//! The seam between the lock table and the log that orders its commands: the
//! [`LogLink`] trait, and the standalone node's log, which commits on append.
//!
//! The lock-table thread drives one [`Replica`] the same way in both modes; only where
//! its requests to the log go differs. Standalone they go to [`LoopbackLog`] here; in a
//! cluster to the Raft thread (`raft_link.rs`).

use crate::messages::Clock;
use crate::replica::{Replica, ReplicaOutput, ToLog};

/// Where the replica's requests to the log go, and what the log needs told each round.
pub(crate) trait LogLink {
    /// Passes on what the replica asked of the log (`out.to_log`).
    fn submit(&mut self, replica: &mut Replica, clock: &Clock, out: &mut ReplicaOutput);

    /// Command bytes of committed entries about to be applied.
    fn note_applied(&mut self, _bytes: u64) {}

    /// The end of one round of the lock-table thread: the log's own thread, if it has
    /// one, is woken once for everything the round sent it.
    fn end_round(&mut self) {}

    /// Goes on with (or starts, when enough was applied) a snapshot of the lock state
    /// the log may then drop its entries for.
    fn maybe_snapshot(&mut self, _replica: &mut Replica) {}
}

/// The standalone log: one node, so an entry is committed as soon as it is appended.
#[derive(Default)]
pub(crate) struct LoopbackLog {
    last_index: u64,
}

impl LogLink for LoopbackLog {
    /// Feeds everything the replica asked of the log straight back as done.
    fn submit(&mut self, replica: &mut Replica, clock: &Clock, out: &mut ReplicaOutput) {
        while !out.to_log.is_empty() {
            for ask in std::mem::take(&mut out.to_log) {
                let now = clock.apply_ms();
                match ask {
                    ToLog::Append { seq, command, .. } => {
                        self.last_index += 1;
                        replica.on_appended(seq, self.last_index, 1);
                        replica.on_committed(self.last_index, 1, Some(&command), now, Clock::unix_us(), out);
                    }
                    ToLog::ReadIndex { ctx } => {
                        replica.on_read_ready(ctx, self.last_index, now, Clock::unix_us(), out)
                    }
                }
            }
        }
    }
}
