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
        let joint = Membership {
            voters,
            outgoing: current.voters,
            learners,
        };
        Ok(self.append_as_leader(EntryKind::Config(joint)))
    }

    /// Convenience for SPEC §8 `admin replace`: swap voter `old` for `new`
    /// (normally a caught-up learner) through joint consensus.
    pub fn replace_voter(&mut self, old: NodeId, new: NodeId) -> Result<u64, RaftError> {
        let current = self.config_change_base()?;
        if !current.voters.contains(&old) || current.voters.contains(&new) {
            return Err(RaftError::InvalidConfig(
                "old must be a voter and new must not",
            ));
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
        let next = Membership {
            voters: joint.voters,
            outgoing: BTreeSet::new(),
            learners: joint.learners,
        };
        self.append_as_leader(EntryKind::Config(next))
    }

    // ----- leadership transfer ---------------------------------------------

    /// Hands leadership to voter `to`: replicate until it is caught up, then
    /// send it `TimeoutNow` so it campaigns at once (bypassing pre-vote and
    /// leases). Proposals are refused meanwhile. Gives up after one election
    /// timeout.
    pub fn transfer_leadership(&mut self, to: NodeId) -> Result<(), RaftError> {
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader_id,
            });
        }
        if to == self.cfg.id {
            return Ok(());
        }
        if !self.log.active_membership().is_voter(to) || !self.progress.contains_key(&to) {
            return Err(RaftError::InvalidConfig("transfer target is not a voter"));
        }
        self.transfer = Some(Transfer {
            to,
            deadline_ms: self.now_ms + self.cfg.election_ms,
            timeout_now_sent: false,
        });
        self.maybe_send_timeout_now(to);
        Ok(())
    }

    pub(super) fn maybe_send_timeout_now(&mut self, peer: NodeId) {
        let last = self.log.last_index();
        let caught_up = self.progress.get(&peer).is_some_and(|p| p.matched == last);
        let term = self.term;
        let Some(t) = self.transfer.as_mut() else {
            return;
        };
        if t.to != peer || t.timeout_now_sent || !caught_up {
            return;
        }
        t.timeout_now_sent = true;
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
            return Err(RaftError::NotLeader {
                leader: self.leader_id,
            });
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
        self.pending_reads.push(PendingRead {
            ctx,
            index: self.log.committed(),
            seq: self.read_seq,
        });
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
        self.read_states
            .extend(done.into_iter().map(|r| (r.ctx, r.index)));
    }
}
