//! Simulated peer connections, modelled on the real transport (`src/cluster/`).
//!
//! What the real transport does, and this models:
//! - **Each direction of a peer link is its own stream, dialed by the sender.** A's
//!   messages to B travel only on a link A dialed; B's answers need a link B dialed.
//! - **A dial takes time** (connect + handshake: about a round trip and a little work)
//!   and fails when the other end is gone, paused, or cut off in either direction;
//!   a failed dial is retried after a backoff that doubles from a minimum to a maximum
//!   (real: 100 ms → 1 s). A link that breaks is dialed again at once.
//! - **A message for a peer without a link** waits in a short bounded queue while the
//!   link is being dialed (`real`), or is dropped (`legacy`).
//! - **Who dials whom**: every node dials the members of its active configuration and
//!   its leader (a joining node that knows no configuration yet: its configured
//!   peers). The `real` model (what `src/cluster/` does) dials a new member as soon as
//!   the configuration naming it is appended, keeps a link to a node that left while it
//!   is still being talked to, and dials a node whose address it knows on demand when
//!   there is something to tell it. The `legacy` model (the transport before) looked
//!   at that set only at housekeeping, every 200 ms (real), so a new member was dialed
//!   up to one period after the configuration naming it was appended, and a node that
//!   left was forgotten at the next period (its link closed).
//! - **Who is heard** (`Admission`, after `src/cluster/raft_thread/admission.rs`): members of the
//!   receiver's configurations; before it knows one, anyone (the real node admits its
//!   configured peers and the leader they name). A node its committed configurations
//!   once named and no longer do is refused with a removal notice (the real node
//!   refuses its next handshake with code 6). A stranger is heard as
//!   `src/cluster/stranger.rs` says (`real` only), and answered on the link it dialed
//!   (`via` the reverse direction), since its address is unknown.
//! - A link carries messages in order (TCP) in "fifo" conditions; otherwise the
//!   simulator also reorders, drops and duplicates, to keep the core honest.
//! - Latency per message: a base, jitter, and optionally one slow node (to and from).
//!   A partition drops what crosses it; a paused receiver gets its messages when it
//!   resumes (they wait in its socket buffers).
//!
//! Timings of a model are scaled from the real transport's to the simulator's election
//! timeout (real: 2000 ms), so the ratios that decide outcomes — backoff and
//! housekeeping against the election timeout — are the real ones.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use ticketing::raft::NodeId;

use super::Rng;

/// Real election timeout the transport's timings are quoted against.
const REAL_ELECTION_MS: u64 = 2000;

/// How the transport behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportModel {
    pub name: &'static str,
    /// Whether the simulators hold runs over this transport to their liveness
    /// bound. Today's transport cannot always meet it — a voter whose log does not
    /// list a new candidate never dials it, so its vote is lost, and clusters stay
    /// leaderless (for good, if that vote is needed) — so its misses are counted
    /// and shown, not failed; safety is checked the same for both.
    pub liveness_bound: bool,
    /// A dial lasts one round trip plus this much.
    pub dial_extra_ms: u64,
    /// Backoff between failed dials: from this…
    pub backoff_min_ms: u64,
    /// …doubling up to this.
    pub backoff_max_ms: u64,
    /// How often a node looks at whom it should dial (and whom to forget).
    pub housekeeping_ms: u64,
    /// Dial a new member as soon as the configuration naming it is appended.
    pub dial_on_append: bool,
    /// Messages for a peer whose link is being dialed wait here, up to this many
    /// (0: dropped), for as long as that one dial attempt lasts: when it fails they
    /// are dropped, and while the dialer backs off nothing waits. Why not longer:
    /// replaying a backoff's worth of stale heartbeats would renew the leases of a
    /// leader long gone.
    pub queue_max: usize,
    /// A link to a node that is no longer wanted is kept until it has been unused
    /// this long (0: closed at the next housekeeping).
    pub linger_ms: u64,
    /// A message for a node we have no link to starts a dial (and waits for it), if
    /// its address is known to the sender.
    pub dial_on_demand: bool,
    /// A stranger's vote requests are heard by a node without a live leader, and
    /// answered on the link the stranger dialed (`src/cluster/stranger.rs`).
    pub strangers: bool,
    /// A node's core is ticked only once its `next_deadline_ms` is reached (its clock
    /// moved on without running timers otherwise), as the server's loop sleeps until
    /// then; else on every step.
    pub tick_when_due: bool,
}

