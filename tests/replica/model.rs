//! The replica's property test: random interleavings of requests, appends, commits, applies, leadership changes and snapshots against a plausible log; every request answered exactly once, tokens increasing.

use super::*;

// Property: random interleavings against a plausible log.

const P_KEYS: [&str; 2] = ["k0", "k1"];
const P_OWNERS: [&str; 2] = ["a", "b"];
const P_CONNS: u8 = 3;

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        conn: u8,
        key: u8,
        owner: u8,
        lease_s: u8,
        wait_ms: u32,
    },
    /// Release a token some G carried (`pick`), or a made-up one.
    Release {
        conn: u8,
        pick: u8,
        bogus: bool,
    },
    Query {
        conn: u8,
        key: u8,
    },
    /// The log handles its oldest ask (Raft appends in order).
    HandleAsk,
    /// The log answers one ReadIndex ask, out of order; `fail` = leadership not confirmed.
    HandleRead {
        pick: u8,
        fail: bool,
    },
    /// The log's commit index advances by up to n.
    Commit(u8),
    /// This node applies up to n committed entries.
    Apply(u8),
    /// This node stops leading.
    StepDown {
        known: bool,
    },
    /// Another node leads a new term: keeps the committed prefix (and maybe more),
    /// replaces the rest with its own no-ops.
    OtherLeader {
        cut: u8,
        noops: u8,
    },
    /// This node leads a new term; its no-op goes at the end of its log.
    BecomeLeader,
    Advance(u16),
    /// The leader begins or ends a hand-over: it defers appends meanwhile; the
    /// replica hears of it later (`Notify`).
    Handover(bool),
    /// The oldest hand-over notice reaches the replica.
    Notify,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..P_CONNS, 0..2u8, 0..2u8, 1..3u8, prop_oneof![Just(0u32), Just(700), Just(3000)])
            .prop_map(|(conn, key, owner, lease_s, wait_ms)| Op::Acquire { conn, key, owner, lease_s, wait_ms }),
        4 => (0..P_CONNS, any::<u8>(), prop::bool::weighted(0.2))
            .prop_map(|(conn, pick, bogus)| Op::Release { conn, pick, bogus }),
        2 => (0..P_CONNS, 0..2u8).prop_map(|(conn, key)| Op::Query { conn, key }),
        12 => Just(Op::HandleAsk),
        2 => (any::<u8>(), prop::bool::weighted(0.1)).prop_map(|(pick, fail)| Op::HandleRead { pick, fail }),
        6 => (1..4u8).prop_map(Op::Commit),
        6 => (1..4u8).prop_map(Op::Apply),
        1 => any::<bool>().prop_map(|known| Op::StepDown { known }),
        1 => (any::<u8>(), 1..3u8).prop_map(|(cut, noops)| Op::OtherLeader { cut, noops }),
        3 => Just(Op::BecomeLeader),
        3 => (0..3000u16).prop_map(Op::Advance),
        2 => any::<bool>().prop_map(Op::Handover),
        3 => Just(Op::Notify),
    ]
}

#[derive(Clone, Debug)]
struct Entry {
    term: u64,
    command: Option<Command>,
    /// The replica's seq when this node appended it.
    seq: Option<u64>,
}

/// Why the replica is being called: which answers may come out of it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    Request,
    /// Applying the entry appended as this seq (None: not ours).
    Commit(Option<u64>),
    Read,
    Tick,
    Role,
    Rejected,
    Handover,
}

struct Sim {
    r: Replica,
    now: u64,
    term: u64,
    leading: bool,
    log: Vec<Entry>,
    log_commit: u64,
    /// Outstanding asks with the leadership (epoch) they were made in.
    asks: std::collections::VecDeque<(ToLog, u64)>,
    /// Bumped at every role change. Raft refuses a proposal made during an earlier
    /// leadership (ToLog::Append carries no term, so the log must track this itself).
    epoch: u64,
    next_id: u32,
    /// Every request sent: (conn, id) → was it a QUERY.
    sent: HashMap<(ConnId, u32), bool>,
    answered: HashMap<(ConnId, u32), Response>,
    /// Requests carried by each proposed command, and where the log appended it.
    seq_of: HashMap<(ConnId, u32), u64>,
    appended_at: HashMap<u64, (u64, u64)>,
    /// Tokens of every G, in order; with (key, owner) for releases.
    grants: Vec<(u64, String, String)>,
    acquires: HashMap<(ConnId, u32), (String, String)>,
    last_g: u64,
    /// The log's side of a hand-over: deferring appends, its gate, and the notices the
    /// replica has not received yet.
    handing_over: bool,
    gate: AppendGate,
    notices: std::collections::VecDeque<bool>,
}

