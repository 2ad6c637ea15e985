//! A deterministic simulator for the Raft core (TigerBeetle VOPR style).
//!
//! One seed fixes everything: cluster size, network behaviour (delay, drop,
//! duplicate, reorder, symmetric and one-way partitions), pauses, crashes
//! with replacement by a new id (learner → joint consensus), proposals,
//! compactions, reads and leadership transfers. After every step the
//! `Checker` verifies Raft's safety invariants; at the end the network heals
//! and liveness is checked. A failure names the seed and step;
//! `SIM_SEED=N` replays exactly that seed.

#![allow(dead_code)]

pub mod checker;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use ticketing::raft::{Entry, EntryKind, Message, NodeId, Raft, RaftConfig, Ready, Role};

pub use checker::{Checker, Violation};

/// SplitMix64, our own (no rand crate).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn range(&mut self, lo: u64, hi_inclusive: u64) -> u64 {
        lo + self.below(hi_inclusive - lo + 1)
    }
    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// A deliberately broken world, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The network turns every vote rejection into a grant.
    ForgeVoteGrants,
}

/// Knobs of one run; all derived from the seed by `SimParams::from_seed`.
#[derive(Clone, Debug)]
pub struct SimParams {
    pub seed: u64,
    pub nodes: usize,
    /// Chaos phase length (simulated ms).
    pub chaos_ms: u64,
    /// Liveness phase bound after healing (simulated ms).
    pub heal_ms: u64,
    pub drop_per_mille: u64,
    pub dup_per_mille: u64,
    pub delay_max_ms: u64,
    pub bug: Option<Bug>,
}

const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: u64 = 500;
const STEP_MS_MAX: u64 = 10;
const SNAPSHOT_CHUNK_BYTES: usize = 128;
const CALM_DELAY_MS: u64 = 2;

impl SimParams {
    pub fn from_seed(seed: u64) -> SimParams {
        let mut r = Rng::new(seed ^ 0x5EED);
        SimParams {
            seed,
            nodes: if seed.is_multiple_of(2) { 3 } else { 5 },
            chaos_ms: 8_000 + r.below(8_000),
            heal_ms: 15_000,
            drop_per_mille: r.below(80),
            dup_per_mille: r.below(30),
            delay_max_ms: 2 + r.below(60),
            bug: None,
        }
    }
}

fn raft_config(id: NodeId, r: &mut Rng) -> RaftConfig {
    RaftConfig {
        heartbeat_ms: HEARTBEAT_MS,
        election_ms: ELECTION_MS,
        max_append_entries: 1 + r.below(20) as usize,
        max_append_bytes: 256,
        max_inflight: 1 + r.below(8) as usize,
        snapshot_chunk_bytes: SNAPSHOT_CHUNK_BYTES,
        ..RaftConfig::new(id)
    }
}

/// The application: a hash chain over everything applied. Its snapshot is
/// (index, hash) plus padding so that snapshots take several chunks.
#[derive(Clone, Debug, Default)]
struct App {
    index: u64,
    hash: u64,
}

fn mix(h: u64, v: u64) -> u64 {
    let mut r = Rng::new(h ^ v.rotate_left(17));
    r.next()
}

pub fn content_hash(kind: &EntryKind) -> u64 {
    match kind {
        EntryKind::Noop => 1,
        EntryKind::Normal(d) => d.iter().fold(2, |h, b| mix(h, *b as u64)),
        EntryKind::Config(m) => {
            let mut h = 3;
            for set in [&m.voters, &m.outgoing, &m.learners] {
                h = mix(h, u64::MAX);
                for id in set {
                    h = mix(h, *id);
                }
            }
            h
        }
    }
}

fn entry_hash(e: &Entry) -> u64 {
    mix(mix(e.index, e.term), content_hash(&e.kind))
}

impl App {
    fn apply(&mut self, e: &Entry) -> Result<(), String> {
        if e.index != self.index + 1 {
            return Err(format!("applied index {} after {}", e.index, self.index));
        }
        self.index = e.index;
        self.hash = mix(self.hash, entry_hash(e));
        Ok(())
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&self.index.to_be_bytes());
        v.extend_from_slice(&self.hash.to_be_bytes());
        let pad = (self.hash % 600) as usize;
        v.extend((0..pad).map(|i| (i as u64 ^ self.hash) as u8));
        v
    }

    fn restore(data: &[u8]) -> Result<App, String> {
        if data.len() < 16 {
            return Err("snapshot too short".into());
        }
        let index = u64::from_be_bytes(data[..8].try_into().unwrap());
        let hash = u64::from_be_bytes(data[8..16].try_into().unwrap());
        let app = App { index, hash };
        if app.snapshot() != data {
            return Err("snapshot data corrupted".into());
        }
        Ok(app)
    }
}