impl TransportModel {
    /// The transport before it dialed on append (kept to show what that changed):
    /// dial backoff 100 ms → 1 s, housekeeping every 200 ms, messages without a link
    /// dropped, links to nodes that left closed at the next housekeeping, strangers
    /// never heard.
    pub fn legacy(election_ms: u64) -> TransportModel {
        let scale = |real_ms: u64| (real_ms * election_ms / REAL_ELECTION_MS).max(1);
        TransportModel {
            name: "legacy",
            liveness_bound: false,
            dial_extra_ms: 1,
            backoff_min_ms: scale(100),
            backoff_max_ms: scale(1000),
            housekeeping_ms: scale(200),
            dial_on_append: false,
            queue_max: 0,
            linger_ms: 0,
            dial_on_demand: false,
            strangers: false,
            tick_when_due: false,
        }
    }

    /// The transport of `src/cluster/` (docs/protocol-cluster.md §1): a new member is
    /// dialed when the configuration naming it is appended; messages wait (at most 256
    /// per peer, `DIAL_QUEUE_MESSAGES_MAX`) while their link is being dialed; a link to
    /// a node that left lingers for two election timeouts after its last use; a node
    /// whose address is known is dialed on demand; a stranger is heard while no
    /// leader is, and answered on its own link — so a voter can answer a candidate its
    /// log does not list yet; the core is ticked when its next deadline is due, not
    /// on every step. (The real queue also gives up after half an election timeout;
    /// a simulated dial never lasts that long.)
    pub fn real(election_ms: u64) -> TransportModel {
        TransportModel {
            name: "real",
            liveness_bound: true,
            dial_on_append: true,
            queue_max: 256,
            linger_ms: 2 * election_ms,
            dial_on_demand: true,
            strangers: true,
            tick_when_due: true,
            ..TransportModel::legacy(election_ms)
        }
    }
}

/// The network's conditions.
#[derive(Clone, Debug)]
pub struct Conditions {
    /// One-way latency: base plus uniform jitter in [0, jitter_ms].
    pub latency_ms: u64,
    pub jitter_ms: u64,
    /// One slow node: this much more latency to and from it.
    pub slow: Option<(NodeId, u64)>,
    /// TCP-like links: in order, nothing lost or duplicated while up.
    pub fifo: bool,
    /// Otherwise, during chaos: loss and duplication.
    pub drop_per_mille: u64,
    pub dup_per_mille: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No dialer.
    Idle,
    Dialing {
        done_at: u64,
    },
    Backoff {
        until: u64,
    },
    Up,
}

#[derive(Debug)]
struct Link<M> {
    state: State,
    backoff_ms: u64,
    /// Bumped whenever the link closes: what was in flight on it is lost.
    epoch: u64,
    /// Messages waiting for the dial under way.
    queue: VecDeque<M>,
    last_used_ms: u64,
    /// FIFO: the latest delivery time scheduled on this link.
    last_at: u64,
}

struct InFlight<M> {
    from: NodeId,
    to: NodeId,
    /// The link it travels on: (from, to), or (to, from) for an answer to a stranger.
    via: (NodeId, NodeId),
    epoch: u64,
    msg: M,
}

/// Counters of one run.
#[derive(Clone, Debug, Default)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    /// Messages dropped because their link did not exist (or its queue was full).
    pub dropped_no_link: u64,
    pub queued: u64,
    /// Answers to strangers, sent on the link the stranger dialed.
    pub answered_inbound: u64,
    /// Messages their receiver did not hear (the sender is no member it admits).
    pub unheard: u64,
    pub dials: u64,
    pub dial_failures: u64,
    pub breaks: u64,
}

impl NetStats {
    pub fn add(&mut self, o: &NetStats) {
        self.sent += o.sent;
        self.delivered += o.delivered;
        self.dropped_no_link += o.dropped_no_link;
        self.queued += o.queued;
        self.dials += o.dials;
        self.dial_failures += o.dial_failures;
        self.answered_inbound += o.answered_inbound;
        self.unheard += o.unheard;
        self.breaks += o.breaks;
    }
}