fn origins_of(command: &Command) -> Vec<(ConnId, u32)> {
    let mut v = Vec::new();
    let mut add = |o: &Origin| {
        if o.node == NODE {
            v.push((o.conn, o.id));
        }
    };
    match command {
        Command::Grant { grant, .. } => add(&grant.origin),
        Command::Release { origin, next, .. } => {
            add(origin);
            if let Some(g) = next {
                add(&g.origin);
            }
        }
        Command::Expire { next, .. } => {
            if let Some(g) = next {
                add(&g.origin);
            }
        }
        Command::SetDomain { .. } | Command::SetMember { .. } => {}
        Command::Hold { hold } => add(&hold.grant.origin),
        Command::End { origin, next, .. } => {
            if let Some(o) = origin {
                add(o);
            }
            for hold in next {
                add(&hold.grant.origin);
            }
        }
    }
    v
}

impl Sim {
    fn new() -> Sim {
        Sim {
            r: Replica::new(TableConfig {
                node: NODE,
                incarnation: INCARNATION,
                waiters_per_key_max: 2,
                keys_max: usize::MAX,
            }),
            now: 0,
            term: 0,
            leading: false,
            log: Vec::new(),
            log_commit: 0,
            asks: Default::default(),
            epoch: 0,
            next_id: 1,
            sent: HashMap::new(),
            answered: HashMap::new(),
            seq_of: HashMap::new(),
            appended_at: HashMap::new(),
            grants: Vec::new(),
            acquires: HashMap::new(),
            last_g: 0,
            handing_over: false,
            gate: AppendGate::default(),
            notices: Default::default(),
        }
    }

    fn unix(&self) -> u64 {
        UNIX0 + self.now * 1000
    }

    fn applied(&self) -> u64 {
        self.r.applied_index()
    }

    /// Checks one call's replies and queues its asks.
    fn absorb(&mut self, call: Call, out: ReplicaOutput) -> Result<(), String> {
        for ask in out.to_log {
            if let ToLog::Append { seq, command, .. } = &ask {
                // The same seq again is a deferred command proposed again; a new seq
                // for a request already proposed would execute it twice.
                for o in origins_of(command) {
                    if self.seq_of.insert(o, *seq).is_some_and(|before| before != *seq) {
                        return Err(format!("{o:?} proposed twice"));
                    }
                }
            }
            self.asks.push_back((ask, self.epoch));
        }
        for Reply { conn, id, response } in out.replies {
            let key = (conn, id);
            let Some(&is_query) = self.sent.get(&key) else {
                return Err(format!("answer to a request never sent: {key:?}"));
            };
            if let Some(first) = self.answered.get(&key) {
                return Err(format!("{key:?} answered twice: {first:?}, then {response:?}"));
            }
            let seq = self.seq_of.get(&key).copied();
            if let Response::Granted { token, .. } = &response {
                if *token <= self.last_g {
                    return Err(format!("G token {token} after {}", self.last_g));
                }
                self.last_g = *token;
                let (k, o) = self.acquires.get(&key).cloned().unwrap_or_default();
                self.grants.push((*token, k, o));
            }
            match &response {
                Response::Granted { .. } | Response::Released | Response::NotHolder => {
                    if seq.is_none() || call != Call::Commit(seq) {
                        return Err(format!(
                            "{response:?} to {key:?} (seq {seq:?}) outside the apply of its entry ({call:?})"
                        ));
                    }
                }
                Response::Busy => {
                    // Definitive and immediate (perhaps when a held-back request runs):
                    // never for a proposed command, whose grant the apply must not refuse.
                    if seq.is_some() || matches!(call, Call::Rejected) {
                        return Err(format!("B to {key:?} (seq {seq:?}) from {call:?}"));
                    }
                }
                Response::Timeout => {
                    if call != Call::Tick || seq.is_some() {
                        return Err(format!("T to {key:?} from {call:?}, seq {seq:?}"));
                    }
                }
                Response::Holder { .. } | Response::Free => {
                    if !is_query || !matches!(call, Call::Read | Call::Commit(_)) {
                        return Err(format!("{response:?} to {key:?} from {call:?}"));
                    }
                }
                Response::Moved { .. } => {
                    // Only for what this node did not append, or whose entry was replaced.
                    if let Some(&(index, term)) = seq.and_then(|s| self.appended_at.get(&s)) {
                        let still =
                            self.log.get(index as usize - 1).is_some_and(|e| e.term == term && e.seq == seq);
                        if still {
                            return Err(format!(
                                "M to {key:?} whose entry is still at ({index}, {term}) ({call:?})"
                            ));
                        }
                    }
                }
                Response::Unknown => {
                    if seq.is_none() || call != Call::Tick {
                        return Err(format!("U to {key:?} (seq {seq:?}) from {call:?}"));
                    }
                }
                other => return Err(format!("unexpected {other:?} to {key:?}")),
            }
            self.answered.insert(key, response);
        }
        Ok(())
    }

