//! The leader's view of one follower (or learner): how much of the log it
//! holds and how replication to it proceeds.
//!
//! States (as in etcd-io/raft):
//! - `Probe`: we do not know where its log ends; send one append, then wait
//!   for an answer (or the next heartbeat response) before sending another.
//! - `Replicate`: the follower is in sync; send optimistically, keeping at
//!   most `max_inflight` unacknowledged appends in flight (pipelining).
//! - `Snapshot`: the entries it needs were compacted away; stream the
//!   snapshot in chunks, one chunk in flight.

use std::collections::VecDeque;
use std::sync::Arc;

use super::message::Snapshot;

/// Replication state of one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressState {
    Probe,
    Replicate,
    Snapshot,
}

/// The leader's bookkeeping for one peer.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Highest index known to be replicated on the peer.
    pub matched: u64,
    /// Next index to send.
    pub next: u64,
    pub state: ProgressState,
    /// Probe: an append is outstanding; wait for an answer.
    pub probe_sent: bool,
    /// Replicate: last index of every unacknowledged append, ascending.
    inflight: VecDeque<u64>,
    /// When the leader last heard from the peer (any answer), in the core's
    /// milliseconds. CheckQuorum counts the peer while this is within the
    /// last election timeout.
    pub last_heard_ms: u64,
    /// Any answer came from the peer since this progress began (a new leader's
    /// `last_heard_ms` is its election time, not an answer).
    pub heard: bool,
    /// Highest read-index round the peer has confirmed in this term.
    pub read_ack: u64,
    /// Replicate: send an empty append at `next - 1` even with a full window,
    /// to find out whether the tail of the window was lost.
    pub probe_tail: bool,
    /// Highest commit index sent to the peer.
    pub sent_commit: u64,
    /// When the peer, behind on the commit index with no append going out to
    /// it, gets a heartbeat carrying that index (see
    /// `RaftConfig::commit_notice_ms`); `None` while it is not behind.
    pub commit_due_ms: Option<u64>,
    /// Snapshot state: the snapshot being streamed (kept even if the leader
    /// compacts again meanwhile), the byte offset the peer asked for last,
    /// and whether a chunk is in flight.
    pub snap: Option<Arc<Snapshot>>,
    pub snap_offset: u64,
    pub snap_chunk_sent: bool,
    /// When the chunk in flight was sent (a lost one is resent after a while,
    /// not on every heartbeat answer).
    pub snap_sent_ms: u64,
}

impl Progress {
    /// A peer we know nothing about: probe from just after our last entry.
    /// `now_ms` counts as having heard from it (a new leader gives every peer
    /// one election timeout to answer before CheckQuorum counts it absent).
    pub fn new(next: u64, now_ms: u64) -> Progress {
        Progress {
            matched: 0,
            next,
            state: ProgressState::Probe,
            probe_sent: false,
            inflight: VecDeque::new(),
            last_heard_ms: now_ms,
            heard: false,
            read_ack: 0,
            sent_commit: 0,
            commit_due_ms: None,
            probe_tail: false,
            snap: None,
            snap_offset: 0,
            snap_chunk_sent: false,
            snap_sent_ms: 0,
        }
    }

    pub fn become_probe(&mut self) {
        self.state = ProgressState::Probe;
        self.snap = None;
        self.next = self.next.max(self.matched + 1);
        self.probe_sent = false;
        self.inflight.clear();
    }

    pub fn become_replicate(&mut self) {
        self.state = ProgressState::Replicate;
        self.snap = None;
        self.next = self.matched + 1;
        self.probe_sent = false;
        self.inflight.clear();
    }

    pub fn become_snapshot(&mut self, snap: Arc<Snapshot>) {
        self.state = ProgressState::Snapshot;
        self.snap = Some(snap);
        self.snap_offset = 0;
        self.snap_chunk_sent = false;
        self.inflight.clear();
    }

    /// Whether another append may be sent now.
    pub fn can_send(&self, max_inflight: usize) -> bool {
        match self.state {
            ProgressState::Probe => !self.probe_sent,
            ProgressState::Replicate => self.inflight.len() < max_inflight.max(1),
            ProgressState::Snapshot => false,
        }
    }

    /// Records an append ending at `last` (≥ next - 1) that was just sent.
    pub fn on_sent(&mut self, last: u64, entry_count: usize) {
        match self.state {
            ProgressState::Probe => self.probe_sent = true,
            ProgressState::Replicate if entry_count > 0 => {
                self.next = last + 1;
                self.inflight.push_back(last);
            }
            _ => {}
        }
    }

