//! Membership changes run by the Raft thread for operators and joining nodes
//! (docs/protocol.md §5.5, docs/operations.md):
//!
//! - `admin replace OLD NEW@ADDR`: dial NEW, add it as a learner (or take the standby
//!   it already is), wait until it caught up, swap it for OLD by joint consensus;
//! - JOIN from a node started with `TICKETING_NODE_ID=auto`: dial it and add it as a
//!   standby learner (at most `TICKETING_STANDBYS_MAX` learners); the leader's
//!   autopilot later swaps a dead voter for a caught-up standby (docs/raft.md
//!   "Autopilot");
//! - FOUND, on a waiting node that knows no cluster: become one of the founding voters
//!   of a new cluster.
//!
//! One job at a time on a leader; while an operator's replacement runs, the autopilot
//! is paused so that the two never pick the same learner or two voters at once.

//!
//! The job's record is `super::admin_job::AdminJob`; this file moves it forward.

use std::collections::BTreeSet;

use log::{info, warn};

use super::admin_job::{AdminJob, AdminPhase, JobKind};
use super::limits::{ADMIN_CATCH_UP_MS, ADMIN_COMMIT_MS, ADMIN_DIAL_MS, CATCH_UP_LAG_MAX};
use super::RaftLoop;
use crate::lock::Command;
use crate::proto::{ErrorCode, Response};
use crate::raft::{Raft, RaftConfig};

impl RaftLoop {
    /// Checks an `admin replace` or a JOIN and starts it, or answers it at once.
    pub(super) fn start_admin(&mut self, mut job: AdminJob, now: u64) {
        if !self.raft.is_leader() {
            job.answer(Response::Moved { leader: self.leader_addr() });
            return;
        }
        let check = match job.kind {
            JobKind::Replace { old } => self.check_replace(old, &job),
            JobKind::Join => self.check_join(&job),
        };
        match check {
            Err(why) => {
                job.refuse(why);
                return;
            }
            Ok(Some(answer)) => {
                job.answer(answer);
                return;
            }
            Ok(None) => {}
        }
        if self.raft.membership().learners.contains(&job.new) {
            // A standby already: it only has to be caught up.
            info!("{}: node {} is a standby already", job.what(), job.new);
            job.phase = AdminPhase::CatchingUp;
            job.deadline_ms = now + ADMIN_CATCH_UP_MS;
            self.set_admin(job);
            return;
        }
        info!("{}: connecting", job.what());
        self.view.learn_addr(job.new, &job.addr);
        match self.kit.spawn(job.new, &job.addr) {
            Ok(tx) => {
                self.redial.insert(job.new, tx);
                self.dialing.insert(job.new);
            }
            Err(e) => {
                job.refuse(format!("cannot start a dialer: {e}"));
                return;
            }
        }
        job.phase = AdminPhase::Dialing;
        job.deadline_ms = now + ADMIN_DIAL_MS;
        job.added_learner = true;
        self.set_admin(job);
    }

    /// Installs the job in progress; an operator's replacement pauses the autopilot at
    /// once (before the core's next tick could start a change of its own).
    fn set_admin(&mut self, job: AdminJob) {
        if job.is_replace() {
            self.raft.set_autopilot_paused(true);
        }
        self.admin = Some(job);
    }

    /// A membership change may start now (one at a time; none while joint).
    fn change_in_progress(&self) -> Option<String> {
        (self.admin.is_some() || self.raft.config_change_pending() || self.raft.membership().is_joint())
            .then(|| "a membership change is already in progress".into())
    }

    /// Was `id` ever a member here (now, or in any committed configuration)? What makes
    /// an id "used" is membership: a joining node has connected already (that is how it
    /// catches up).
    fn id_used(&self, id: u64) -> bool {
        self.retired.contains(&id) || self.ever_committed.contains(&id)
    }

