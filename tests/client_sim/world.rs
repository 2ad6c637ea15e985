//! The simulated world around the real client core: a clock, connections as
//! `src/client/io` makes them (dial, writer, reader), servers (standalone or a
//! cluster with a modelled log), callers, and faults.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ticketing::client::core::{
    Action, Config, Core, DialFailure, NetEvent, OpId, Outcome, Resolved, SessionId, SlotId, Target,
    WriteFailure, CONNECT_WAIT_MIN, RELEASE_DEADLINE,
};
use ticketing::client::{
    AcquireError, ClientError, Indeterminate, IndeterminateCause, Place, ReleaseError, COMMIT_MARGIN,
    CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT, WRITE_DEADLINE,
};
use ticketing::proto::frame::{decode_request, ErrorCode, HoldPart, Request, Response};
use ticketing::proto::handshake::{role, Welcome};

use super::checker::{hold_key, Check, Checker, OpKind, Stats};
use super::rng::Rng;

/// Simulated time, in microseconds since the world began.
pub type T = u64;
pub const MS: T = 1_000;
pub const SEC: T = 1_000_000;

fn us(d: Duration) -> T {
    d.as_micros() as T
}

/// A deliberately broken world, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The network delivers every ACQUIRE frame twice.
    DuplicateAcquires,
    /// The transport tells the core a cut write sent nothing, although its frames went
    /// out whole.
    UnderReportedWrite,
    /// The servers answer a grant with another token than the one they granted.
    WrongToken,
    /// The servers grant a multi-key HOLD only its first key (a split grant).
    PartialHold,
    /// The reader loses the `I` frames (places in line) it reads: the core never sees them.
    LostPlace,
}

/// Knobs of one run, all derived from the seed (or set by a scenario).
#[derive(Clone, Debug)]
pub struct Params {
    pub seed: u64,
    /// 1: a standalone server; 3 or 5: a cluster.
    pub nodes: usize,
    /// How many node addresses the client is given (the first ones).
    pub seeds: usize,
    pub callers: usize,
    pub keys: usize,
    /// Chaos phase (faults on, callers acquiring), then the heal phase.
    pub chaos: T,
    pub heal: T,
    /// One-way latency between client and servers, and its jitter.
    pub latency: T,
    pub jitter: T,
    /// Time from a proposal to its commit, min and max.
    pub commit: (T, T),
    /// Time from a leader's loss to the new leader, min and max.
    pub election: (T, T),
    pub faults: bool,
    /// TLS: a cut write reports only that some ciphertext left.
    pub tls: bool,
    pub idle_ping: Duration,
    /// Leases the callers ask for (seconds).
    pub leases: (u8, u8),
    /// Per mille of the callers' acquires that are HOLDs (counted, multi-key, some
    /// asking for places in line), and the capacities of the stock keys `s0`, `s1`, …
    /// they take permits of.
    pub holds: u64,
    pub stocks: Vec<u32>,
    /// Every caller acquires under one owner, as the threads of one `Client` do with its
    /// default owner: concurrent acquires of one key by one owner.
    pub one_owner: bool,
    /// The client was given the cluster's name (it then does not wait for every seed's
    /// first connection before its first request).
    pub named: bool,
    /// Per mille of the callers' operations cancelled at a random moment (a future or
    /// task cancelled): 0 in most seeds.
    pub cancels: u64,
    pub bug: Option<Bug>,
    pub trace: bool,
}

impl Params {
    pub fn from_seed(seed: u64) -> Params {
        let mut r = Rng::new(seed ^ 0xC11E_5EED);
        let nodes = [1, 3, 3, 5][r.below(4) as usize];
        let chaos = r.range(4, 16) * SEC;
        let heal = 45 * SEC;
        Params {
            seed,
            nodes,
            seeds: if r.chance(300) { 1 } else { nodes },
            callers: r.range(2, 10) as usize,
            keys: r.range(1, 4) as usize,
            chaos,
            heal,
            latency: r.range(50, 3000),
            jitter: r.range(0, 1000),
            commit: (r.range(200, 2000), r.range(2000, 30_000)),
            election: (2000 * MS, 2500 * MS),
            faults: true,
            tls: r.chance(250),
            idle_ping: if r.chance(700) {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(r.range(300, 3000))
            },
            // Mostly longer than the run: a lease that ends on the server is then a grant
            // left to it. One seed in eight has short leases that do end (grants that
            // arrive after their lease, locks outliving theirs).
            leases: if seed % 8 == 7 { (1, 12) } else { (((chaos + heal) / SEC + 10) as u8, 250) },
            // Drawn from their own generator, so the other knobs stay as they were.
            holds: if seed % 5 == 4 { 0 } else { 250 },
            stocks: {
                let mut h = Rng::new(seed ^ 0x401D_5EED);
                (0..h.range(1, 2)).map(|_| h.range(2, 5) as u32).collect()
            },
            // One seed in four: the whole client under one owner (not drawn from `r`, so
            // the other seeds' worlds stay as they were).
            one_owner: seed % 4 == 2,
            named: seed % 3 == 1,
            // One seed in three cancels operations (not drawn from `r`, and the callers
            // draw for it only then: the other seeds' worlds stay as they were).
            cancels: if seed % 3 == 1 { 150 } else { 0 },
            bug: None,
            trace: false,
        }
    }

