//! Faults in the client simulator: nodes paused, partitioned, killed, replaced, made
//! mistaken (a lasting dial error), and their ends; the chaos phase draws them.

use super::*;

impl World {
    // ----- faults ---------------------------------------------------------------------------------

    pub(super) fn unavailable(&self) -> usize {
        self.cluster
            .nodes
            .iter()
            .filter(|n| n.voter && (n.up != Life::Running || n.partitioned || self.now < n.mistaken_until))
            .count()
    }

    pub(super) fn chaos_fault(&mut self) {
        if self.healing {
            return;
        }
        let next = self.now + self.rng.range(200 * MS, 2500 * MS);
        self.at(next, Ev::Fault);
        let voters = self.cluster.voters();
        let f = (voters.len() - 1) / 2;
        let room = self.cluster.standalone || self.unavailable() < f.max(1) || self.rng.chance(100);
        let pick_leader = self.rng.chance(600);
        let target = match (pick_leader, self.cluster.leader) {
            (true, Some(l)) => l,
            _ => voters[self.rng.below(voters.len() as u64) as usize],
        };
        let free = self.cluster.nodes[target].up == Life::Running && !self.cluster.nodes[target].partitioned;
        match self.rng.below(10) {
            0..=2 if room && free => {
                let d = self.rng.range(200 * MS, 7 * SEC);
                self.pause(target, d)
            }
            3..=4 if room && free => {
                let d = self.rng.range(300 * MS, 8 * SEC);
                self.partition(target, d)
            }
            5 if room && free && !self.cluster.standalone => {
                let dead = self.cluster.nodes.iter().filter(|n| n.voter && n.up == Life::Down).count();
                // The client needs one live seed (docs/client.md, "Seeds and discovery").
                let seed_left = self.seeds.iter().any(|a| {
                    self.cluster.nodes.iter().any(|n| {
                        n.addr == *a && n.up != Life::Down && n.addr != self.cluster.nodes[target].addr
                    })
                });
                if dead < f && seed_left {
                    self.kill(target);
                }
            }
            6 if !self.cluster.standalone => self.replace(),
            7 if room && free && self.rng.chance(400) => {
                let d = self.rng.range(300 * MS, 6 * SEC);
                self.mistake(target, d)
            }
            _ => {
                let live: Vec<usize> = (0..self.conns.len())
                    .filter(|&c| !self.conns[c].broken && !self.conns[c].client_closed)
                    .collect();
                if !live.is_empty() {
                    let c = live[self.rng.below(live.len() as u64) as usize];
                    self.break_conn(c);
                }
            }
        }
    }

    /// Node `n` refuses new connections with a lasting mistake for `duration` (the
    /// operator then fixes it).
    pub fn mistake(&mut self, n: usize, duration: T) {
        note!(self, "n{} mistaken for {} ms", self.cluster.nodes[n].id, duration / MS);
        self.fault();
        self.cluster.nodes[n].mistaken_until = self.now + duration;
    }

    /// Invariant 7: a request ends for a lasting mistake (`Unavailable` with `lasting`)
    /// only while a node is mistaken, or was a moment ago (a slot learns of the fix at
    /// its next dial, within the backoff's ceiling), and while no connection is up.
    pub(super) fn check_lasting(&self, outcome: &Outcome) -> Check {
        if !lasting_unavailable(outcome) {
            return Ok(());
        }
        let recently = self.now.saturating_sub(4 * SEC);
        // Every node the client dials must have been mistaken: one merely unreachable
        // may come back, so the mistake is not lasting.
        let dialed_not_mistaken =
            self.cluster.nodes.iter().position(|n| self.core.dials(&n.addr) && n.mistaken_until <= recently);
        if let Some(n) = dialed_not_mistaken {
            return Err(format!(
                "invariant 7: {outcome:?} although node {n}, which it dials, was not mistaken"
            ));
        }
        if let Some(c) = self.conns.iter().position(|c| !c.broken && !c.client_closed && !c.server_done) {
            return Err(format!("invariant 7: {outcome:?} while connection {c} was up"));
        }
        Ok(())
    }

    pub fn pause(&mut self, n: usize, duration: T) {
        note!(self, "pause n{} for {} ms", self.cluster.nodes[n].id, duration / MS);
        self.fault();
        let node = &mut self.cluster.nodes[n];
        node.up = Life::Paused;
        node.resume_at = self.now + duration;
        self.at(self.now + duration, Ev::Resume { node: n });
        if self.cluster.leader == Some(n) {
            self.leader_lost();
        }
    }

    pub(super) fn resume(&mut self, n: usize) -> Check {
        if self.cluster.nodes[n].up != Life::Paused {
            return Ok(());
        }
        note!(self, "resume n{}", self.cluster.nodes[n].id);
        self.fault();
        self.cluster.nodes[n].up = Life::Running;
        // Writes blocked on its full buffers go through now.
        let blocked: Vec<SessionId> = self
            .writes
            .iter()
            .filter(|(s, w)| w.to_paused && self.conns[self.by_session[s]].node == n)
            .map(|(s, _)| *s)
            .collect();
        for session in blocked {
            self.write_gen += 1;
            let gen = self.write_gen;
            let w = self.writes.get_mut(&session).unwrap();
            w.to_paused = false;
            w.fail_after = None;
            w.gen = gen;
            let t = self.now + self.lat();
            self.at(t, Ev::WriteDone { session, gen });
        }
        self.back(n)
    }

