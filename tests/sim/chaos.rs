//! The Raft-level world's faults: what the shared injector (`faults.rs`) decided,
//! carried out on this world's nodes — pauses, crashes and their replacements by the
//! admin or the autopilot — and the heal that ends them all.

use super::*;

impl World {
    // ----- faults ----------------------------------------------------------

    pub(super) fn perturb(&mut self) {
        let ids = self.live_ids();
        let decided = faults::step(
            &mut self.rng,
            &mut self.net,
            &mut self.partition_until,
            self.p.break_per_mille,
            &ids,
            self.now,
        );
        if let Some((x, until)) = decided.pause {
            self.nodes.get_mut(&x).unwrap().paused_until = until;
        }
        if decided.crash {
            self.crash_one();
        }
    }

    /// Crashes a voter for good (its id is never reused) and starts the
    /// admin replacing it — only when the cluster is whole, so a quorum of
    /// the configuration always survives.
    pub(super) fn crash_one(&mut self) {
        if self.autopilot() {
            self.crash_one_for_autopilot();
            return;
        }
        if self.replacement.is_some() {
            return;
        }
        let Some(leader) = self.leader() else { return };
        let m = self.nodes[&leader].raft.committed_membership().1.clone();
        if m.is_joint() || self.nodes[&leader].raft.config_change_pending() {
            return;
        }
        let voters: Vec<NodeId> = m.voters.iter().copied().collect();
        if voters.iter().any(|v| !self.nodes.contains_key(v)) {
            return;
        }
        let old = voters[self.rng.below(voters.len() as u64) as usize];
        if std::env::var("SIM_DEBUG").is_ok() {
            let r = &self.nodes[&leader].raft;
            eprintln!(
                "t={} crash {old} (leader {leader} term {} commit {} committed cfg {:?} active {:?})",
                self.now,
                r.term(),
                r.commit_index(),
                r.committed_membership(),
                r.membership()
            );
        }
        self.nodes.remove(&old);
        self.net.remove_node(old, self.now);
        self.crashed.insert(old);
        let new = self.next_id;
        self.next_id += 1;
        let cfg = raft_config(new, &mut self.rng, self.p.autopilot_dead_ms);
        let raft = Raft::new_joining(cfg, self.rng.next(), self.now);
        // Started with the surviving voters as its configured peers.
        let peers: Vec<NodeId> = voters.iter().copied().filter(|v| *v != old).collect();
        self.net.add_node(new, &peers, self.now);
        let admission = Admission::default();
        self.nodes.insert(new, Node { raft, app: App::default(), paused_until: 0, peers, admission });
        self.replacement = Some(Replacement { old, new });
    }

