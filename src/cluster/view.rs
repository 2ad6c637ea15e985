//! What the Raft thread publishes about the cluster for the other threads: WELCOME
//! and STATUS are answered from here, without asking the Raft thread, and the peer
//! acceptor judges PEER HELLOs against it (who may speak Raft to this node).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::metrics::{Metrics, PeerFigures};

use crate::lock::MemberRecord;
use crate::proto::handshake::role;
use crate::raft::{Raft, Role};

/// A consistent copy of the Raft facts STATUS reports.
#[derive(Clone, Debug, Default)]
pub struct RaftFacts {
    pub role: Option<Role>,
    pub term: u64,
    pub leader_id: Option<u64>,
    pub commit_index: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// This node leads, or heard from its leader within an election timeout.
    pub live_leader: bool,
    /// When this node last heard from a leader, in ms of [`loop_clock_ms`] (`None`:
    /// it leads, or never heard from one): how old its view of the cluster is.
    pub leader_heard_at: Option<u64>,
    /// This leader is handing leadership over (`Raft::handing_over`).
    pub handing_over: bool,
    /// This node is stopping, asked to leave, and a standby may still take its place
    /// (`Raft::awaits_replacement`).
    pub awaiting_replacement: bool,
    /// Members that said they are about to stop (`Raft::stopping_peers`).
    pub stopping: Vec<u64>,
}

/// What MEMBERS reports of the autopilot, published at the housekeeping pace (every
/// 200 ms), not every loop turn: an operator reads it, no decision depends on it.
#[derive(Clone, Debug, Default)]
pub struct AutopilotFacts {
    /// Leader only: how long ago it last heard from each other member (ms).
    pub heard_ms: Vec<(u64, u64)>,
    /// Leader only: the members it has had no answer from since it began replicating
    /// to them (its election, or their joining): their `heard_ms` counts from then.
    pub unheard: Vec<u64>,
    /// Leader only: learners caught up and healthy, ready to replace a dead voter.
    pub standbys: Vec<u64>,
    /// A member unheard for longer than this is called unreachable (three heartbeat
    /// intervals: a healthy member answers every heartbeat).
    pub unreachable_after_ms: u64,
    /// The autopilot's threshold (`None`: off) and whether it waits for an
    /// operator's replacement.
    pub dead_ms: Option<u64>,
    pub paused: bool,
}

/// A member unheard for this many heartbeat intervals is reported unreachable.
pub const UNREACHABLE_HEARTBEATS: u64 = 3;

/// Who may speak Raft to this node: published by the Raft thread, read by the peer
/// acceptor (at PEER HELLO) and by the Raft thread itself (before stepping a message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Nodes of the active or the committed configuration, and the learner an admin
    /// replace on this leader is adding.
    pub members: BTreeSet<u64>,
    /// Nodes that were in a committed configuration and are in none now: refused with
    /// a removal notice, so a removed node that missed its removal learns of it.
    pub retired: BTreeSet<u64>,
    /// False until this node knows a configuration (a joining node before its first
    /// snapshot or entries).
    pub config_known: bool,
    /// The configured peers (`TICKETING_CLUSTER_PEERS`), admitted before any
    /// configuration is known.
    pub configured: BTreeSet<u64>,
}

/// Why a peer may speak Raft to this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// A member (or a configured peer, or the vouched leader, before any configuration
    /// is known).
    Member,
    /// A stranger (no configuration of this node names it, none ever did), admitted
    /// only because this node has no live leader: it may ask for votes
    /// (`super::stranger`).
    Stranger,
}

/// Why a peer may not speak Raft to this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAdmitted {
    /// Never a member here.
    NotMember,
    /// Was a member; a committed configuration removed it.
    Removed,
}

