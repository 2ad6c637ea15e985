//! Log replication: AppendEntries on both sides, heartbeats, commit.
//!
//! Leader side: `flush_replication` (called from `ready()`) sends each peer
//! what its `Progress` allows — one probe at a time after a rejection, a
//! pipelined window in replicate mode, snapshot chunks when the entries it
//! needs are gone. Follower side: `handle_append` checks the previous entry,
//! truncates a conflicting suffix, appends, and answers with a match index or
//! a conflict hint (term + first index of that term) so the leader can skip a
//! whole term per round trip.

use super::core::Raft;
use super::message::{Entry, EntryKind, Message};
use super::progress::ProgressState;
use super::{NodeId, Role};

impl Raft {
    // ----- follower side ---------------------------------------------------

    pub(super) fn handle_append(
        &mut self,
        from: NodeId,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
        commit: u64,
    ) {
        if !well_formed(prev_index, self.term, &entries) {
            return;
        }
        let committed = self.log.committed();
        let msg_last = prev_index + entries.len() as u64;
        if msg_last <= committed {
            // Everything in it is already committed here: nothing to check.
            self.reply_append_ok(from, msg_last);
            return;
        }
        // Why trim: entries up to our commit index are final and identical
        // on every node; only what follows can conflict.
        let (prev_index, prev_term, entries) = trim_committed(prev_index, prev_term, entries, committed);
        match self.log.term_at(prev_index) {
            None => self.reply_append_reject(from, prev_index, None, self.log.last_index() + 1),
            Some(t) if t != prev_term => {
                let hint = self.log.first_index_of_term_run(prev_index, t);
                self.reply_append_reject(from, prev_index, Some(t), hint);
            }
            Some(_) => {
                let last_new = prev_index + entries.len() as u64;
                self.append_entries(entries);
                self.follower_commit(commit.min(last_new));
                self.reply_append_ok(from, last_new);
            }
        }
    }

    /// Appends entries after a matching previous entry, truncating our
    /// suffix at the first entry whose term differs.
    fn append_entries(&mut self, entries: Vec<Entry>) {
        let mut config_changed = false;
        for entry in entries {
            match self.log.term_at(entry.index) {
                Some(t) if t == entry.term => continue,
                Some(_) => {
                    crate::invariant!(
                        self.role != Role::Leader,
                        "a leader never truncates its log",
                        "node {} leads term {} and would cut its log at {}",
                        self.cfg.id,
                        self.term,
                        entry.index
                    );
                    config_changed |= self.log.active_config_index() >= entry.index;
                    self.log.truncate_from(entry.index);
                }
                None => {}
            }
            config_changed |= matches!(entry.kind, EntryKind::Config(_));
            self.log.append(entry);
        }
        if config_changed {
            self.refresh_role();
        }
    }

    fn follower_commit(&mut self, index: u64) {
        if self.log.commit_to(index) {
            self.check_removed();
        }
    }

    fn reply_append_ok(&mut self, to: NodeId, index: u64) {
        let term = self.term;
        self.send(to, Message::AppendResp { term, success: true, index, conflict_term: None, hint_index: 0 });
    }

    fn reply_append_reject(
        &mut self,
        to: NodeId,
        rejected: u64,
        conflict_term: Option<u64>,
        hint_index: u64,
    ) {
        let term = self.term;
        self.send(
            to,
            Message::AppendResp { term, success: false, index: rejected, conflict_term, hint_index },
        );
    }

    pub(super) fn handle_heartbeat(&mut self, from: NodeId, commit: u64, read_seq: u64) {
        // The leader never sends a commit index beyond our match index, so
        // everything up to it is identical to the leader's log.
        self.follower_commit(commit.min(self.log.last_index()));
        let term = self.term;
        self.send(from, Message::HeartbeatResp { term, read_seq });
    }

    // ----- leader side -----------------------------------------------------

    pub(super) fn handle_append_resp(
        &mut self,
        from: NodeId,
        success: bool,
        index: u64,
        conflict_term: Option<u64>,
        hint_index: u64,
    ) {
        // Why: neither a match nor a rejected prev_index can lie beyond our
        // log; such an answer is corrupt or from another leader's era.
        if self.role != Role::Leader || index > self.log.last_index() {
            return;
        }
        let retry = match conflict_term {
            Some(t) => self.log.last_index_of_term(t).map_or(hint_index, |i| i + 1),
            None => hint_index,
        };
        let now = self.now_ms;
        let Some(pr) = self.progress.get_mut(&from) else {
            return;
        };
        pr.last_heard_ms = now;
        pr.heard = true;
        if !success {
            pr.on_reject(index, retry);
            return;
        }
        if pr.on_success(index) || pr.state == ProgressState::Probe {
            if pr.state == ProgressState::Probe {
                pr.become_replicate();
            }
            self.maybe_commit();
        }
        self.maybe_send_timeout_now(from);
    }

