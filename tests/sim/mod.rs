//! A deterministic simulator for the Raft core (TigerBeetle VOPR style).
//!
//! One seed fixes everything: cluster size, the transport model and the
//! network's conditions (`net.rs`: links that must be dialed, come up after a
//! dial delay, break, and lose messages while absent; one-way link outages;
//! latency, jitter, a slow node; on non-FIFO seeds also drop, duplicate and
//! reorder), symmetric and one-way partitions, pauses, crashes with
//! replacement by a new id (learner → joint consensus; by the admin, or on
//! autopilot seeds by the leader's autopilot after a fresh node joined),
//! proposals, compactions, reads and leadership transfers. After every step the
//! `Checker` verifies Raft's safety invariants; at the end the faults heal and
//! liveness is checked: a leader serves within two election timeouts. A
//! failure names the seed and step; `SIM_SEED=N` replays exactly that seed.

#![allow(dead_code)]

mod chaos;
pub mod checker;
pub mod faults;
pub mod net;
pub mod rng;
pub mod seeds;

use std::collections::{BTreeMap, BTreeSet};

use ticketing::raft::{AutopilotEvent, Entry, EntryKind, Message, NodeId, Raft, RaftConfig, Ready, Role};

pub use checker::{Checker, Violation};
pub use net::{Conditions, Net, NetStats, TransportModel};

pub use rng::Rng;

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
    pub transport: TransportModel,
    pub cond: Conditions,
    /// Chance per step (‰) that a working link breaks, and that a one-way dial
    /// outage starts.
    pub break_per_mille: u64,
    /// `RaftConfig::autopilot_dead_ms` of every node: off on a quarter of the seeds
    /// (crashed voters are replaced by the admin), else 3 to 8 election timeouts
    /// (a crash is followed by a fresh node that joins as a learner, and autopilot
    /// swaps it in).
    pub autopilot_dead_ms: Option<u64>,
    /// Autopilot seeds: one extra fresh node joins as a standby learner at the start.
    pub standby_at_start: bool,
    pub bug: Option<Bug>,
}

const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: u64 = 500;
const STEP_MS_MAX: u64 = 10;
const SNAPSHOT_CHUNK_BYTES: usize = 128;
/// Clients stop proposing while the leader holds this many uncommitted entries.
const UNCOMMITTED_MAX: u64 = 64;

/// The longest election timeout a node may draw (`RaftConfig::election_ms`
/// doc): the unit of the liveness bound.
pub const ELECTION_MAX_MS: u64 = ELECTION_MS * 23 / 20;
/// After the last fault heals, a leader serves within this long.
pub const SERVE_AFTER_HEAL_MS: u64 = 2 * ELECTION_MAX_MS;

impl SimParams {
    pub fn from_seed(seed: u64) -> SimParams {
        let mut r = Rng::new(seed ^ 0x5EED);
        let nodes = if seed.is_multiple_of(2) { 3 } else { 5 };
        let chaos_ms = 8_000 + r.below(8_000);
        let (transport, cond) = network_from(&mut r, nodes as u64, ELECTION_MS);
        SimParams {
            seed,
            nodes,
            chaos_ms,
            heal_ms: 15_000,
            transport,
            cond,
            break_per_mille: r.below(4),
            autopilot_dead_ms: (!r.chance(250)).then(|| r.range(3, 8) * ELECTION_MS),
            standby_at_start: r.chance(300),
            bug: None,
        }
    }
}