#[derive(Debug, Default)]
pub struct ClusterView {
    facts: Mutex<RaftFacts>,
    autopilot: Mutex<AutopilotFacts>,
    /// Client addresses known locally: from the configuration, from `admin replace`,
    /// and the leader address that configured peers named (see `vouched`). Never from
    /// a PEER HELLO alone: a dialer's claim about itself is not evidence.
    addrs: Mutex<BTreeMap<u64, String>>,
    /// Member records of the applied lock state (their addresses win).
    replicated: Mutex<BTreeMap<u64, MemberRecord>>,
    /// Incarnations seen in handshakes per node id, for ids the log has no record of
    /// yet: a different one under the same id is a restarted process, refused.
    incarnations: Mutex<HashMap<u64, u64>>,
    admission: Mutex<Admission>,
    /// Leaders (node id and client address) that configured peers named while this node
    /// knew no configuration: the leader that adds a joining node dials it as one of
    /// these, and is admitted because a configured peer vouched for the pair.
    vouched: Mutex<BTreeMap<u64, String>>,
    /// Set once this node learned it was removed from the cluster.
    pub removed: AtomicBool,
    /// Why this node cannot go on (it stops with exit status 1), if it cannot.
    broken: Mutex<Option<String>>,
    /// When the Raft thread last published, in ms of [`loop_clock_ms`] (+1; 0 = never):
    /// it publishes every loop turn (at least every 200 ms, the housekeeping interval),
    /// so an old stamp means a stuck Raft thread.
    published_ms: std::sync::atomic::AtomicU64,
    /// Where `publish` also writes the Raft figures for a scrape (when metrics run).
    metrics: std::sync::OnceLock<Arc<Metrics>>,
    /// The last leader this node knew (0 = none yet), for counting leader changes.
    last_leader: std::sync::atomic::AtomicU64,
    /// Peers this node has an established outbound link to (set by the transport).
    links_up: Mutex<BTreeSet<u64>>,
    /// The leader (id, client address) a node that knows no configuration yet asks to
    /// add it, as its join thread last found it (`None`: none named).
    joining: Mutex<Option<(u64, String)>>,
    /// Why a waiting node found no leader, when not because every member it asked
    /// answered that it knows none (some were silent or refused it): then founding is
    /// not the advice.
    waiting_why: Mutex<Option<String>>,
}

/// What a node that knows no cluster says it is (`/readyz`, and the CLI about it).
pub const WAITING: &str = "waiting to be founded or to join: no member of TICKETING_CLUSTER_PEERS named a \
                           leader; when the cluster is born, found it once with `ticketing admin found \
                           ADDR,ADDR,ADDR` (docs/operations.md, \"Founding\")";

/// Where a cluster node stands before it is a member: what STATUS, MEMBERS, `/readyz`
/// and the CLI call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It knows a configuration: a member (or a removed one), in the Raft role it has.
    Member,
    /// It knows no configuration and no member named a leader: it waits to be founded
    /// (`ticketing admin found`) or for a cluster to join.
    Waiting,
    /// It knows no configuration yet; a member named this leader (id, client address),
    /// which it asks to add it.
    Joining(u64, String),
}

/// Milliseconds since the first call, on the monotonic clock (for loop stamps).
pub fn loop_clock_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

impl ClusterView {
    pub fn new(addrs: impl IntoIterator<Item = (u64, String)>) -> ClusterView {
        let addrs: BTreeMap<u64, String> = addrs.into_iter().collect();
        let admission = Admission { configured: addrs.keys().copied().collect(), ..Default::default() };
        ClusterView { addrs: Mutex::new(addrs), admission: Mutex::new(admission), ..Default::default() }
    }

    /// Replaces who may speak Raft to this node (the configured peers stay as given).
    pub fn set_admission(&self, members: BTreeSet<u64>, retired: BTreeSet<u64>, config_known: bool) {
        let mut admission = lock(&self.admission);
        admission.members = members;
        admission.retired = retired;
        admission.config_known = config_known;
    }

    /// Marks this node as unable to go on; the main thread stops it.
    pub fn set_broken(&self, why: String) {
        lock(&self.broken).get_or_insert(why);
    }

    pub fn broken(&self) -> Option<String> {
        lock(&self.broken).clone()
    }

    pub fn admission(&self) -> Admission {
        lock(&self.admission).clone()
    }

    /// Is `peer` a member, or (before any configuration is known) a configured peer or
    /// one `vouched` says a configured peer named? Asked for every peer message, so it
    /// reads the admission in place instead of copying it.
    pub fn may_speak(&self, peer: u64, vouched: impl FnOnce(u64) -> bool) -> bool {
        let admission = lock(&self.admission);
        admission.members.contains(&peer)
            || (!admission.config_known && (admission.configured.contains(&peer) || vouched(peer)))
    }

