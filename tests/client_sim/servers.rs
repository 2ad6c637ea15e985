//! The simulated servers of the client simulator: a node takes requests off its
//! connections, a leader proposes and commits them (answers go out at commit), waits
//! end, leases expire, reads take a round; and leadership — lost, elected, deposed,
//! with the answers an old leader's requests get. Every key is a pool of permits
//! (capacity 1 for ACQUIRE's keys): a HOLD is granted all its keys in one entry under
//! one token when no earlier waiter names one of them and each has its count free,
//! else it waits in the leader's one line (told its place when it asked).

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
        let before = self.cluster.nodes[n].waiters.len();
        self.cluster.nodes[n].waiters.retain(|w| w.conn != conn);
        if self.cluster.nodes[n].waiters.len() != before {
            // The line moved: a request behind may fit now.
            self.grant_waiters(n);
        }
    }

    pub(super) fn send(&mut self, conn: usize, rid: u32, response: Response) {
        if self.conns[conn].broken {
            return;
        }
        let mut t = self.down_time(conn);
        if self.slow_grants > 0 && matches!(response, Response::Granted { .. }) {
            // A slow path (scenarios): this connection's answers from here on are late.
            t += self.slow_grants;
            self.conns[conn].down_at = t;
        }
        self.at(t, Ev::Recv { conn, frames: vec![(rid, response)] });
    }

    pub(super) fn request(&mut self, n: usize, conn: usize, rid: u32, request: Request) -> Check {
        let session = self.conns[conn].session;
        note!(self, "n{} takes {session:?}#{rid} {}", self.cluster.nodes[n].id, brief(&request));
        if let Request::Acquire { .. } | Request::Hold { .. } = request {
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
            Request::Acquire { .. } | Request::Hold { .. } | Request::Release { .. } if self.overloaded() => {
                let message = "overloaded".to_owned();
                self.send(conn, rid, Response::Error { code: ErrorCode::Overloaded, message });
            }
            Request::Acquire { lease_s, wait_ms, key, owner } => {
                let parts = vec![HoldPart { key, count: 1, capacity: 1 }];
                self.take_hold(n, conn, rid, owner, lease_s, wait_ms, parts, false);
            }
            Request::Hold { lease_s, wait_ms, place, owner, parts } => {
                self.take_hold(n, conn, rid, owner, lease_s, wait_ms, parts, place);
            }
            Request::Release { token, key, owner } => {
                // Any key of the hold names it; the release ends all of them.
                let holds = self.cluster.spec.get(&token).is_some_and(|h| h.owner == owner && h.names(&key));
                if holds {
                    let (mut effects, mut answers) = self.hand_off(n, token);
                    effects.insert(0, Effect::Free { token });
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

    /// A HOLD (an ACQUIRE is one of a key of capacity 1) reaches the leader `n`.
    #[allow(clippy::too_many_arguments)]
    fn take_hold(
        &mut self,
        n: usize,
        conn: usize,
        rid: u32,
        owner: String,
        lease_s: u8,
        wait_ms: u32,
        parts: Vec<HoldPart>,
        place: bool,
    ) {
        let lease = T::from(lease_s) * SEC;
        if let Some(message) = self.capacity_mismatch(n, &parts) {
            self.send(conn, rid, Response::Error { code: ErrorCode::Invalid, message });
            return;
        }
        let line = &self.cluster.nodes[n].waiters;
        let behind = line
            .iter()
            .any(|w| !self.conns[w.conn].server_done && parts.iter().any(|p| names(&w.parts, &p.key)));
        if !behind && parts.iter().all(|p| self.free(p) >= p.count) {
            let token = self.token();
            let (grant, answer) = self.grant(parts, owner, token, lease, conn, rid);
            self.propose(vec![grant], vec![answer]);
        } else if wait_ms == 0 {
            self.send(conn, rid, Response::Busy);
        } else {
            let deadline = self.now + T::from(wait_ms) * MS;
            let w = Waiter { conn, rid, owner, lease, deadline, parts, place, told: None };
            self.cluster.nodes[n].waiters.push_back(w);
            self.at(deadline, Ev::WaitEnd { node: n });
            self.tell_places(n);
        }
    }

    /// `E 1` when a key of `parts` has holders or waiters of another capacity.
    fn capacity_mismatch(&self, n: usize, parts: &[HoldPart]) -> Option<String> {
        let holds = self.cluster.spec.values().map(|h| &h.parts);
        let waits = self.cluster.nodes[n].waiters.iter().map(|w| &w.parts);
        for other in holds.chain(waits) {
            for p in parts {
                if let Some(q) = other.iter().find(|q| q.key == p.key && q.capacity != p.capacity) {
                    return Some(format!(
                        "key {}: capacity {} asked, the key has capacity {}",
                        p.key, p.capacity, q.capacity
                    ));
                }
            }
        }
        None
    }

    /// Permits of `part`'s key free in the leader's view.
    fn free(&self, part: &HoldPart) -> u32 {
        let used: u32 = self
            .cluster
            .spec
            .values()
            .flat_map(|h| h.parts.iter())
            .filter(|q| q.key == part.key)
            .map(|q| q.count)
            .sum();
        part.capacity.saturating_sub(used)
    }

    /// A grant in the leader's view, with its entry and its answer. (`Bug::PartialHold`:
    /// a multi-key hold gets only its first key.)
    fn grant(
        &mut self,
        mut parts: Vec<HoldPart>,
        owner: String,
        token: u64,
        lease: T,
        conn: usize,
        rid: u32,
    ) -> (Effect, (usize, u32, Response)) {
        if self.p.bug == Some(Bug::PartialHold) {
            parts.truncate(1);
        }
        let h = Holder { owner: owner.clone(), token, lease, lease_end: 0, parts: parts.clone() };
        self.cluster.spec.insert(token, h);
        let answer = Response::Granted { token, lease_ms: (lease / MS) as u32 };
        (Effect::Grant { parts, owner, token, lease, conn, rid }, (conn, rid, answer))
    }

    /// Frees the hold `token` in the leader's view and grants, in the same entry, every
    /// waiter that fits now.
    pub(super) fn hand_off(&mut self, n: usize, token: u64) -> (Vec<Effect>, Vec<(usize, u32, Response)>) {
        self.cluster.spec.remove(&token);
        self.fitting(n)
    }

    /// The waiters of the line at `n` that fit now, in arrival order: none that an
    /// earlier waiter naming one of its keys still waits for, each with its counts free.
    fn fitting(&mut self, n: usize) -> (Vec<Effect>, Vec<(usize, u32, Response)>) {
        let (mut effects, mut answers) = (Vec::new(), Vec::new());
        let mut blocked: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.cluster.nodes[n].waiters.len() {
            let w = &self.cluster.nodes[n].waiters[i];
            if self.conns[w.conn].server_done {
                self.cluster.nodes[n].waiters.remove(i);
                continue;
            }
            let fits = w.parts.iter().all(|p| !blocked.contains(&p.key) && self.free(p) >= p.count);
            if !fits {
                blocked.extend(w.parts.iter().map(|p| p.key.clone()));
                i += 1;
                continue;
            }
            let w = self.cluster.nodes[n].waiters.remove(i).unwrap();
            let token = self.token();
            let (grant, answer) = self.grant(w.parts, w.owner, token, w.lease, w.conn, w.rid);
            effects.push(grant);
            answers.push(answer);
        }
        if !effects.is_empty() {
            self.tell_places(n);
        }
        (effects, answers)
    }

    /// The line at `n` moved without a release (a waiter left): what fits now is
    /// granted, if `n` leads and serves.
    fn grant_waiters(&mut self, n: usize) {
        if self.cluster.leader_serving() != Some(n) || !self.cluster.nodes[n].deposed.is_empty() {
            return;
        }
        let (effects, answers) = self.fitting(n);
        if !effects.is_empty() {
            self.propose(effects, answers);
        }
        self.tell_places(n);
    }

    /// Tells each waiter at `n` that asked its place — requests ahead of it in the
    /// longest of its queues — when it queues and then at most once a second while it
    /// changes (`I`, with its request's id, before its answer).
    fn tell_places(&mut self, n: usize) {
        let now = self.now;
        let mut tell = Vec::new();
        let line = &self.cluster.nodes[n].waiters;
        for (i, w) in line.iter().enumerate() {
            if !w.place || self.conns[w.conn].server_done {
                continue;
            }
            let ahead = w
                .parts
                .iter()
                .map(|p| line.iter().take(i).filter(|e| names(&e.parts, &p.key)).count() as u32)
                .max()
                .unwrap_or(0);
            let due = match w.told {
                None => true,
                Some((told, at)) => told != ahead && now >= at + SEC,
            };
            if due {
                tell.push((i, ahead));
            }
        }
        for (i, ahead) in tell {
            let w = &mut self.cluster.nodes[n].waiters[i];
            w.told = Some((ahead, now));
            let (conn, rid) = (w.conn, w.rid);
            self.send(conn, rid, Response::InLine { ahead, grants_per_ks: 250 * (ahead % 5) });
        }
    }

    /// The leader appends an entry; it commits (in order) after the commit delay.
    pub(super) fn propose(&mut self, effects: Vec<Effect>, answers: Vec<(usize, u32, Response)>) {
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

    /// A QUERY's answer: the key's oldest hold (the only one of a key of capacity 1).
    pub(super) fn holder(&self, n: usize, key: &str, table: &BTreeMap<u64, Holder>) -> Response {
        match table.values().find(|h| h.names(key)) {
            Some(h) => Response::Holder {
                token: h.token,
                remaining_ms: (h.lease_end.saturating_sub(self.now) / MS) as u32,
                waiters: self.cluster.nodes[n].waiters.iter().filter(|w| names(&w.parts, key)).count() as u32,
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
                Effect::Grant { parts, owner, token, lease, conn, rid } => {
                    let lease_end = self.now + lease;
                    let session = Some(self.conns[*conn].session).filter(|s| s.0 != 0);
                    note!(self, "commit: grant {parts:?} to {owner} ({token}) for {session:?}#{rid}");
                    self.checker.granted(*token, parts, owner, session, *rid, self.now, lease_end)?;
                    self.grant_log.push((*token, self.now));
                    let h = Holder {
                        owner: owner.clone(),
                        token: *token,
                        lease: *lease,
                        lease_end,
                        parts: parts.clone(),
                    };
                    if let Some(s) = self.cluster.spec.get_mut(token) {
                        s.lease_end = lease_end;
                    }
                    self.cluster.committed.insert(*token, h);
                    self.at(lease_end, Ev::Expire { token: *token });
                }
                Effect::Free { token } => {
                    note!(self, "commit: free {token}");
                    // The whole hold, every key of it.
                    self.cluster.committed.remove(token);
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
        self.cluster.nodes[n].waiters.retain(|w| {
            let due = w.deadline <= now;
            if due {
                ended.push((w.conn, w.rid));
            }
            !due
        });
        let moved = !ended.is_empty();
        for (conn, rid) in ended {
            self.send(conn, rid, Response::Timeout);
        }
        if moved {
            self.grant_waiters(n);
        }
    }

    pub(super) fn expire(&mut self, token: u64) -> Check {
        let Some(l) = self.cluster.leader_serving() else { return Ok(()) };
        let Some(h) = self.cluster.committed.get(&token) else {
            return Ok(());
        };
        if h.lease_end > self.now || !self.cluster.spec.contains_key(&token) {
            return Ok(());
        }
        note!(self, "lease of {token} ends");
        self.checker.expired(token, self.now)?;
        let (mut effects, answers) = self.hand_off(l, token);
        effects.insert(0, Effect::Free { token });
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
        let waiters = std::mem::take(&mut self.cluster.nodes[n].waiters);
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

/// True when `parts` name `key`.
fn names(parts: &[HoldPart], key: &str) -> bool {
    parts.iter().any(|p| p.key == key)
}