/// The transport model and network conditions of a seed: every seed runs the real
/// transport (what `src/cluster/` does); `SIM_TRANSPORT=legacy` runs them over the one
/// it replaced, kept for the scripted tests that show what the real one fixed
/// (`tests/raft_sim.rs`). Half the seeds have TCP-like links, the others also lose,
/// duplicate and reorder; a fifth have one slow node. Latencies are the real ones scaled to
/// the simulator's election timeout (real: 2000 ms).
pub fn network_from(r: &mut Rng, nodes: u64, election_ms: u64) -> (TransportModel, Conditions) {
    let transport = match std::env::var("SIM_TRANSPORT").as_deref() {
        Ok("legacy") => TransportModel::legacy(election_ms),
        Ok("real") => TransportModel::real(election_ms),
        Ok(other) => panic!("SIM_TRANSPORT must be real or legacy, not {other}"),
        Err(_) => TransportModel::real(election_ms),
    };
    let latency_ms = 1 + r.below(8);
    let fifo = r.chance(500);
    let cond = Conditions {
        latency_ms,
        jitter_ms: r.below(latency_ms + 1) * if fifo { 1 } else { 4 },
        slow: r.chance(200).then(|| (1 + r.below(nodes), 10 + r.below(40))),
        fifo,
        drop_per_mille: r.below(80),
        dup_per_mille: r.below(30),
    };
    (transport, cond)
}

fn raft_config(id: NodeId, r: &mut Rng, autopilot_dead_ms: Option<u64>) -> RaftConfig {
    RaftConfig {
        heartbeat_ms: HEARTBEAT_MS,
        election_ms: ELECTION_MS,
        max_append_entries: 1 + r.below(20) as usize,
        max_append_bytes: 256,
        max_inflight: 1 + r.below(8) as usize,
        snapshot_chunk_bytes: SNAPSHOT_CHUNK_BYTES,
        autopilot_dead_ms,
        ..RaftConfig::new(id)
    }
}

/// Standby places: the server adds a joining node as a learner only while the
/// configuration has fewer learners than this.
pub const STANDBY_PLACES: usize = 2;

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
    /// The peers it was started with (dialed until it knows a configuration).
    peers: Vec<NodeId>,
    admission: Admission,
}

/// An admin replacing a crashed voter with a fresh id (docs/operations.md).
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
    pub net: Net<Message>,
    partition_until: u64,
    replacement: Option<Replacement>,
    /// Autopilot seeds: when fresh nodes start (each after a crash).
    joiner_starts: Vec<u64>,
    /// Fresh nodes started that no leader's committed configuration named yet,
    /// in the order they started (the first is the one being added).
    joiners: Vec<NodeId>,
    /// Nodes that learned they were removed (autopilot seeds: each stops, and a
    /// fresh node starts in its place).
    stopped: BTreeSet<NodeId>,
    /// Joiners a leader's committed configuration named.
    added: BTreeSet<NodeId>,
    /// (from, to) → (term, time) of the latest delivered answer to replication
    /// (append, heartbeat or snapshot answer) in the highest term seen.
    last_answer: BTreeMap<(NodeId, NodeId), (u64, u64)>,
    reads: BTreeMap<u64, ReadReq>,
    next_ctx: u64,
    proposals: u64,
    pub checker: Checker,
    pub stats: Stats,
    /// Every autopilot decision: (time, leader, event).
    pub autopilot_events: Vec<(u64, NodeId, AutopilotEvent)>,
}

#[derive(Default, Debug, Clone)]
pub struct Stats {
    pub elections: u64,
    pub committed: u64,
    pub snapshots_installed: u64,
    pub replacements: u64,
    /// Autopilot decisions: dead voters replaced, dead learners removed.
    pub autopilot_replacements: u64,
    pub autopilot_learners_removed: u64,
    pub reads_answered: u64,
    /// Time from the heal until a quorum followed a leader (the largest over
    /// the seeds added up), and the seed it was seen in.
    pub served_after_heal_ms: u64,
    pub slowest_seed: u64,
    /// Time from the heal until the check passed (a leader serves, a fresh
    /// proposal committed, the cluster has its full count of live voters): the
    /// largest, and its seed.
    pub healed_after_heal_ms: u64,
    pub slowest_heal_seed: u64,
    /// Seeds whose liveness check failed over a transport not held to it.
    pub liveness_misses: Vec<u64>,
    pub net: NetStats,
}