    /// A quiet world for a scenario: no faults, no random callers.
    pub fn script(nodes: usize) -> Params {
        Params {
            seed: 0,
            nodes,
            seeds: nodes,
            callers: 0,
            keys: 1,
            chaos: 0,
            heal: 0,
            latency: 500,
            jitter: 0,
            commit: (1000, 1000),
            election: (2000 * MS, 2000 * MS),
            faults: false,
            tls: false,
            idle_ping: Duration::from_secs(1),
            leases: (30, 30),
            holds: 0,
            stocks: vec![3],
            one_owner: false,
            named: false,
            cancels: 0,
            bug: None,
            trace: false,
        }
    }
}

// ----- the servers -------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Running,
    /// SIGSTOPped: processes nothing, closes nothing; resumes at `until` (if known).
    Paused,
    Down,
}

/// One hold: an ACQUIRE's (one key of capacity 1, count 1) or a HOLD's, of all its keys.
#[derive(Clone, Debug)]
struct Holder {
    owner: String,
    token: u64,
    lease: T,
    lease_end: T,
    parts: Vec<HoldPart>,
}

impl Holder {
    fn names(&self, key: &str) -> bool {
        self.parts.iter().any(|p| p.key == key)
    }
}

/// A request waiting in the leader's line (one arrival sequence for all keys).
#[derive(Clone, Debug)]
struct Waiter {
    conn: usize,
    rid: u32,
    owner: String,
    lease: T,
    deadline: T,
    parts: Vec<HoldPart>,
    /// It asked for its place in line; the last place told and when.
    place: bool,
    told: Option<(u32, T)>,
}

#[derive(Clone, Debug)]
enum Effect {
    Grant { parts: Vec<HoldPart>, owner: String, token: u64, lease: T, conn: usize, rid: u32 },
    Free { token: u64 },
}

#[derive(Clone, Debug)]
struct Proposal {
    commit_at: T,
    effects: Vec<Effect>,
    answers: Vec<(usize, u32, Response)>,
    /// Decided by an election: committed by the new leader, or overwritten.
    fate: Option<bool>,
}

/// What reached a node's socket: processed in arrival order when it runs.
#[derive(Clone, Debug)]
enum Inbound {
    Frames(usize, Vec<(u32, Request)>),
    /// The client's FIN, or the connection's end after a cut write.
    End(usize),
}

struct Node {
    id: u64,
    addr: String,
    up: Life,
    resume_at: T,
    partitioned: bool,
    voter: bool,
    inbox: VecDeque<Inbound>,
    /// Deliveries held by a partition, in order: (toward the node, conn, frames).
    held: Vec<Ev>,
    /// Waiters queued at this node while it led, in arrival order.
    waiters: VecDeque<Waiter>,
    /// Proposals this node made whose fate it has not told yet (it was deposed).
    deposed: Vec<Proposal>,
    /// Until then, a dial of it fails with a lasting mistake (a certificate from
    /// another CA, a secret that changed), as `src/client/io/dial.rs` reports it; its
    /// sessions already up are not touched.
    mistaken_until: T,
}

impl Node {
    fn new(id: u64, addr: String) -> Node {
        Node {
            id,
            addr,
            up: Life::Running,
            resume_at: 0,
            partitioned: false,
            voter: true,
            inbox: VecDeque::new(),
            held: Vec::new(),
            waiters: VecDeque::new(),
            deposed: Vec::new(),
            mistaken_until: 0,
        }
    }
}

struct Cluster {
    standalone: bool,
    nodes: Vec<Node>,
    /// The node the others believe leads.
    leader: Option<usize>,
    term: u64,
    /// Holds by token.
    committed: BTreeMap<u64, Holder>,
    /// The leader's view: committed plus its pending proposals.
    spec: BTreeMap<u64, Holder>,
    pending: VecDeque<Proposal>,
    next_token: u64,
    election_at: Option<T>,
}

impl Cluster {
    fn serving(&self, n: usize) -> bool {
        let node = &self.nodes[n];
        node.up == Life::Running && (self.standalone || !node.partitioned)
    }

    fn leader_serving(&self) -> Option<usize> {
        self.leader.filter(|&l| self.serving(l))
    }

    fn leader_addr(&self) -> String {
        self.leader.map(|l| self.nodes[l].addr.clone()).unwrap_or_default()
    }