    fn check_replace(&self, old: u64, job: &AdminJob) -> Result<Option<Response>, String> {
        if let Some(why) = self.change_in_progress() {
            return Err(why);
        }
        let membership = self.raft.membership();
        if !membership.voters.contains(&old) {
            return Err(format!("node {old} is not a voter"));
        }
        let standby = membership.learners.contains(&job.new);
        if standby && self.view.addr_of(job.new) != job.addr {
            return Err(format!(
                "node {} is a standby at {}, not at {}",
                job.new,
                self.view.addr_of(job.new),
                job.addr
            ));
        }
        if !standby && (self.members().contains(&job.new) || self.id_used(job.new)) {
            return Err(format!("node id {} was already used in this cluster; pick a new one", job.new));
        }
        // The joint configuration needs a majority of the old voters and of the new
        // ones; the new node counts once it has caught up. Reachable = this leader or
        // a voter we hold a connection to.
        let alive = |id: &u64| *id == self.raft.id() || self.outbound.contains_key(id);
        let voters = membership.voters.len();
        let old_alive = membership.voters.iter().filter(|id| alive(id)).count();
        let new_alive = membership.voters.iter().filter(|id| **id != old && alive(id)).count() + 1;
        if old_alive <= voters / 2 || new_alive <= voters / 2 {
            return Err(format!(
                "not enough voters alive to commit the change ({old_alive} of {voters} reachable)"
            ));
        }
        Ok(None)
    }

    /// JOIN: `Ok(Some(answer))` when there is nothing to do (the node is a member
    /// already: a JOIN asked again after a lost answer).
    fn check_join(&self, job: &AdminJob) -> Result<Option<Response>, String> {
        let membership = self.raft.membership();
        if membership.contains(job.new) {
            let committed = self.raft.committed_membership().1.contains(job.new);
            if committed && self.view.addr_of(job.new) == job.addr {
                return Ok(Some(self.joined_text(job.new)));
            }
            if committed {
                return Err(format!(
                    "node {} is a member at {}, not at {}",
                    job.new,
                    self.view.addr_of(job.new),
                    job.addr
                ));
            }
        }
        if self.id_used(job.new) {
            return Err(format!(
                "node id {} was already used in this cluster; a restarted process takes a fresh id \
                 (TICKETING_NODE_ID=auto)",
                job.new
            ));
        }
        if let Some(why) = self.change_in_progress() {
            return Err(why);
        }
        if membership.learners.len() >= self.standbys_max {
            return Err(format!(
                "the cluster keeps {} standbys already (TICKETING_STANDBYS_MAX={}); a standby \
                 unreachable for the autopilot's threshold is removed, and one is promoted when a \
                 voter dies",
                membership.learners.len(),
                self.standbys_max
            ));
        }
        Ok(None)
    }

    /// The answer to a JOIN that is done.
    fn joined_text(&self, node: u64) -> Response {
        let me = self.raft.id();
        Response::Status { text: format!("standby={node}\nleader={}\n", self.view.members_text(&[me])) }
    }

    /// Moves the job in progress one step forward, answering when it ends. Also tells
    /// the core whether the autopilot must wait (an operator's replacement runs).
    pub(super) fn step_admin(&mut self, now: u64) {
        let job = self.admin.take();
        self.admin = job.and_then(|job| self.advance_admin(job, now));
        let paused = self.admin.as_ref().is_some_and(AdminJob::is_replace);
        if self.raft.autopilot_paused() != paused {
            self.raft.set_autopilot_paused(paused);
        }
    }

