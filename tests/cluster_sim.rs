//! Deterministic LOCK-LEVEL simulation: real Raft cores + real lock `Replica`s,
//! wired exactly like the server (src/cluster/raft_thread/ + src/server/lock_thread.rs,
//! each node's two threads as two FIFO inboxes that may lag each other), simulated
//! clients on simulated connections, a hostile peer network (delay, drop, duplicate,
//! reorder, symmetric and one-way partitions), node pauses, wall-clock jumps, and
//! crashes with replacement by a new id (learner → `replace_voter` by the admin, or on
//! half the seeds by the leader's autopilot after the successor joined as a learner).
//!
//! The clients send ACQUIRE, RELEASE and QUERY, and counted and multi-key holds
//! (`cluster_sim/holds.rs`): HOLDs of 1–2 permits of a stock key of capacity 3 (now and
//! then stating another capacity), HOLDs of 2–4 keys in random orders crossing the
//! keys ACQUIREs use (capacity 1) and the stock, some asking their place in line, with
//! waits of 0, up to 2 s and up to 10 s; their releases; POOL reads.
//!
//! After every step the lock invariants of `sim/lock_checker.rs` hold (inv1–inv11, each
//! checked as its fact happens: one holder per exclusive key and permits within capacity
//! in every committed state, a grant one entry under one token with all its keys, held
//! and ended together, capacity fixed while held, tokens growing, FIFO per connection and
//! strict FIFO across keys on each leader, leases never early, one answer per request,
//! linearizable QUERY and POOL reads) and Raft's own invariants (`sim::check_node`). At
//! the end the world heals, a fresh ACQUIRE must be granted, and until every request is
//! answered the oldest waiter whose keys have their counts free is granted within
//! `WAITER_SERVED_MS` (inv12).
//!
//! `SIM_SEED=N` replays one seed exactly, `SIM_SEEDS=K` sets the seed count,
//! `SIM_SEED_BASE=B` the first seed (see scripts/sim.sh).

#[path = "cluster_sim/clients.rs"]
mod clients;
#[path = "cluster_sim/holds.rs"]
mod holds;
#[path = "sim/lock_checker.rs"]
mod lock_checker;
mod sim;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use lock_checker::{Asked, LockChecker};
use sim::{check_node, env_u64, faults, Checker, Conditions, Net, Rng, TransportModel};
use ticketing::lock::codec::{decode_command, decode_snapshot, encode_command};
use ticketing::lock::{Command, ConnId, TableConfig};
use ticketing::messages::FromLog;
use ticketing::proto::{Request, Response};
use ticketing::raft::{EntryKind, Message, NodeId, Raft, RaftConfig, RaftError, Role};
use ticketing::replica::{AppendGate, LogRole, Replica, ReplicaOutput, ToLog, SNAPSHOT_SLICE_SLOTS};

/// Default seed count: sized so the test takes under a minute in `--release` on 2 cores.
const SEEDS_DEFAULT: u64 = 4000;
const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: u64 = 500;
const STEP_MS_MAX: u64 = 10;
const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const WALL_BASE_US: i64 = 1_700_000_000_000_000;
const PROBE_KEY: &str = "probe";
/// At quiescence a waiter that is the oldest on each of its keys, whose counts are
/// free in the committed state, is granted within this long (inv12).
const WAITER_SERVED_MS: u64 = 2 * ELECTION_MS;

/// A deliberately broken world, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// The leader answers G as soon as Raft appended the grant (no commit wait).
    GrantOnAppend,
    /// The lock side applies with a clock 700 ms behind its timers: leases end early.
    EarlyLease,
    /// The glue skips the `term` check on appends (a command planned under an old
    /// leadership may enter a newer term's log). An exploration, not a test:
    /// `scripts/sim.sh --only lock --no-term-check` runs the seeds without the check
    /// (3000 seeds passed without it; the check stays, as in the server).
    NoTermCheck,
    /// The glue treats an append refused during a hand-over as refused for good (the
    /// replica answers `M`), as before deferral existed.
    RejectDuringHandover,
}

#[derive(Clone, Debug)]
struct Params {
    seed: u64,
    nodes: usize,
    clients: usize,
    keys: usize,
    chaos_ms: u64,
    heal_ms: u64,
    /// The peer transport and network (see `sim/net.rs`), as in the Raft-level
    /// simulator.
    transport: TransportModel,
    cond: Conditions,
    /// Chance per step (‰) of a link break, and of a one-way dial outage.
    break_per_mille: u64,
    client_delay_max_ms: u64,
    /// Chance per step (‰) that a node's Raft / lock thread runs its loop turn.
    turn_per_mille: u64,
    client_per_mille: u64,
    waiters_max: usize,
    snapshot_every: u64,
    /// Planned hand-overs: leadership transfers (to a named voter or the successor),
    /// graceful stops of the leader (transfer, then stop) and planned replacements of
    /// live voters, the leader included.
    handovers: bool,
    /// The leader's autopilot threshold on half the seeds (`None`: off). With it on, a
    /// crashed voter's successor only joins as a learner, as the real server's JOIN
    /// does, and the autopilot swaps it in; planned replacements of live voters stay
    /// the admin's, with the autopilot paused meanwhile (as the server does).
    autopilot_ms: Option<u64>,
    bug: Option<Bug>,
}

impl Params {
    fn from_seed(seed: u64) -> Params {
        let mut r = Rng::new(seed ^ 0x10C4_5EED);
        let nodes = if seed.is_multiple_of(2) { 3 } else { 5 };
        let (transport, cond) = sim::network_from(&mut r, nodes as u64, ELECTION_MS);
        Params {
            seed,
            nodes,
            clients: 3 + r.below(4) as usize,
            keys: 2 + r.below(3) as usize,
            chaos_ms: 10_000 + r.below(20_000),
            heal_ms: 20_000,
            transport,
            cond,
            break_per_mille: r.below(4),
            client_delay_max_ms: 1 + r.below(40),
            turn_per_mille: 500 + r.below(500),
            client_per_mille: 30 + r.below(150),
            waiters_max: 1 + r.below(4) as usize,
            snapshot_every: 3 + r.below(40),
            handovers: r.chance(700),
            autopilot_ms: r.chance(500).then(|| ELECTION_MS * (4 + r.below(5))),
            bug: None,
        }
    }
}