struct Node {
    raft: Raft,
    app: App,
    paused_until: u64,
}

struct InFlight {
    from: NodeId,
    to: NodeId,
    msg: Message,
}

/// An admin replacing a crashed voter with a fresh id (SPEC §8).
#[derive(Clone, Copy, Debug)]
struct Replacement {
    old: NodeId,
    new: NodeId,
}

/// A ReadIndex request: (ctx, issuing node, highest commit anyone had seen).
struct ReadReq {
    node: NodeId,
    floor: u64,
}

pub struct World {
    p: SimParams,
    rng: Rng,
    pub now: u64,
    pub step: u64,
    nodes: BTreeMap<NodeId, Node>,
    crashed: BTreeSet<NodeId>,
    next_id: NodeId,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    inflight: BTreeMap<u64, InFlight>,
    seq: u64,
    blocked: BTreeSet<(NodeId, NodeId)>,
    partition_until: u64,
    replacement: Option<Replacement>,
    reads: BTreeMap<u64, ReadReq>,
    next_ctx: u64,
    proposals: u64,
    pub checker: Checker,
    pub stats: Stats,
}

#[derive(Default, Debug, Clone)]
pub struct Stats {
    pub elections: u64,
    pub committed: u64,
    pub snapshots_installed: u64,
    pub replacements: u64,
    pub reads_answered: u64,
}

impl World {
    pub fn new(p: SimParams) -> World {
        let mut rng = Rng::new(p.seed);
        let ids: Vec<NodeId> = (1..=p.nodes as u64).collect();
        let nodes = ids
            .iter()
            .map(|id| {
                let cfg = raft_config(*id, &mut rng);
                let raft = Raft::new_bootstrap(cfg, &ids, rng.next(), 0);
                (*id, Node { raft, app: App::default(), paused_until: 0 })
            })
            .collect();
        World {
            rng,
            now: 0,
            step: 0,
            nodes,
            crashed: BTreeSet::new(),
            next_id: p.nodes as u64 + 1,
            queue: BinaryHeap::new(),
            inflight: BTreeMap::new(),
            seq: 0,
            blocked: BTreeSet::new(),
            partition_until: 0,
            replacement: None,
            reads: BTreeMap::new(),
            next_ctx: 1,
            proposals: 0,
            checker: Checker::default(),
            stats: Stats::default(),
            p,
        }
    }

    /// Runs chaos, then heals and checks liveness.
    pub fn run(&mut self) -> Result<(), String> {
        while self.now < self.p.chaos_ms {
            self.chaos_step()?;
        }
        self.heal();
        self.check_liveness()
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        format!("seed={} step={} t={}ms: {what}", self.p.seed, self.step, self.now)
    }

