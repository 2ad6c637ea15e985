//! A planned stop (SIGTERM): the node about to stop tells the other members, is never
//! handed leadership again, and — when it asks to leave — the leader swaps a standby
//! in for it before it goes.
//!
//! Nodes keep their state only in memory, so a voter that stops is gone for good: its
//! process manager starts a fresh process under a new id. Without a word from it, the
//! cluster runs on the voters left until the autopilot calls it dead
//! (`autopilot_dead_ms`, 30 s by default). A node that knows it stops can say so:
//!
//! - [`Raft::stop`]`(leave)` marks this node as stopping and sends
//!   `Message::Stopping { leave }` to every other member of the active and committed
//!   configurations, at once and again every heartbeat period while it runs (why
//!   again: a message may be lost, and a leader elected meanwhile must hear it too).
//!   From then on the node never campaigns: an election timeout and `TimeoutNow`
//!   change nothing. Why: leadership won by a node that stops would only move again
//!   (or be lost with it), and the cluster would go through one more election.
//! - Every node records which members said they stop ([`Raft::is_peer_stopping`]).
//!   A stopping voter is never chosen as a successor (`successor`,
//!   `reachable_successor`, the hand-over of a leader that removes itself), and a
//!   transfer heading to a voter that says it stops goes to the next successor, or is
//!   abandoned when there is none. A stopping learner is no standby.
//! - **Leaving voter** (a leader rule, ahead of the autopilot's): a voter other than
//!   this leader that said it stops with `leave`, while a standby exists, is swapped
//!   for the best standby with `replace_voter` — the joint-consensus path of `admin
//!   replace` and the autopilot — and `AutopilotEvent::ReplacingStopping` is
//!   reported; once the leader's appends flow to it (replicating, within
//!   `STANDBY_LAG_MAX` of the commit index), so that it receives the joint entry
//!   before its removal notice and can tell who took its place. A learner that said
//!   it stops with `leave` is removed (`AutopilotEvent::RemovingStopping`), which
//!   frees its standby place at once.
//!   The preconditions are the autopilot's (this node leads and is a voter, no
//!   hand-over, no change in flight, not joint, this term's entry committed, not
//!   paused by an operator's `admin replace`) without its own setting: leaving is the
//!   stopping node's request. Tried when the request arrives and on every tick, so a
//!   new leader, or a standby that catches up, acts on a request made earlier.
//!
//! Why no healthy-majority condition as for a dead voter: the leaving voter is alive
//! until the change commits or its own bound passes (the server waits for one of the
//! two), so the joint configuration can commit with the leader and the leaving voter
//! in the old half and the leader and the standby in the new. If the leaving node stops before
//! the change commits, the cluster needs a majority of both halves: the voters it
//! would have needed without the change. Never worse than stopping without a word.
//!
//! [`Raft::awaits_replacement`] tells the server whether a leaving node should still
//! wait: a swap may still come (a change is under way, or a learner that does not stop
//! exists) and this node is still a voter of its committed configuration. Removal ends
//! it (`Ready::removed`, as for any removed node).

use super::core::{Raft, Transfer};
use super::message::Message;
use super::progress::ProgressState;
use super::{AutopilotEvent, NodeId, Role, STANDBY_LAG_MAX};

impl Raft {
    /// This node is about to stop; `leave`: ask the leader to swap a standby in for
    /// it first (module doc). Calling it again changes only `leave`.
    pub fn stop(&mut self, leave: bool) {
        self.stopping = Some(leave);
        self.send_stopping();
    }

    /// `Some(leave)` once [`Raft::stop`] was called.
    pub fn stopping(&self) -> Option<bool> {
        self.stopping
    }

    /// Whether member `id` said it is about to stop.
    pub fn is_peer_stopping(&self, id: NodeId) -> bool {
        self.stopping_peers.contains_key(&id)
    }