    fn request(&mut self, conn: u8, request: Request) -> Result<(), String> {
        let conn = ConnId::from(conn) + 1;
        let id = self.next_id;
        self.next_id += 1;
        self.sent.insert((conn, id), matches!(request, Request::Query { .. }));
        if let Request::Acquire { key, owner, .. } = &request {
            self.acquires.insert((conn, id), (key.clone(), owner.clone()));
        }
        let mut out = ReplicaOutput::default();
        self.r.request(conn, id, request, self.now, self.unix(), &mut out);
        self.absorb(Call::Request, out)
    }

    fn handle_ask(&mut self, (ask, epoch): (ToLog, u64), fail: bool) -> Result<(), String> {
        let mut out = ReplicaOutput::default();
        let current = self.leading && epoch == self.epoch && !fail;
        match ask {
            ToLog::Append { seq, command, term } => {
                if current && (self.handing_over || !self.gate.admit(seq)) {
                    self.gate.deferred(seq);
                    self.r.on_deferred(seq, term, command, &mut out);
                    self.absorb(Call::Rejected, out)
                } else if current {
                    self.gate.appended(seq);
                    self.log.push(Entry { term: self.term, command: Some(command), seq: Some(seq) });
                    let index = self.log.len() as u64;
                    self.appended_at.insert(seq, (index, self.term));
                    self.r.on_appended(seq, index, self.term);
                    Ok(())
                } else {
                    self.r.on_rejected(seq, &mut out);
                    self.absorb(Call::Rejected, out)
                }
            }
            ToLog::ReadIndex { ctx } => {
                if current {
                    self.r.on_read_ready(ctx, self.log_commit, self.now, self.unix(), &mut out);
                } else {
                    self.r.on_read_failed(ctx, &mut out);
                }
                self.absorb(Call::Read, out)
            }
        }
    }