fn raft_config(id: NodeId, r: &mut Rng, autopilot_ms: Option<u64>) -> RaftConfig {
    RaftConfig {
        heartbeat_ms: HEARTBEAT_MS,
        election_ms: ELECTION_MS,
        max_append_entries: 1 + r.below(20) as usize,
        max_append_bytes: 512,
        max_inflight: 1 + r.below(8) as usize,
        snapshot_chunk_bytes: 64,
        autopilot_dead_ms: autopilot_ms,
        ..RaftConfig::new(id)
    }
}

fn addr(id: NodeId) -> String {
    format!("n{id}")
}

fn parse_addr(a: &str) -> Option<NodeId> {
    a.strip_prefix('n')?.parse().ok()
}

/// To a node's lock-table thread (one FIFO, like the server's crossbeam channel).
enum LockMsg {
    Request { conn: ConnId, id: u32, request: Request },
    Closed { conn: ConnId },
    Log(FromLog),
}

/// To a node's Raft thread.
enum RaftMsg {
    Log(ToLog),
    Compact { index: u64, data: Vec<u8> },
}

struct Node {
    raft: Raft,
    replica: Replica,
    lock_inbox: VecDeque<LockMsg>,
    raft_inbox: VecDeque<RaftMsg>,
    /// The Raft thread's half of deferral.
    gate: AppendGate,
    paused_until: u64,
    /// The peers it was started with (dialed until it knows a configuration).
    peers: Vec<NodeId>,
    /// Who its transport hears.
    admission: sim::Admission,
    /// Wall clock = base + simulated time + offset (jumps both ways).
    wall_offset_us: i64,
    snapshot_index: u64,
    conns: BTreeSet<ConnId>,
    serving: bool,
    arrivals: u64,
    /// Deliveries that reached this node while it was paused, in order.
    held: VecDeque<Ev>,
}

impl Node {
    fn new(raft: Raft, id: NodeId, waiters_max: usize, peers: Vec<NodeId>) -> Node {
        Node {
            raft,
            replica: Replica::new(TableConfig {
                node: id,
                incarnation: id * 1000 + 1,
                waiters_per_key_max: waiters_max,
                keys_max: usize::MAX,
            }),
            lock_inbox: VecDeque::new(),
            raft_inbox: VecDeque::new(),
            gate: AppendGate::default(),
            paused_until: 0,
            peers,
            admission: sim::Admission::default(),
            wall_offset_us: 0,
            snapshot_index: 0,
            conns: BTreeSet::new(),
            serving: false,
            arrivals: 0,
            held: VecDeque::new(),
        }
    }

    fn unix_us(&self, now: u64) -> u64 {
        (WALL_BASE_US + now as i64 * 1000 + self.wall_offset_us) as u64
    }
}

enum Ev {
    ToNode { node: NodeId, msg: LockMsg },
    ToClient { client: usize, conn: ConnId, id: u32, response: Response },
}

struct Client {
    owner: String,
    node: NodeId,
    conn: Option<ConnId>,
    next_id: u32,
    outstanding: BTreeMap<u32, Asked>,
    /// The G this client got: keys, token, deadline.
    holds: Vec<holds::Held>,
    hint: Option<NodeId>,
    switch: bool,
}

#[derive(Default, Debug, Clone)]
struct Stats {
    elections: u64,
    committed: u64,
    grants: u64,
    g_received: u64,
    handoffs: u64,
    expiries: u64,
    moved: u64,
    unknown: u64,
    busy: u64,
    timeouts: u64,
    released: u64,
    not_holder: u64,
    queries: u64,
    /// Counted and multi-key holds (`holds.rs`): requests sent, pooled and multi-key
    /// grants committed, places in line heard, capacity refusals, POOL reads checked.
    holds: holds::HoldStats,
    snapshots: u64,
    replacements: u64,
    /// Of those, the ones the autopilot made (a crashed voter's successor swapped in).
    autopilot_replacements: u64,
    crashes: u64,
    /// Hand-overs begun (transfers, graceful stops, a leader removing itself).
    handovers: u64,
    /// Appends the log deferred during a hand-over.
    deferred: u64,
    /// The longest time from the heal until a leader served, and its seed.
    served_after_heal_ms: u64,
    slowest_seed: u64,
    /// Seeds whose liveness check failed over a transport not held to it.
    liveness_misses: Vec<u64>,
    /// (seed, ms): a leader served later than `sim::SERVE_AFTER_HEAL_MS` but within
    /// `SERVE_LATE_MAX_MS` (docs/raft.md, Known limits).
    late_serves: Vec<(u64, u64)>,
}

impl sim::seeds::Totals for Stats {
    fn add(&mut self, o: &Stats) {
        Stats::add(self, o)
    }
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.elections += o.elections;
        self.committed += o.committed;
        self.grants += o.grants;
        self.g_received += o.g_received;
        self.handoffs += o.handoffs;
        self.expiries += o.expiries;
        self.moved += o.moved;
        self.unknown += o.unknown;
        self.busy += o.busy;
        self.timeouts += o.timeouts;
        self.released += o.released;
        self.not_holder += o.not_holder;
        self.queries += o.queries;
        self.holds.add(&o.holds);
        self.snapshots += o.snapshots;
        self.replacements += o.replacements;
        self.autopilot_replacements += o.autopilot_replacements;
        self.crashes += o.crashes;
        self.handovers += o.handovers;
        self.deferred += o.deferred;
        if o.served_after_heal_ms >= self.served_after_heal_ms {
            self.served_after_heal_ms = o.served_after_heal_ms;
            self.slowest_seed = o.slowest_seed;
        }
        self.liveness_misses.extend(o.liveness_misses.iter().copied());
        self.late_serves.extend(o.late_serves.iter().copied());
    }
}