    fn voters(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].voter).collect()
    }

    fn status(&self, n: usize) -> String {
        let node = &self.nodes[n];
        let role = if self.standalone {
            "standalone"
        } else if self.leader == Some(n) {
            "leader"
        } else if self.leader.is_some() {
            "follower"
        } else {
            "candidate"
        };
        let voters: Vec<String> =
            self.voters().iter().map(|&i| format!("{}@{}", self.nodes[i].id, self.nodes[i].addr)).collect();
        format!(
            "node_id={}\nrole={role}\nterm={}\nleader={}\nvoters={}\n",
            node.id,
            self.term,
            self.leader_addr(),
            voters.join(",")
        )
    }
}

// ----- connections ---------------------------------------------------------------------

struct Conn {
    session: SessionId,
    node: usize,
    /// The client shut its socket: answers that arrive now are dropped.
    client_closed: bool,
    /// The connection died (both sides).
    broken: bool,
    /// The server saw the end (FIN or break): it answers nothing more.
    server_done: bool,
    /// Last scheduled arrival in each direction (TCP keeps order).
    up_at: T,
    down_at: T,
}

struct Write {
    gen: u64,
    buf: Vec<u8>,
    /// (start, end, id, request) of each frame.
    frames: Vec<(usize, usize, u32, Request)>,
    /// None: written whole; Some(n): fails after n bytes.
    fail_after: Option<usize>,
    blocked: bool,
    /// Blocked because the node is frozen: it completes when the node resumes.
    to_paused: bool,
}

// ----- callers ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Caller {
    Idle,
    Acquiring {
        key: String,
        owner: Arc<str>,
        shared: bool,
    },
    Holding {
        key: String,
        owner: Arc<str>,
        token: u64,
    },
    Releasing,
    /// Resolving the indeterminate acquire `acquire` (kept to try again).
    Resolving {
        acquire: OpId,
        attempt: Box<Indeterminate>,
    },
    Reading,
}

// ----- events -------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub enum Ev {
    Dial {
        slot: SlotId,
        addr: String,
        started: T,
    },
    WriteDone {
        session: SessionId,
        gen: u64,
    },
    Arrive {
        conn: usize,
        frames: Vec<(u32, Request)>,
    },
    End {
        conn: usize,
    },
    Recv {
        conn: usize,
        frames: Vec<(u32, Response)>,
    },
    ReaderClosed {
        conn: usize,
    },
    Commit,
    WaitEnd {
        node: usize,
    },
    Expire {
        token: u64,
    },
    Elect,
    Unknowns {
        node: usize,
    },
    Fault,
    Resume {
        node: usize,
    },
    Heal {
        node: usize,
    },
    Caller {
        c: usize,
    },
    Read {
        node: usize,
        term: u64,
        conn: usize,
        rid: u32,
        key: String,
    },
    HealStart,
    PenFlush {
        session: SessionId,
    },
    /// The caller of `op` stops waiting for it.
    Cancel {
        op: OpId,
    },
}