    /// The members that said they are about to stop.
    pub fn stopping_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.stopping_peers.keys().copied()
    }

    /// This node asked to leave and should wait for it: it is not removed, it is a
    /// voter of its committed configuration, and a swap may still come — a
    /// configuration change is under way (appended, uncommitted, or joint), or a
    /// learner that does not stop is in the active configuration. False otherwise
    /// (no standby: nothing to wait for).
    pub fn awaits_replacement(&self) -> bool {
        if self.stopping != Some(true) || self.removed {
            return false;
        }
        if !self.log.committed_membership().1.is_voter(self.cfg.id) {
            return false;
        }
        let active = self.log.active_membership();
        self.config_change_pending()
            || active.is_joint()
            || active.learners.iter().any(|id| !self.stopping_peers.contains_key(id))
    }

    /// Tells every other member of the active and committed configurations.
    fn send_stopping(&mut self) {
        let Some(leave) = self.stopping else { return };
        let mut to = self.log.active_membership().all_nodes();
        to.extend(self.log.committed_membership().1.all_nodes());
        to.remove(&self.cfg.id);
        let term = self.term;
        for id in to {
            self.send(id, Message::Stopping { term, leave });
        }
        self.stopping_sent_ms = self.now_ms;
    }

    /// On every tick: a stopping node repeats its news each heartbeat period; every
    /// node forgets stopping peers that are no longer members.
    pub(super) fn tick_stopping(&mut self) {
        if self.stopping.is_some()
            && self.now_ms >= self.stopping_sent_ms.saturating_add(self.cfg.heartbeat_ms)
        {
            self.send_stopping();
        }
        if !self.stopping_peers.is_empty() {
            let active = self.log.active_membership();
            let committed = self.log.committed_membership().1;
            self.stopping_peers.retain(|id, _| active.contains(*id) || committed.contains(*id));
        }
    }

    /// When a stopping node next repeats its news (for `next_deadline_ms`).
    pub(super) fn stopping_deadline_ms(&self) -> Option<u64> {
        self.stopping.map(|_| self.stopping_sent_ms.saturating_add(self.cfg.heartbeat_ms))
    }

    /// `Message::Stopping` from `from` (a member; others are not recorded).
    pub(super) fn handle_stopping(&mut self, from: NodeId, leave: bool) {
        let known =
            self.log.active_membership().contains(from) || self.log.committed_membership().1.contains(from);
        if !known {
            return;
        }
        self.stopping_peers.insert(from, leave);
        // A transfer heading to it goes to the next successor (it no longer campaigns).
        if let Some(t) = self.transfer.filter(|t| t.to == from) {
            self.transfer = self.successor().map(|to| Transfer { to, timeout_now_ms: None, ..t });
            if let Some(to) = self.transfer.map(|t| t.to) {
                self.maybe_send_timeout_now(to);
            }
        }
        if leave && self.role == Role::Leader {
            self.tick_leaving();
        }
    }

    /// Leader, on every tick and when a request arrives: the "leaving voter" rule
    /// (module doc), at most one change.
    pub(super) fn tick_leaving(&mut self) {
        if !self.stopping_peers.values().any(|leave| *leave) || !self.membership_change_may_start() {
            return;
        }
        let me = self.cfg.id;
        let active = self.log.active_membership();
        let leaving = |id: &&NodeId| self.stopping_peers.get(id) == Some(&true);
        // Why only once its appends flow (replicating, caught up like a standby): the
        // joint entry then reaches it before the removal notice does, on the same link,
        // so it can tell who took its place. A new leader needs one round trip for this.
        let commit = self.log.committed();
        let flowing = |id: &&NodeId| {
            self.progress.get(id).is_some_and(|p| {
                p.state == ProgressState::Replicate && p.matched.saturating_add(STANDBY_LAG_MAX) >= commit
            })
        };
        let voter = active.voters.iter().filter(|id| **id != me).filter(flowing).find(leaving).copied();
        let learner = active.learners.iter().find(leaving).copied();
        if let Some(leaving) = voter {
            if let Some(&standby) = self.standbys().first() {
                if let Ok(config_index) = self.replace_voter(leaving, standby) {
                    self.autopilot_events.push(AutopilotEvent::ReplacingStopping {
                        leaving,
                        standby,
                        config_index,
                    });
                }
                return;
            }
        }
        if let Some(learner) = learner {
            if let Ok(config_index) = self.remove_learner(learner) {
                self.autopilot_events.push(AutopilotEvent::RemovingStopping { learner, config_index });
            }
        }
    }
}
