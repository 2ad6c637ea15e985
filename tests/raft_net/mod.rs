//! `Net`: a tiny synchronous network for the Raft core's named tests
//! (`raft_scenarios.rs`, `raft_guards.rs`). Messages queue up and are delivered in
//! order unless a link is cut; only nodes in `ticking` see time pass, so a test
//! decides who campaigns.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ticketing::raft::{AutopilotEvent, Entry, EntryKind, Message, NodeId, Raft, RaftConfig, Role, Snapshot};

pub const STEP_MS: u64 = 10;

pub struct Net {
    pub nodes: BTreeMap<NodeId, Raft>,
    pub now: u64,
    pub queue: VecDeque<(NodeId, NodeId, Message)>,
    pub cut: BTreeSet<(NodeId, NodeId)>,
    pub ticking: BTreeSet<NodeId>,
    pub applied: BTreeMap<NodeId, Vec<Entry>>,
    pub snapshots: BTreeMap<NodeId, Vec<Snapshot>>,
    pub reads: BTreeMap<NodeId, Vec<(u64, u64)>>,
    pub removed: BTreeSet<NodeId>,
    /// Every `Ready::handover` each node reported, in order.
    pub handovers: BTreeMap<NodeId, Vec<bool>>,
    /// Every message ever sent: (from, to, msg).
    pub sent: Vec<(NodeId, NodeId, Message)>,
    /// `advance_1ms` ticks a node only once its `next_deadline_ms` is reached (as the
    /// server's loop does), not every millisecond.
    pub tick_when_due: bool,
    /// Rewrites (or drops, with None) messages in flight.
    pub mangle: Option<Mangle>,
    /// Every `Ready::autopilot` event: (node, time reported, event).
    pub autopilot: Vec<(NodeId, u64, AutopilotEvent)>,
}

pub type Mangle = Box<dyn Fn(NodeId, NodeId, Message) -> Option<Message>>;

pub fn config(id: NodeId) -> RaftConfig {
    RaftConfig::new(id)
}

impl Net {
    pub fn new(ids: &[NodeId]) -> Net {
        Net::with_config(ids, config)
    }

    pub fn with_config(ids: &[NodeId], cfg: impl Fn(NodeId) -> RaftConfig) -> Net {
        let nodes = ids.iter().map(|id| (*id, Raft::new_bootstrap(cfg(*id), ids, 42, 0))).collect();
        Net {
            nodes,
            now: 0,
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            ticking: ids.iter().copied().collect(),
            applied: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            reads: BTreeMap::new(),
            removed: BTreeSet::new(),
            handovers: BTreeMap::new(),
            sent: Vec::new(),
            tick_when_due: false,
            mangle: None,
            autopilot: Vec::new(),
        }
    }

    pub fn add_joining(&mut self, id: NodeId) {
        self.nodes.insert(id, Raft::new_joining(config(id), 7, self.now));
        self.ticking.insert(id);
    }

    pub fn node(&self, id: NodeId) -> &Raft {
        &self.nodes[&id]
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Raft {
        self.nodes.get_mut(&id).unwrap()
    }

    /// Node `id` with its clock moved to now, as a loop handling a request does
    /// (the request stamps times from it).
    pub fn at(&mut self, id: NodeId) -> &mut Raft {
        let now = self.now;
        let node = self.node_mut(id);
        node.advance_clock(now);
        node
    }

    pub fn collect(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let rd = self.node_mut(id).ready();
            for (to, m) in rd.messages {
                self.sent.push((id, to, m.clone()));
                self.queue.push_back((id, to, m));
            }
            if let Some(s) = rd.snapshot {
                self.snapshots.entry(id).or_default().push(s);
            }
            self.applied.entry(id).or_default().extend(rd.committed);
            self.reads.entry(id).or_default().extend(rd.read_states);
            if rd.removed {
                self.removed.insert(id);
            }
            if let Some(h) = rd.handover {
                self.handovers.entry(id).or_default().push(h);
            }
            let now = self.now;
            self.autopilot.extend(rd.autopilot.into_iter().map(|e| (id, now, e)));
        }
    }

    /// Delivers until no message is left (bounded).
    pub fn deliver_all(&mut self) {
        for _ in 0..10_000 {
            self.collect();
            let Some((from, to, m)) = self.queue.pop_front() else {
                return;
            };
            let m = match &self.mangle {
                Some(f) => f(from, to, m),
                None => Some(m),
            };
            let Some(m) = m else { continue };
            if self.cut.contains(&(from, to)) || !self.nodes.contains_key(&to) {
                continue;
            }
            let now = self.now;
            self.node_mut(to).step(from, m, now);
        }
        panic!("network did not settle");
    }

