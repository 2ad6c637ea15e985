//! Membership changes, leadership transfer and ReadIndex: the leader-side
//! requests that are about the cluster rather than the data.
//!
//! Membership (Raft thesis §4.3): a configuration takes effect on a node as
//! soon as its entry is appended. At most one change is in flight (appended
//! but uncommitted). Voter changes go through joint consensus: enter C_old,new
//! with `propose_membership`; once that commits the leader appends C_new by
//! itself (or the app calls `leave_joint`). Learner changes need no joint
//! phase because learners never count.

use std::collections::BTreeSet;

use super::core::{PendingRead, Raft, Transfer};
use super::membership::Membership;
use super::message::{EntryKind, Message};
use super::progress::Progress;
use super::{NodeId, RaftError, Role};

impl Raft {
    // ----- membership ------------------------------------------------------

    /// Adds `id` as a learner: it receives the log (or a snapshot) but does
    /// not vote or count. Returns the config entry's index.
    pub fn add_learner(&mut self, id: NodeId) -> Result<u64, RaftError> {
        let mut next = self.config_change_base()?;
        if next.contains(id) {
            return Err(RaftError::InvalidConfig("node is already a member"));
        }
        next.learners.insert(id);
        Ok(self.append_as_leader(EntryKind::Config(next)))
    }

    /// Removes learner `id`.
    pub fn remove_learner(&mut self, id: NodeId) -> Result<u64, RaftError> {
        let mut next = self.config_change_base()?;
        if !next.learners.remove(&id) {
            return Err(RaftError::InvalidConfig("node is not a learner"));
        }
        Ok(self.append_as_leader(EntryKind::Config(next)))
    }

    /// Enters joint consensus towards `voters`. Learners named in `voters`
    /// are promoted; voters left out are removed from the cluster.
    pub fn propose_membership(&mut self, voters: BTreeSet<NodeId>) -> Result<u64, RaftError> {
        let current = self.config_change_base()?;
        if voters.is_empty() {
            return Err(RaftError::InvalidConfig("no voters"));
        }
        if voters == current.voters {
            return Err(RaftError::InvalidConfig("voter set unchanged"));
        }
        let learners = current.learners.difference(&voters).copied().collect();
        let joint = Membership { voters, outgoing: current.voters, learners };
        Ok(self.append_as_leader(EntryKind::Config(joint)))
    }

    /// Convenience for `admin replace` (docs/operations.md): swap voter `old` for `new`
    /// (normally a caught-up learner) through joint consensus.
    pub fn replace_voter(&mut self, old: NodeId, new: NodeId) -> Result<u64, RaftError> {
        let current = self.config_change_base()?;
        if !current.voters.contains(&old) || current.voters.contains(&new) {
            return Err(RaftError::InvalidConfig("old must be a voter and new must not"));
        }
        let mut voters = current.voters.clone();
        voters.remove(&old);
        voters.insert(new);
        self.propose_membership(voters)
    }

    /// Leaves joint consensus (C_old,new → C_new). Normally automatic.
    pub fn leave_joint(&mut self) -> Result<u64, RaftError> {
        self.check_can_propose()?;
        if self.config_change_pending() {
            return Err(RaftError::ConfigChangePending);
        }
        let current = self.log.active_membership().clone();
        if !current.is_joint() {
            return Err(RaftError::InvalidConfig("not in joint consensus"));
        }
        Ok(self.append_leave_joint(current))
    }

    /// The active configuration, if a new change may be proposed now.
    fn config_change_base(&self) -> Result<Membership, RaftError> {
        self.check_can_propose()?;
        if self.config_change_pending() {
            return Err(RaftError::ConfigChangePending);
        }
        let current = self.log.active_membership();
        if current.is_joint() {
            return Err(RaftError::ConfigChangePending);
        }
        Ok(current.clone())
    }

    /// Leader, after a commit: a committed joint configuration that is still
    /// the active one is left automatically.
    pub(super) fn maybe_leave_joint(&mut self) {
        if self.role != Role::Leader || self.config_change_pending() {
            return;
        }
        let current = self.log.active_membership().clone();
        if current.is_joint() {
            self.append_leave_joint(current);
        }
    }

