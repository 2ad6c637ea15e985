//! Snapshots: chunked InstallSnapshot on both sides.
//!
//! The application hands the core a snapshot with `compact`; the core keeps
//! the latest one and streams it to peers whose next entry was compacted
//! away, `snapshot_chunk_bytes` at a time, one chunk in flight (stop and
//! wait: the follower answers with the offset it wants next, so a lost or
//! duplicated chunk costs one retransmission, sent on the first heartbeat
//! answer after the chunk went unanswered for half an election timeout). The follower assembles chunks of one snapshot (same meta) in
//! order and installs it when `done` arrives.

use super::core::Raft;
use super::message::{Message, Snapshot, SnapshotMeta};
use super::progress::ProgressState;
use super::{wire, NodeId, Role};

impl Raft {
    // ----- leader side -----------------------------------------------------

    pub(super) fn start_snapshot(&mut self, id: NodeId) {
        let snap = self.snapshot_arc();
        if let Some(pr) = self.progress.get_mut(&id) {
            pr.become_snapshot(snap);
        }
    }

    /// Sends the chunk at the offset the peer asked for, unless one is in
    /// flight already. Returns true if something was sent.
    pub(super) fn send_snapshot_chunk(&mut self, id: NodeId) -> bool {
        let chunk_max = self.cfg.snapshot_chunk_bytes.max(1);
        let term = self.term;
        let now = self.now_ms;
        let Some(pr) = self.progress.get_mut(&id) else {
            return false;
        };
        let Some(snap) = pr.snap.clone() else {
            return false;
        };
        if pr.state != ProgressState::Snapshot || pr.snap_chunk_sent {
            return false;
        }
        let len = snap.data.len();
        let offset = (pr.snap_offset as usize).min(len);
        let end = offset + chunk_max.min(len - offset);
        pr.snap_chunk_sent = true;
        pr.snap_sent_ms = now;
        self.send(
            id,
            Message::InstallSnapshot {
                term,
                meta: snap.meta.clone(),
                offset: offset as u64,
                data: snap.data[offset..end].to_vec(),
                done: end == len,
            },
        );
        true
    }

    pub(super) fn handle_snapshot_resp(&mut self, from: NodeId, index: u64, next_offset: u64, done: bool) {
        if self.role != Role::Leader || index > self.log.last_index() {
            return;
        }
        let now = self.now_ms;
        let Some(pr) = self.progress.get_mut(&from) else {
            return;
        };
        pr.last_heard_ms = now;
        pr.heard = true;
        if done {
            // The peer holds everything up to `index`: resume with entries.
            pr.on_success(index);
            if pr.state == ProgressState::Snapshot {
                pr.next = pr.matched + 1;
                pr.become_probe();
            }
            self.maybe_commit();
            self.maybe_send_timeout_now(from);
            return;
        }
        let current = pr.snap.as_ref().map(|s| s.meta.index);
        if pr.state == ProgressState::Snapshot && current == Some(index) {
            pr.snap_offset = next_offset;
            pr.snap_chunk_sent = false;
        }
    }

    // ----- follower side ---------------------------------------------------

    pub(super) fn handle_snapshot_chunk(
        &mut self,
        from: NodeId,
        meta: SnapshotMeta,
        offset: u64,
        data: Vec<u8>,
        done: bool,
    ) {
        let index = meta.index;
        if index <= self.log.committed() {
            // Our committed prefix already covers it.
            self.reply_snapshot(from, index, 0, true);
            return;
        }
        match self.accept_chunk(from, meta, offset, data) {
            Err(want) => self.reply_snapshot(from, index, want, false),
            Ok(_) if done => {
                self.install_incoming();
                self.reply_snapshot(from, index, 0, true);
            }
            Ok(have) => self.reply_snapshot(from, index, have, false),
        }
    }

    /// Adds a chunk to the snapshot being received: Ok(bytes held now), or
    /// Err(offset we want instead) for a chunk we cannot use.
    ///
    /// A snapshot is the one being assembled only if it has the same meta AND comes
    /// from the same node. Why the node: two nodes' snapshots at the same index
    /// describe the same state but need not be the same bytes (the lock table encodes
    /// its keys in the order of its own storage), so the chunks of a new leader's
    /// snapshot must never continue an old leader's.
    fn accept_chunk(
        &mut self,
        from: NodeId,
        meta: SnapshotMeta,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<u64, u64> {
        // Why only for another snapshot: a late duplicate of the first chunk of
        // the snapshot being assembled must not throw away what came since.
        let assembling = matches!(&self.incoming_snapshot, Some((m, f, _)) if *m == meta && *f == from);
        if offset == 0 && !assembling {
            self.incoming_snapshot = Some((meta.clone(), from, Vec::new()));
        }
        let Some((have_meta, have_from, buf)) = self.incoming_snapshot.as_mut() else {
            return Err(0);
        };
        if *have_meta != meta || *have_from != from {
            // A different snapshot than the one we were assembling.
            self.incoming_snapshot = None;
            return Err(0);
        }
        if buf.len() as u64 != offset {
            // Out of order or duplicate: ask for what we actually need.
            return Err(buf.len() as u64);
        }
        if !within_snapshot_limit(buf.len(), data.len()) {
            self.incoming_snapshot = None;
            return Err(0);
        }
        buf.extend_from_slice(&data);
        Ok(buf.len() as u64)
    }

    fn install_incoming(&mut self) {
        let Some((meta, _, data)) = self.incoming_snapshot.take() else {
            return;
        };
        let snapshot = Snapshot { meta, data };
        if self.log.install_snapshot(snapshot.clone()) {
            self.installed_snapshot = Some(snapshot);
            self.refresh_role();
            self.check_removed();
        }
    }

    fn reply_snapshot(&mut self, to: NodeId, index: u64, next_offset: u64, done: bool) {
        let term = self.term;
        self.send(to, Message::InstallSnapshotResp { term, index, next_offset, done });
    }
}

/// Whether a snapshot of `have` bytes may take `more`: at most
/// `wire::SNAPSHOT_MAX_BYTES` in all. (A function of its own so that the limit is
/// tested exactly, without assembling a gigabyte.)
fn within_snapshot_limit(have: usize, more: usize) -> bool {
    have.saturating_add(more) <= wire::SNAPSHOT_MAX_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_may_reach_the_limit_and_not_pass_it() {
        let max = wire::SNAPSHOT_MAX_BYTES;
        assert!(within_snapshot_limit(10, 20));
        assert!(within_snapshot_limit(0, max));
        assert!(within_snapshot_limit(max - 1, 1));
        assert!(within_snapshot_limit(max, 0));
        assert!(!within_snapshot_limit(max, 1));
        assert!(!within_snapshot_limit(1, max));
        assert!(!within_snapshot_limit(usize::MAX, 1), "no overflow");
    }
}