    /// May node `id`, which says its client address is `addr`, speak Raft to us?
    pub fn admits(&self, id: u64, addr: &str) -> Result<Admitted, NotAdmitted> {
        let admission = lock(&self.admission);
        if admission.members.contains(&id) {
            return Ok(Admitted::Member);
        }
        if !admission.config_known && (admission.configured.contains(&id) || self.is_vouched(id, addr)) {
            return Ok(Admitted::Member);
        }
        if admission.retired.contains(&id) {
            return Err(NotAdmitted::Removed);
        }
        if admission.config_known && !lock(&self.facts).live_leader {
            return Ok(Admitted::Stranger);
        }
        Err(NotAdmitted::NotMember)
    }

    /// True when node `id` left the cluster (a committed configuration removed it, or
    /// the configuration this node knows no longer names it) or said it is about to
    /// stop: a planned stop, whose silence is expected and asks nothing of anyone.
    pub fn gone_or_going(&self, id: u64) -> bool {
        let left = {
            let admission = lock(&self.admission);
            admission.retired.contains(&id) || (admission.config_known && !admission.members.contains(&id))
        };
        left || lock(&self.facts).stopping.contains(&id)
    }

    /// The leader the join thread asks to add this node (`None`: no member named one).
    pub fn set_joining(&self, leader: Option<(u64, String)>) {
        *lock(&self.joining) = leader;
    }

    /// Records why a waiting node found no leader (`None`: every member it asked
    /// answered, knowing none; see [`ClusterView::waiting_words`]).
    pub fn set_waiting_why(&self, why: Option<String>) {
        *lock(&self.waiting_why) = why;
    }

    /// What a waiting node says it is (`/readyz`): founding is advised only when every
    /// member it asked answered that it knows no leader.
    pub fn waiting_words(&self) -> String {
        match &*lock(&self.waiting_why) {
            None => WAITING.to_owned(),
            Some(why) => format!("waiting to join: {why}"),
        }
    }

    /// Where this node stands: a member, or waiting, or joining (see [`Standing`]).
    pub fn standing(&self) -> Standing {
        // Before the Raft thread's first publication nothing is known yet: a member's
        // view is the one to show (its role then reads `follower`).
        // Each lock taken alone (docs/architecture.md §1: `admission` is never taken
        // under `facts`).
        let published = lock(&self.facts).role.is_some();
        let config_known = lock(&self.admission).config_known;
        if !published || config_known {
            return Standing::Member;
        }
        match lock(&self.joining).clone() {
            Some((id, addr)) => Standing::Joining(id, addr),
            None => Standing::Waiting,
        }
    }

