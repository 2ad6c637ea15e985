//! The simulated servers of the client simulator: a node takes requests off its
//! connections, a leader proposes and commits them (answers go out at commit), waits
//! end, leases expire, reads take a round; and leadership — lost, elected, deposed,
//! with the answers an old leader's requests get.

use super::*;

impl World {
    // ----- the servers ---------------------------------------------------------------------------

    pub(super) fn arrive(&mut self, conn: usize, what: Inbound) -> Check {
        let n = self.conns[conn].node;
        if self.conns[conn].server_done {
            return Ok(());
        }
        let node = &mut self.cluster.nodes[n];
        if node.up == Life::Down {
            return Ok(());
        }
        if node.partitioned {
            node.held.push(match what {
                Inbound::Frames(c, f) => Ev::Arrive { conn: c, frames: f },
                Inbound::End(c) => Ev::End { conn: c },
            });
            return Ok(());
        }
        node.inbox.push_back(what);
        self.run_node(n)
    }

    /// A running node processes what reached its sockets, in arrival order.
    pub(super) fn run_node(&mut self, n: usize) -> Check {
        while self.cluster.nodes[n].up == Life::Running {
            let Some(what) = self.cluster.nodes[n].inbox.pop_front() else { break };
            match what {
                Inbound::End(conn) => self.server_end(conn),
                Inbound::Frames(conn, frames) => {
                    for (rid, request) in frames {
                        if self.conns[conn].server_done {
                            break;
                        }
                        self.request(n, conn, rid, request)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The server side of a connection ends: its queued ACQUIREs leave their queues.
    pub(super) fn server_end(&mut self, conn: usize) {
        note!(self, "conn {conn} ends at the server");
        self.conns[conn].server_done = true;
        let n = self.conns[conn].node;
        for q in self.cluster.nodes[n].waiters.values_mut() {
            q.retain(|w| w.conn != conn);
        }
    }

    pub(super) fn send(&mut self, conn: usize, rid: u32, response: Response) {
        if self.conns[conn].broken {
            return;
        }
        let t = self.down_time(conn);
        self.at(t, Ev::Recv { conn, frames: vec![(rid, response)] });
    }

    pub(super) fn request(&mut self, n: usize, conn: usize, rid: u32, request: Request) -> Check {
        let session = self.conns[conn].session;
        note!(self, "n{} takes {session:?}#{rid} {}", self.cluster.nodes[n].id, brief(&request));
        if let Request::Acquire { .. } = request {
            self.checker.arrived(session, rid)?;
        }
        match request {
            Request::Ping => self.send(conn, rid, Response::Pong),
            Request::Status => {
                self.statuses += 1;
                let text = self.cluster.status(n);
                self.send(conn, rid, Response::Status { text });
            }
            _ if self.cluster.leader != Some(n) || !self.cluster.nodes[n].deposed.is_empty() => {
                self.misrouted += 1;
                let leader = self.cluster.leader_addr();
                self.send(conn, rid, Response::Moved { leader });
            }
            Request::Acquire { .. } | Request::Release { .. } if self.overloaded() => {
                let message = "overloaded".to_owned();
                self.send(conn, rid, Response::Error { code: ErrorCode::Overloaded, message });
            }
            Request::Acquire { lease_s, wait_ms, key, owner } => {
                let lease = T::from(lease_s) * SEC;
                if self.cluster.spec.contains_key(&key) {
                    if wait_ms == 0 {
                        self.send(conn, rid, Response::Busy);
                    } else {
                        let deadline = self.now + T::from(wait_ms) * MS;
                        let w = Waiter { conn, rid, owner, lease, deadline };
                        self.cluster.nodes[n].waiters.entry(key).or_default().push_back(w);
                        self.at(deadline, Ev::WaitEnd { node: n });
                    }
                } else {
                    let token = self.token();
                    let grant =
                        Effect::Grant { key: key.clone(), owner: owner.clone(), token, lease, conn, rid };
                    let answer = Response::Granted { token, lease_ms: (lease / MS) as u32 };
                    self.propose(vec![grant], vec![(conn, rid, answer)]);
                }
            }
            Request::Release { token, key, owner } => {
                let holds = self.cluster.spec.get(&key).is_some_and(|h| h.token == token && h.owner == owner);
                if holds {
                    let (mut effects, mut answers) = self.hand_off(n, &key);
                    effects.insert(0, Effect::Free { key: key.clone(), token });
                    answers.insert(0, (conn, rid, Response::Released));
                    self.propose(effects, answers);
                } else {
                    self.propose(vec![], vec![(conn, rid, Response::NotHolder)]);
                }
            }
            Request::Query { key } if self.cluster.standalone => {
                // The applied table at once (no read round); a grant shows once it is
                // applied, which is when its `G` is answered (the real node applies and
                // answers in one step).
                let response = self.holder(n, &key, &self.cluster.committed);
                self.send(conn, rid, response);
            }
            Request::Query { key } => {
                // ReadIndex: the state committed now, once a heartbeat round confirms
                // the leadership (a proposal still in flight is not seen).
                let round = self.rng.range(self.p.commit.0, 2 * self.p.commit.0);
                let t = self.now + self.read_round.unwrap_or(round);
                let term = self.cluster.term;
                self.at(t, Ev::Read { node: n, term, conn, rid, key });
            }
            other => return Err(format!("the client sent {other:?}")),
        }
        Ok(())
    }

    /// Now and then a leader refuses a request for load (`E 4`: not executed).
    pub(super) fn overloaded(&mut self) -> bool {
        self.p.faults && !self.healing && self.rng.chance(3)
    }

    pub(super) fn token(&mut self) -> u64 {
        self.cluster.next_token += 1 + self.rng.below(3);
        self.cluster.next_token
    }

    /// Frees `key` from `token` in the leader's view and grants it to the queue head,
    /// in the same entry.
    pub(super) fn hand_off(&mut self, n: usize, key: &str) -> (Vec<Effect>, Vec<(usize, u32, Response)>) {
        self.cluster.spec.remove(key);
        let head = loop {
            let Some(q) = self.cluster.nodes[n].waiters.get_mut(key) else { break None };
            match q.pop_front() {
                Some(w) if self.conns[w.conn].server_done => continue,
                other => break other,
            }
        };
        let Some(w) = head else { return (vec![], vec![]) };
        let token = self.token();
        let grant = Effect::Grant {
            key: key.to_owned(),
            owner: w.owner,
            token,
            lease: w.lease,
            conn: w.conn,
            rid: w.rid,
        };
        let answer = Response::Granted { token, lease_ms: (w.lease / MS) as u32 };
        (vec![grant], vec![(w.conn, w.rid, answer)])
    }

    /// The leader appends an entry; it commits (in order) after the commit delay.
    pub(super) fn propose(&mut self, effects: Vec<Effect>, answers: Vec<(usize, u32, Response)>) {
        for e in &effects {
            match e {
                Effect::Grant { key, owner, token, lease, .. } => {
                    let h = Holder { owner: owner.clone(), token: *token, lease: *lease, lease_end: 0 };
                    self.cluster.spec.insert(key.clone(), h);
                }
                Effect::Free { key, .. } => {
                    self.cluster.spec.remove(key);
                }
            }
        }
        let delay = match self.commit_override {
            Some(d) => d,
            None if self.cluster.standalone => self.rng.range(5, 200),
            // Now and then a slow disk: this entry, and all behind it, commit seconds
            // later (answers then come after the client stopped waiting).
            // The client's settle window assumes that a request reaches the leader and
            // commits within the commit margin of its write: a slow commit plus the
            // longest delivery delay of a leader that stays leader (a pause or a partition
            // shorter than an election, 2.5 s) stays within it.
            None if self.p.faults && !self.healing && self.rng.chance(4) => self.rng.range(SEC, 2400 * MS),
            None => self.rng.range(self.p.commit.0, self.p.commit.1),
        };
        let last = self.cluster.pending.back().map_or(0, |p| p.commit_at);
        let commit_at = (self.now + delay).max(last);
        self.cluster.pending.push_back(Proposal { commit_at, effects, answers, fate: None });
        self.at(commit_at, Ev::Commit);
    }

    /// Commits what is due, if the leader serves.
    pub(super) fn commit(&mut self) -> Check {
        if self.cluster.leader_serving().is_none() {
            return Ok(());
        }
        while self.cluster.pending.front().is_some_and(|p| p.commit_at <= self.now) {
            let p = self.cluster.pending.pop_front().unwrap();
            self.apply(&p.effects)?;
            for (conn, rid, answer) in p.answers {
                let response = match answer {
                    Response::Granted { token, lease_ms } if self.p.bug == Some(Bug::WrongToken) => {
                        Response::Granted { token: token + 1, lease_ms }
                    }
                    other => other,
                };
                self.send(conn, rid, response);
            }
        }
        Ok(())
    }

    pub(super) fn holder(&self, n: usize, key: &str, table: &BTreeMap<String, Holder>) -> Response {
        match table.get(key) {
            Some(h) => Response::Holder {
                token: h.token,
                remaining_ms: (h.lease_end.saturating_sub(self.now) / MS) as u32,
                waiters: self.cluster.nodes[n].waiters.get(key).map_or(0, |q| q.len() as u32),
                owner: h.owner.clone(),
            },
            None => Response::Free,
        }
    }

    /// A QUERY's read round ended.
    pub(super) fn read_done(&mut self, n: usize, term: u64, conn: usize, rid: u32, key: String) {
        let node = &self.cluster.nodes[n];
        let leads = self.cluster.leader == Some(n) && self.cluster.term == term;
        if node.up == Life::Down {
            return;
        }
        if node.up == Life::Paused || (leads && node.partitioned) {
            self.at(self.now + 100 * MS, Ev::Read { node: n, term, conn, rid, key });
            return;
        }
        let response = if leads {
            self.holder(n, &key, &self.cluster.committed)
        } else {
            Response::Moved { leader: self.cluster.leader_addr() }
        };
        self.send(conn, rid, response);
    }

    /// A committed entry takes effect.
    pub(super) fn apply(&mut self, effects: &[Effect]) -> Check {
        for e in effects {
            match e {
                Effect::Grant { key, owner, token, lease, conn, rid } => {
                    let lease_end = self.now + lease;
                    let session = Some(self.conns[*conn].session).filter(|s| s.0 != 0);
                    note!(self, "commit: grant {key} to {owner} ({token}) for {session:?}#{rid}");
                    self.checker.granted(*token, key, owner, session, *rid, self.now, lease_end)?;
                    self.grant_log.push((*token, self.now));
                    let h = Holder { owner: owner.clone(), token: *token, lease: *lease, lease_end };
                    if let Some(s) = self.cluster.spec.get_mut(key).filter(|s| s.token == *token) {
                        s.lease_end = lease_end;
                    }
                    self.cluster.committed.insert(key.clone(), h);
                    self.at(lease_end, Ev::Expire { token: *token });
                }
                Effect::Free { key, token } => {
                    note!(self, "commit: free {key} ({token})");
                    self.cluster.committed.remove(key);
                    self.checker.released(*token);
                }
            }
        }
        Ok(())
    }

    pub(super) fn wait_ends(&mut self, n: usize) {
        if self.cluster.nodes[n].up != Life::Running {
            return;
        }
        let now = self.now;
        let mut ended = Vec::new();
        for q in self.cluster.nodes[n].waiters.values_mut() {
            q.retain(|w| {
                let due = w.deadline <= now;
                if due {
                    ended.push((w.conn, w.rid));
                }
                !due
            });
        }
        for (conn, rid) in ended {
            self.send(conn, rid, Response::Timeout);
        }
    }

    pub(super) fn expire(&mut self, token: u64) -> Check {
        let Some(l) = self.cluster.leader_serving() else { return Ok(()) };
        let Some((key, h)) = self.cluster.committed.iter().find(|(_, h)| h.token == token) else {
            return Ok(());
        };
        if h.lease_end > self.now {
            return Ok(());
        }
        let key = key.clone();
        if self.cluster.spec.get(&key).is_none_or(|s| s.token != token) {
            return Ok(());
        }
        note!(self, "lease of {key} ({token}) ends");
        self.checker.expired(token, self.now)?;
        let (mut effects, answers) = self.hand_off(l, &key);
        effects.insert(0, Effect::Free { key, token });
        self.propose(effects, answers);
        Ok(())
    }

    // ----- leadership ------------------------------------------------------------------------------

    /// The leader stopped serving: an election follows unless it comes back first.
    pub(super) fn leader_lost(&mut self) {
        if self.cluster.standalone || self.cluster.election_at.is_some() {
            return;
        }
        let t = self.now + self.rng.range(self.p.election.0, self.p.election.1);
        self.cluster.election_at = Some(t);
        self.at(t, Ev::Elect);
    }

    pub(super) fn elect(&mut self) -> Check {
        if self.cluster.election_at != Some(self.now) {
            // A stale election of an earlier loss.
            return Ok(());
        }
        self.cluster.election_at = None;
        if self.cluster.leader_serving().is_some() {
            return Ok(());
        }
        let voters = self.cluster.voters();
        let able: Vec<usize> = voters.iter().copied().filter(|&i| self.cluster.serving(i)).collect();
        if able.len() * 2 <= voters.len() {
            // No majority: no leader; try again.
            self.cluster.leader = None;
            let t = self.now + 500 * MS;
            self.cluster.election_at = Some(t);
            self.at(t, Ev::Elect);
            return Ok(());
        }
        self.fault();
        let new = able[self.rng.below(able.len() as u64) as usize];
        // The old leader's pipeline: a prefix was replicated and is committed by the
        // new leader, the rest is overwritten.
        let pending: Vec<Proposal> = self.cluster.pending.drain(..).collect();
        let cut = self.rng.below(pending.len() as u64 + 1) as usize;
        let mut told = Vec::new();
        for (i, mut p) in pending.into_iter().enumerate() {
            let kept = i < cut;
            if kept {
                self.apply(&p.effects)?;
            }
            p.fate = Some(kept);
            told.push(p);
        }
        self.cluster.term += 1;
        let old = self.cluster.leader.replace(new);
        note!(
            self,
            "n{} leads (term {}), {cut} of {} pending kept",
            self.cluster.nodes[new].id,
            self.cluster.term,
            told.len()
        );
        if let Some(old) = old.filter(|&o| o != new) {
            let node = &mut self.cluster.nodes[old];
            if node.up != Life::Down {
                node.deposed.extend(told);
                if node.partitioned {
                    // It steps down without a quorum; what it cannot learn within 5 s is `U`.
                    self.at(self.now + 5 * SEC, Ev::Unknowns { node: old });
                }
            }
            self.deposed_waiters(old);
        }
        // A new leader restarts every lease in full.
        let now = self.now;
        let mut expiries = Vec::new();
        for h in self.cluster.committed.values_mut() {
            h.lease_end = now + h.lease;
            expiries.push((h.lease_end, h.token));
        }
        for (t, token) in expiries {
            self.at(t, Ev::Expire { token });
        }
        self.cluster.spec = self.cluster.committed.clone();
        self.run_node(new)
    }

    /// Waiters queued at a deposed node were never proposed: `M` (sent when it runs).
    pub(super) fn deposed_waiters(&mut self, n: usize) {
        if self.cluster.nodes[n].up != Life::Running {
            return;
        }
        let waiters: Vec<Waiter> =
            std::mem::take(&mut self.cluster.nodes[n].waiters).into_values().flatten().collect();
        let leader = self.cluster.leader_addr();
        for w in waiters {
            self.send(w.conn, w.rid, Response::Moved { leader: leader.clone() });
        }
    }

    /// A deposed node learns the fate of its proposals and answers them.
    pub(super) fn tell_deposed(&mut self, n: usize) {
        let told = std::mem::take(&mut self.cluster.nodes[n].deposed);
        let leader = self.cluster.leader_addr();
        for p in told {
            for (conn, rid, answer) in p.answers {
                let response = match (p.fate, answer) {
                    (Some(true), r) => r,
                    _ => Response::Moved { leader: leader.clone() },
                };
                self.send(conn, rid, response);
            }
        }
        self.deposed_waiters(n);
    }

    pub(super) fn unknowns(&mut self, n: usize) {
        let node = &self.cluster.nodes[n];
        if node.up != Life::Running || !node.partitioned {
            return;
        }
        for p in std::mem::take(&mut self.cluster.nodes[n].deposed) {
            for (conn, rid, _) in p.answers {
                self.send(conn, rid, Response::Unknown);
            }
        }
    }
}