/// At lock level a leader that serves later than two election timeouts after the heal
/// is listed (`late_serves`), and fails the seed only past four: after a partition
/// heals, the links come back through their dial backoff, and a split election or a
/// lagging voter's catch-up may take one more election timeout (docs/raft.md).
const SERVE_LATE_MAX_MS: u64 = 2 * sim::SERVE_AFTER_HEAL_MS;

struct World {
    p: Params,
    rng: Rng,
    now: u64,
    step: u64,
    chaos: bool,
    nodes: BTreeMap<NodeId, Node>,
    next_id: NodeId,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    seq: u64,
    /// Per (connection, direction): the last scheduled delivery (TCP keeps order).
    conn_last: BTreeMap<(ConnId, bool), u64>,
    net: Net<Message>,
    partition_until: u64,
    replacement: Option<(NodeId, NodeId)>,
    /// The replacement under way follows a crash (with the autopilot on: a JOIN, then
    /// the autopilot's swap), not an admin's planned replacement.
    replacement_crash: bool,
    /// A leader stopping gracefully (SIGTERM): (id, when it stops regardless).
    stopping: Option<(NodeId, u64)>,
    /// Replaced nodes still running until they learn they were removed.
    retiring: BTreeSet<NodeId>,
    clients: Vec<Client>,
    conn_client: BTreeMap<ConnId, usize>,
    next_conn: ConnId,
    raft_checker: Checker,
    checker: LockChecker,
    stats: Stats,
}