    pub(super) fn handle_heartbeat_resp(&mut self, from: NodeId, read_seq: u64) {
        if self.role != Role::Leader {
            return;
        }
        let now = self.now_ms;
        let resend_after = snapshot_resend_ms(self.cfg.election_ms);
        let Some(pr) = self.progress.get_mut(&from) else {
            return;
        };
        pr.last_heard_ms = now;
        pr.heard = true;
        pr.read_ack = pr.read_ack.max(read_seq.min(self.read_seq));
        pr.on_heartbeat_resp();
        if pr.state == ProgressState::Snapshot && now >= pr.snap_sent_ms.saturating_add(resend_after) {
            // The peer is alive but the chunk has gone unanswered for long:
            // it or its answer was lost. Why not resend on every heartbeat
            // answer: a large chunk on a slow link is still on its way, and
            // each copy would only queue behind it.
            pr.snap_chunk_sent = false;
        }
        self.maybe_send_timeout_now(from);
        self.resolve_reads();
    }

    /// Advances the commit index to the highest current-term index a quorum
    /// holds. Why current-term only: Raft §5.4.2 / Figure 8 — an old-term
    /// entry on a majority can still be overwritten.
    pub(super) fn maybe_commit(&mut self) {
        let id = self.cfg.id;
        let last = self.log.last_index();
        let progress = &self.progress;
        let quorum = self.log.active_membership().committed_index(|n| {
            if n == id {
                last
            } else {
                progress.get(&n).map_or(0, |p| p.matched)
            }
        });
        if quorum <= self.log.committed() || self.log.term_at(quorum) != Some(self.term) {
            return;
        }
        self.log.commit_to(quorum);
        self.on_leader_commit();
    }

    fn on_leader_commit(&mut self) {
        self.release_waiting_reads();
        self.sync_progress();
        self.maybe_leave_joint();
        let (_, committed) = self.log.committed_membership();
        if !committed.is_voter(self.cfg.id) {
            // A leader that removed itself steps down once the change commits. Why the
            // TimeoutNow first: a caught-up remaining voter (one of long standing if
            // possible, see `successor`) campaigns at once, instead of the cluster
            // waiting an election timeout without a leader. It must hold the whole log
            // now: we stop leading at once. Safety does not depend on it: voters still
            // check the candidate's log.
            let successor = self.best_successor(true);
            let still_learner = committed.contains(self.cfg.id);
            if let Some(to) = successor {
                let term = self.term;
                self.send(to, Message::TimeoutNow { term });
            }
            self.become_follower(self.term, None);
            self.handed_to = successor;
            if !still_learner {
                self.check_removed();
            }
        }
    }

    /// Sends whatever each peer may receive now. Called from `ready()`.
    pub(super) fn flush_replication(&mut self) {
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for id in peers {
            self.send_appends(id);
            self.maybe_send_commit(id);
        }
        if std::mem::take(&mut self.heartbeat_requested) {
            self.broadcast_heartbeat();
        }
    }

    /// Sends appends to `id` until its window is full or it is up to date.
    fn send_appends(&mut self, id: NodeId) {
        // Bounded: each round either sends into a finite window or stops.
        for _ in 0..=self.cfg.max_inflight.max(1) {
            if !self.send_one(id) {
                break;
            }
        }
    }

    /// Sends one append (or snapshot chunk) to `id` if allowed and useful.
    fn send_one(&mut self, id: NodeId) -> bool {
        let last = self.log.last_index();
        let Some(pr) = self.progress.get(&id) else {
            return false;
        };
        if pr.state == ProgressState::Snapshot {
            return self.send_snapshot_chunk(id);
        }
        let prev = pr.next - 1;
        let Some(prev_term) = self.log.term_at(prev) else {
            // The entries this peer needs were compacted away.
            self.start_snapshot(id);
            return self.send_snapshot_chunk(id);
        };
        let useful = pr.next <= last || (pr.state == ProgressState::Probe && pr.matched < prev);
        let can_send = useful && pr.can_send(self.cfg.max_inflight);
        // Why: only when nothing else may go out do we spend a message on
        // asking whether the tail of a full window was lost.
        let tail_probe = !can_send && pr.probe_tail && pr.matched < last;
        if !can_send && !tail_probe {
            return false;
        }
        let entries = if tail_probe {
            Vec::new()
        } else {
            self.log.slice(pr.next, last, self.cfg.max_append_entries, self.cfg.max_append_bytes)
        };
        let msg_last = prev + entries.len() as u64;
        let commit = self.log.committed();
        let count = entries.len();
        let pr = self.progress.get_mut(&id).expect("progress checked above");
        pr.probe_tail = false;
        pr.on_sent(msg_last, count);
        pr.sent_commit = pr.sent_commit.max(commit.min(msg_last));
        let term = self.term;
        self.send(id, Message::Append { term, prev_index: prev, prev_term, entries, commit });
        !tail_probe
    }