    fn chaos_step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.now += self.rng.range(1, STEP_MS_MAX);
        self.perturb();
        self.deliver_due()?;
        self.tick_all()?;
        self.client_actions();
        self.check().map_err(|v| self.fail(v.0))
    }

    fn calm_step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.now += STEP_MS_MAX / 2;
        self.deliver_due()?;
        self.tick_all()?;
        self.advance_replacement();
        self.check().map_err(|v| self.fail(v.0))
    }

    fn live_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    // ----- faults ----------------------------------------------------------

    fn perturb(&mut self) {
        if self.now >= self.partition_until && !self.blocked.is_empty() {
            self.blocked.clear();
        }
        if self.blocked.is_empty() && self.rng.chance(3) {
            self.partition();
        }
        if self.rng.chance(2) {
            self.pause_one();
        }
        if self.rng.chance(1) {
            self.crash_one();
        }
    }

    fn partition(&mut self) {
        let ids = self.live_ids();
        self.partition_until = self.now + self.rng.range(300, 4000);
        self.blocked.extend(random_partition(&mut self.rng, &ids));
    }

    fn pause_one(&mut self) {
        let ids = self.live_ids();
        let x = ids[self.rng.below(ids.len() as u64) as usize];
        let until = self.now + self.rng.range(100, 3000);
        self.nodes.get_mut(&x).unwrap().paused_until = until;
    }

    /// Crashes a voter for good (its id is never reused) and starts the
    /// admin replacing it — only when the cluster is whole, so a quorum of
    /// the configuration always survives.
    fn crash_one(&mut self) {
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
        self.crashed.insert(old);
        let new = self.next_id;
        self.next_id += 1;
        let cfg = raft_config(new, &mut self.rng);
        let raft = Raft::new_joining(cfg, self.rng.next(), self.now);
        self.nodes.insert(new, Node { raft, app: App::default(), paused_until: 0 });
        self.replacement = Some(Replacement { old, new });
    }

    fn heal(&mut self) {
        self.blocked.clear();
        for n in self.nodes.values_mut() {
            n.paused_until = 0;
        }
    }

    // ----- network ---------------------------------------------------------

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message, chaos: bool) {
        if chaos && self.rng.chance(self.p.drop_per_mille) {
            return;
        }
        let copies = if chaos && self.rng.chance(self.p.dup_per_mille) { 2 } else { 1 };
        for _ in 0..copies {
            // After healing the network behaves like TCP: short, in order.
            let delay = if chaos { self.rng.range(1, self.p.delay_max_ms.max(1)) } else { CALM_DELAY_MS };
            self.seq += 1;
            self.queue.push(Reverse((self.now + delay, self.seq)));
            self.inflight.insert(self.seq, InFlight { from, to, msg: msg.clone() });
        }
    }

    fn deliver_due(&mut self) -> Result<(), String> {
        let mut held = Vec::new();
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > self.now {
                break;
            }
            self.queue.pop();
            let Some(m) = self.inflight.remove(&seq) else {
                continue;
            };
            let Some(node) = self.nodes.get(&m.to) else {
                continue;
            };
            if node.paused_until > self.now {
                held.push((seq, m)); // delivered when the pause ends
                continue;
            }
            if self.blocked.contains(&(m.from, m.to)) {
                continue;
            }
            let msg = self.mangle(m.msg);
            let now = self.now;
            if std::env::var("SIM_TRACE").is_ok_and(|v| v.parse::<u64>().unwrap() <= now) {
                let mut t = format!("{now} {}->{} {msg:?}", m.from, m.to);
                t.truncate(300);
                eprintln!("{t}");
            }
            self.nodes.get_mut(&m.to).unwrap().raft.step(m.from, msg, now);
            self.process_ready(m.to)?;
        }
        for (seq, m) in held {
            let until = self.nodes[&m.to].paused_until;
            self.queue.push(Reverse((until, seq)));
            self.inflight.insert(seq, m);
        }
        Ok(())
    }

    fn mangle(&self, msg: Message) -> Message {
        match (self.p.bug, msg) {
            (Some(Bug::ForgeVoteGrants), Message::VoteResp { term, .. }) => {
                Message::VoteResp { term, granted: true }
            }
            (Some(Bug::ForgeVoteGrants), Message::PreVoteResp { term, .. }) => {
                Message::PreVoteResp { term, granted: true }
            }
            (_, m) => m,
        }
    }

    fn tick_all(&mut self) -> Result<(), String> {
        let now = self.now;
        for id in self.live_ids() {
            let n = self.nodes.get_mut(&id).unwrap();
            if n.paused_until > now {
                continue;
            }
            n.raft.tick(now);
            self.process_ready(id)?;
        }
        Ok(())
    }

    /// Consumes a node's Ready in the documented order.
    fn process_ready(&mut self, id: NodeId) -> Result<(), String> {
        let rd: Ready = self.nodes.get_mut(&id).unwrap().raft.ready();
        let chaos = self.now < self.p.chaos_ms;
        for (to, msg) in rd.messages {
            self.send(id, to, msg, chaos);
        }
        if let Some(s) = rd.snapshot {
            let app = App::restore(&s.data).map_err(|e| self.fail(format!("node {id}: {e}")))?;
            if app.index != s.meta.index {
                return Err(self.fail(format!("node {id}: snapshot index mismatch")));
            }
            self.checker.applied(id, app.index, app.hash).map_err(|v| self.fail(v.0))?;
            self.nodes.get_mut(&id).unwrap().app = app;
            self.stats.snapshots_installed += 1;
        }
        for e in &rd.committed {
            let node = self.nodes.get_mut(&id).unwrap();
            node.app.apply(e).map_err(|err| format!("node {id}: {err}"))?;
            let (index, hash) = (node.app.index, node.app.hash);
            self.checker.applied(id, index, hash).map_err(|v| self.fail(v.0))?;
            self.stats.committed += 1;
        }
        for (ctx, index) in rd.read_states {
            let Some(req) = self.reads.remove(&ctx) else {
                return Err(self.fail(format!("node {id}: unknown read ctx {ctx}")));
            };
            if req.node != id || index < req.floor {
                return Err(self.fail(format!(
                    "read {ctx} answered by {id} at index {index}, below {} already committed",
                    req.floor
                )));
            }
            self.stats.reads_answered += 1;
        }
        if let Some(rc) = rd.role_changed {
            if rc.role == Role::Leader {
                self.stats.elections += 1;
            }
        }
        Ok(())
    }

    // ----- clients and admin -----------------------------------------------

    fn leader(&self) -> Option<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.raft.role() == Role::Leader)
            .max_by_key(|n| n.raft.term())
            .map(|n| n.raft.id())
    }

    fn client_actions(&mut self) {
        if let Some(l) = self.leader() {
            if self.rng.chance(150) {
                let batch = self.rng.range(1, 5);
                for _ in 0..batch {
                    self.proposals += 1;
                    let data = self.proposals.to_be_bytes().to_vec();
                    let _ = self.nodes.get_mut(&l).unwrap().raft.propose(data);
                }
            }
            if self.rng.chance(20) {
                self.read(l);
            }
            if self.rng.chance(2) {
                let peers: Vec<NodeId> = self.nodes[&l].raft.membership().voters.iter().copied().collect();
                let to = peers[self.rng.below(peers.len() as u64) as usize];
                let _ = self.nodes.get_mut(&l).unwrap().raft.transfer_leader(Some(to));
            }
            let _ = self.process_ready(l);
        }
        self.advance_replacement();
        if self.rng.chance(30) {
            self.compact_random();
        }
    }

    fn read(&mut self, l: NodeId) {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        let floor = self.nodes.values().map(|n| n.raft.commit_index()).max().unwrap_or(0);
        if self.nodes.get_mut(&l).unwrap().raft.read_index(ctx).is_ok() {
            self.reads.insert(ctx, ReadReq { node: l, floor });
        }
    }

    fn compact_random(&mut self) {
        let ids = self.live_ids();
        let id = ids[self.rng.below(ids.len() as u64) as usize];
        let node = self.nodes.get_mut(&id).unwrap();
        let (index, data) = (node.app.index, node.app.snapshot());
        node.raft.compact(index, data);
    }

    /// Drives the admin's replacement: add learner → wait until caught up →
    /// joint consensus (left automatically) → done.
    fn advance_replacement(&mut self) {
        let Some(Replacement { old, new }) = self.replacement else {
            return;
        };
        let Some(l) = self.leader() else { return };
        let raft = &mut self.nodes.get_mut(&l).unwrap().raft;
        let m = raft.membership().clone();
        let (_, committed) = raft.committed_membership();
        if !committed.contains(old) && committed.voters.contains(&new) && !committed.is_joint() {
            self.replacement = None;
            self.stats.replacements += 1;
            return;
        }
        if raft.config_change_pending() || m.is_joint() {
            return;
        }
        if !m.contains(new) {
            let _ = raft.add_learner(new);
        } else if m.learners.contains(&new) {
            let caught_up = raft.progress_of(new).is_some_and(|(matched, _)| matched >= raft.commit_index());
            if caught_up && m.voters.contains(&old) {
                let _ = raft.replace_voter(old, new);
            }
        }
    }

    // ----- invariants ------------------------------------------------------

    pub fn check(&mut self) -> Result<(), Violation> {
        for n in self.nodes.values() {
            check_node(&mut self.checker, &n.raft)?;
        }
        Ok(())
    }

    // ----- liveness --------------------------------------------------------

    /// After healing: a leader appears and a fresh proposal commits on it,
    /// within `heal_ms`.
    fn check_liveness(&mut self) -> Result<(), String> {
        let deadline = self.now + self.p.heal_ms;
        let mut proposed: Option<(NodeId, u64, u64)> = None;
        while self.now < deadline {
            self.calm_step()?;
            let Some(l) = self.leader() else { continue };
            let raft = &self.nodes[&l].raft;
            match proposed {
                Some((pl, index, term)) if pl == l && raft.term() == term => {
                    if raft.commit_index() >= index && self.replacement.is_none() {
                        return Ok(());
                    }
                }
                _ => {
                    let raft = &mut self.nodes.get_mut(&l).unwrap().raft;
                    if let Ok(index) = raft.propose(b"liveness".to_vec()) {
                        proposed = Some((l, index, raft.term()));
                    }
                    self.process_ready(l)?;
                }
            }
        }
        if std::env::var("SIM_DEBUG").is_ok() {
            for n in self.nodes.values() {
                let r = &n.raft;
                eprintln!(
                    "node {} role {:?} term {} leader {:?} commit {} last {} lastterm {} first {} members {:?} committed {:?} removed {} voted {:?}",
                    r.id(), r.role(), r.term(), r.leader_id(), r.commit_index(), r.last_index(), r.last_term(),
                    r.first_index(), r.membership(), r.committed_membership(), r.is_removed(), r.voted_for()
                );
                if r.role() == Role::Leader {
                    let dbg = format!("{r:?}");
                    let i = dbg.find("progress:").unwrap();
                    let j = dbg.find("transfer:").unwrap();
                    eprintln!("{}", &dbg[i..j]);
                }
            }
        }
        Err(self.fail(format!(
            "liveness: no commit within {} ms after healing (leader {:?}, replacement {:?})",
            self.p.heal_ms,
            self.leader(),
            self.replacement
        )))
    }
}