impl World {
    fn new(p: Params) -> World {
        let mut rng = Rng::new(p.seed);
        let ids: Vec<NodeId> = (1..=p.nodes as u64).collect();
        let mut nodes = BTreeMap::new();
        let mut net = Net::new(p.transport.clone(), p.cond.clone(), p.seed);
        for id in &ids {
            let cfg = raft_config(*id, &mut rng, p.autopilot_ms);
            let raft = Raft::new_bootstrap(cfg, &ids, rng.next(), 0);
            net.add_node(*id, &ids, 0);
            nodes.insert(*id, Node::new(raft, *id, p.waiters_max, ids.clone()));
        }
        let clients = (0..p.clients)
            .map(|i| Client {
                owner: format!("c{i}"),
                node: ids[i % ids.len()],
                conn: None,
                next_id: 1,
                outstanding: BTreeMap::new(),
                holds: Vec::new(),
                hint: None,
                switch: false,
            })
            .collect();
        World {
            rng,
            now: 0,
            step: 0,
            chaos: true,
            nodes,
            next_id: p.nodes as u64 + 1,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            conn_last: BTreeMap::new(),
            net,
            partition_until: 0,
            replacement: None,
            replacement_crash: false,
            stopping: None,
            retiring: BTreeSet::new(),
            clients,
            conn_client: BTreeMap::new(),
            next_conn: 1,
            raft_checker: Checker::default(),
            checker: LockChecker::new(),
            stats: Stats::default(),
            p,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        format!(
            "seed={} ({} transport) step={} t={}ms: {what}",
            self.p.seed, self.p.transport.name, self.step, self.now
        )
    }

    fn run(&mut self) -> Result<(), String> {
        while self.now < self.p.chaos_ms {
            self.step_once().map_err(|e| self.fail(e))?;
        }
        self.chaos = false;
        self.heal();
        match self.check_liveness() {
            Err(e) if e.starts_with("liveness:") && !self.p.transport.liveness_bound => {
                self.stats.liveness_misses.push(self.p.seed);
            }
            r => r.map_err(|e| self.fail(e))?,
        }
        let c = &self.checker;
        self.stats.grants = c.grants_committed;
        self.stats.g_received = c.g_received;
        self.stats.handoffs = c.handoffs;
        self.stats.expiries = c.expiries;
        self.stats.committed = c.committed_len();
        self.stats.holds.pooled_grants = c.pooled_grants;
        self.stats.holds.multi_key_grants = c.multi_key_grants;
        self.stats.holds.pool_reads = c.pool_reads;
        self.stats.holds.due_at_quiescence = c.due_at_quiescence;
        Ok(())
    }

    fn step_once(&mut self) -> Result<(), String> {
        self.step += 1;
        self.now += self.rng.range(1, STEP_MS_MAX);
        if self.chaos {
            self.perturb();
        }
        self.deliver_due()?;
        let turn = if self.chaos { self.p.turn_per_mille } else { 1000 };
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            if self.nodes[&id].paused_until > self.now {
                continue;
            }
            if self.rng.chance(turn) {
                self.raft_turn(id)?;
            }
            if self.rng.chance(turn) {
                self.lock_turn(id)?;
            }
        }
        self.run_transport();
        if self.chaos {
            self.client_actions()?;
        }
        self.advance_stopping();
        self.advance_replacement();
        if !self.chaos {
            let leader = self.serving_leader();
            self.checker.waiters_served(leader, self.now, WAITER_SERVED_MS)?;
        }
        for n in self.nodes.values() {
            check_node(&mut self.raft_checker, &n.raft).map_err(|v| format!("raft: {}", v.0))?;
        }
        Ok(())
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// In-order delivery on one client connection, one direction.
    fn conn_at(&mut self, conn: ConnId, to_node: bool) -> u64 {
        let delay = self.rng.range(1, self.p.client_delay_max_ms);
        let last = self.conn_last.entry((conn, to_node)).or_insert(0);
        let at = (self.now + delay).max(*last);
        *last = at;
        at
    }

    // ----- faults ----------------------------------------------------------

    fn perturb(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
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
        if self.rng.chance(2) {
            // Wall clock jumps, forwards or backwards (tokens must still grow).
            let x = ids[self.rng.below(ids.len() as u64) as usize];
            let jump = self.rng.range(0, 6_000_000) as i64 - 3_000_000;
            self.nodes.get_mut(&x).unwrap().wall_offset_us += jump;
        }
        if decided.crash {
            self.crash_one();
        }
        if self.p.handovers {
            self.planned_handovers();
        }
    }

    /// What an operator does on purpose: `admin transfer-leader [ID]`, SIGTERM to the
    /// leader (hand over, then stop), `admin replace` of a live voter (maybe the leader).
    fn planned_handovers(&mut self) {
        let Some(l) = self.leader() else { return };
        if self.rng.chance(2) {
            let voters: Vec<NodeId> = self.nodes[&l].raft.membership().voters.iter().copied().collect();
            let to = match self.rng.chance(500) {
                true => Some(voters[self.rng.below(voters.len() as u64) as usize]),
                false => None,
            };
            let _ = self.nodes.get_mut(&l).unwrap().raft.transfer_leader(to);
        }
        if self.stopping.is_none() && self.replacement.is_none() && self.rng.chance(1) {
            // SIGTERM: the process keeps running its loops until it no longer leads or
            // the hand-over ended, at most an election timeout and a little more.
            if self.nodes.get_mut(&l).unwrap().raft.transfer_leader(None).is_ok() {
                self.stopping = Some((l, self.now + ELECTION_MS + 2 * HEARTBEAT_MS));
            }
        }
        if self.replacement.is_none() && self.rng.chance(1) {
            let voters: Vec<NodeId> = self.nodes[&l].raft.membership().voters.iter().copied().collect();
            let old =
                if self.rng.chance(500) { l } else { voters[self.rng.below(voters.len() as u64) as usize] };
            self.start_replacement(old, false);
        }
    }

    /// A node being stopped gracefully goes once it no longer leads, its hand-over
    /// ended, or its deadline passed; then it is replaced like a crashed one. A node
    /// replaced while alive goes once it learned it was removed (one cut off meanwhile
    /// stays until it learns it) and its lock thread has caught up.
    fn advance_stopping(&mut self) {
        let done: Vec<NodeId> = self
            .retiring
            .iter()
            .copied()
            .filter(|id| {
                self.nodes
                    .get(id)
                    .is_none_or(|n| n.raft.is_removed() && n.raft_inbox.is_empty() && n.lock_inbox.is_empty())
            })
            .collect();
        for id in done {
            self.retiring.remove(&id);
            self.stop(id);
        }
        let Some((id, deadline)) = self.stopping else { return };
        let Some(node) = self.nodes.get(&id) else {
            self.stopping = None;
            return;
        };
        let leading = node.raft.is_leader() && node.raft.handing_over();
        if leading && self.now < deadline {
            return;
        }
        self.stopping = None;
        if self.replacement.is_none() {
            self.start_replacement(id, true);
        }
    }

    fn leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.raft.role() == Role::Leader)
            .max_by_key(|(_, n)| n.raft.term())
            .map(|(id, _)| *id)
    }

    /// The leader of the newest term any live node has reached, if that term has one.
    /// Why not any node that believes it leads: a paused or cut-off leader of an older
    /// term knows neither the newest configuration nor which of its voters are gone, so
    /// a fault chosen from its view could leave the real configuration without a
    /// quorum for good.
    fn current_leader(&self) -> Option<NodeId> {
        let newest = self.nodes.values().map(|n| n.raft.term()).max()?;
        self.leader().filter(|l| self.nodes[l].raft.term() == newest)
    }

    /// Crashes a voter for good (its id never returns) and starts replacing it by a
    /// new id, only when the whole configuration is alive (as the Raft sim does).
    fn crash_one(&mut self) {
        let Some(leader) = self.current_leader() else { return };
        let voters: Vec<NodeId> =
            self.nodes[&leader].raft.committed_membership().1.voters.iter().copied().collect();
        let old = voters[self.rng.below(voters.len() as u64) as usize];
        self.start_replacement(old, true);
    }

    /// Starts replacing voter `old` by a new id (the admin's `replace`), killing `old`
    /// first if `crash`, else stopping it once the change commits. Only when no other
    /// replacement runs and the whole configuration is alive, so a quorum survives.
    fn start_replacement(&mut self, old: NodeId, crash: bool) {
        if self.replacement.is_some() {
            return;
        }
        let Some(leader) = self.current_leader() else { return };
        let raft = &self.nodes[&leader].raft;
        let m = raft.committed_membership().1.clone();
        if m.is_joint() || raft.config_change_pending() || !m.voters.contains(&old) {
            return;
        }
        if m.voters.iter().any(|v| !self.nodes.contains_key(v)) {
            return;
        }
        if crash {
            self.stop(old);
        }
        let new = self.next_id;
        self.next_id += 1;
        let cfg = raft_config(new, &mut self.rng, self.p.autopilot_ms);
        let raft = Raft::new_joining(cfg, self.rng.next(), self.now);
        // Started with the voters as its configured peers (the one leaving too:
        // a live voter may still be replaced).
        let peers: Vec<NodeId> = m.voters.iter().copied().filter(|v| self.nodes.contains_key(v)).collect();
        self.net.add_node(new, &peers, self.now);
        self.nodes.insert(new, Node::new(raft, new, self.p.waiters_max, peers));
        self.replacement = Some((old, new));
        self.replacement_crash = crash;
        trace(self.now, || format!("replace n{old} by n{new} (crash {crash}, leader n{leader})"));
    }

    /// Node `id` is gone for good; its client connections die with it (whatever they
    /// had outstanding stays unknown).
    fn stop(&mut self, id: NodeId) {
        if self.nodes.remove(&id).is_none() {
            return;
        }
        self.net.remove_node(id, self.now);
        self.checker.node_gone(id);
        self.stats.crashes += 1;
        for c in self.clients.iter_mut() {
            if c.node == id {
                c.conn = None;
                c.outstanding.clear();
            }
        }
    }

    /// The admin's replacement: add learner → caught up → replace_voter → done. With
    /// the autopilot on, a crashed voter's successor is only added (a JOIN) and the
    /// autopilot swaps it in.
    fn advance_replacement(&mut self) {
        let by_autopilot = self.p.autopilot_ms.is_some() && self.replacement_crash;
        // The server pauses the autopilot while an operator's replacement runs.
        let paused = self.replacement.is_some() && !by_autopilot;
        for n in self.nodes.values_mut() {
            if n.raft.autopilot_paused() != paused {
                n.raft.set_autopilot_paused(paused);
            }
        }
        let Some((old, new)) = self.replacement else {
            return;
        };
        if by_autopilot && self.autopilot_went_elsewhere(old, new) {
            return;
        }
        let Some(l) = self.leader() else { return };
        let raft = &mut self.nodes.get_mut(&l).unwrap().raft;
        let m = raft.membership().clone();
        let (_, committed) = raft.committed_membership();
        if !committed.contains(old) && committed.voters.contains(&new) && !committed.is_joint() {
            self.replacement = None;
            self.stats.replacements += 1;
            if by_autopilot {
                self.stats.autopilot_replacements += 1;
            }
            trace(self.now, || format!("replaced n{old} by n{new}"));
            // A planned replacement: the old process stops once it knows it is out and
            // has answered what it applied (`advance_stopping`).
            if self.nodes.contains_key(&old) {
                self.retiring.insert(old);
            }
            return;
        }
        if raft.config_change_pending() || m.is_joint() {
            return;
        }
        if !m.voters.contains(&old) {
            // Started on a stale leader whose configuration still had `old` (removed
            // meanwhile by a change it had not heard of): the real admin job would time
            // out and remove its learner; the operator retries if needed.
            let _ = raft.remove_learner(new);
            self.replacement = None;
            trace(self.now, || format!("replacement of n{old} by n{new} abandoned"));
            self.stop(new);
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
        } else if m.learners.contains(&new) && !by_autopilot {
            let caught_up = raft.progress_of(new).is_some_and(|(matched, _)| matched >= raft.commit_index());
            if caught_up && m.voters.contains(&old) {
                let _ = raft.replace_voter(old, new);
            }
        }
    }

    /// With the autopilot on, the standby meant for crashed voter `old` may go
    /// elsewhere: swapped in for another voter it found dead (one cut off past the
    /// threshold), or removed as a dead learner itself. Then `old` needs another
    /// fresh node, as a process manager would start one. True when that happened.
    fn autopilot_went_elsewhere(&mut self, old: NodeId, new: NodeId) -> bool {
        let Some(l) = self.leader() else { return false };
        let raft = &self.nodes[&l].raft;
        let committed = raft.committed_membership().1.clone();
        let taken =
            committed.voters.contains(&new) && !committed.is_joint() && committed.voters.contains(&old);
        let dropped = !raft.membership().contains(new) && raft.committed_configs().any(|c| c.contains(new));
        if !taken && !dropped {
            return false;
        }
        trace(self.now, || format!("n{new} went elsewhere (taken {taken}); another fresh node for n{old}"));
        if dropped {
            self.stop(new);
        }
        self.replacement = None;
        let voters: Vec<NodeId> = committed.voters.iter().copied().collect();
        let new = self.next_id;
        self.next_id += 1;
        let cfg = raft_config(new, &mut self.rng, self.p.autopilot_ms);
        let raft = Raft::new_joining(cfg, self.rng.next(), self.now);
        let peers: Vec<NodeId> = voters.iter().copied().filter(|v| self.nodes.contains_key(v)).collect();
        self.net.add_node(new, &peers, self.now);
        self.nodes.insert(new, Node::new(raft, new, self.p.waiters_max, peers));
        self.replacement = Some((old, new));
        self.replacement_crash = true;
        true
    }

    fn heal(&mut self) {
        self.net.heal();
        for n in self.nodes.values_mut() {
            n.paused_until = 0;
        }
    }

    // ----- network ---------------------------------------------------------

    fn wanted(&self, id: NodeId) -> BTreeSet<NodeId> {
        let node = &self.nodes[&id];
        sim::wanted_peers(&node.raft, &node.peers, self.replacement.map(|(_, new)| new))
    }

    /// Dialers make progress; each node's housekeeping runs when due.
    fn run_transport(&mut self) {
        let now = self.now;
        self.net.advance(now);
        let awake: Vec<NodeId> =
            self.nodes.iter().filter(|(_, n)| n.paused_until <= now).map(|(id, _)| *id).collect();
        for id in self.net.housekeeping_due(&awake, now) {
            let wanted = self.wanted(id);
            self.net.sync_dialers(id, &wanted, true, now);
        }
    }

    fn deliver_due(&mut self) -> Result<(), String> {
        while let Some((from, to, msg, inbound)) = self.net.pop_due(self.now) {
            trace(self.now, || {
                let mut t = format!("n{from}->n{to} {msg:?}");
                t.truncate(200);
                t
            });
            let adding = self.replacement.map(|(_, new)| new);
            let Some(node) = self.nodes.get_mut(&to) else { continue };
            match node.admission.judge(&self.net.model, &node.raft, adding, from, &msg, inbound) {
                sim::Verdict::Step => node.raft.step(from, msg, self.now),
                sim::Verdict::Drop => self.net.stats.unheard += 1,
                sim::Verdict::Removed => {
                    let now = self.now;
                    if let Some(sender) = self.nodes.get_mut(&from).filter(|n| n.paused_until <= now) {
                        let term = sender.raft.term();
                        sender.raft.step(to, Message::Removed { term, config_index: u64::MAX }, now);
                    }
                }
            }
            if let Some(node) = self.nodes.get(&to) {
                let ci = node.raft.commit_index();
                self.checker.raft_commit(ci, self.now);
            }
        }
        // What reached a paused node waits for it, in arrival order (TCP keeps the
        // order of one connection's requests; a pause must not reorder them).
        let resumed: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.paused_until <= self.now && !n.held.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in resumed {
            let held = std::mem::take(&mut self.nodes.get_mut(&id).unwrap().held);
            for ev in held {
                self.deliver(ev)?;
            }
        }
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > self.now {
                break;
            }
            self.queue.pop();
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            self.deliver(ev)?;
        }
        Ok(())
    }

    fn deliver(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::ToNode { node: id, msg } => {
                let Some(node) = self.nodes.get_mut(&id) else {
                    return Ok(());
                };
                if node.paused_until > self.now {
                    node.held.push_back(Ev::ToNode { node: id, msg });
                    return Ok(());
                }
                node.lock_inbox.push_back(msg);
            }
            Ev::ToClient { client, conn, id, response } => {
                self.client_receives(client, conn, id, response)?
            }
        }
        Ok(())
    }

    // ----- the Raft thread (mirrors src/cluster/raft_thread/mod.rs) -----------

    fn raft_turn(&mut self, id: NodeId) -> Result<(), String> {
        let now = self.now;
        let tick_when_due = self.net.model.tick_when_due;
        let bug = self.p.bug;
        let mut fake_g = Vec::new();
        let node = self.nodes.get_mut(&id).unwrap();
        while let Some(m) = node.raft_inbox.pop_front() {
            match m {
                RaftMsg::Log(ToLog::Append { seq, term, command }) => {
                    let term_ok = node.raft.term() == term || bug == Some(Bug::NoTermCheck);
                    let msg = if !node.raft.is_leader() || !term_ok {
                        LockMsg::Log(FromLog::Rejected { seq })
                    } else if !node.gate.admit(seq) && bug != Some(Bug::RejectDuringHandover) {
                        node.gate.deferred(seq);
                        LockMsg::Log(FromLog::Deferred { seq, term, command })
                    } else {
                        let mut data = Vec::with_capacity(64);
                        encode_command(&mut data, &command);
                        match node.raft.propose(data) {
                            Ok(index) => {
                                node.gate.appended(seq);
                                if bug == Some(Bug::GrantOnAppend) {
                                    if let Command::Grant { grant, .. } = &command {
                                        fake_g.push(grant.clone());
                                    }
                                }
                                LockMsg::Log(FromLog::Appended { seq, index, term })
                            }
                            Err(RaftError::HandingOver) if bug != Some(Bug::RejectDuringHandover) => {
                                node.gate.deferred(seq);
                                LockMsg::Log(FromLog::Deferred { seq, term, command })
                            }
                            Err(_) => LockMsg::Log(FromLog::Rejected { seq }),
                        }
                    };
                    node.lock_inbox.push_back(msg);
                }
                RaftMsg::Log(ToLog::ReadIndex { ctx }) => {
                    if node.raft.read_index(ctx).is_err() {
                        node.lock_inbox.push_back(LockMsg::Log(FromLog::ReadFailed { ctx }));
                    }
                }
                RaftMsg::Compact { index, data } => {
                    node.raft.compact(index, data);
                }
            }
        }
        if tick_when_due && node.raft.next_deadline_ms().is_none_or(|d| now < d) {
            node.raft.advance_clock(now);
        } else {
            node.raft.tick(now);
        }
        let ready = node.raft.ready();
        let ci = node.raft.commit_index();
        if let Some(s) = ready.snapshot {
            node.lock_inbox.push_back(LockMsg::Log(FromLog::Snapshot { index: s.meta.index, data: s.data }));
            self.stats.snapshots += 1;
        }
        if !ready.committed.is_empty() {
            node.lock_inbox.push_back(LockMsg::Log(FromLog::Committed(ready.committed)));
        }
        for (ctx, index) in ready.read_states {
            node.lock_inbox.push_back(LockMsg::Log(FromLog::ReadReady { ctx, index }));
        }
        if let Some(change) = ready.role_changed {
            let leading = (change.role == Role::Leader).then(|| {
                self.stats.elections += 1;
                (change.term, noop_index(&node.raft, change.term))
            });
            // Until a leader is known, the node a hand-over went to is the best hint.
            let leader_addr = change.leader.or(node.raft.handed_to()).map(addr).unwrap_or_default();
            node.lock_inbox.push_back(LockMsg::Log(FromLog::Role { leading, leader_addr }));
            node.gate.reset();
        }
        if let Some(active) = ready.handover {
            self.stats.handovers += u64::from(active);
            node.lock_inbox.push_back(LockMsg::Log(FromLog::Handover(active)));
        }
        self.checker.raft_commit(ci, now);
        if self.net.model.dial_on_append {
            // A member just appended is dialed before anything is sent to it.
            let wanted = self.wanted(id);
            self.net.sync_dialers(id, &wanted, false, now);
        }
        let adding = self.replacement.map(|(_, new)| new);
        for (to, msg) in ready.messages {
            let node = self.nodes.get_mut(&id).unwrap();
            let known = node.admission.knows_addr(&node.raft, &node.peers, adding, to);
            self.net.send(id, to, msg, now, known);
        }
        for g in fake_g {
            if let Some(&client) = self.conn_client.get(&g.origin.conn) {
                let at = self.conn_at(g.origin.conn, false);
                let response = Response::Granted { token: g.token, lease_ms: g.lease_ms };
                self.schedule(at, Ev::ToClient { client, conn: g.origin.conn, id: g.origin.id, response });
            }
        }
        Ok(())
    }

    // ----- the lock-table thread (mirrors src/server/lock_thread.rs) ----------

    fn lock_turn(&mut self, id: NodeId) -> Result<(), String> {
        let now = self.now;
        let mut out = ReplicaOutput::default();
        // The node's answers are told to the checker before its proposals of the same
        // call: a waiter answered `T` may let a later request through.
        let mut told = 0;
        while let Some(msg) = self.nodes.get_mut(&id).unwrap().lock_inbox.pop_front() {
            self.handle(id, msg, &mut out)?;
            told = self.tell_answers(id, &out, told);
            self.submit(id, &mut out)?;
        }
        let node = self.nodes.get_mut(&id).unwrap();
        node.replica.tick(now, node.unix_us(now), &mut out);
        self.note_serving(id);
        self.tell_answers(id, &out, told);
        self.submit(id, &mut out)?;
        // Deliver: one reply per request, to connections still open on this node.
        // (Sorted: the replica builds some batches from hash maps.)
        let mut replies = std::mem::take(&mut out.replies);
        replies.sort_by_key(|r| (r.conn, r.id));
        for r in replies {
            if !self.nodes[&id].conns.contains(&r.conn) {
                continue;
            }
            let Some(&client) = self.conn_client.get(&r.conn) else {
                continue;
            };
            let at = self.conn_at(r.conn, false);
            self.schedule(at, Ev::ToClient { client, conn: r.conn, id: r.id, response: r.response });
        }
        node_invariants(&self.nodes[&id].replica).map_err(|e| format!("n{id}: {e}"))?;
        // Hand Raft a snapshot now and then (small threshold: exercise compaction),
        // encoded like the lock-table thread does: one slice per turn. (The states
        // here are small enough for one slice; tests/lock_storage.rs encodes in
        // slices of one or two slots while commands are applied in between.)
        let every = self.p.snapshot_every;
        let slice = SNAPSHOT_SLICE_SLOTS;
        let node = self.nodes.get_mut(&id).unwrap();
        let applied = node.replica.applied_index();
        let since = applied.saturating_sub(node.snapshot_index);
        let keys = node.replica.state().keys_held() as u64;
        if !node.replica.snapshot_in_progress() && since >= every.max(2 * keys) {
            node.snapshot_index = applied;
            node.replica.begin_snapshot();
        }
        if let Some((index, data)) = node.replica.snapshot_step(slice) {
            // Whatever was applied while it was encoded, the bytes are the state at
            // `index` as the checker replayed it.
            let decoded = decode_snapshot(&data).map_err(|e| format!("n{id}: own snapshot: {e}"))?;
            if let Some(want) = self.checker.state_at(index) {
                if &decoded != want {
                    return Err(format!("n{id}: snapshot at {index} is {decoded:?}, the state was {want:?}"));
                }
            }
            node.raft_inbox.push_back(RaftMsg::Compact { index, data });
        }
        Ok(())
    }

    /// Passes what the replica asked of the log to the Raft thread.
    fn submit(&mut self, id: NodeId, out: &mut ReplicaOutput) -> Result<(), String> {
        for ask in out.to_log.drain(..) {
            if let ToLog::Append { command, term, seq } = &ask {
                trace(self.now, || format!("n{id} propose seq {seq} t{term} {command:?}"));
                self.checker.proposed(id, command, self.now)?;
            }
            self.nodes.get_mut(&id).unwrap().raft_inbox.push_back(RaftMsg::Log(ask));
        }
        Ok(())
    }

    fn handle(&mut self, id: NodeId, msg: LockMsg, out: &mut ReplicaOutput) -> Result<(), String> {
        let now = self.now;
        let node = self.nodes.get_mut(&id).unwrap();
        let unix = node.unix_us(now);
        match msg {
            LockMsg::Request { conn, id: rid, request } => {
                node.arrivals += 1;
                trace(now, || format!("n{id} takes conn {conn} #{rid} (arrival {})", node.arrivals));
                self.checker.arrived((conn, rid), id, node.arrivals);
                node.replica.request(conn, rid, request, now, unix, out);
            }
            LockMsg::Closed { conn } => {
                self.checker.node_conn_closed(id, conn);
                node.conns.remove(&conn);
                node.replica.conn_closed(conn, now, unix, out);
            }
            LockMsg::Log(news) => match news {
                FromLog::Deferred { seq, term, command } => {
                    self.stats.deferred += 1;
                    node.replica.on_deferred(seq, term, command, out)
                }
                FromLog::Handover(active) => node.replica.on_handover(active, now, unix, out),
                FromLog::Appended { seq, index, term } => node.replica.on_appended(seq, index, term),
                FromLog::Rejected { seq } => node.replica.on_rejected(seq, out),
                FromLog::Committed(entries) => {
                    for entry in entries {
                        let command = match &entry.kind {
                            EntryKind::Normal(data) => Some(
                                decode_command(data).map_err(|e| format!("entry {}: {e:?}", entry.index))?,
                            ),
                            EntryKind::Noop | EntryKind::Config(_) => None,
                        };
                        if entry.index > self.checker.committed_len() {
                            trace(now, || format!("commit {} t{} {command:?}", entry.index, entry.term));
                        }
                        self.checker.committed(entry.index, entry.term, command.as_ref(), now)?;
                        let node = self.nodes.get_mut(&id).unwrap();
                        let apply_ms = match self.p.bug {
                            Some(Bug::EarlyLease) => now.saturating_sub(700),
                            _ => now,
                        };
                        node.replica.on_committed(
                            entry.index,
                            entry.term,
                            command.as_ref(),
                            apply_ms,
                            unix,
                            out,
                        );
                        self.checker.node_state(id, entry.index, node.replica.state())?;
                        for (parts, grant) in
                            command.as_ref().map(lock_checker::grants_in).unwrap_or_default()
                        {
                            if lock_checker::holds_grant(node.replica.state(), &parts, grant.token) {
                                self.checker.node_applied_grant(id, grant.token, now);
                            }
                        }
                    }
                }
                FromLog::Snapshot { index, data } => {
                    let state = decode_snapshot(&data)
                        .map_err(|e| format!("node {id}: snapshot at {index}: {e:?}"))?;
                    node.replica.on_snapshot(index, state, out);
                    self.checker.node_state(id, index, node.replica.state())?;
                }
                FromLog::ReadReady { ctx, index } => node.replica.on_read_ready(ctx, index, now, unix, out),
                FromLog::ReadFailed { ctx } => node.replica.on_read_failed(ctx, out),
                FromLog::Role { leading, leader_addr } => {
                    let role = match leading {
                        Some((term, noop_index)) => {
                            LogRole::Leader { term, noop_index, new_domain: self.rng.next() | 1 }
                        }
                        None => LogRole::NotLeader { leader_addr },
                    };
                    trace(now, || format!("n{id} role {role:?}"));
                    node.replica.on_role(role, now, unix, out);
                }
            },
        }
        self.note_serving(id);
        Ok(())
    }

    /// Records when a node starts serving (its lease timers restart then).
    fn note_serving(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).unwrap();
        let serving = node.replica.serving();
        if serving && !node.serving {
            self.checker.node_serving(id, self.now);
        }
        node.serving = serving;
    }
}