    fn advance_admin(&mut self, mut job: AdminJob, now: u64) -> Option<AdminJob> {
        let (_, committed) = self.raft.committed_membership();
        // Done, whoever leads now: the committed configuration has new and not old.
        if let JobKind::Replace { old } = job.kind {
            if job.phase == AdminPhase::Swapping
                && !committed.is_joint()
                && committed.voters.contains(&job.new)
                && !committed.voters.contains(&old)
            {
                let voters: Vec<u64> = committed.voters.iter().copied().collect();
                let voters = self.view.members_text(&voters);
                info!("replace {old} by {}: done; voters {voters}", job.new);
                let text = format!("replaced {old} by {}\nvoters={voters}\n", job.new);
                job.answer(Response::Status { text });
                return None;
            }
        }
        if job.kind == JobKind::Join
            && job.phase == AdminPhase::Adding
            && committed.learners.contains(&job.new)
        {
            info!("node {} at {} joined as a standby", job.new, job.addr);
            job.answer(self.joined_text(job.new));
            return None;
        }
        if !self.raft.is_leader() && job.phase != AdminPhase::Swapping {
            // `M`, not a refusal: "ask the leader" is what a client must do, and it
            // must learn it from the answer's kind, not from its wording
            // (docs/protocol.md §5.5). The change is safe to ask again: the new leader
            // finds the learner already added, or adds it.
            let leader = self.leader_addr();
            // Info: a redirect the asker follows by itself, not a failure.
            info!("{}: this node stopped leading; redirecting to {leader:?}", job.what());
            job.answer(Response::Moved { leader });
            return None;
        }
        if now > job.deadline_ms {
            let why = match job.phase {
                AdminPhase::Dialing => format!("node {} at {} is unreachable", job.new, job.addr),
                AdminPhase::CatchingUp => format!("node {} did not catch up in time", job.new),
                AdminPhase::Adding => "the standby's configuration did not commit in time".into(),
                AdminPhase::Swapping => "the change did not commit in time: not enough voters alive".into(),
            };
            if job.phase == AdminPhase::CatchingUp && job.added_learner && self.raft.is_leader() {
                let _ = self.raft.remove_learner(job.new);
            }
            job.refuse(why);
            return None;
        }
        match job.phase {
            AdminPhase::Dialing => {
                if !self.outbound.contains_key(&job.new) {
                    return Some(job);
                }
                let incarnation = self.view.seen_incarnation(job.new).unwrap_or(0);
                let record = Command::SetMember { node: job.new, incarnation, addr: job.addr.clone() };
                self.propose_command(&record);
                if let Err(e) = self.raft.add_learner(job.new) {
                    job.refuse(format!("cannot add the standby: {e}"));
                    return None;
                }
                if job.kind == JobKind::Join {
                    info!("{}: standby added", job.what());
                    job.phase = AdminPhase::Adding;
                    job.deadline_ms = now + ADMIN_COMMIT_MS;
                } else {
                    info!("{}: standby added, catching up", job.what());
                    job.phase = AdminPhase::CatchingUp;
                    job.deadline_ms = now + ADMIN_CATCH_UP_MS;
                }
            }
            AdminPhase::CatchingUp => {
                let JobKind::Replace { old } = job.kind else { return None };
                let commit = self.raft.commit_index();
                let caught_up = !self.raft.config_change_pending()
                    && self
                        .raft
                        .progress_of(job.new)
                        .is_some_and(|(matched, _)| matched + CATCH_UP_LAG_MAX >= commit);
                if !caught_up {
                    return Some(job);
                }
                if let Err(e) = self.raft.replace_voter(old, job.new) {
                    job.refuse(format!("cannot start the swap: {e}"));
                    return None;
                }
                info!("replace {old} by {}: joint consensus entered", job.new);
                job.phase = AdminPhase::Swapping;
                job.deadline_ms = now + ADMIN_COMMIT_MS;
            }
            AdminPhase::Adding | AdminPhase::Swapping => {}
        }
        Some(job)
    }

    /// Says in the log what the autopilot decided (docs/operations.md "Self-healing").
    pub(super) fn log_autopilot(&self, event: &crate::raft::AutopilotEvent) {
        match *event {
            crate::raft::AutopilotEvent::Replacing { dead, standby, unreachable_ms, config_index } => info!(
                "autopilot: voter {dead} ({}) unreachable for {} ms; replacing it by standby {standby} ({}) \
                 (configuration at index {config_index})",
                self.view.addr_of(dead),
                unreachable_ms,
                self.view.addr_of(standby)
            ),
            crate::raft::AutopilotEvent::RemovingLearner { learner, unreachable_ms, config_index } => info!(
                "autopilot: standby {learner} ({}) unreachable for {unreachable_ms} ms; removing it \
                 (configuration at index {config_index})",
                self.view.addr_of(learner)
            ),
            crate::raft::AutopilotEvent::ReplacingStopping { leaving, standby, config_index } => info!(
                "voter {leaving} ({}) is stopping and asked to leave; replacing it by standby {standby} ({}) \
                 (configuration at index {config_index})",
                self.view.addr_of(leaving),
                self.view.addr_of(standby)
            ),
            crate::raft::AutopilotEvent::RemovingStopping { learner, config_index } => info!(
                "standby {learner} ({}) is stopping and asked to leave; removing it (configuration at index \
                 {config_index})",
                self.view.addr_of(learner)
            ),
        }
    }