    fn apply(&mut self, n: u64) -> Result<(), String> {
        for _ in 0..n {
            let index = self.applied() + 1;
            if index > self.log_commit {
                break;
            }
            let e = self.log[index as usize - 1].clone();
            let mut out = ReplicaOutput::default();
            self.r.on_committed(index, e.term, e.command.as_ref(), self.now, self.unix(), &mut out);
            self.absorb(Call::Commit(e.seq), out)?;
            // Once an index is applied, every command of ours appended at or below it
            // is decided and must have been answered (the real answer, M, or U earlier).
            for (key, seq) in &self.seq_of {
                if let Some(&(at, term)) = self.appended_at.get(seq) {
                    if at <= index && !self.answered.contains_key(key) {
                        return Err(format!(
                            "{key:?} appended at ({at}, {term}) still unanswered after applying {index}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn role(&mut self, role: LogRole) -> Result<(), String> {
        // Notices sent before the role change arrive before it; the log's hand-over
        // ends with its leadership.
        while self.notices.front().is_some() {
            self.notify()?;
        }
        self.handing_over = false;
        self.gate.reset();
        self.epoch += 1;
        let mut out = ReplicaOutput::default();
        self.r.on_role(role, self.now, self.unix(), &mut out);
        self.absorb(Call::Role, out)
    }

    fn notify(&mut self) -> Result<(), String> {
        let Some(active) = self.notices.pop_front() else {
            return Ok(());
        };
        let mut out = ReplicaOutput::default();
        self.r.on_handover(active, self.now, self.unix(), &mut out);
        self.absorb(Call::Handover, out)
    }

    fn tick(&mut self) -> Result<(), String> {
        let mut out = ReplicaOutput::default();
        self.r.tick(self.now, self.unix(), &mut out);
        self.absorb(Call::Tick, out)
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Acquire { conn, key, owner, lease_s, wait_ms } => {
                self.request(conn, acq(P_KEYS[key as usize], P_OWNERS[owner as usize], lease_s, wait_ms))
            }
            Op::Release { conn, pick, bogus } => {
                let request = match self.grants.get(pick as usize % self.grants.len().max(1)) {
                    Some((token, key, owner)) if !bogus => rel(*token, key, owner),
                    _ => rel(u64::from(pick), P_KEYS[pick as usize % 2], "a"),
                };
                self.request(conn, request)
            }
            Op::Query { conn, key } => self.request(conn, query(P_KEYS[key as usize])),
            Op::HandleAsk => match self.asks.pop_front() {
                Some(ask) => self.handle_ask(ask, false),
                None => Ok(()),
            },
            Op::HandleRead { pick, fail } => {
                let reads: Vec<usize> = (0..self.asks.len())
                    .filter(|&i| matches!(self.asks[i].0, ToLog::ReadIndex { .. }))
                    .collect();
                if reads.is_empty() {
                    return Ok(());
                }
                let at = reads[pick as usize % reads.len()];
                let ask = self.asks.remove(at).expect("present");
                self.handle_ask(ask, fail)
            }
            Op::Commit(n) => {
                self.log_commit = (self.log_commit + u64::from(n)).min(self.log.len() as u64);
                Ok(())
            }
            Op::Apply(n) => self.apply(u64::from(n)),
            Op::StepDown { known } => {
                if !self.leading {
                    return Ok(());
                }
                self.leading = false;
                let leader_addr = if known { OTHER_ADDR } else { "" };
                self.role(LogRole::NotLeader { leader_addr: leader_addr.into() })
            }
            Op::OtherLeader { cut, noops } => {
                if self.leading {
                    return Ok(());
                }
                self.term += 1;
                let len = self.log.len() as u64;
                let keep = self.log_commit + u64::from(cut) % (len - self.log_commit + 1);
                self.log.truncate(keep as usize);
                for _ in 0..noops {
                    self.log.push(Entry { term: self.term, command: None, seq: None });
                }
                self.role(LogRole::NotLeader { leader_addr: OTHER_ADDR.into() })
            }
            Op::BecomeLeader => {
                if self.leading {
                    return Ok(());
                }
                self.term += 1;
                self.leading = true;
                self.log.push(Entry { term: self.term, command: None, seq: None });
                let noop_index = self.log.len() as u64;
                self.role(LogRole::Leader { term: self.term, noop_index, new_domain: 0 })
            }
            Op::Advance(ms) => {
                self.now += u64::from(ms);
                self.tick()
            }
            Op::Handover(active) => {
                if self.leading && self.handing_over != active {
                    self.handing_over = active;
                    self.notices.push_back(active);
                }
                Ok(())
            }
            Op::Notify => self.notify(),
        }
    }

    /// The scenario ends: the log handles every ask, this node steps down, everything
    /// is committed and applied, and more than 5 s pass.
    fn finish(&mut self) -> Result<(), String> {
        self.step(&Op::Handover(false))?;
        while self.notices.front().is_some() {
            self.notify()?;
        }
        for round in 0..2 {
            while let Some(ask) = self.asks.pop_front() {
                self.handle_ask(ask, false)?;
            }
            if round == 0 && self.leading {
                self.log_commit = self.log.len() as u64;
                self.apply(u64::MAX)?;
                self.step(&Op::StepDown { known: true })?;
            }
        }
        self.log_commit = self.log.len() as u64;
        self.apply(u64::MAX)?;
        self.now += UNKNOWN_AFTER_MS + 1;
        self.tick()?;
        if !self.asks.is_empty() {
            return Err(format!("asks after the end: {:?}", self.asks));
        }
        let mut missing: Vec<_> = self.sent.keys().filter(|k| !self.answered.contains_key(k)).collect();
        missing.sort();
        if !missing.is_empty() {
            return Err(format!("never answered: {missing:?}"));
        }
        Ok(())
    }
}

fn run(ops: &[Op]) -> Result<(), String> {
    let mut sim = Sim::new();
    // Start as a serving leader (term 1, no-op at 1 committed and applied).
    sim.step(&Op::BecomeLeader)?;
    sim.step(&Op::Commit(1))?;
    sim.step(&Op::Apply(1))?;
    for (n, op) in ops.iter().enumerate() {
        sim.step(op).map_err(|e| format!("op {n} {op:?}: {e}"))?;
    }
    sim.finish().map_err(|e| format!("finish: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4000,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x7469_636b_6574),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_interleavings_answer_every_request_exactly_once_with_increasing_tokens(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        if let Err(e) = run(&ops) {
            prop_assert!(false, "{}", e);
        }
    }
}
