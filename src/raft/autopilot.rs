//! Autopilot: the leader replaces a dead voter by a caught-up learner (a
//! "standby") and removes learners that have been dead long, by itself.
//!
//! Nodes keep their state only in memory, so a node that dies comes back as a
//! fresh process under a new `NodeId` and joins as a learner
//! (docs/operations.md). Autopilot turns such a learner into the voter the
//! dead node was, through the same joint-consensus path as `admin replace`
//! ([`Raft::replace_voter`]). It runs in the leader's `tick`, makes at most
//! one decision per tick, and never changes the number of voters.
//!
//! # Definitions
//!
//! - *Unreachable for* `u` ms: the leader's last answer from the node (an
//!   append, heartbeat or snapshot answer in its term,
//!   `Progress::last_heard_ms`) is `u` ms old ([`Raft::unreachable_ms`]).
//! - *Dead*: unreachable for at least `RaftConfig::autopilot_dead_ms`.
//! - *Healthy*: unreachable for less than one election timeout (what
//!   CheckQuorum counts as present).
//! - *Standby*: a learner of the active configuration that is healthy and
//!   caught up: its match index plus [`STANDBY_LAG_MAX`] reaches the commit
//!   index ([`Raft::standbys`]; the same 64 entries `admin replace` waits
//!   for), and that has not said it is about to stop (`stopping.rs`).
//!
//! # Rules
//!
//! Nothing happens unless all of these hold:
//! - this node leads, `autopilot_dead_ms` is set, and autopilot is not paused
//!   ([`Raft::set_autopilot_paused`]). Why paused: an operator's
//!   `admin replace` drives its own change; two drivers would race for the
//!   one change allowed in flight and for the same learner.
//! - no hand-over is under way (a transfer, or a configuration without this
//!   leader) and this leader is a voter of the active configuration. Why: a
//!   leader on its way out refuses proposals, and its successor will judge
//!   for itself with fresh information.
//! - no configuration change is appended but uncommitted, and the active
//!   configuration is not joint. Why: at most one change in flight (the core
//!   refuses a second anyway), and a change decided on a configuration that
//!   is about to be replaced could undo it.
//! - the entry at the commit index is of the current term. Why: until this
//!   term's no-op commits, the leader does not know the cluster's commit index
//!   and so cannot tell which learner is caught up.
//!
//! Then, in this order:
//! 1. **Dead voter.** A voter other than this leader is dead; every other
//!    voter that is not dead is healthy; the healthy voters and this leader
//!    form a majority of the voters; and a standby exists. Then the dead voter
//!    (the longest unreachable, then the lowest id) is swapped for the best
//!    standby (the highest match index, then the lowest id) with
//!    `replace_voter`, and `AutopilotEvent::Replacing` is reported. Why the
//!    healthy-majority condition: the joint configuration needs a majority of
//!    the old voters and of the new ones; with a shaky quorum the change could
//!    stall half-way, and a voter that is merely slow right now is better left
//!    alone than replaced on top of another outage. Two dead voters of five
//!    are therefore replaced one at a time, each with its own change.
//! 2. **Dead learner.** Otherwise, a learner that is dead (the longest
//!    unreachable, then the lowest id) is removed with `remove_learner`, and
//!    `AutopilotEvent::RemovingLearner` is reported. Why: a dead learner will
//!    never come back under its id, and it takes a standby place the server
//!    would give to a fresh node. This runs even while rule 1 waits (for a
//!    standby, or a steadier quorum), since removing it is what lets a fresh
//!    node take its place.
//!
//! # Why these thresholds
//!
//! The default `autopilot_dead_ms` is [`AUTOPILOT_DEAD_MS_DEFAULT`] (30 s,
//! fifteen default election timeouts). A voter that is partitioned, paused or
//! slow for less than that is never replaced: it comes back and catches up
//! as before. A planned hand-over takes well under one election timeout, and
//! an election a few; neither comes near it. A replaced node that was only
//! cut off learns it was removed when it reaches the cluster again and stops
//! (`Ready::removed`).
//!
//! `Progress::last_heard_ms` is set to the election time when a node becomes
//! leader (the CheckQuorum grace period). So a new leader waits a full
//! `autopilot_dead_ms` of its own before it calls any voter dead, even one
//! that died long before the election. That is kept on purpose: a new leader
//! knows nothing of who was reachable before, and guessing from an old
//! leader's view could replace a voter that is only slow to answer the new
//! leader. Healing is delayed by at most one threshold per election.
//!
//! The leader is ticked at least once per heartbeat period, and
//! `next_deadline_ms` includes the moment a node turns dead, so a decision is
//! taken on the first tick at or after it.

use super::core::Raft;
use super::{AutopilotEvent, NodeId, Role, STANDBY_LAG_MAX};

impl Raft {
    /// Pauses (or resumes) autopilot. The server pauses it while an
    /// operator's `admin replace` runs.
    pub fn set_autopilot_paused(&mut self, paused: bool) {
        self.autopilot_paused = paused;
    }

    /// Whether autopilot is paused (see [`Raft::set_autopilot_paused`]).
    pub fn autopilot_paused(&self) -> bool {
        self.autopilot_paused
    }

    /// Leader only: how long ago this leader last heard an answer from `id`
    /// (`now − last heard`). `None` on a non-leader, for this node itself and
    /// for a node the leader does not replicate to.
    pub fn unreachable_ms(&self, id: NodeId) -> Option<u64> {
        if self.role != Role::Leader || id == self.cfg.id {
            return None;
        }
        self.progress.get(&id).map(|p| self.now_ms.saturating_sub(p.last_heard_ms))
    }