impl World {
    /// Once everything is calm for longer than any wait, lease and the 5 s `U`
    /// deadline, every request on a connection that stayed open has its one answer
    /// (docs/protocol.md §8: exactly one response per request).
    fn check_all_answered(&mut self) -> Result<(), String> {
        let until = self.now + ticketing::replica::UNKNOWN_AFTER_MS + 4_000;
        while self.now < until {
            self.step_once()?;
        }
        for (ci, c) in self.clients.iter().enumerate() {
            if let (Some(conn), Some((id, asked))) = (c.conn, c.outstanding.first_key_value()) {
                return Err(format!(
                    "no answer: client {ci} conn {conn} (node {}) request #{id} {asked:?}",
                    c.node
                ));
            }
        }
        Ok(())
    }
}

/// The index of the first entry of `term` in the leader's log: its no-op
/// (as `RaftLoop::noop_index`).
fn noop_index(raft: &Raft, term: u64) -> u64 {
    let mut index = raft.last_index();
    while index > raft.first_index() && raft.term_at(index - 1) == Some(term) {
        index -= 1;
    }
    index
}

fn trace(now: u64, what: impl FnOnce() -> String) {
    thread_local!(static ON: bool = std::env::var("SIM_TRACE").is_ok());
    if ON.with(|on| *on) {
        eprintln!("{now:>6} {}", what());
    }
}