    pub fn advance(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += STEP_MS;
            let now = self.now;
            let ticking: Vec<NodeId> = self.ticking.iter().copied().collect();
            for id in ticking {
                if let Some(n) = self.nodes.get_mut(&id) {
                    n.tick(now);
                }
            }
            self.deliver_all();
        }
    }

    /// Like `advance`, in steps of 1 ms.
    pub fn advance_1ms(&mut self, ms: u64) {
        for _ in 0..ms {
            self.now += 1;
            let now = self.now;
            let ticking: Vec<NodeId> = self.ticking.iter().copied().collect();
            let mut ticked = Vec::new();
            for id in ticking {
                if let Some(n) = self.nodes.get_mut(&id) {
                    if !self.tick_when_due || n.next_deadline_ms().is_some_and(|d| now >= d) {
                        n.tick(now);
                        ticked.push(id);
                    }
                }
            }
            self.deliver_all();
            // Like the server's loop: tick, drain `ready()`, sleep until the next
            // deadline. One that a tick and its `ready()` leave at or before now
            // would make that loop spin.
            for id in ticked.into_iter().filter(|_| self.tick_when_due) {
                if let Some(n) = self.nodes.get(&id) {
                    let next = n.next_deadline_ms();
                    assert!(
                        next.is_none_or(|d| d > now),
                        "node {id}: after a tick at {now} its next deadline is {next:?}"
                    );
                }
            }
        }
    }

    /// Lets only `id` see time pass until it leads (at most 10 s).
    pub fn elect(&mut self, id: NodeId) {
        let saved = std::mem::replace(&mut self.ticking, [id].into());
        for _ in 0..1000 {
            if self.node(id).role() == Role::Leader {
                break;
            }
            self.advance(STEP_MS);
        }
        self.ticking = saved;
        assert_eq!(self.node(id).role(), Role::Leader, "node {id} failed to win");
    }

    pub fn isolate(&mut self, id: NodeId) {
        let all: Vec<NodeId> = self.nodes.keys().copied().collect();
        for other in all {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    pub fn cut_link(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn leaders(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|n| n.role() == Role::Leader).map(|n| n.id()).collect()
    }

    pub fn applied_data(&self, id: NodeId) -> Vec<Vec<u8>> {
        self.applied.get(&id).map(|es| normal_data(es)).unwrap_or_default()
    }
}

impl Net {
    /// Lets every node tick until one leads (at most 10 s); returns it.
    pub fn wait_leader(&mut self) -> NodeId {
        for _ in 0..1000 {
            if let [l] = self.leaders()[..] {
                return l;
            }
            self.advance(STEP_MS);
        }
        panic!("no leader within 10 s");
    }

    /// Advances in steps until `done` holds; returns the time it took (None: not
    /// within `max_ms`).
    pub fn advance_until(&mut self, max_ms: u64, done: impl Fn(&Net) -> bool) -> Option<u64> {
        let start = self.now;
        while self.now < start + max_ms {
            if done(self) {
                return Some(self.now - start);
            }
            self.advance(STEP_MS);
        }
        done(self).then(|| self.now - start)
    }

    pub fn followers_of(&self, l: NodeId) -> Vec<NodeId> {
        self.nodes.keys().copied().filter(|id| *id != l).collect()
    }

    /// Loses every message `from` sends that `lost` picks.
    pub fn lose_from(&mut self, from: NodeId, lost: fn(&Message) -> bool) {
        self.mangle = Some(Box::new(move |f, _, m| (f != from || !lost(&m)).then_some(m)));
    }

    /// Messages sent from `from` to `to` (since `sent` was last cleared) that `pick` picks.
    pub fn count_sent(&self, from: NodeId, to: NodeId, pick: fn(&Message) -> bool) -> usize {
        self.sent.iter().filter(|(f, t, m)| *f == from && *t == to && pick(m)).count()
    }
}

/// The data of the normal entries among `entries`, in order.
pub fn normal_data(entries: &[Entry]) -> Vec<Vec<u8>> {
    entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Normal(d) => Some(d.to_vec()),
            _ => None,
        })
        .collect()
}