/// All per-step invariants for one node.
pub fn check_node(c: &mut Checker, r: &Raft) -> Result<(), Violation> {
    let id = r.id();
    if r.role() == Role::Leader {
        if r.is_removed() {
            return Err(Violation(format!("node {id} is removed but leads")));
        }
        c.leader(id, r.term())?;
        if c.first_time_leader(id, r.term()) {
            c.leader_log(id, r.term(), r.first_index(), |i| r.term_at(i))?;
        }
        let pending = r
            .entries(r.commit_index() + 1, r.last_index())
            .iter()
            .filter(|e| matches!(e.kind, EntryKind::Config(_)))
            .count();
        c.uncommitted_configs(id, pending)?;
    }
    // Log matching over what may have changed since the last check: entries
    // at or below the commit index seen then are final and were checked.
    let lo = r.first_index().max(c.last_commit(id));
    c.commit(id, r.commit_index(), r.term(), |i| r.term_at(i))?;
    for e in r.entries(lo, r.last_index()) {
        let prev_term = r.term_at(e.index - 1).unwrap_or(u64::MAX);
        c.log_entry(id, e.index, e.term, content_hash(&e.kind), prev_term)?;
    }
    let (config_index, m) = r.committed_membership();
    c.committed_config(id, r.term(), config_index, m)?;
    check_active_config(r)
}