fn run_seed(p: Params) -> Result<Stats, String> {
    let seed = p.seed;
    sim::caught(seed, move || {
        let mut w = World::new(p);
        w.run()?;
        Ok(w.stats)
    })
}

#[test]
fn simulate_many_seeds() {
    // SIM_NO_TERM_CHECK=1: every seed with `Bug::NoTermCheck` (an exploration).
    let bug = (env_u64("SIM_NO_TERM_CHECK") == Some(1)).then_some(Bug::NoTermCheck);
    sim::seeds::run_many(
        SEEDS_DEFAULT,
        "cargo test --release --test cluster_sim simulate_many_seeds -- --nocapture (or scripts/sim.sh \
         --only lock --seed <seed>); add SIM_TRACE=1 for a trace, SIM_DEBUG=1 for the nodes and links at a \
         liveness failure",
        move |seed| run_seed(Params { bug, ..Params::from_seed(seed) }),
    );
}

#[test]
fn same_seed_same_history() {
    let run = |seed| {
        let mut w = World::new(Params::from_seed(seed));
        w.run().unwrap();
        (w.step, w.now, format!("{:?}", w.stats))
    };
    assert_eq!(run(7), run(7));
    assert_eq!(run(8), run(8));
}

/// Runs seeds with `bug` until one fails; returns its error.
fn caught(bug: Bug, seeds: u64) -> String {
    (0..seeds)
        .find_map(|seed| {
            let mut p = Params::from_seed(seed);
            p.bug = Some(bug);
            run_seed(p).err()
        })
        .unwrap_or_else(|| panic!("{bug:?} went unnoticed for {seeds} seeds"))
}