    /// Autopilot seeds: crashes a member of the committed configuration for good — a
    /// learner, or a voter while fewer than a minority of the voters are dead (so a
    /// quorum survives), never during a change — and starts a fresh node after a
    /// random delay, as a supervisor restarting the process would (under a new id).
    /// No admin: autopilot replaces the dead voter, or removes the dead learner.
    pub(super) fn crash_one_for_autopilot(&mut self) {
        let Some(leader) = self.leader() else { return };
        let r = &self.nodes[&leader].raft;
        let m = r.committed_membership().1.clone();
        if m.is_joint() || r.config_change_pending() {
            return;
        }
        let dead_voters = m.voters.iter().filter(|v| !self.nodes.contains_key(v)).count();
        let mut candidates: Vec<NodeId> =
            m.learners.iter().copied().filter(|l| self.nodes.contains_key(l)).collect();
        if dead_voters < (m.voters.len() - 1) / 2 {
            candidates.extend(m.voters.iter().copied().filter(|v| self.nodes.contains_key(v)));
        }
        if candidates.is_empty() {
            return;
        }
        let x = candidates[self.rng.below(candidates.len() as u64) as usize];
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!("t={} crash {x} (leader {leader}, committed cfg {m:?})", self.now);
        }
        self.crash(x);
        self.schedule_joiner();
    }

    /// A fresh node starts after a random delay (a supervisor restarting a process).
    pub(super) fn schedule_joiner(&mut self) {
        let at = self.now + self.rng.range(50, 4 * ELECTION_MS);
        self.joiner_starts.push(at);
    }

    /// Starts a fresh node under a new id that asks to join (`advance_joiners`),
    /// with the live voters some node knows as its configured peers.
    pub fn start_joiner(&mut self) -> NodeId {
        let known = self
            .nodes
            .values()
            .max_by_key(|n| n.raft.commit_index())
            .map(|n| n.raft.membership().voters.clone());
        let peers: Vec<NodeId> =
            known.unwrap_or_default().into_iter().filter(|v| self.nodes.contains_key(v)).collect();
        let id = self.add_joining(&peers);
        self.joiners.push(id);
        id
    }

    /// The fresh node the current leader is adding, if any: the first joiner its
    /// active configuration does not name. The leader admits it (and dials it), as
    /// the real server does for a node that asked to join.
    pub(super) fn joiner_being_added(&self) -> Option<NodeId> {
        let l = self.leader()?;
        let m = self.nodes[&l].raft.membership();
        self.joiners.iter().copied().find(|j| !m.contains(*j))
    }

    /// The node a leader admits besides its configurations: the one an admin
    /// replacement adds, or a joiner being added.
    pub(super) fn adding(&self) -> Option<NodeId> {
        self.replacement.map(|r| r.new).or_else(|| self.joiner_being_added())
    }

    /// Fresh nodes start when due; the leader (whoever leads now) dials the first
    /// joiner not yet in its configuration and adds it as a learner once connected,
    /// if the configuration has a free standby place and no change is under way. A
    /// joiner is done once the leader's committed configuration names it (or it is
    /// gone).
    pub(super) fn advance_joiners(&mut self) {
        let now = self.now;
        let due = self.joiner_starts.iter().filter(|t| **t <= now).count();
        if due > 0 {
            self.joiner_starts.retain(|t| *t > now);
            for _ in 0..due {
                self.start_joiner();
            }
        }
        let Some(l) = self.leader() else { return };
        let committed = self.nodes[&l].raft.committed_membership().1.clone();
        self.added.extend(self.joiners.iter().copied().filter(|j| committed.contains(*j)));
        let nodes = &self.nodes;
        self.joiners
            .retain(|j| nodes.get(j).is_some_and(|n| !n.raft.is_removed()) && !committed.contains(*j));
        // A learner autopilot removed (as dead) while cut off misses the one removal
        // notice the leader sends, and a learner sends nothing by itself, so no later
        // message of its is refused. The real one learns it at its next handshake with
        // the leader, which refuses it with a removal notice (code 6); the simulated
        // dial does not model that refusal, so it is done here once the two can reach
        // each other. A learner that never learned it was a member ignores the notice
        // (`Removed` means nothing to it): its server gives up, stops, and a fresh
        // node starts in its place.
        let now = self.now;
        let dropped: Vec<NodeId> = self
            .added
            .iter()
            .copied()
            .filter(|j| {
                self.nodes.get(j).is_some_and(|n| !n.raft.is_removed() && n.paused_until <= now)
                    && !committed.contains(*j)
                    && !self.net.blocked.contains(&(*j, l))
                    && !self.net.blocked.contains(&(l, *j))
            })
            .collect();
        for j in dropped {
            self.added.remove(&j);
            let node = self.nodes.get_mut(&j).unwrap();
            let term = node.raft.term();
            node.raft.step(l, Message::Removed { term, config_index: u64::MAX }, now);
            let _ = self.process_ready(j);
            if !self.nodes[&j].raft.is_removed() {
                self.crash(j);
                self.schedule_joiner();
            }
        }
        let Some(j) = self.joiner_being_added() else { return };
        let raft = &self.nodes[&l].raft;
        let m = raft.membership();
        if raft.config_change_pending() || m.is_joint() || m.learners.len() >= STANDBY_PLACES {
            return;
        }
        if !self.net.is_up(l, j) {
            self.net.dial(l, j, now);
            return;
        }
        let _ = self.nodes.get_mut(&l).unwrap().raft.add_learner(j);
        let _ = self.process_ready(l);
    }

    /// The leader's committed configuration is whole again: not joint, the
    /// cluster's count of voters, each of them live, not removed, and answering the
    /// leader within an election timeout.
    pub fn voters_whole(&self) -> bool {
        let Some(l) = self.leader() else { return false };
        let r = &self.nodes[&l].raft;
        let m = r.committed_membership().1;
        !m.is_joint()
            && m.voters.len() == self.p.nodes
            && m.voters.iter().all(|v| {
                self.nodes.get(v).is_some_and(|n| !n.raft.is_removed())
                    && (*v == l || r.unreachable_ms(*v).is_some_and(|ms| ms < ELECTION_MS))
            })
    }

    pub(super) fn heal(&mut self) {
        self.net.heal();
        for n in self.nodes.values_mut() {
            n.paused_until = 0;
        }
    }
}