/// The configuration a node acts on is the latest config entry in its log
/// (or its snapshot's when the log holds none).
fn check_active_config(r: &Raft) -> Result<(), Violation> {
    let mut i = r.last_index();
    while i >= r.first_index() {
        if let Some(Entry { kind: EntryKind::Config(m), .. }) = r.entry(i) {
            if m != r.membership() {
                return Err(Violation(format!("node {}: active config is not its log's latest", r.id())));
            }
            return Ok(());
        }
        i -= 1;
    }
    if r.membership() != &r.snapshot_meta().membership {
        return Err(Violation(format!("node {}: active config is not its snapshot's", r.id())));
    }
    Ok(())
}

/// Runs one seed; Err names the seed and step.
pub fn run_seed(p: SimParams) -> Result<Stats, String> {
    let mut w = World::new(p);
    w.run()?;
    Ok(w.stats)
}

/// Links (from, to) a random partition cuts, drawn from `rng`: a symmetric split into
/// two random sides, one isolated node, or some links dropped in one direction only.
/// Shared by the Raft-level and the lock-level simulators.
pub fn random_partition(rng: &mut Rng, ids: &[NodeId]) -> Vec<(NodeId, NodeId)> {
    let mut cut = Vec::new();
    match rng.below(3) {
        0 => {
            let side: BTreeSet<NodeId> = ids.iter().copied().filter(|_| rng.chance(500)).collect();
            for a in ids {
                for b in ids {
                    if side.contains(a) != side.contains(b) {
                        cut.push((*a, *b));
                    }
                }
            }
        }
        1 => {
            let x = ids[rng.below(ids.len() as u64) as usize];
            for b in ids {
                if *b != x {
                    cut.push((x, *b));
                    cut.push((*b, x));
                }
            }
        }
        _ => {
            for a in ids {
                for b in ids {
                    if a != b && rng.chance(250) {
                        cut.push((*a, *b));
                    }
                }
            }
        }
    }
    cut
}

/// A number from the environment (SIM_SEED, SIM_SEEDS, ...), if set.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} must be a number")))
}