#[test]
fn checker_catches_grant_before_commit() {
    let err = caught(Bug::GrantOnAppend, 20);
    assert!(err.contains("seed=") && err.contains("inv7"), "{err}");
}

#[test]
fn checker_catches_early_lease_expiry() {
    let err = caught(Bug::EarlyLease, 20);
    assert!(err.contains("seed=") && err.contains("inv5"), "{err}");
}

/// Why deferral exists: a glue that answers an append refused during a hand-over as
/// refused for good (the replica says `M` and drops it) leaves the lock table planning
/// on top of a command that never entered the log — the checker must see it.
#[test]
fn checker_catches_appends_refused_for_good_during_a_handover() {
    let err = caught(Bug::RejectDuringHandover, 400);
    assert!(err.contains("seed="), "{err}");
}

#[path = "cluster_sim/bad_histories.rs"]
mod bad_histories;
#[path = "cluster_sim/bad_pool_histories.rs"]
mod bad_pool_histories;

/// The replica's and the lock table's own invariants (they panic, naming the one
/// violated), and a one-shot snapshot that decodes.
fn node_invariants(replica: &Replica) -> Result<(), String> {
    replica.check_invariants();
    decode_snapshot(&replica.snapshot()).map(|_| ()).map_err(|e| format!("one-shot snapshot: {e}"))
}