impl seeds::Totals for Stats {
    fn add(&mut self, o: &Stats) {
        Stats::add(self, o)
    }
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.elections += o.elections;
        self.committed += o.committed;
        self.snapshots_installed += o.snapshots_installed;
        self.replacements += o.replacements;
        self.autopilot_replacements += o.autopilot_replacements;
        self.autopilot_learners_removed += o.autopilot_learners_removed;
        self.reads_answered += o.reads_answered;
        if o.served_after_heal_ms >= self.served_after_heal_ms {
            self.served_after_heal_ms = o.served_after_heal_ms;
            self.slowest_seed = o.slowest_seed;
        }
        if o.healed_after_heal_ms >= self.healed_after_heal_ms {
            self.healed_after_heal_ms = o.healed_after_heal_ms;
            self.slowest_heal_seed = o.slowest_heal_seed;
        }
        self.liveness_misses.extend(o.liveness_misses.iter().copied());
        self.net.add(&o.net);
    }
}

impl World {
    pub fn new(p: SimParams) -> World {
        let mut rng = Rng::new(p.seed);
        let ids: Vec<NodeId> = (1..=p.nodes as u64).collect();
        let mut net = Net::new(p.transport.clone(), p.cond.clone(), p.seed);
        let nodes = ids
            .iter()
            .map(|id| {
                let cfg = raft_config(*id, &mut rng, p.autopilot_dead_ms);
                let raft = Raft::new_bootstrap(cfg, &ids, rng.next(), 0);
                net.add_node(*id, &ids, 0);
                let peers = ids.clone();
                (
                    *id,
                    Node {
                        raft,
                        app: App::default(),
                        paused_until: 0,
                        peers,
                        admission: Admission::default(),
                    },
                )
            })
            .collect();
        let mut checker = Checker::default();
        checker.voters_expected = Some(p.nodes);
        let mut w = World {
            rng,
            now: 0,
            step: 0,
            nodes,
            crashed: BTreeSet::new(),
            next_id: p.nodes as u64 + 1,
            net,
            partition_until: 0,
            replacement: None,
            joiner_starts: Vec::new(),
            joiners: Vec::new(),
            stopped: BTreeSet::new(),
            added: BTreeSet::new(),
            last_answer: BTreeMap::new(),
            reads: BTreeMap::new(),
            next_ctx: 1,
            proposals: 0,
            checker,
            stats: Stats::default(),
            autopilot_events: Vec::new(),
            p,
        };
        if w.p.autopilot_dead_ms.is_some() && w.p.standby_at_start {
            w.start_joiner();
        }
        w
    }

    /// Whether autopilot runs in this world.
    pub fn autopilot(&self) -> bool {
        self.p.autopilot_dead_ms.is_some()
    }

    /// Runs chaos, then heals and checks liveness.
    pub fn run(&mut self) -> Result<(), String> {
        while self.now < self.p.chaos_ms {
            self.chaos_step()?;
        }
        self.heal();
        let r = self.check_liveness();
        self.stats.net = self.net.stats.clone();
        match r {
            Err(e) if e.contains("liveness:") && !self.p.transport.liveness_bound => {
                self.stats.liveness_misses.push(self.p.seed);
                Ok(())
            }
            r => r,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        format!(
            "seed={} ({} transport) step={} t={}ms: {what}",
            self.p.seed, self.p.transport.name, self.step, self.now
        )
    }

    fn chaos_step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.now += self.rng.range(1, STEP_MS_MAX);
        self.perturb();
        self.deliver_due()?;
        self.tick_all()?;
        self.run_transport();
        self.client_actions();
        self.check().map_err(|v| self.fail(v.0))
    }