    /// The role STATUS and MEMBERS report: the Raft role of a member, `waiting` or
    /// `joining` before it is one.
    pub fn role_text(&self, role: Option<Role>) -> &'static str {
        match self.standing() {
            Standing::Member => role_name(role),
            Standing::Waiting => "waiting",
            Standing::Joining(..) => "joining",
        }
    }

    /// Records the leader (`id` at client address `addr`) a configured peer named (only
    /// while no configuration is known: afterwards membership decides).
    pub fn vouch_for_leader(&self, id: u64, addr: &str) {
        if id == 0
            || crate::proto::addr::check_client_addr(addr).is_err()
            || lock(&self.admission).config_known
        {
            return;
        }
        let mut vouched = lock(&self.vouched);
        // Bounded: configured peers name one leader each at a time. A node that waits
        // long sees leaders come and go: when full, one old name gives way (the leader
        // of the moment is named again at the next round).
        if vouched.len() >= 16 && !vouched.contains_key(&id) {
            vouched.pop_first();
        }
        vouched.insert(id, addr.to_owned());
    }

    /// The leaders configured peers (or the members a joining node asked) named.
    pub fn vouched_leaders(&self) -> Vec<(u64, String)> {
        lock(&self.vouched).iter().map(|(id, addr)| (*id, addr.clone())).collect()
    }

    /// True if a configured peer named node `id` at `addr` as the leader.
    pub fn is_vouched(&self, id: u64, addr: &str) -> bool {
        lock(&self.vouched).get(&id).is_some_and(|a| a == addr)
    }

    /// How long ago the Raft thread last published; `None` before it ever did.
    pub fn since_published_ms(&self) -> Option<u64> {
        match self.published_ms.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            stamp => Some(loop_clock_ms().saturating_sub(stamp - 1)),
        }
    }

    /// Makes `publish` write the Raft figures into `metrics` too.
    pub fn attach_metrics(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// The metrics `publish` writes to, if any.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.get()
    }

    pub fn publish(&self, raft: &Raft) {
        self.published_ms.store(loop_clock_ms() + 1, std::sync::atomic::Ordering::Relaxed);
        if let Some(metrics) = self.metrics.get() {
            self.publish_metrics(raft, metrics);
        }
        let membership = raft.membership();
        let mut voters: Vec<u64> = membership.voters.iter().copied().collect();
        for id in &membership.outgoing {
            if !voters.contains(id) {
                voters.push(*id);
            }
        }
        voters.sort_unstable();
        let facts = RaftFacts {
            role: Some(raft.role()),
            term: raft.term(),
            leader_id: raft.leader_id(),
            commit_index: raft.commit_index(),
            voters,
            learners: membership.learners.iter().copied().collect(),
            live_leader: raft.has_live_leader(),
            leader_heard_at: raft.leader_heard_ms().map(|age| loop_clock_ms().saturating_sub(age)),
            handing_over: raft.handing_over(),
            awaiting_replacement: raft.awaits_replacement(),
            stopping: raft.stopping_peers().collect(),
        };
        *lock(&self.facts) = facts;
    }

    /// The Raft figures of docs/metrics.md §3. Called at least every loop turn and after
    /// every step's output, so an election (a term this node moved to by voting for
    /// itself) or a new leader is seen even if it lasted one turn.
    fn publish_metrics(&self, raft: &Raft, metrics: &Metrics) {
        use std::sync::atomic::Ordering::Relaxed;
        let r = &metrics.raft;
        if raft.term() > r.term.get() && raft.voted_for() == Some(raft.id()) {
            r.elections_started.inc();
        }
        r.term.set(raft.term());
        r.role.set(match raft.role() {
            Role::Leader => 0,
            Role::Follower => 1,
            Role::PreCandidate | Role::Candidate => 2,
            Role::Learner => 3,
        });
        let leader = raft.leader_id().unwrap_or(0);
        r.leader_id.set(leader);
        let membership = raft.membership();
        r.voters.set(membership.voters.len() as u64);
        r.standbys.set(membership.learners.len() as u64);
        // Leader only (rendered only while this node leads): the voters heard within
        // an election timeout, itself included, and the standbys ready to take a
        // voter's place.
        let election = raft.config().election_ms;
        let healthy = membership
            .voters
            .iter()
            .filter(|&&id| id == raft.id() || raft.unreachable_ms(id).is_some_and(|ms| ms < election))
            .count();
        r.healthy_voters.set(healthy as u64);
        r.ready_standbys.set(raft.standbys().len() as u64);
        // A change from one known leader to another: learning the first leader (a
        // process that just started) is none, nor is the same node elected again.
        if leader != 0 {
            let before = self.last_leader.swap(leader, Relaxed);
            if before != 0 && before != leader {
                r.leader_changes.inc();
            }
        }
        r.commit_index.set(raft.commit_index());
        let leading = raft.is_leader();
        r.proposals_pending.set(if leading {
            raft.last_index().saturating_sub(raft.commit_index())
        } else {
            0
        });
        let mut others = raft.membership().all_nodes();
        others.remove(&raft.id());
        let links_up = lock(&self.links_up);
        let mut peers = r.peers.lock().unwrap_or_else(|p| p.into_inner());
        if peers.len() != others.len() || peers.iter().zip(&others).any(|(p, id)| p.node != *id) {
            *peers = others.iter().map(|&node| PeerFigures { node, ..Default::default() }).collect();
        }
        for p in peers.iter_mut() {
            p.link_up = links_up.contains(&p.node);
            p.match_lag = match raft.progress_of(p.node) {
                Some((matched, _)) if leading => Some(raft.last_index().saturating_sub(matched)),
                _ => None,
            };
        }
    }

    /// Records whether an outbound link to peer `node` is established (the transport).
    pub fn set_link_up(&self, node: u64, up: bool) {
        let mut links = lock(&self.links_up);
        if up {
            links.insert(node);
        } else {
            links.remove(&node);
        }
    }

    pub fn facts(&self) -> RaftFacts {
        lock(&self.facts).clone()
    }

    /// How long ago this node last heard from a leader (ms); `None` on the leader, or
    /// before it ever heard from one.
    pub fn leader_heard_ms(&self) -> Option<u64> {
        lock(&self.facts).leader_heard_at.map(|at| loop_clock_ms().saturating_sub(at))
    }

    /// Publishes what MEMBERS reports of the autopilot (the Raft thread's housekeeping).
    pub fn publish_autopilot(&self, raft: &Raft) {
        let leading = raft.is_leader();
        let heard_ms = if leading {
            let members = raft.membership().all_nodes();
            members.into_iter().filter_map(|id| Some((id, raft.unreachable_ms(id)?))).collect()
        } else {
            Vec::new()
        };
        let unheard = heard_ms
            .iter()
            .filter(|(id, _)| raft.heard_from(*id) == Some(false))
            .map(|(id, _)| *id)
            .collect();
        *lock(&self.autopilot) = AutopilotFacts {
            heard_ms,
            unheard,
            standbys: if leading { raft.standbys() } else { Vec::new() },
            unreachable_after_ms: UNREACHABLE_HEARTBEATS * raft.config().heartbeat_ms,
            dead_ms: raft.config().autopilot_dead_ms,
            paused: raft.autopilot_paused(),
        };
    }

    pub fn autopilot(&self) -> AutopilotFacts {
        lock(&self.autopilot).clone()
    }

    /// Records a client address for `id` (configuration, `admin replace`, or a vouched
    /// leader). Callers validate it first.
    pub fn learn_addr(&self, id: u64, addr: &str) {
        if !addr.is_empty() {
            lock(&self.addrs).insert(id, addr.to_owned());
        }
    }

    /// A member's client address; empty when unknown.
    pub fn addr_of(&self, id: u64) -> String {
        if let Some(record) = lock(&self.replicated).get(&id) {
            if !record.addr.is_empty() {
                return record.addr.clone();
            }
        }
        lock(&self.addrs).get(&id).cloned().unwrap_or_default()
    }

    /// The nodes whose known client address has `ip` as its host (an IP literal; names
    /// are not resolved here).
    pub fn nodes_at_ip(&self, ip: std::net::IpAddr) -> BTreeSet<u64> {
        let at_ip = |addr: &str| {
            addr.rsplit_once(':').and_then(|(host, _)| host.trim_matches(['[', ']']).parse().ok()) == Some(ip)
        };
        let mut ids: BTreeSet<u64> = lock(&self.addrs).keys().copied().collect();
        ids.extend(lock(&self.replicated).keys());
        ids.into_iter().filter(|id| at_ip(&self.addr_of(*id))).collect()
    }

    /// Publishes the member records of the applied lock state, if they changed.
    pub fn set_replicated(&self, members: &BTreeMap<u64, MemberRecord>) {
        let mut replicated = lock(&self.replicated);
        if *replicated != *members {
            *replicated = members.clone();
        }
    }

    /// The log's record of `id`, if any.
    pub fn record_of(&self, id: u64) -> Option<MemberRecord> {
        lock(&self.replicated).get(&id).cloned()
    }

    /// Is process `incarnation` the one that runs node `id`? The log's record decides
    /// when it has one; otherwise the first incarnation seen here, which is recorded.
    pub fn check_incarnation(&self, id: u64, incarnation: u64) -> bool {
        if let Some(record) = lock(&self.replicated).get(&id) {
            if record.incarnation != 0 {
                return record.incarnation == incarnation;
            }
        }
        *lock(&self.incarnations).entry(id).or_insert(incarnation) == incarnation
    }

    /// The incarnation seen for `id` in a handshake, if any.
    pub fn seen_incarnation(&self, id: u64) -> Option<u64> {
        lock(&self.incarnations).get(&id).copied()
    }

    /// The WELCOME role letter and leader address.
    pub fn welcome_role(&self) -> (u8, String) {
        let facts = self.facts();
        let letter = match facts.role {
            Some(Role::Leader) => role::LEADER,
            Some(Role::Candidate) | Some(Role::PreCandidate) => role::CANDIDATE,
            Some(Role::Learner) => role::LEARNER,
            Some(Role::Follower) | None => role::FOLLOWER,
        };
        let leader = facts.leader_id.map(|id| self.addr_of(id)).unwrap_or_default();
        (letter, leader)
    }

    /// `id@addr` for each id, comma-separated.
    pub fn members_text(&self, ids: &[u64]) -> String {
        ids.iter().map(|id| format!("{id}@{}", self.addr_of(*id))).collect::<Vec<_>>().join(",")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// STATUS's name for a role.
pub fn role_name(role: Option<Role>) -> &'static str {
    match role {
        Some(Role::Leader) => "leader",
        Some(Role::Candidate) | Some(Role::PreCandidate) => "candidate",
        Some(Role::Learner) => "learner",
        Some(Role::Follower) | None => "follower",
    }
}