    /// A success ending at `index`. Returns true if `matched` advanced.
    pub fn on_success(&mut self, index: u64) -> bool {
        self.probe_sent = false;
        while self.inflight.front().is_some_and(|i| *i <= index) {
            self.inflight.pop_front();
        }
        if index <= self.matched {
            return false;
        }
        self.matched = index;
        self.next = self.next.max(index + 1);
        true
    }

    /// A rejection of an append whose `prev_index` was `rejected`; `retry` is
    /// where the hints say to try next. Returns false for a stale rejection.
    pub fn on_reject(&mut self, rejected: u64, retry: u64) -> bool {
        // Why: a rejection for an index we already know matches is an old,
        // reordered answer; acting on it would only move us backwards.
        if rejected <= self.matched || self.state == ProgressState::Snapshot {
            return false;
        }
        if self.state == ProgressState::Probe && rejected.checked_add(1) != Some(self.next) {
            return false;
        }
        // Always move back at least one, never below what is known to match.
        self.next = retry.min(rejected).max(self.matched + 1);
        self.become_probe();
        true
    }

    /// Heartbeat answered: the peer is alive, so an append lost in probe mode
    /// may be retried. In replicate mode no slot is freed — the window stays a
    /// bound — but the next flush may send an empty append at the window's tail:
    /// its answer drains the window if the appends arrived (only their answers
    /// were lost), and its rejection sends the peer back to probe mode if they
    /// did not.
    pub fn on_heartbeat_resp(&mut self) {
        self.probe_sent = false;
        if self.state == ProgressState::Replicate {
            self.probe_tail = true;
        }
    }

    pub fn inflight_len(&self) -> usize {
        self.inflight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicate_window_fills_and_drains() {
        let mut p = Progress::new(1, 0);
        p.become_replicate();
        for last in [10, 20, 30] {
            assert!(p.can_send(3));
            p.on_sent(last, 10);
        }
        assert!(!p.can_send(3));
        assert!(p.on_success(20));
        assert_eq!(p.inflight_len(), 1);
        assert!(p.can_send(3));
        assert_eq!(p.next, 31);
    }

    #[test]
    fn stale_rejection_is_ignored() {
        let mut p = Progress::new(1, 0);
        p.on_success(5);
        p.become_replicate();
        assert!(!p.on_reject(4, 1));
        assert!(p.on_reject(7, 6));
        assert_eq!(p.state, ProgressState::Probe);
        assert_eq!(p.next, 6);
    }

    #[test]
    fn probe_sends_one_at_a_time() {
        let mut p = Progress::new(5, 0);
        assert!(p.can_send(8));
        p.on_sent(4, 0);
        assert!(!p.can_send(8));
        p.on_heartbeat_resp();
        assert!(p.can_send(8));
    }

    #[test]
    fn heartbeat_answer_frees_no_slot_of_a_full_window() {
        let mut p = Progress::new(1, 0);
        p.become_replicate();
        p.on_sent(10, 10);
        p.on_sent(20, 10);
        assert!(!p.can_send(2));
        p.on_heartbeat_resp();
        assert!(!p.can_send(2), "a heartbeat answer acknowledges no append");
        assert!(p.probe_tail);
        assert!(p.on_success(20));
        assert!(p.can_send(2));
    }

    #[test]
    fn an_empty_append_in_replicate_mode_takes_no_slot() {
        let mut p = Progress::new(1, 0);
        p.on_success(4);
        p.become_replicate();
        assert_eq!((p.next, p.inflight_len()), (5, 0));
        p.on_sent(4, 0);
        assert_eq!((p.next, p.inflight_len()), (5, 0), "a heartbeat-like append is no slot");
        p.on_sent(9, 5);
        p.on_sent(12, 3);
        assert_eq!((p.next, p.inflight_len()), (13, 2));
    }

    #[test]
    fn next_index_is_always_past_the_match() {
        let mut p = Progress::new(1, 0);
        assert!(p.on_success(5));
        assert_eq!(p.next, 6, "a success moves next past it");
        p.next = 2;
        p.become_probe();
        assert_eq!(p.next, 6, "probing never starts at or below the match");
        p.next = 40;
        p.become_replicate();
        assert_eq!(p.next, 6, "replication resumes right after the match");
    }
}