struct Sched {
    t: T,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Sched {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Sched {}
impl PartialOrd for Sched {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Sched {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

/// What a scenario sets for the next write.
#[derive(Clone, Copy, Debug)]
pub enum WritePlan {
    Block(T),
    FailAfter(usize),
}

pub struct World {
    pub p: Params,
    rng: Rng,
    pub now: T,
    pub base: Instant,
    queue: BinaryHeap<Sched>,
    seq: u64,
    pub core: Core<usize>,
    cluster: Cluster,
    conns: Vec<Conn>,
    by_session: HashMap<SessionId, usize>,
    writes: BTreeMap<SessionId, Write>,
    /// Readers holding the pen, about to write what the callers they woke queued.
    pens: std::collections::BTreeSet<SessionId>,
    write_gen: u64,
    callers: Vec<Caller>,
    calls: u64,
    pub checker: Checker,
    pub step: u64,
    pub trace: VecDeque<String>,
    pub shut_down: bool,
    /// Outcomes of the operations a scenario started, with when.
    pub outcomes: HashMap<OpId, (T, Outcome)>,
    /// The client's configured addresses.
    seeds: Vec<String>,
    /// Scenario knobs.
    pub write_plans: VecDeque<WritePlan>,
    pub commit_override: Option<T>,
    /// A cluster QUERY's read round takes this long (scenarios).
    pub read_round: Option<T>,
    /// Sessions the client closed, with when.
    pub closes: Vec<(SessionId, T)>,
    /// Grants committed: token → (time, node that led).
    pub grant_log: Vec<(u64, T)>,
    /// Requests that reached a node not leading (answered `M`).
    pub misrouted: u64,
    /// STATUS requests the nodes answered.
    pub statuses: u64,
    healing: bool,
    /// Places in line the callers' functions were handed: (the hold's number, place).
    places: Arc<std::sync::Mutex<Vec<(u64, Place)>>>,
    /// The hold each number stands for.
    place_ops: HashMap<u64, OpId>,
    /// The places each hold's caller was handed, in order.
    told: HashMap<OpId, Vec<Place>>,
    /// Scenario knob: a `G` (and what follows it on its connection) reaches the client
    /// this much later.
    pub slow_grants: T,
}

const TRACE_KEEP: usize = 400;

/// Records a line of the trace (formatted only when the trace is on).
macro_rules! note {
    ($w:expr, $($arg:tt)*) => {
        if $w.p.trace {
            let line = format!($($arg)*);
            $w.push_trace(line);
        }
    };
}
/// A write that blocks on a full socket takes at most this long here (the real
/// writer gives up at WRITE_DEADLINE).
const BLOCK_MAX: T = 4 * SEC;

impl World {
    pub fn new(p: Params) -> World {
        let mut rng = Rng::new(p.seed);
        let base = Instant::now();
        let standalone = p.nodes == 1;
        let nodes = (0..p.nodes).map(|i| Node::new(i as u64 + 1, format!("10.0.0.{}:5225", i + 1))).collect();
        let leader = if standalone { Some(0) } else { Some(rng.below(p.nodes as u64) as usize) };
        let cluster = Cluster {
            standalone,
            nodes,
            leader,
            term: 1,
            committed: BTreeMap::new(),
            spec: BTreeMap::new(),
            pending: VecDeque::new(),
            next_token: 1000,
            election_at: None,
        };
        // The seeds: the first `seeds` addresses, rotated so a follower comes first
        // as often as the leader.
        let start = rng.below(p.nodes as u64) as usize;
        let seeds: Vec<String> =
            (0..p.seeds).map(|i| cluster.nodes[(start + i) % p.nodes].addr.clone()).collect();
        let config = Config {
            seeds: seeds.clone(),
            tls: p.tls,
            commit_margin: COMMIT_MARGIN,
            idle_ping: p.idle_ping,
            named: p.named,
            seeds_setting: "TICKETING_ADDRS",
            name_setting: "TICKETING_CLUSTER_NAME",
        };
        let core = Core::new(config, base);
        let callers = vec![Caller::Idle; p.callers];
        let mut w = World {
            rng,
            now: 0,
            base,
            queue: BinaryHeap::new(),
            seq: 0,
            core,
            cluster,
            conns: Vec::new(),
            by_session: HashMap::new(),
            writes: BTreeMap::new(),
            pens: std::collections::BTreeSet::new(),
            write_gen: 0,
            callers,
            calls: 0,
            checker: Checker::new(base, p.leases.0 < 30),
            step: 0,
            trace: VecDeque::new(),
            shut_down: false,
            outcomes: HashMap::new(),
            seeds,
            write_plans: VecDeque::new(),
            commit_override: None,
            read_round: None,
            closes: Vec::new(),
            grant_log: Vec::new(),
            misrouted: 0,
            statuses: 0,
            healing: false,
            places: Arc::default(),
            place_ops: HashMap::new(),
            told: HashMap::new(),
            slow_grants: 0,
            p,
        };
        for c in 0..w.p.callers {
            let t = w.rng.range(0, 500 * MS);
            w.at(t, Ev::Caller { c });
        }
        if w.p.faults {
            let t = w.rng.range(200 * MS, 2 * SEC);
            w.at(t, Ev::Fault);
        }
        if w.p.callers > 0 {
            w.at(w.p.chaos, Ev::HealStart);
        }
        // The seeds' dials.
        w.drain().expect("nothing to check before the first event");
        w
    }

    pub fn instant(&self, t: T) -> Instant {
        self.base + Duration::from_micros(t)
    }

    fn t_of(&self, at: Instant) -> T {
        at.saturating_duration_since(self.base).as_nanos().div_ceil(1000) as T
    }

    fn at(&mut self, t: T, ev: Ev) {
        self.seq += 1;
        self.queue.push(Sched { t: t.max(self.now), seq: self.seq, ev });
    }

    fn push_trace(&mut self, what: String) {
        let keep = if std::env::var_os("SIM_SEED").is_some() { 100 * TRACE_KEEP } else { TRACE_KEEP };
        if self.trace.len() >= keep {
            self.trace.pop_front();
        }
        let line = format!("{:>9.3} #{} {what}", self.now as f64 / 1000.0, self.step);
        self.trace.push_back(line);
    }

    fn lat(&mut self) -> T {
        self.p.latency + self.rng.below(self.p.jitter + 1)
    }

    fn fault(&mut self) {
        self.checker.fault(self.now);
    }

    // ----- the run ------------------------------------------------------------------

    /// Runs the whole seed: chaos, heal, the end checks, then the client's close.
    pub fn run(&mut self) -> Check {
        let end = self.p.chaos + self.p.heal;
        self.run_until(end)?;
        let holders: Vec<(String, u64)> =
            self.cluster.committed.values().map(|h| (h.parts[0].key.clone(), h.token)).collect();
        self.checker.end(self.now, &holders)?;
        if self.core.outstanding() != 0 {
            return Err(format!(
                "liveness: {} releases or orphan records still open after the heal phase",
                self.core.outstanding()
            ));
        }
        self.check_follows_membership()?;
        self.core.close(self.instant(self.now));
        self.drain()?;
        self.run_until(end + 10 * SEC)?;
        if !self.shut_down {
            return Err("the closed client did not shut down".into());
        }
        Ok(())
    }

    /// After the heal phase (longer than the membership refresh) the client dials
    /// exactly the voters: each one, and no node that left (replaced while dead).
    fn check_follows_membership(&self) -> Check {
        for node in &self.cluster.nodes {
            if node.voter && !self.core.dials(&node.addr) {
                return Err(format!(
                    "liveness: after the heal phase the client does not dial the voter n{} ({})",
                    node.id, node.addr
                ));
            }
            if !node.voter && self.core.dials(&node.addr) {
                return Err(format!(
                    "after the heal phase the client still dials n{} ({}), which left the voter set",
                    node.id, node.addr
                ));
            }
        }
        Ok(())
    }

    /// Runs events and timers up to `until`.
    pub fn run_until(&mut self, until: T) -> Check {
        let mut spins = 0u32;
        loop {
            let timer = if self.shut_down { None } else { self.core.poll_timeout().map(|i| self.t_of(i)) };
            let event = self.queue.peek().map(|s| s.t);
            let next = match (timer, event) {
                (None, None) => break,
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
            };
            if next > until {
                break;
            }
            self.step += 1;
            if timer.is_some_and(|t| event.is_none_or(|e| t <= e)) {
                let t = timer.unwrap();
                if t <= self.now {
                    spins += 1;
                    if spins > 1000 {
                        return Err("the core asks for the time again and again without moving on".into());
                    }
                } else {
                    spins = 0;
                }
                self.now = self.now.max(t);
                note!(self, "timer");
                self.core.handle_timeout(self.instant(self.now));
            } else {
                spins = 0;
                let s = self.queue.pop().unwrap();
                self.now = self.now.max(s.t);
                self.event(s.ev)?;
            }
            self.drain()?;
            self.checker.step(self.now)?;
        }
        self.now = self.now.max(until);
        Ok(())
    }

    /// Does what the core asked for.
    fn drain(&mut self) -> Check {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Net(NetEvent::Dial { slot, addr }) => {
                    note!(self, "dial {slot:?} {addr}");
                    let handshake = 3 * self.lat();
                    self.at(self.now + handshake, Ev::Dial { slot, addr, started: self.now });
                }
                Action::Net(NetEvent::Close { session }) => self.client_close(session),
                Action::Net(NetEvent::Flush { session }) => {
                    if self.writes.contains_key(&session) || self.pens.contains(&session) {
                        return Err(format!("{session:?} got a second writer while one writes"));
                    }
                    self.next_write(session)?;
                }
                Action::Net(NetEvent::Forget { slot }) => note!(self, "forget {slot:?}"),
                Action::Complete { waker, op, outcome } => self.complete(waker, op, outcome)?,
                Action::Place(news) => {
                    // Handed to the caller's function, which notes it with its hold's number.
                    news.deliver();
                    let told: Vec<(u64, Place)> = std::mem::take(&mut *self.places.lock().unwrap());
                    for (hold, place) in told {
                        let op = self.place_ops.get(&hold).copied();
                        note!(self, "place {place:?} for hold {hold} ({op:?})");
                        let op = op.ok_or_else(|| format!("a place for hold {hold}, which never started"))?;
                        self.checker.place(op, place)?;
                        self.told.entry(op).or_default().push(place);
                    }
                }
                Action::Shutdown => {
                    note!(self, "shutdown");
                    self.shut_down = true;
                }
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: Ev) -> Check {
        match ev {
            Ev::Dial { slot, addr, started } => self.dial(slot, addr, started),
            Ev::WriteDone { session, gen } => return self.write_done(session, gen),
            Ev::Arrive { conn, frames } => return self.arrive(conn, Inbound::Frames(conn, frames)),
            Ev::End { conn } => return self.arrive(conn, Inbound::End(conn)),
            Ev::Recv { conn, frames } => self.recv(conn, frames)?,
            Ev::ReaderClosed { conn } => {
                let session = self.conns[conn].session;
                note!(self, "{session:?} reader ends");
                self.core.on_closed(session, self.instant(self.now));
            }
            Ev::Commit => return self.commit(),
            Ev::WaitEnd { node } => self.wait_ends(node),
            Ev::Expire { token } => return self.expire(token),
            Ev::Elect => return self.elect(),
            Ev::Unknowns { node } => self.unknowns(node),
            Ev::Fault => self.chaos_fault(),
            Ev::Resume { node } => return self.resume(node),
            Ev::Heal { node } => return self.heal(node),
            Ev::Caller { c } => return self.caller(c),
            Ev::HealStart => return self.heal_start(),
            Ev::Read { node, term, conn, rid, key } => self.read_done(node, term, conn, rid, key),
            Ev::PenFlush { session } => {
                self.pens.remove(&session);
                return self.next_write(session);
            }
            Ev::Cancel { op } => return self.cancel(op),
        }
        Ok(())
    }

    // ----- dialing ------------------------------------------------------------------------

    fn dial(&mut self, slot: SlotId, addr: String, started: T) {
        let node = self.cluster.nodes.iter().position(|n| n.addr == addr && n.voter);
        let failed = |w: &mut World, why: &str| {
            note!(w, "dial {slot:?} {addr} failed: {why}");
            w.core.on_dial_failed(slot, DialFailure::transient(format!("{addr}: {why}")), w.instant(w.now));
        };
        let Some(n) = node.filter(|&n| self.cluster.nodes[n].up != Life::Down) else {
            return failed(self, "connection refused");
        };
        if self.now < self.cluster.nodes[n].mistaken_until && !self.cluster.nodes[n].partitioned {
            note!(self, "dial {slot:?} {addr} failed: a lasting mistake");
            let why = format!("{addr}: TLS: the server's certificate is not signed by the CA");
            self.core.on_dial_failed(slot, DialFailure::lasting(why), self.instant(self.now));
            return;
        }
        if self.cluster.nodes[n].partitioned {
            let give_up = started + us(CONNECT_TIMEOUT);
            if self.now >= give_up {
                return failed(self, "no answer to the connection");
            }
            return self.at(give_up, Ev::Dial { slot, addr, started });
        }
        if self.cluster.nodes[n].up == Life::Paused {
            // The kernel accepts; the server never greets.
            let give_up = started + us(HANDSHAKE_TIMEOUT);
            if self.now >= give_up {
                return failed(self, "no greeting from the server");
            }
            let retry = give_up.min(self.cluster.nodes[n].resume_at.max(self.now + MS));
            return self.at(retry, Ev::Dial { slot, addr, started });
        }
        let c = &self.cluster;
        let (r, leader) = if c.standalone {
            (role::STANDALONE, c.nodes[n].addr.clone())
        } else if c.leader == Some(n) {
            (role::LEADER, c.nodes[n].addr.clone())
        } else if c.leader.is_some() {
            (role::FOLLOWER, c.leader_addr())
        } else {
            (role::CANDIDATE, String::new())
        };
        let welcome = Welcome { node_id: c.nodes[n].id, role: r, domain: 7, leader };
        let conn = self.conns.len();
        self.conns.push(Conn {
            session: SessionId(0),
            node: n,
            client_closed: false,
            broken: false,
            server_done: false,
            up_at: self.now,
            down_at: self.now,
        });
        let session = self.core.on_connected(slot, &welcome, addr.clone(), self.instant(self.now));
        note!(self, "dial {slot:?} {addr}: {session:?} as conn {conn}, role {}", r as char);
        match session {
            Some(s) => {
                self.conns[conn].session = s;
                self.by_session.insert(s, conn);
            }
            None => {
                self.conns[conn].client_closed = true;
                self.conns[conn].server_done = true;
            }
        }
    }

    // ----- the client's writes ------------------------------------------------------------------

    /// The session's writer takes the next batch (or its role ends).
    fn next_write(&mut self, session: SessionId) -> Check {
        let mut buf = Vec::new();
        if !self.core.next_batch(session, &mut buf) {
            self.writes.remove(&session);
            return Ok(());
        }
        let mut frames = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            let payload = &buf[at + 4..at + 4 + len];
            let (rid, request) =
                decode_request(payload).map_err(|e| format!("the core wrote a bad frame: {e:?}"))?;
            frames.push((at, at + 4 + len, rid, request));
            at += 4 + len;
        }
        let pairs: Vec<(u32, Option<OpId>, Request)> = frames
            .iter()
            .map(|(_, _, rid, r)| (*rid, self.core.pending_op(session, *rid), r.clone()))
            .collect();
        self.checker.batch(session, &pairs)?;
        let conn = self.by_session[&session];
        let len = buf.len();
        let chaos = self.p.faults && !self.healing;
        let paused = self.cluster.nodes[self.conns[conn].node].up == Life::Paused;
        let mut to_paused = false;
        let (delay, fail_after, blocked) = match self.write_plans.pop_front() {
            Some(WritePlan::Block(d)) => (d, None, true),
            Some(WritePlan::FailAfter(n)) => (10, Some(n.min(len)), false),
            None if self.conns[conn].broken || self.conns[conn].client_closed => (10, Some(0), false),
            None if chaos && paused && self.rng.chance(300) => {
                // A frozen peer's buffers are full: the write gives up at its deadline
                // unless the node resumes first.
                to_paused = true;
                (us(WRITE_DEADLINE), Some(self.cut(&frames, len)), true)
            }
            None if chaos && self.rng.chance(15) => {
                (self.rng.range(10, 500), Some(self.cut(&frames, len)), false)
            }
            None if chaos && self.rng.chance(40) => (self.rng.range(50 * MS, BLOCK_MAX), None, true),
            None => (self.rng.range(2, 200), None, false),
        };
        if blocked || fail_after.is_some() {
            self.fault();
        }
        self.write_gen += 1;
        let gen = self.write_gen;
        if self.p.trace {
            let ids: Vec<String> = frames.iter().map(|f| format!("#{} {}", f.2, brief(&f.3))).collect();
            let cut = fail_after.map(|n| format!(", cut after {n} of {len} bytes")).unwrap_or_default();
            note!(self, "{session:?} writes [{}] in {delay} µs{cut}", ids.join(", "));
        }
        self.writes.insert(session, Write { gen, buf, frames, fail_after, blocked, to_paused });
        self.at(self.now + delay, Ev::WriteDone { session, gen });
        Ok(())
    }

    /// Where a failing write stops: at a frame's end or inside a frame.
    fn cut(&mut self, frames: &[(usize, usize, u32, Request)], len: usize) -> usize {
        if self.rng.chance(500) {
            frames[self.rng.below(frames.len() as u64) as usize].0
        } else {
            self.rng.below(len as u64 + 1) as usize
        }
    }

    fn write_done(&mut self, session: SessionId, gen: u64) -> Check {
        if self.writes.get(&session).is_none_or(|w| w.gen != gen) {
            return Ok(());
        }
        let write = self.writes.remove(&session).unwrap();
        let conn = self.by_session[&session];
        let n = write.fail_after.unwrap_or(write.buf.len());
        let lie = self.p.bug == Some(Bug::UnderReportedWrite) && write.fail_after.is_some();
        let n = if lie { write.buf.len() } else { n };
        let reached: Vec<(u32, Request, bool)> =
            write.frames.iter().map(|(start, _, rid, r)| (*rid, r.clone(), *start < n)).collect();
        self.checker.written(session, &reached, self.now);
        let whole: Vec<(u32, Request)> =
            write.frames.iter().filter(|f| f.1 <= n).map(|(_, _, rid, r)| (*rid, r.clone())).collect();
        if !self.conns[conn].broken && !whole.is_empty() {
            let t = self.up_time(conn);
            if self.p.bug == Some(Bug::DuplicateAcquires) {
                let again: Vec<_> = whole
                    .iter()
                    .filter(|f| matches!(f.1, Request::Acquire { .. } | Request::Hold { .. }))
                    .cloned()
                    .collect();
                if !again.is_empty() {
                    self.at(t + 100 * MS, Ev::Arrive { conn, frames: again });
                }
            }
            self.at(t, Ev::Arrive { conn, frames: whole });
        }
        let result = match write.fail_after {
            None => Ok(()),
            Some(n) => {
                // The stream is cut: the server gets what came whole, then the end.
                if !self.conns[conn].broken {
                    let t = self.up_time(conn);
                    self.at(t, Ev::End { conn });
                    self.conns[conn].broken = true;
                }
                if lie {
                    Err(WriteFailure::After(0))
                } else if self.p.tls && n > 0 {
                    Err(WriteFailure::SomeTls)
                } else {
                    Err(WriteFailure::After(n))
                }
            }
        };
        note!(self, "{session:?} written: {result:?}");
        self.core.on_written(session, result, self.instant(self.now));
        if result.is_ok() {
            return self.next_write(session);
        }
        Ok(())
    }

    fn up_time(&mut self, conn: usize) -> T {
        let t = (self.now + self.lat()).max(self.conns[conn].up_at);
        self.conns[conn].up_at = t;
        t
    }

    fn down_time(&mut self, conn: usize) -> T {
        let t = (self.now + self.lat()).max(self.conns[conn].down_at);
        self.conns[conn].down_at = t;
        t
    }

    /// The core closed the session: the socket is shut, the reader reports the end,
    /// a blocked write fails at once.
    fn client_close(&mut self, session: SessionId) {
        let Some(&conn) = self.by_session.get(&session) else { return };
        note!(self, "{session:?} closed by the client");
        self.closes.push((session, self.now));
        if self.conns[conn].client_closed {
            return;
        }
        self.conns[conn].client_closed = true;
        if let Some(w) = self.writes.get_mut(&session) {
            if w.blocked && w.fail_after.is_none() {
                let n = self.rng.below(w.buf.len() as u64 + 1) as usize;
                w.fail_after = Some(n);
                let gen = w.gen;
                self.at(self.now + 10, Ev::WriteDone { session, gen });
            }
        }
        if !self.conns[conn].broken {
            let t = self.up_time(conn);
            self.at(t, Ev::End { conn });
        }
        let d = self.rng.range(20, 2000);
        self.at(self.now + d, Ev::ReaderClosed { conn });
    }

    /// The connection dies by itself: both sides see it.
    fn break_conn(&mut self, conn: usize) {
        if self.conns[conn].broken {
            return;
        }
        note!(self, "conn {conn} breaks");
        self.fault();
        self.conns[conn].broken = true;
        if !self.conns[conn].server_done {
            self.server_end(conn);
        }
        if self.conns[conn].client_closed {
            return;
        }
        let d = self.rng.range(100, 50 * MS);
        self.conns[conn].client_closed = true;
        let session = self.conns[conn].session;
        if let Some(w) = self.writes.get_mut(&session) {
            if w.fail_after.is_none() {
                w.fail_after = Some(0);
                let gen = w.gen;
                self.at(self.now + d, Ev::WriteDone { session, gen });
            }
        }
        self.at(self.now + d, Ev::ReaderClosed { conn });
    }

    // ----- the client's reads ---------------------------------------------------------------

    fn recv(&mut self, conn: usize, frames: Vec<(u32, Response)>) -> Check {
        let node = self.conns[conn].node;
        if self.cluster.nodes[node].partitioned {
            self.cluster.nodes[node].held.push(Ev::Recv { conn, frames });
            return Ok(());
        }
        if self.conns[conn].client_closed || self.conns[conn].broken {
            note!(self, "conn {conn}: answers dropped (closed): {frames:?}");
            return Ok(());
        }
        let session = self.conns[conn].session;
        note!(self, "{session:?} reads {frames:?}");
        for (rid, r) in &frames {
            match r {
                Response::Granted { token, .. } => self.checker.learned(session, *rid, *token, self.now),
                Response::InLine { ahead, grants_per_ks } => {
                    self.checker.in_line(session, *rid, Place::new(*ahead, *grants_per_ks))?
                }
                _ => {}
            }
        }
        let frames = if self.p.bug == Some(Bug::LostPlace) {
            frames.into_iter().filter(|(_, r)| !matches!(r, Response::InLine { .. })).collect()
        } else {
            frames
        };
        self.core.on_frames(session, frames, self.instant(self.now));
        // The reader holds the pen while it hands the answers out (the callers it wakes
        // queue their frames meanwhile), then writes them together.
        if self.core.take_pen(session) {
            if self.writes.contains_key(&session) {
                return Err(format!("{session:?}: the reader got the pen while a writer writes"));
            }
            self.pens.insert(session);
            self.at(self.now + 25, Ev::PenFlush { session });
        }
        Ok(())
    }

    // ----- questions ------------------------------------------------------------------------------

    pub fn stats(&self) -> Stats {
        self.checker.stats.clone()
    }

    pub fn holders(&self) -> Vec<(String, String, u64)> {
        let mut all: Vec<(String, String, u64)> = self
            .cluster
            .committed
            .values()
            .flat_map(|h| h.parts.iter().map(|p| (p.key.clone(), h.owner.clone(), h.token)))
            .collect();
        all.sort();
        all
    }

    /// The places the caller of hold `op` was handed.
    pub fn places_told(&self, op: OpId) -> Vec<Place> {
        self.told.get(&op).cloned().unwrap_or_default()
    }

    pub fn leader(&self) -> Option<usize> {
        self.cluster.leader
    }

    /// Scenario helpers: elect `n` now / move a node.
    pub fn set_leader(&mut self, n: Option<usize>) {
        self.cluster.leader = n;
        self.cluster.term += 1;
    }

    pub fn set_addr(&mut self, n: usize, addr: &str) {
        self.cluster.nodes[n].addr = addr.to_owned();
    }

    pub fn t(&self, at: Instant) -> T {
        self.t_of(at)
    }

    pub fn break_session(&mut self, s: SessionId) {
        if let Some(&c) = self.by_session.get(&s) {
            self.break_conn(c);
        }
    }

    pub fn session_of_node(&self, n: usize) -> Vec<SessionId> {
        self.conns.iter().filter(|c| c.node == n && !c.client_closed).map(|c| c.session).collect()
    }
}

fn brief(r: &Request) -> String {
    match r {
        Request::Acquire { key, owner, wait_ms, .. } => format!("A {key} {owner} w{wait_ms}"),
        Request::Release { token, key, .. } => format!("R {key} {token}"),
        Request::Query { key } => format!("Q {key}"),
        Request::Hold { owner, wait_ms, parts, place, .. } => {
            let keys: Vec<String> =
                parts.iter().map(|p| format!("{}:{}/{}", p.key, p.count, p.capacity)).collect();
            format!("H [{}] {owner} w{wait_ms}{}", keys.join(" "), if *place { " +place" } else { "" })
        }
        Request::Status => "S".into(),
        Request::Ping => "P".into(),
        other => format!("{other:?}"),
    }
}

fn lasting_unavailable(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Acquire(Err(AcquireError::Unavailable { lasting: true, .. }))
            | Outcome::Read(Err(ClientError::Unavailable { lasting: true, .. }))
            | Outcome::Release(Err(ReleaseError::Unavailable { lasting: true, .. }))
    )
}

#[path = "servers.rs"]
mod servers;

#[path = "faults.rs"]
mod faults;

#[path = "callers.rs"]
mod callers;