/// The simulated network of one run. Deterministic: all randomness comes from its own
/// generator, seeded by the run.
pub struct Net<M> {
    pub model: TransportModel,
    pub cond: Conditions,
    rng: Rng,
    links: BTreeMap<(NodeId, NodeId), Link<M>>,
    alive: BTreeSet<NodeId>,
    paused: BTreeMap<NodeId, u64>,
    /// Partitioned directions: (from, to) messages are lost, dials fail.
    pub blocked: BTreeSet<(NodeId, NodeId)>,
    /// Directions whose dials fail until the given time (a one-way link outage).
    dial_blocked: BTreeMap<(NodeId, NodeId), u64>,
    next_housekeeping: BTreeMap<NodeId, u64>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    inflight: BTreeMap<u64, InFlight<M>>,
    seq: u64,
    /// Loss, duplication and reordering apply while true.
    pub chaos: bool,
    pub stats: NetStats,
}

impl<M: Clone> Net<M> {
    pub fn new(model: TransportModel, cond: Conditions, seed: u64) -> Net<M> {
        Net {
            model,
            cond,
            rng: Rng::new(seed ^ 0x11E7_5EED),
            links: BTreeMap::new(),
            alive: BTreeSet::new(),
            paused: BTreeMap::new(),
            blocked: BTreeSet::new(),
            dial_blocked: BTreeMap::new(),
            next_housekeeping: BTreeMap::new(),
            queue: BinaryHeap::new(),
            inflight: BTreeMap::new(),
            seq: 0,
            chaos: true,
            stats: NetStats::default(),
        }
    }

    // ----- nodes ---------------------------------------------------------------

    /// A node starts and dials `peers` (its configured peers).
    pub fn add_node(&mut self, id: NodeId, peers: &[NodeId], now: u64) {
        self.alive.insert(id);
        let phase = self.rng.below(self.model.housekeeping_ms);
        self.next_housekeeping.insert(id, now + phase);
        for p in peers.iter().filter(|p| **p != id) {
            self.dial(id, *p, now);
        }
    }

    /// A node is gone: its links close; the others' dials to it fail from now on.
    pub fn remove_node(&mut self, id: NodeId, now: u64) {
        self.alive.remove(&id);
        self.paused.remove(&id);
        let ends: Vec<(NodeId, NodeId)> =
            self.links.keys().filter(|(a, b)| *a == id || *b == id).copied().collect();
        for (a, b) in ends {
            if a == id {
                self.close(a, b);
            } else {
                self.break_link(a, b, now);
            }
        }
    }

    pub fn set_paused(&mut self, id: NodeId, until: u64) {
        self.paused.insert(id, until);
    }

    fn is_paused(&self, id: NodeId, now: u64) -> bool {
        self.paused.get(&id).is_some_and(|until| *until > now)
    }

    /// Faults end: no partition, no pause, no dial outage, no loss.
    pub fn heal(&mut self) {
        self.blocked.clear();
        self.dial_blocked.clear();
        self.paused.clear();
        self.chaos = false;
    }

    // ----- dialers -------------------------------------------------------------

    /// Starts a dialer from `from` to `to` unless one runs.
    pub fn dial(&mut self, from: NodeId, to: NodeId, now: u64) {
        let done_at = now + self.dial_ms(from, to);
        let backoff_min = self.model.backoff_min_ms;
        let link = self.link(from, to);
        if link.state == State::Idle {
            link.state = State::Dialing { done_at };
            link.backoff_ms = backoff_min;
            link.last_used_ms = now;
        }
    }

    /// When `id`'s housekeeping runs next.
    pub fn next_housekeeping(&self, id: NodeId) -> u64 {
        self.next_housekeeping.get(&id).copied().unwrap_or(u64::MAX)
    }

    /// Those of `ids` whose housekeeping runs at `now` (each is scheduled again).
    pub fn housekeeping_due(&mut self, ids: &[NodeId], now: u64) -> Vec<NodeId> {
        let period = self.model.housekeeping_ms;
        let mut due = Vec::new();
        for id in ids {
            if let Some(at) = self.next_housekeeping.get_mut(id).filter(|at| **at <= now) {
                *at = now + period;
                due.push(*id);
            }
        }
        due
    }