    fn append_leave_joint(&mut self, joint: Membership) -> u64 {
        let next = Membership { voters: joint.voters, outgoing: BTreeSet::new(), learners: joint.learners };
        self.append_as_leader(EntryKind::Config(next))
    }

    // ----- leadership transfer ---------------------------------------------

    /// Hands leadership to voter `target`, or (`None`) to [`Raft::successor`]:
    /// replicates until the target holds the whole log, then sends it
    /// `TimeoutNow` so it campaigns at once (bypassing pre-vote and leases).
    /// Returns the target. Meanwhile proposals are refused with
    /// [`RaftError::HandingOver`] (why: a log that keeps growing could keep
    /// the target from ever catching up). The transfer is abandoned one
    /// election timeout after it started if the target has not taken over;
    /// `Ready::handover` reports the start and that end.
    ///
    /// A transfer to the same target while one is under way changes nothing;
    /// one to another target replaces it (with a new deadline). `Some(own
    /// id)` is a no-op. Errors: `NotLeader`; `HandingOver` when this leader
    /// is leaving the configuration (it hands over by itself when that
    /// commits); `InvalidConfig` when `target` may not lead or (for `None`)
    /// no voter could.
    pub fn transfer_leader(&mut self, target: Option<NodeId>) -> Result<NodeId, RaftError> {
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader { leader: self.leader_id });
        }
        if !self.log.active_membership().is_voter(self.cfg.id) {
            return Err(RaftError::HandingOver);
        }
        let to = match target {
            Some(to) => to,
            None => self.successor().ok_or(RaftError::InvalidConfig("no other voter to hand over to"))?,
        };
        if to == self.cfg.id {
            return Ok(to);
        }
        if !self.may_succeed(to) {
            return Err(RaftError::InvalidConfig("transfer target is not a voter"));
        }
        if self.transfer.is_some_and(|t| t.to == to) {
            return Ok(to);
        }
        let now = self.now_ms;
        self.transfer = Some(Transfer {
            to,
            started_ms: now,
            deadline_ms: now + self.cfg.election_ms,
            timeout_now_ms: None,
        });
        self.handover_epoch += 1;
        self.maybe_send_timeout_now(to);
        Ok(to)
    }

    /// The voter this leader would hand leadership to now, if any: one that
    /// may lead (a voter of the active configuration's incoming set and of the
    /// committed one) and has not said it is about to stop (`Message::Stopping`:
    /// it would only hand leadership on again, or stop leading), ranked by
    /// 1. answered within the last election timeout (it is reachable);
    /// 2. holds the whole log (match == last index: it can win at once);
    /// 3. a voter in every configuration the log knows (why: a newcomer just
    ///    promoted is the node most likely to lack links to the others);
    /// 4. the highest match index, then the lowest id.
    pub fn successor(&self) -> Option<NodeId> {
        self.best_successor(false)
    }

    /// Leader: the voter a hand-over could reach now — [`Raft::successor`]'s
    /// ranking among the voters heard within the last election timeout for
    /// which `linked(id)` holds (the caller's fact: its transport has a link
    /// to `id`) — or `None` when no voter could take over. Why: a leader that
    /// stops must not wait an election timeout for a hand-over to a node that
    /// cannot answer.
    pub fn reachable_successor(&self, linked: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        let since = self.now_ms.saturating_sub(self.cfg.election_ms);
        self.ranked_successor(|id, p| p.last_heard_ms > since && linked(id))
    }

    /// Leader: `successor`, limited to voters holding the whole log when
    /// `caught_up_only`.
    pub(super) fn best_successor(&self, caught_up_only: bool) -> Option<NodeId> {
        let last = self.log.last_index();
        self.ranked_successor(|_, p| !caught_up_only || p.matched == last)
    }

    /// Leader: the best-ranked voter that may lead among those `usable` accepts
    /// (the ranking of [`Raft::successor`]).
    fn ranked_successor(&self, usable: impl Fn(NodeId, &Progress) -> bool) -> Option<NodeId> {
        if self.role != Role::Leader {
            return None;
        }
        let last = self.log.last_index();
        let since = self.now_ms.saturating_sub(self.cfg.election_ms);
        self.progress
            .iter()
            .filter(|(id, p)| {
                self.may_succeed(**id) && !self.stopping_peers.contains_key(id) && usable(**id, p)
            })
            .max_by_key(|(id, p)| {
                let caught_up = p.matched == last;
                let veteran = self.log.voter_throughout(**id);
                (p.last_heard_ms > since, caught_up, veteran, p.matched, std::cmp::Reverse(**id))
            })
            .map(|(id, _)| *id)
    }

    /// Whether `id` could campaign after a hand-over: a voter that stays (the
    /// incoming half while joint) in the active configuration, and a voter of
    /// the committed one.
    fn may_succeed(&self, id: NodeId) -> bool {
        id != self.cfg.id
            && self.log.active_membership().voters.contains(&id)
            && self.log.committed_membership().1.is_voter(id)
            && self.progress.contains_key(&id)
    }

    /// Sends `TimeoutNow` to `peer` if it is the transfer's target and holds
    /// the whole log. Sent again (at most once per heartbeat interval) while
    /// the target keeps answering in our term. Why: a lost `TimeoutNow` would
    /// cost a whole election timeout, and a duplicate is harmless — the
    /// target has left our term by the time a second one could matter, so it
    /// ignores it.
    pub(super) fn maybe_send_timeout_now(&mut self, peer: NodeId) {
        let last = self.log.last_index();
        let caught_up = self.progress.get(&peer).is_some_and(|p| p.matched == last);
        let (now, term, heartbeat) = (self.now_ms, self.term, self.cfg.heartbeat_ms);
        let Some(t) = self.transfer.as_mut() else {
            return;
        };
        let recent = t.timeout_now_ms.is_some_and(|at| now < at.saturating_add(heartbeat));
        if t.to != peer || !caught_up || recent {
            return;
        }
        t.timeout_now_ms = Some(now);
        self.send(peer, Message::TimeoutNow { term });
    }

    // ----- ReadIndex -------------------------------------------------------

    /// Linearizable read: `(ctx, index)` appears in `Ready::read_states` once
    /// a quorum has confirmed, after this call, that we are still the leader;
    /// the read may be served when the app has applied `index`. Reads asked
    /// before this term's no-op commits wait for it (why: until then the
    /// leader's commit index may lag the cluster's). A leader that loses
    /// leadership drops its pending reads silently.
    pub fn read_index(&mut self, ctx: u64) -> Result<(), RaftError> {
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader { leader: self.leader_id });
        }
        if self.log.term_at(self.log.committed()) != Some(self.term) {
            self.waiting_reads.push(ctx);
            return Ok(());
        }
        self.start_read(ctx);
        Ok(())
    }

    fn start_read(&mut self, ctx: u64) {
        self.read_seq += 1;
        self.pending_reads.push(PendingRead { ctx, index: self.log.committed(), seq: self.read_seq });
        self.heartbeat_requested = true;
        self.resolve_reads();
    }

    pub(super) fn release_waiting_reads(&mut self) {
        if self.log.term_at(self.log.committed()) != Some(self.term) {
            return;
        }
        for ctx in std::mem::take(&mut self.waiting_reads) {
            self.start_read(ctx);
        }
    }

    /// Answers every pending read whose round a quorum has acknowledged.
    pub(super) fn resolve_reads(&mut self) {
        let id = self.cfg.id;
        let own = self.read_seq;
        let progress = &self.progress;
        let acked = self.log.active_membership().committed_index(|n| {
            if n == id {
                own
            } else {
                progress.get(&n).map_or(0, |p| p.read_ack)
            }
        });
        let (done, waiting): (Vec<PendingRead>, Vec<PendingRead>) =
            self.pending_reads.drain(..).partition(|r| r.seq <= acked);
        self.pending_reads = waiting;
        self.read_states.extend(done.into_iter().map(|r| (r.ctx, r.index)));
    }
}