    /// A node runs again (resumed, or healed): it learns what happened meanwhile.
    pub(super) fn back(&mut self, n: usize) -> Check {
        if !self.cluster.serving(n) {
            return Ok(());
        }
        if self.cluster.leader == Some(n) {
            self.cluster.election_at = None;
            // Its lease timers fire now for every lease that ended meanwhile.
            let ended: Vec<u64> = self
                .cluster
                .committed
                .values()
                .filter(|h| h.lease_end <= self.now)
                .map(|h| h.token)
                .collect();
            for token in ended {
                self.at(self.now, Ev::Expire { token });
            }
            let due: Vec<T> = self.cluster.pending.iter().map(|p| p.commit_at).collect();
            for t in due {
                self.at(t, Ev::Commit);
            }
            self.at(self.now, Ev::WaitEnd { node: n });
            self.run_node(n)
        } else {
            self.tell_deposed(n);
            self.run_node(n)
        }
    }

    pub fn partition(&mut self, n: usize, duration: T) {
        note!(self, "partition n{} for {} ms", self.cluster.nodes[n].id, duration / MS);
        self.fault();
        self.cluster.nodes[n].partitioned = true;
        self.at(self.now + duration, Ev::Heal { node: n });
        if self.cluster.leader == Some(n) {
            self.leader_lost();
        }
    }

    pub(super) fn heal(&mut self, n: usize) -> Check {
        if !self.cluster.nodes[n].partitioned {
            return Ok(());
        }
        note!(self, "heal n{}", self.cluster.nodes[n].id);
        self.fault();
        self.cluster.nodes[n].partitioned = false;
        let held = std::mem::take(&mut self.cluster.nodes[n].held);
        let conn_of = |ev: &Ev| match ev {
            Ev::Arrive { conn, .. } | Ev::End { conn } | Ev::Recv { conn, .. } => *conn,
            _ => unreachable!("only deliveries are held"),
        };
        // Most connections survive a partition (TCP retransmits); some do not.
        let mut broken = Vec::new();
        for ev in &held {
            let conn = conn_of(ev);
            if !broken.contains(&conn) && !self.conns[conn].broken && self.rng.chance(150) {
                broken.push(conn);
            }
        }
        for ev in held {
            let conn = conn_of(&ev);
            if broken.contains(&conn) {
                continue;
            }
            // In order, per connection and direction (TCP).
            let t = match ev {
                Ev::Recv { .. } => self.down_time(conn),
                _ => self.up_time(conn),
            };
            self.at(t, ev);
        }
        for conn in broken {
            self.break_conn(conn);
        }
        if self.cluster.leader != Some(n) {
            self.tell_deposed(n);
        }
        self.back(n)
    }

    pub(super) fn kill(&mut self, n: usize) {
        note!(self, "kill n{}", self.cluster.nodes[n].id);
        self.fault();
        self.cluster.nodes[n].up = Life::Down;
        self.cluster.nodes[n].inbox.clear();
        self.cluster.nodes[n].held.clear();
        self.cluster.nodes[n].deposed.clear();
        self.cluster.nodes[n].waiters.clear();
        for c in 0..self.conns.len() {
            if self.conns[c].node == n {
                self.break_conn(c);
            }
        }
        if self.cluster.leader == Some(n) {
            self.leader_lost();
        }
    }

    /// A dead voter is replaced by a new node at a new address.
    pub(super) fn replace(&mut self) {
        let Some(dead) = self.cluster.nodes.iter().position(|n| n.voter && n.up == Life::Down) else {
            return;
        };
        let id = self.cluster.nodes.len() as u64 + 1;
        let addr = format!("10.0.1.{id}:5225");
        note!(self, "replace n{} by n{id} at {addr}", self.cluster.nodes[dead].id);
        self.fault();
        self.cluster.nodes[dead].voter = false;
        self.cluster.nodes.push(Node::new(id, addr));
    }

    /// The heal phase: every fault ends, callers stop acquiring.
    pub(super) fn heal_start(&mut self) -> Check {
        note!(self, "heal phase");
        self.healing = true;
        self.fault();
        for n in 0..self.cluster.nodes.len() {
            if self.cluster.nodes[n].up == Life::Paused {
                self.cluster.nodes[n].resume_at = self.now;
                self.resume(n)?;
            }
            self.heal(n)?;
        }
        for c in 0..self.callers.len() {
            if matches!(self.callers[c], Caller::Holding { .. } | Caller::Idle) {
                let t = self.now + self.rng.range(0, 100 * MS);
                self.at(t, Ev::Caller { c });
            }
        }
        Ok(())
    }
}