    /// Node `id` wants links to `wanted`: dials those it has none to; at housekeeping
    /// (`forget`) also closes links to nodes no longer wanted (after `linger_ms` unused).
    pub fn sync_dialers(&mut self, id: NodeId, wanted: &BTreeSet<NodeId>, forget: bool, now: u64) {
        for w in wanted.iter().filter(|w| **w != id) {
            self.dial(id, *w, now);
        }
        if !forget {
            return;
        }
        let linger = self.model.linger_ms;
        let gone: Vec<NodeId> = self
            .links
            .iter()
            .filter(|((a, b), l)| {
                *a == id && !wanted.contains(b) && l.state != State::Idle && now >= l.last_used_ms + linger
            })
            .map(|((_, b), _)| *b)
            .collect();
        for b in gone {
            self.close(id, b);
        }
    }

    /// Every link's state, for debugging output.
    pub fn describe_links(&self) -> String {
        let mut out = String::new();
        for ((a, b), l) in &self.links {
            out.push_str(&format!(
                "{a}->{b}: {:?} backoff {} queued {}\n",
                l.state,
                l.backoff_ms,
                l.queue.len()
            ));
        }
        out
    }

    /// Whether `from` has a working link to `to`.
    pub fn is_up(&self, from: NodeId, to: NodeId) -> bool {
        self.links.get(&(from, to)).is_some_and(|l| l.state == State::Up)
    }

    fn link(&mut self, from: NodeId, to: NodeId) -> &mut Link<M> {
        self.links.entry((from, to)).or_insert_with(|| Link {
            state: State::Idle,
            backoff_ms: 0,
            epoch: 0,
            queue: VecDeque::new(),
            last_used_ms: 0,
            last_at: 0,
        })
    }

    /// Closes the dialer and its link: queued and in-flight messages are lost.
    fn close(&mut self, from: NodeId, to: NodeId) {
        let link = self.link(from, to);
        link.state = State::Idle;
        link.epoch += 1;
        link.queue.clear();
    }

    /// The link breaks (connection reset); its dialer dials again at once.
    pub fn break_link(&mut self, from: NodeId, to: NodeId, now: u64) {
        let done_at = now + self.dial_ms(from, to);
        let backoff_min = self.model.backoff_min_ms;
        let link = self.link(from, to);
        if link.state != State::Up {
            return;
        }
        link.epoch += 1;
        link.state = State::Dialing { done_at };
        link.backoff_ms = backoff_min;
        self.stats.breaks += 1;
    }

    /// Breaks a random working link (chaos).
    pub fn break_random_link(&mut self, now: u64) -> Option<(NodeId, NodeId)> {
        let up: Vec<(NodeId, NodeId)> =
            self.links.iter().filter(|(_, l)| l.state == State::Up).map(|(k, _)| *k).collect();
        if up.is_empty() {
            return None;
        }
        let (a, b) = up[self.rng.below(up.len() as u64) as usize];
        self.break_link(a, b, now);
        Some((a, b))
    }

    /// `from` cannot dial `to` until `until` (and its current link, if any, breaks):
    /// for a while only the other direction may work.
    pub fn block_dials(&mut self, from: NodeId, to: NodeId, until: u64, now: u64) {
        self.dial_blocked.insert((from, to), until);
        self.break_link(from, to, now);
    }

    fn dial_ms(&mut self, from: NodeId, to: NodeId) -> u64 {
        2 * self.base_latency(from, to) + self.model.dial_extra_ms
    }

    fn base_latency(&self, from: NodeId, to: NodeId) -> u64 {
        let slow = match self.cond.slow {
            Some((s, extra)) if s == from || s == to => extra,
            _ => 0,
        };
        self.cond.latency_ms + slow
    }

    fn dial_succeeds(&self, from: NodeId, to: NodeId, now: u64) -> bool {
        self.alive.contains(&from)
            && self.alive.contains(&to)
            && !self.is_paused(from, now)
            && !self.is_paused(to, now)
            && !self.blocked.contains(&(from, to))
            && !self.blocked.contains(&(to, from))
            && self.dial_blocked.get(&(from, to)).is_none_or(|until| *until <= now)
    }

