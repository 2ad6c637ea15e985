//! The lock-level simulator's clients (connect, send, act on answers) and its liveness
//! check after the heal: a serving leader, then a fresh ACQUIRE granted. (Their HOLD
//! requests and POOL reads: `holds.rs`.)

use super::*;

impl World {
    pub(super) fn connect(&mut self, ci: usize) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let c = &self.clients[ci];
        let node = match c.hint {
            Some(h) if self.nodes.contains_key(&h) && !self.rng.chance(100) => h,
            _ => ids[self.rng.below(ids.len() as u64) as usize],
        };
        let conn = self.next_conn;
        self.next_conn += 1;
        self.nodes.get_mut(&node).unwrap().conns.insert(conn);
        self.conn_client.insert(conn, ci);
        let c = &mut self.clients[ci];
        c.node = node;
        c.conn = Some(conn);
        c.switch = false;
    }

    pub(super) fn close(&mut self, ci: usize) {
        let c = &mut self.clients[ci];
        let Some(conn) = c.conn.take() else { return };
        c.outstanding.clear();
        let node = c.node;
        let at = self.conn_at(conn, true);
        self.schedule(at, Ev::ToNode { node, msg: LockMsg::Closed { conn } });
    }

    pub(super) fn client_send(&mut self, ci: usize, asked: Asked) {
        let c = &mut self.clients[ci];
        let conn = c.conn.expect("connected");
        let id = c.next_id;
        c.next_id += 1;
        c.outstanding.insert(id, asked.clone());
        let node = c.node;
        let request = holds::request_of(&asked);
        trace(self.now, || format!("c{ci} conn {conn} -> n{node} #{id} {asked:?}"));
        self.checker.sent((conn, id), ci as u64, node, asked, self.now);
        let at = self.conn_at(conn, true);
        self.schedule(at, Ev::ToNode { node, msg: LockMsg::Request { conn, id, request } });
    }

    pub(super) fn client_actions(&mut self) -> Result<(), String> {
        for ci in 0..self.clients.len() {
            if !self.rng.chance(self.p.client_per_mille) {
                continue;
            }
            let now = self.now;
            let c = &self.clients[ci];
            if c.conn.is_none() {
                self.connect(ci);
                continue;
            }
            if c.switch && (c.outstanding.is_empty() || self.rng.chance(200)) {
                self.close(ci);
                self.connect(ci);
                continue;
            }
            let roll = self.rng.below(100);
            let outstanding = c.outstanding.len();
            let owner = c.owner.clone();
            if roll < 2 {
                self.close(ci);
            } else if roll < 48 {
                if outstanding >= 2 {
                    continue;
                }
                let key = KEYS[self.rng.below(self.p.keys as u64) as usize].to_string();
                let lease_ms = self.rng.range(1, 3) * 1000;
                let wait_ms = if self.rng.chance(500) { 0 } else { self.rng.range(1, 2000) };
                let asked = Asked::Acquire { key, owner, lease_ms, wait_ms };
                self.client_send(ci, asked);
            } else if roll < 62 {
                if outstanding >= 2 {
                    continue;
                }
                let asked = self.hold_request(ci);
                self.client_send(ci, asked);
            } else if roll < 88 {
                if self.clients[ci].holds.is_empty() {
                    continue;
                }
                let n = self.clients[ci].holds.len() as u64;
                let i = self.rng.below(n) as usize;
                let held = self.clients[ci].holds[i].clone();
                // A hold of several keys is released by naming any one of them.
                let key = held.keys[self.rng.below(held.keys.len() as u64) as usize].clone();
                let token = held.token;
                let r = self.rng.below(10);
                let (token, owner) = match r {
                    0 => (token + 1, owner),
                    1 => (token, format!("{owner}x")),
                    _ => {
                        self.clients[ci].holds.remove(i);
                        (token, owner)
                    }
                };
                self.client_send(ci, Asked::Release { key, owner, token });
            } else if roll < 95 {
                let key = KEYS[self.rng.below(self.p.keys as u64) as usize].to_string();
                self.client_send(ci, Asked::Query { key });
            } else {
                let key = match self.rng.chance(600) {
                    true => holds::STOCK_KEY.to_string(),
                    false => KEYS[self.rng.below(self.p.keys as u64) as usize].to_string(),
                };
                self.client_send(ci, Asked::Pool { key });
            }
            // Forget holds whose lease ended long ago (a late release gets N).
            self.clients[ci].holds.retain(|h| h.deadline + 3000 > now);
        }
        Ok(())
    }

    pub(super) fn client_receives(
        &mut self,
        ci: usize,
        conn: ConnId,
        id: u32,
        response: Response,
    ) -> Result<(), String> {
        if self.clients[ci].conn != Some(conn) {
            return Ok(()); // the client closed that connection
        }
        trace(self.now, || format!("c{ci} conn {conn} <- #{id} {response:?}"));
        self.checker.received((conn, id), &response, self.now)?;
        let c = &mut self.clients[ci];
        if let Response::InLine { .. } = response {
            // News for a waiting HOLD; its answer comes later.
            self.stats.holds.in_line += 1;
            return Ok(());
        }
        let asked = c.outstanding.remove(&id);
        match &response {
            Response::Granted { token, .. } => {
                let keys =
                    asked.as_ref().and_then(Asked::parts).map(|p| p.into_iter().map(|p| p.key).collect());
                if let (Some(keys), Some((lease_ms, _))) = (keys, asked.as_ref().and_then(Asked::lease_wait))
                {
                    c.holds.push(holds::Held { keys, token: *token, deadline: self.now + lease_ms });
                }
            }
            Response::Error { .. } => self.stats.holds.refused += 1,
            Response::Moved { leader } => {
                self.stats.moved += 1;
                c.hint = parse_addr(leader);
                if c.hint != Some(c.node) {
                    c.switch = true;
                }
            }
            Response::Unknown => self.stats.unknown += 1,
            Response::Busy => self.stats.busy += 1,
            Response::Timeout => self.stats.timeouts += 1,
            Response::Released => self.stats.released += 1,
            Response::NotHolder => self.stats.not_holder += 1,
            Response::Holder { .. } | Response::Free => self.stats.queries += 1,
            _ => {}
        }
        Ok(())
    }

    // ----- liveness --------------------------------------------------------

    /// With SIM_DEBUG set: every node's Raft state and every link, for a liveness failure.
    pub(super) fn debug_dump(&self) {
        if std::env::var("SIM_DEBUG").is_err() {
            return;
        }
        eprint!("t={} links:\n{}", self.now, self.net.describe_links());
        for (id, n) in &self.nodes {
            let r = &n.raft;
            eprintln!(
                "node {id} role {:?} term {} leader {:?} commit {} last {} lastterm {} members {:?} committed {:?} \
                 removed {} voted {:?} serving {} handing over {} transfer {:?}",
                r.role(),
                r.term(),
                r.leader_id(),
                r.commit_index(),
                r.last_index(),
                r.last_term(),
                r.membership(),
                r.committed_membership(),
                r.is_removed(),
                r.voted_for(),
                n.replica.serving(),
                n.replica.handing_over(),
                r.transfer()
            );
        }
    }

    /// A leader that a quorum of its configuration follows in its term, whose lock
    /// side serves requests (its term's first entry applied, no hand-over).
    pub(super) fn serving_leader(&self) -> Option<NodeId> {
        let l = self.leader()?;
        let node = &self.nodes[&l];
        let quorum = sim::followed_by_quorum(&node.raft, |id| self.nodes.get(&id).map(|n| &n.raft));
        (quorum && node.replica.serving() && !node.replica.handing_over()).then_some(l)
    }

    /// After healing: within two election timeouts a leader serves (see
    /// `serving_leader`), and within `heal_ms` it grants a fresh ACQUIRE on a free key.
    pub(super) fn check_liveness(&mut self) -> Result<(), String> {
        let deadline = self.now + self.p.heal_ms;
        let probe = self.clients.len();
        self.clients.push(Client {
            owner: "probe".into(),
            node: 0,
            conn: None,
            next_id: 1,
            outstanding: BTreeMap::new(),
            holds: Vec::new(),
            hint: None,
            switch: false,
        });
        let mut asked_at = 0;
        let healed = self.now;
        let mut served = false;
        while self.now < deadline {
            self.step_once()?;
            if !served && self.serving_leader().is_some() {
                served = true;
                let ms = self.now - healed;
                self.stats.served_after_heal_ms = ms;
                self.stats.slowest_seed = self.p.seed;
                if ms > sim::SERVE_AFTER_HEAL_MS {
                    self.stats.late_serves.push((self.p.seed, ms));
                }
            }
            if !served && self.now > healed + SERVE_LATE_MAX_MS {
                self.debug_dump();
                return Err(format!(
                    "liveness: no leader served within {SERVE_LATE_MAX_MS} ms (four election timeouts) after the \
                     last fault healed at {healed} ms (leader {:?})",
                    self.leader()
                ));
            }
            if !self.clients[probe].holds.is_empty() {
                return self.check_all_answered();
            }
            let Some(l) = self.leader() else { continue };
            if !self.nodes[&l].replica.serving() || self.replacement.is_some() {
                continue;
            }
            let c = &self.clients[probe];
            let idle = c.outstanding.is_empty() || self.now > asked_at + 3000;
            if idle && (c.conn.is_none() || c.node != l || self.now > asked_at + 1000) {
                self.close(probe);
                self.clients[probe].hint = Some(l);
                self.connect(probe);
                self.clients[probe].node = l;
                asked_at = self.now;
                let asked = Asked::Acquire {
                    key: PROBE_KEY.into(),
                    owner: "probe".into(),
                    lease_ms: 3000,
                    wait_ms: 0,
                };
                self.client_send(probe, asked);
            }
        }
        self.debug_dump();
        Err(format!(
            "liveness: no G for a fresh ACQUIRE within {} ms after healing (leader {:?}, replacement {:?})",
            self.p.heal_ms,
            self.leader(),
            self.replacement
        ))
    }
}