    /// FOUND on this node: if it waits to join and knows no cluster, it becomes one of
    /// `voters`, the founders of a new cluster (as if started with
    /// `TICKETING_CLUSTER_STATE=new`). Asked again with the same voters, it answers the
    /// same (a founder whose answer was lost).
    pub(super) fn found(&mut self, voters: &[(u64, String)], now: u64) -> Response {
        let me = self.raft.id();
        let ids: BTreeSet<u64> = voters.iter().map(|(id, _)| *id).collect();
        let text = format!(
            "founding={me}\nvoters={}\n",
            voters.iter().map(|(id, addr)| format!("{id}@{addr}")).collect::<Vec<_>>().join(",")
        );
        let refuse = |why: String| {
            warn!("found: refused: {why}");
            Response::Error { code: ErrorCode::Refused, message: why }
        };
        let Some((_, my_addr)) = voters.iter().find(|(id, _)| *id == me) else {
            return refuse(format!("this node's id {me} is not among the voters"));
        };
        if *my_addr != self.view.addr_of(me) {
            return refuse(format!(
                "node {me} is at {} (TICKETING_CLUSTER_SELF), not at {my_addr}",
                self.view.addr_of(me)
            ));
        }
        // Asked again (an answer lost, a founding Job run twice): the cluster these
        // voters founded is the one asked for.
        let committed = self.raft.committed_membership().1;
        let active = self.raft.membership();
        if active.voters == ids && (self.kit.founded_by_found() || committed.voters == ids) {
            return Response::Status { text };
        }
        if !self.kit.joining() {
            return refuse(
                "this node was started with TICKETING_CLUSTER_STATE=new; only a waiting join node can be told \
                 to found a cluster"
                    .into(),
            );
        }
        let known = active.all_nodes();
        if !known.is_empty() || self.raft.last_index() > 0 || self.kit.founded_by_found() {
            return refuse(format!(
                "node {me} belongs to a cluster already (members {known:?}); a cluster is founded once"
            ));
        }
        // A cluster may be taking this node in right now (a leader a member named, a
        // term heard, a snapshot arriving): it joins that one instead.
        let leaders = self.view.vouched_leaders();
        if !leaders.is_empty() || self.raft.term() > 0 || self.raft.receiving_snapshot() {
            let led =
                leaders.first().map_or(String::new(), |(id, addr)| format!(" led by node {id} at {addr}"));
            return refuse(format!(
                "node {me} has found a cluster{led} and joins it; a cluster is founded once"
            ));
        }
        let mut config = RaftConfig::new(me);
        let old = self.raft.config();
        config.heartbeat_ms = old.heartbeat_ms;
        config.election_ms = old.election_ms;
        config.autopilot_dead_ms = old.autopilot_dead_ms;
        let founders: Vec<u64> = ids.iter().copied().collect();
        self.raft = Raft::new_bootstrap(config, &founders, crate::random::u64(), now);
        self.kit.start_founding();
        for (id, addr) in voters.iter().filter(|(id, _)| *id != me) {
            self.view.learn_addr(*id, addr);
            if let Ok(tx) = self.kit.spawn(*id, addr) {
                self.redial.insert(*id, tx);
                self.dialing.insert(*id);
            }
        }
        // Published at once: from now on this node knows a configuration (its join
        // thread stops, and the admission judges by membership).
        self.publish();
        info!("found: node {me} founds a new cluster with voters {founders:?}");
        Response::Status { text }
    }
}