    /// Runs the dialers up to `now`: finished dials succeed or back off, backoffs end.
    pub fn advance(&mut self, now: u64) {
        let keys: Vec<(NodeId, NodeId)> = self
            .links
            .iter()
            .filter(|(_, l)| match l.state {
                State::Dialing { done_at } => done_at <= now,
                State::Backoff { until } => until <= now,
                _ => false,
            })
            .map(|(k, _)| *k)
            .collect();
        for (a, b) in keys {
            let state = self.links[&(a, b)].state;
            match state {
                State::Dialing { .. } => {
                    self.stats.dials += 1;
                    if self.dial_succeeds(a, b, now) {
                        let link = self.link(a, b);
                        link.state = State::Up;
                        let queued: Vec<M> = link.queue.drain(..).collect();
                        for msg in queued {
                            self.transmit(a, b, (a, b), msg, now);
                        }
                    } else {
                        self.stats.dial_failures += 1;
                        let max = self.model.backoff_max_ms;
                        let link = self.link(a, b);
                        link.state = State::Backoff { until: now + link.backoff_ms };
                        link.backoff_ms = (link.backoff_ms * 2).min(max);
                        let dropped = link.queue.len() as u64;
                        link.queue.clear();
                        self.stats.dropped_no_link += dropped;
                    }
                }
                State::Backoff { .. } => {
                    let done_at = now + self.dial_ms(a, b);
                    self.link(a, b).state = State::Dialing { done_at };
                }
                _ => {}
            }
        }
    }

    // ----- messages ------------------------------------------------------------

    /// `from` sends `msg` to `to`: on its link if up; else queued while dialing, or
    /// dropped, as the model says.
    /// `known`: `from` knows `to`'s address (it may dial it on demand); otherwise,
    /// with no link of its own, it answers on the link `to` dialed, if the model hears
    /// strangers and that link is up.
    pub fn send(&mut self, from: NodeId, to: NodeId, msg: M, now: u64, known: bool) {
        self.stats.sent += 1;
        let model = self.model.clone();
        if self.link(from, to).state == State::Idle && model.dial_on_demand && known {
            self.dial(from, to, now);
        }
        let reverse_up = self.is_up(to, from);
        let link = self.link(from, to);
        link.last_used_ms = now;
        match link.state {
            State::Up => self.transmit(from, to, (from, to), msg, now),
            State::Dialing { .. } if link.queue.len() < model.queue_max => {
                link.queue.push_back(msg);
                self.stats.queued += 1;
            }
            State::Idle if model.strangers && !known && reverse_up => {
                self.stats.answered_inbound += 1;
                self.transmit(from, to, (to, from), msg, now)
            }
            _ => self.stats.dropped_no_link += 1,
        }
    }

    fn transmit(&mut self, from: NodeId, to: NodeId, via: (NodeId, NodeId), msg: M, now: u64) {
        let hostile = self.chaos && !self.cond.fifo;
        if hostile && self.rng.chance(self.cond.drop_per_mille) {
            return;
        }
        let copies = if hostile && self.rng.chance(self.cond.dup_per_mille) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = self.base_latency(from, to) + self.rng.range(0, self.cond.jitter_ms);
            let fifo = self.cond.fifo || !self.chaos;
            let link = self.link(via.0, via.1);
            let mut at = now + delay.max(1);
            if fifo {
                at = at.max(link.last_at);
                link.last_at = at;
            }
            let epoch = link.epoch;
            self.seq += 1;
            self.queue.push(Reverse((at, self.seq)));
            self.inflight.insert(self.seq, InFlight { from, to, via, epoch, msg: msg.clone() });
        }
    }

    /// The next message due at `now` that arrives: (from, to, msg, inbound) — inbound
    /// when it came on a link `from` dialed (not an answer to a stranger). Messages on a link
    /// that closed meanwhile, to a node that is gone, or across a partition are lost;
    /// those for a paused node wait for it.
    pub fn pop_due(&mut self, now: u64) -> Option<(NodeId, NodeId, M, bool)> {
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > now {
                return None;
            }
            self.queue.pop();
            let Some(m) = self.inflight.remove(&seq) else { continue };
            let link_ok = self.links.get(&m.via).is_some_and(|l| l.epoch == m.epoch && l.state == State::Up);
            if !link_ok || !self.alive.contains(&m.to) || self.blocked.contains(&(m.from, m.to)) {
                continue;
            }
            if let Some(until) = self.paused.get(&m.to).copied().filter(|u| *u > now) {
                self.seq += 1;
                self.queue.push(Reverse((until, self.seq)));
                self.inflight.insert(self.seq, m);
                continue;
            }
            self.stats.delivered += 1;
            let inbound = m.via == (m.from, m.to);
            return Some((m.from, m.to, m.msg, inbound));
        }
        None
    }
}