    /// A peer behind on the commit index (never counting beyond its match
    /// index) gets a heartbeat carrying it once it has been behind for
    /// `commit_notice_ms` with no append or heartbeat sent to it meanwhile
    /// (either carries the index and ends the wait). Why not at once: at low
    /// rates that was a second exchange per follower for every entry, and the
    /// next entry's append usually carries it within that time.
    fn maybe_send_commit(&mut self, id: NodeId) {
        let commit = self.log.committed();
        let due_after = self.cfg.commit_notice_ms();
        let now = self.now_ms;
        let Some(pr) = self.progress.get_mut(&id) else {
            return;
        };
        if pr.sent_commit >= commit.min(pr.matched) {
            pr.commit_due_ms = None;
            return;
        }
        let due = *pr.commit_due_ms.get_or_insert(now.saturating_add(due_after));
        if now >= due {
            self.send_heartbeat(id);
        }
    }

    /// Leader: the earliest moment a peer is due a commit-only heartbeat.
    pub(super) fn next_commit_notice_ms(&self) -> Option<u64> {
        self.progress.values().filter_map(|p| p.commit_due_ms).min()
    }

    pub(super) fn broadcast_heartbeat(&mut self) {
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for id in peers {
            self.send_heartbeat(id);
        }
    }

    fn send_heartbeat(&mut self, id: NodeId) {
        let term = self.term;
        let read_seq = self.read_seq;
        let commit = self.log.committed();
        let Some(pr) = self.progress.get_mut(&id) else {
            return;
        };
        let commit = commit.min(pr.matched);
        pr.sent_commit = pr.sent_commit.max(commit);
        pr.commit_due_ms = None;
        self.send(id, Message::Heartbeat { term, commit, read_seq });
    }
}

/// How long a snapshot chunk may go unanswered before a heartbeat answer
/// (proof that the peer is alive) has it sent again: half an election timeout.
pub(super) fn snapshot_resend_ms(election_ms: u64) -> u64 {
    election_ms / 2
}

/// Entries must follow `prev_index` one by one, with non-decreasing terms no
/// newer than the leader's term. Anything else is a malformed message.
fn well_formed(prev_index: u64, term: u64, entries: &[Entry]) -> bool {
    let mut expect = prev_index;
    let mut last_term = 0;
    for e in entries {
        expect = match expect.checked_add(1) {
            Some(i) => i,
            None => return false,
        };
        if e.index != expect || e.term < last_term || e.term > term {
            return false;
        }
        last_term = e.term;
    }
    true
}

/// Drops the entries at or below `committed` (which the message covers past),
/// returning the new (prev_index, prev_term, entries).
fn trim_committed(
    prev_index: u64,
    prev_term: u64,
    entries: Vec<Entry>,
    committed: u64,
) -> (u64, u64, Vec<Entry>) {
    if prev_index >= committed {
        return (prev_index, prev_term, entries);
    }
    let skip = (committed - prev_index) as usize;
    let new_prev_term = entries[skip - 1].term;
    (committed, new_prev_term, entries.into_iter().skip(skip).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(first: u64, terms: &[u64]) -> Vec<Entry> {
        terms
            .iter()
            .zip(first..)
            .map(|(term, index)| Entry { term: *term, index, kind: EntryKind::Noop })
            .collect()
    }

    #[test]
    fn well_formed_entries_follow_one_by_one_in_terms_up_to_the_leaders() {
        assert!(well_formed(4, 3, &entries(5, &[1, 2, 2, 3])));
        assert!(well_formed(4, 3, &[]));
        assert!(!well_formed(4, 3, &entries(6, &[1, 2])), "a gap after prev_index");
        assert!(!well_formed(4, 3, &entries(5, &[2, 1])), "a term going back");
        assert!(!well_formed(4, 3, &entries(5, &[2, 4])), "a term past the leader's");
        assert!(!well_formed(u64::MAX, 3, &entries(1, &[1])), "an index past u64");
    }

    #[test]
    fn trim_committed_drops_what_the_commit_index_covers() {
        let (prev, prev_term, rest) = trim_committed(2, 1, entries(3, &[1, 2, 2, 3, 3, 3]), 5);
        assert_eq!((prev, prev_term), (5, 2));
        assert_eq!(rest, entries(6, &[3, 3, 3]));
        let (prev, prev_term, rest) = trim_committed(6, 3, entries(7, &[3]), 5);
        assert_eq!((prev, prev_term, rest), (6, 3, entries(7, &[3])));
    }
}