    /// Leader only: whether any answer came from `id` since this leader began
    /// replicating to it (its election, or `id` joining). `None` as for
    /// [`Raft::unreachable_ms`].
    pub fn heard_from(&self, id: NodeId) -> Option<bool> {
        if self.role != Role::Leader || id == self.cfg.id {
            return None;
        }
        self.progress.get(&id).map(|p| p.heard)
    }

    /// Leader only: the learners of the active configuration that autopilot
    /// could promote now — heard within the last election timeout, at most
    /// [`STANDBY_LAG_MAX`] entries behind the commit index, and not about to
    /// stop (`Message::Stopping`) — best first (the highest match index, then
    /// the lowest id). Empty on a non-leader.
    pub fn standbys(&self) -> Vec<NodeId> {
        if self.role != Role::Leader {
            return Vec::new();
        }
        let commit = self.log.committed();
        let mut found: Vec<(u64, NodeId)> = self
            .log
            .active_membership()
            .learners
            .iter()
            .filter_map(|id| {
                let p = self.progress.get(id)?;
                let healthy = self.unreachable_ms(*id)? < self.cfg.election_ms;
                let caught_up = p.matched.saturating_add(STANDBY_LAG_MAX) >= commit;
                let staying = !self.stopping_peers.contains_key(id);
                (healthy && caught_up && staying).then_some((p.matched, *id))
            })
            .collect();
        found.sort_by_key(|(matched, id)| (std::cmp::Reverse(*matched), *id));
        found.into_iter().map(|(_, id)| id).collect()
    }

    /// Whether autopilot may decide anything now (the preconditions in the
    /// module doc).
    fn autopilot_may_act(&self) -> bool {
        self.cfg.autopilot_dead_ms.is_some() && self.membership_change_may_start()
    }

    /// The preconditions of the module doc but the autopilot's own setting: also
    /// those of swapping a standby in for a voter that leaves (`stopping.rs`).
    pub(super) fn membership_change_may_start(&self) -> bool {
        !self.autopilot_paused
            && self.role == Role::Leader
            && !self.handing_over()
            && self.log.active_membership().is_voter(self.cfg.id)
            && !self.config_change_pending()
            && !self.log.active_membership().is_joint()
            && self.log.term_at(self.log.committed()) == Some(self.term)
    }

    /// Leader, on every tick: at most one autopilot decision (module doc).
    pub(super) fn tick_autopilot(&mut self) {
        if !self.autopilot_may_act() {
            return;
        }
        let Some(dead_ms) = self.cfg.autopilot_dead_ms else { return };
        if let Some((dead, standby, unreachable_ms)) = self.voter_to_replace(dead_ms) {
            if let Ok(config_index) = self.replace_voter(dead, standby) {
                self.autopilot_events.push(AutopilotEvent::Replacing {
                    dead,
                    standby,
                    unreachable_ms,
                    config_index,
                });
                return;
            }
        }
        if let Some((learner, unreachable_ms)) = self.dead_learner(dead_ms) {
            if let Ok(config_index) = self.remove_learner(learner) {
                self.autopilot_events.push(AutopilotEvent::RemovingLearner {
                    learner,
                    unreachable_ms,
                    config_index,
                });
            }
        }
    }

    /// Rule 1: (dead voter, standby, how long the voter has been unreachable).
    fn voter_to_replace(&self, dead_ms: u64) -> Option<(NodeId, NodeId, u64)> {
        let voters = &self.log.active_membership().voters;
        let mut dead: Option<(u64, NodeId)> = None;
        let mut healthy = 1; // this leader
        for id in voters.iter().filter(|id| **id != self.cfg.id) {
            let unreachable = self.unreachable_ms(*id).unwrap_or(u64::MAX);
            if unreachable >= dead_ms {
                // Longest unreachable first; ids ascend, so ties keep the lowest.
                if dead.is_none_or(|(u, _)| unreachable > u) {
                    dead = Some((unreachable, *id));
                }
            } else if unreachable < self.cfg.election_ms {
                healthy += 1;
            } else {
                return None; // a shaky voter: wait until it is healthy or dead
            }
        }
        let (unreachable, dead) = dead?;
        if 2 * healthy <= voters.len() {
            return None;
        }
        let standby = *self.standbys().first()?;
        Some((dead, standby, unreachable))
    }

    /// Rule 2: (dead learner, how long it has been unreachable).
    fn dead_learner(&self, dead_ms: u64) -> Option<(NodeId, u64)> {
        let mut dead: Option<(u64, NodeId)> = None;
        for id in &self.log.active_membership().learners {
            let unreachable = self.unreachable_ms(*id).unwrap_or(u64::MAX);
            if unreachable >= dead_ms && dead.is_none_or(|(u, _)| unreachable > u) {
                dead = Some((unreachable, *id));
            }
        }
        dead.map(|(u, id)| (id, u))
    }

    /// Leader: when a node the leader replicates to turns dead, if that is
    /// still ahead (for `next_deadline_ms`).
    pub(super) fn autopilot_deadline_ms(&self) -> Option<u64> {
        let dead_ms = self.cfg.autopilot_dead_ms?;
        if self.role != Role::Leader || self.autopilot_paused {
            return None;
        }
        let now = self.now_ms;
        self.progress.values().map(|p| p.last_heard_ms.saturating_add(dead_ms)).filter(|t| *t > now).min()
    }
}