    fn calm_step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.now += STEP_MS_MAX / 2;
        self.deliver_due()?;
        self.tick_all()?;
        self.run_transport();
        self.advance_replacement();
        self.advance_joiners();
        self.check().map_err(|v| self.fail(v.0))
    }

    fn live_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    // ----- scripted scenarios (no chaos) ---------------------------------------

    /// A calm world for a scripted scenario: `nodes` founders, `transport`, one
    /// millisecond links that keep order and lose nothing, no faults.
    pub fn scripted(seed: u64, nodes: usize, transport: TransportModel) -> World {
        let mut p = SimParams::from_seed(seed);
        p.nodes = nodes;
        p.chaos_ms = 0;
        p.transport = transport;
        p.cond = Conditions {
            latency_ms: 1,
            jitter_ms: 0,
            slow: None,
            fifo: true,
            drop_per_mille: 0,
            dup_per_mille: 0,
        };
        p.break_per_mille = 0;
        p.autopilot_dead_ms = None;
        p.standby_at_start = false;
        let mut w = World::new(p);
        w.heal();
        w
    }

    /// `scripted`, with autopilot on at `dead_ms`.
    pub fn scripted_autopilot(seed: u64, nodes: usize, transport: TransportModel, dead_ms: u64) -> World {
        let mut w = World::scripted(seed, nodes, transport);
        w.p.autopilot_dead_ms = Some(dead_ms);
        for n in w.nodes.values_mut() {
            let cfg = RaftConfig { autopilot_dead_ms: Some(dead_ms), ..n.raft.config().clone() };
            let ids: Vec<NodeId> = (1..=nodes as u64).collect();
            n.raft = Raft::new_bootstrap(cfg, &ids, w.rng.next(), 0);
        }
        w
    }

    /// Runs calm steps until `done` holds (Err after `max_ms`).
    pub fn run_until(&mut self, max_ms: u64, done: impl Fn(&World) -> bool) -> Result<u64, String> {
        let start = self.now;
        while !done(self) {
            if self.now >= start + max_ms {
                return Err(self.fail(format!("condition not reached within {max_ms} ms")));
            }
            self.calm_step()?;
        }
        Ok(self.now - start)
    }

    /// Cuts `id` off from every other live node, both ways.
    pub fn isolate(&mut self, id: NodeId) {
        for other in self.live_ids().into_iter().filter(|o| *o != id) {
            self.net.blocked.insert((id, other));
            self.net.blocked.insert((other, id));
        }
    }

    /// The admin's `replace old new` on leader `l`, as the real admin job does it:
    /// start a node, dial it, add it as a learner once connected (`before_add` runs
    /// just before), wait until it caught up, swap it in, and wait (each step at most
    /// `step_ms`) until the final configuration commits. Returns the new node.
    pub fn admin_replace(
        &mut self,
        l: NodeId,
        old: NodeId,
        step_ms: u64,
        before_add: impl FnOnce(&mut World),
    ) -> Result<NodeId, String> {
        let voters: Vec<NodeId> = self.raft(l).membership().voters.iter().copied().collect();
        let new = self.add_joining(&voters);
        self.net.dial(l, new, self.now);
        self.run_until(step_ms, |w| w.net.is_up(l, new))?;
        before_add(self);
        self.with_raft(l, |r| r.add_learner(new)).map_err(|e| e.to_string())?;
        self.run_until(step_ms, |w| {
            w.raft(l).progress_of(new).is_some_and(|(m, _)| m >= w.raft(l).commit_index())
        })?;
        self.with_raft(l, |r| r.replace_voter(old, new)).map_err(|e| e.to_string())?;
        self.run_until(step_ms, |w| {
            let m = w.raft(l).committed_membership().1;
            !m.is_joint() && m.voters.contains(&new) && !m.contains(old)
        })?;
        Ok(new)
    }

    /// Node `id` stops for good.
    pub fn crash(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.net.remove_node(id, self.now);
        self.crashed.insert(id);
    }

    /// Runs calm steps for `ms`.
    pub fn run_for(&mut self, ms: u64) -> Result<(), String> {
        let end = self.now + ms;
        while self.now < end {
            self.calm_step()?;
        }
        Ok(())
    }

    pub fn raft(&self, id: NodeId) -> &Raft {
        &self.nodes[&id].raft
    }

    /// Calls `f` on node `id`'s core and handles what it produced.
    pub fn with_raft<T>(&mut self, id: NodeId, f: impl FnOnce(&mut Raft) -> T) -> T {
        let out = f(&mut self.nodes.get_mut(&id).unwrap().raft);
        self.process_ready(id).expect("ready");
        out
    }

    /// Starts a new node that joins with `peers` as its configured peers.
    pub fn add_joining(&mut self, peers: &[NodeId]) -> NodeId {
        let id = self.next_id;
        self.next_id += 1;
        let cfg = raft_config(id, &mut self.rng, self.p.autopilot_dead_ms);
        let raft = Raft::new_joining(cfg, self.rng.next(), self.now);
        self.net.add_node(id, peers, self.now);
        let node = Node {
            raft,
            app: App::default(),
            paused_until: 0,
            peers: peers.to_vec(),
            admission: Admission::default(),
        };
        self.nodes.insert(id, node);
        id
    }

    // ----- network ---------------------------------------------------------

    fn deliver_due(&mut self) -> Result<(), String> {
        while let Some((from, to, msg, inbound)) = self.net.pop_due(self.now) {
            if !self.nodes.contains_key(&to) {
                continue;
            }
            let msg = self.mangle(msg);
            let now = self.now;
            if std::env::var("SIM_TRACE").is_ok_and(|v| v.parse::<u64>().unwrap() <= now) {
                let mut t = format!("{now} {from}->{to} {msg:?}");
                t.truncate(300);
                eprintln!("{t}");
            }
            let adding = self.adding();
            let node = self.nodes.get_mut(&to).unwrap();
            match node.admission.judge(&self.net.model, &node.raft, adding, from, &msg, inbound) {
                Verdict::Step => {
                    if matches!(
                        msg,
                        Message::AppendResp { .. }
                            | Message::HeartbeatResp { .. }
                            | Message::InstallSnapshotResp { .. }
                    ) {
                        let last = self.last_answer.entry((from, to)).or_insert((0, 0));
                        if msg.term() >= last.0 {
                            *last = (msg.term(), now);
                        }
                    }
                    node.raft.step(from, msg, now);
                    self.process_ready(to)?;
                }
                Verdict::Drop => self.net.stats.unheard += 1,
                Verdict::Removed => {
                    if let Some(sender) = self.nodes.get_mut(&from).filter(|n| n.paused_until <= now) {
                        let term = sender.raft.term();
                        sender.raft.step(to, Message::Removed { term, config_index: u64::MAX }, now);
                        self.process_ready(from)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn wanted(&self, id: NodeId) -> BTreeSet<NodeId> {
        let node = &self.nodes[&id];
        let adding = self.adding();
        wanted_peers(&node.raft, &node.peers, adding)
    }

    /// Dialers make progress; each node's housekeeping runs when due.
    fn run_transport(&mut self) {
        let now = self.now;
        self.net.advance(now);
        let awake: Vec<NodeId> =
            self.live_ids().into_iter().filter(|id| self.nodes[id].paused_until <= now).collect();
        for id in self.net.housekeeping_due(&awake, now) {
            let wanted = self.wanted(id);
            self.net.sync_dialers(id, &wanted, true, now);
        }
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
            if self.net.model.tick_when_due && n.raft.next_deadline_ms().is_none_or(|d| now < d) {
                n.raft.advance_clock(now);
            } else {
                n.raft.tick(now);
            }
            self.process_ready(id)?;
        }
        Ok(())
    }

    /// Consumes a node's Ready in the documented order.
    fn process_ready(&mut self, id: NodeId) -> Result<(), String> {
        let rd: Ready = self.nodes.get_mut(&id).unwrap().raft.ready();
        if self.net.model.dial_on_append {
            // Why before sending: a message for a member just appended waits for
            // its link instead of being dropped.
            let wanted = self.wanted(id);
            self.net.sync_dialers(id, &wanted, false, self.now);
        }
        let adding = self.adding();
        for (to, msg) in rd.messages {
            let node = self.nodes.get_mut(&id).unwrap();
            let known = node.admission.knows_addr(&node.raft, &node.peers, adding, to);
            self.net.send(id, to, msg, self.now, known);
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
        for e in rd.autopilot {
            self.on_autopilot(id, e)?;
        }
        if rd.removed && self.autopilot() && self.stopped.insert(id) {
            // The real node stops once it learns it was removed; its supervisor
            // starts a fresh one (under a new id), which joins as a standby. The
            // removed core stays here, inert, for the checks.
            self.schedule_joiner();
        }
        Ok(())
    }

    /// An autopilot decision of leader `l`. A dead voter must really have been
    /// unheard: no answer to `l`'s replication in `l`'s term delivered from it
    /// within the last `autopilot_dead_ms` (the core counts a node as heard when
    /// such an answer arrives, nothing else).
    fn on_autopilot(&mut self, l: NodeId, e: AutopilotEvent) -> Result<(), String> {
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!("t={} leader {l}: {e:?}", self.now);
        }
        let Some(dead_ms) = self.p.autopilot_dead_ms else {
            return Err(self.fail(format!("autopilot is off, yet {l} reported {e:?}")));
        };
        self.autopilot_events.push((self.now, l, e.clone()));
        let (gone, since) = match e {
            AutopilotEvent::Replacing { dead, .. } => {
                self.stats.autopilot_replacements += 1;
                (dead, dead_ms)
            }
            AutopilotEvent::RemovingLearner { learner, .. } => {
                self.stats.autopilot_learners_removed += 1;
                (learner, dead_ms)
            }
            // No simulated node is ever told to stop (`Raft::stop`).
            AutopilotEvent::ReplacingStopping { .. } | AutopilotEvent::RemovingStopping { .. } => {
                return Err(self.fail(format!("leader {l} reported {e:?}, but no node was told to stop")));
            }
        };
        let term = self.nodes[&l].raft.term();
        if let Some(&(t, at)) = self.last_answer.get(&(gone, l)) {
            if t == term && at + since > self.now {
                return Err(self.fail(format!(
                    "autopilot: leader {l} (term {term}) reported {e:?}, but an answer from {gone} in its term \
                     was delivered to it at {at} ms, within the last {since} ms"
                )));
            }
        }
        Ok(())
    }

    // ----- clients and admin -----------------------------------------------

    pub fn leader(&self) -> Option<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.raft.role() == Role::Leader)
            .max_by_key(|n| n.raft.term())
            .map(|n| n.raft.id())
    }

    fn client_actions(&mut self) {
        if let Some(l) = self.leader() {
            // Clients keep a bounded pipeline: no new proposals while the leader
            // holds many uncommitted entries. Why: some seeds replicate one entry
            // per round trip (window 1, one entry per append); without a bound
            // the backlog grows without limit and after the heal catching up
            // takes longer than any liveness bound.
            let raft = &self.nodes[&l].raft;
            let backlog_ok = raft.last_index() - raft.commit_index() < UNCOMMITTED_MAX;
            if backlog_ok && self.rng.chance(150) {
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
        self.advance_joiners();
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
            // As the real admin job: dial the new node, add it once connected.
            if !self.net.is_up(l, new) {
                self.net.dial(l, new, self.now);
                return;
            }
            let raft = &mut self.nodes.get_mut(&l).unwrap().raft;
            let _ = raft.add_learner(new);
        } else if m.learners.contains(&new) {
            let caught_up = raft.progress_of(new).is_some_and(|(matched, _)| matched >= raft.commit_index());
            if caught_up && m.voters.contains(&old) {
                let _ = raft.replace_voter(old, new);
            }
        }
    }

    /// A leader that a quorum of its configuration follows in its term.
    pub fn followed_leader(&self) -> Option<NodeId> {
        let l = self.leader()?;
        let raft_of = |id: NodeId| self.nodes.get(&id).map(|n| &n.raft);
        followed_by_quorum(&self.nodes[&l].raft, raft_of).then_some(l)
    }

    /// Who leads and why it may not serve, for a liveness failure.
    fn leadership_summary(&self) -> String {
        let Some(l) = self.leader() else {
            let terms: Vec<String> = self
                .nodes
                .values()
                .map(|n| format!("{}:{:?}@{}", n.raft.id(), n.raft.role(), n.raft.term()))
                .collect();
            return format!("no leader; {}", terms.join(" "));
        };
        let r = &self.nodes[&l].raft;
        let own_committed = r.term_at(r.commit_index()) == Some(r.term());
        let lag: Vec<String> = self
            .nodes
            .keys()
            .filter(|id| **id != l)
            .map(|id| format!("{id}:{:?}", r.progress_of(*id).map(|p| r.last_index() - p.0)))
            .collect();
        format!(
            "leader {l} term {}, own entry committed: {own_committed}, commit {} last {}, \
             behind by {}, transfer {:?}, handing over {}",
            r.term(),
            r.commit_index(),
            r.last_index(),
            lag.join(" "),
            r.transfer(),
            r.handing_over()
        )
    }

    /// With autopilot, `voters_whole`; without, true (the admin replacement is
    /// checked on its own).
    fn whole_or_off(&self) -> bool {
        !self.autopilot() || self.voters_whole()
    }

    // ----- invariants ------------------------------------------------------

    pub fn check(&mut self) -> Result<(), Violation> {
        for n in self.nodes.values() {
            check_node(&mut self.checker, &n.raft)?;
        }
        Ok(())
    }

    // ----- liveness --------------------------------------------------------

    /// After healing: within `SERVE_AFTER_HEAL_MS` (two election timeouts) a
    /// leader leads — a quorum of its configuration follows it in its term —
    /// and within `heal_ms` a fresh proposal made on a leader commits, any
    /// admin replacement under way finishes and, with autopilot, every crashed
    /// voter has been replaced (`voters_whole`).
    fn check_liveness(&mut self) -> Result<(), String> {
        let healed = self.now;
        let deadline = self.now + self.p.heal_ms;
        let mut proposed: Option<(NodeId, u64, u64)> = None;
        let mut committed = false;
        let mut served = None;
        while self.now < deadline {
            self.calm_step()?;
            if served.is_none() && self.followed_leader().is_some() {
                served = Some(self.now - healed);
            }
            if served.is_none() && self.now > healed + SERVE_AFTER_HEAL_MS {
                break;
            }
            if served.is_some() && committed && self.replacement.is_none() && self.whole_or_off() {
                break;
            }
            let Some(l) = self.leader() else { continue };
            let raft = &self.nodes[&l].raft;
            match proposed {
                Some((pl, index, term)) if pl == l && raft.term() == term => {
                    committed |= raft.commit_index() >= index;
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
        let whole = self.whole_or_off();
        if let (Some(ms), true, None, true) = (served, committed, self.replacement, whole) {
            if ms <= SERVE_AFTER_HEAL_MS {
                self.stats.served_after_heal_ms = ms;
                self.stats.slowest_seed = self.p.seed;
                self.stats.healed_after_heal_ms = self.now - healed;
                self.stats.slowest_heal_seed = self.p.seed;
                return Ok(());
            }
        }
        if std::env::var("SIM_DEBUG").is_ok() {
            eprint!("t={} links:\n{}", self.now, self.net.describe_links());
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
        Err(self.fail(match served {
            None => format!(
                "liveness: no leader served within {SERVE_AFTER_HEAL_MS} ms (two election timeouts) after \
                 the last fault healed at {healed} ms ({})",
                self.leadership_summary()
            ),
            Some(ms) => format!(
                "liveness: a leader served {ms} ms after the heal, but within {} ms a fresh proposal \
                 committed: {committed}, replacement still under way: {:?}, voters whole (autopilot): {whole}, \
                 joiners {:?} ({})",
                self.p.heal_ms,
                self.replacement,
                self.joiners,
                self.leadership_summary()
            ),
        }))
    }
}

/// All per-step invariants for one node.
pub fn check_node(c: &mut Checker, r: &Raft) -> Result<(), Violation> {
    // The core's own invariants (they panic, naming the one violated).
    r.check_invariants();
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
    let seed = p.seed;
    caught(seed, move || {
        let mut w = World::new(p);
        w.run()?;
        Ok(w.stats)
    })
}

/// Runs one seed, turning a panic (a violated invariant in the production code)
/// into an error that names the seed, so the other seeds still run and the failure
/// can be replayed.
pub fn caught<T>(seed: u64, run: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(format!("seed {seed}: panicked: {message}"))
        }
    }
}

/// Whether a quorum of leader `l`'s active and committed configurations follow it
/// in its term (`raft_of` gives the live nodes).
pub fn followed_by_quorum<'a>(l: &Raft, raft_of: impl Fn(NodeId) -> Option<&'a Raft>) -> bool {
    let follows = |id: NodeId| {
        id == l.id() || raft_of(id).is_some_and(|n| n.term() == l.term() && n.leader_id() == Some(l.id()))
    };
    l.is_leader() && l.membership().has_quorum(follows) && l.committed_membership().1.has_quorum(follows)
}

/// Whom a node keeps links to, as the real Raft thread's housekeeping decides:
/// the members of its active configuration and its leader (and, on a leader
/// running an admin replacement, the node being `adding`); a node that knows
/// no configuration yet dials its `configured` peers.
pub fn wanted_peers(r: &Raft, configured: &[NodeId], adding: Option<NodeId>) -> BTreeSet<NodeId> {
    let mut wanted = r.membership().all_nodes();
    if r.membership().voters.is_empty() {
        wanted.extend(configured.iter().copied());
    }
    wanted.extend(r.leader_id());
    if r.is_leader() {
        wanted.extend(adding);
    }
    wanted.remove(&r.id());
    wanted
}

/// What a node's transport does with a Raft message that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Step,
    /// Not heard (a non-member that is no stranger it may hear now).
    Drop,
    /// The sender was removed: the real node refuses its next handshake with a removal
    /// notice (code 6), which the sender takes as `Removed`.
    Removed,
}

/// Who a node hears, as the real node judges it (`src/cluster/raft_thread/admission.rs`,
/// `may_step`, and the PEER HELLO rules of docs/protocol-cluster.md §2).
#[derive(Clone, Debug, Default)]
pub struct Admission {
    /// Every node of every committed configuration seen (a removed node is refused).
    ever_committed: BTreeSet<NodeId>,
}

impl Admission {
    fn remember(&mut self, r: &Raft) {
        for c in r.committed_configs() {
            self.ever_committed.extend(c.all_nodes());
        }
    }

    /// The nodes `r`'s transport admits as members: its active and committed
    /// configurations, and (on the leader running it) the node an admin replace adds.
    fn members(r: &Raft, adding: Option<NodeId>) -> BTreeSet<NodeId> {
        let mut m = r.membership().all_nodes();
        m.extend(r.committed_membership().1.all_nodes());
        if r.is_leader() {
            m.extend(adding);
        }
        m
    }

    /// Judges message `msg` from `from` arriving at `r` (`inbound`: on a link `from`
    /// dialed). Before `r` knows a configuration everyone is heard (the real node hears
    /// its configured peers and the leader they name).
    pub fn judge(
        &mut self,
        model: &TransportModel,
        r: &Raft,
        adding: Option<NodeId>,
        from: NodeId,
        msg: &Message,
        inbound: bool,
    ) -> Verdict {
        self.remember(r);
        if Self::members(r, adding).contains(&from) || r.membership().all_nodes().is_empty() {
            return Verdict::Step;
        }
        if self.ever_committed.contains(&from) {
            return Verdict::Removed;
        }
        if model.strangers && inbound && ticketing::cluster::stranger::stranger_may_step(r, from, msg) {
            return Verdict::Step;
        }
        Verdict::Drop
    }

    /// Whether `r`'s node knows `to`'s address (configuration, member records, admin
    /// replace): only those are dialed on demand.
    pub fn knows_addr(
        &mut self,
        r: &Raft,
        configured: &[NodeId],
        adding: Option<NodeId>,
        to: NodeId,
    ) -> bool {
        self.remember(r);
        configured.contains(&to)
            || Self::members(r, adding).contains(&to)
            || self.ever_committed.contains(&to)
            || r.committed_configs().any(|c| c.contains(to))
    }
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
