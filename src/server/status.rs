//! What STATUS reports (docs/protocol.md §6.1). The lock-table thread publishes its figures in
//! atomics after every batch, so connection threads answer STATUS without asking it.

use crate::cluster::view::Standing;
use crate::metrics::Metrics;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Figures published by the lock-table thread and the accept loop.
#[derive(Debug, Default)]
pub struct Counters {
    pub applied_index: AtomicU64,
    pub keys_held: AtomicU64,
    pub waiters: AtomicU64,
    /// Keys with at least one waiter (the leader's queues; 0 on a follower).
    pub keys_with_waiters: AtomicU64,
    /// Counted and multi-key holds held, and the permits they take (applied state).
    pub pooled_holds: AtomicU64,
    pub permits_in_use: AtomicU64,
    pub last_token: AtomicU64,
    /// The fencing domain, 0 until recorded.
    pub domain: AtomicU64,
    pub connections: AtomicU64,
}

/// Facts fixed at start.
#[derive(Debug)]
pub struct NodeInfo {
    pub node_id: u64,
    /// This node's client address as clients should dial it.
    pub addr: String,
    /// `TICKETING_CLUSTER_NAME`; empty when none.
    pub cluster_name: String,
    pub started: Instant,
}

/// The Raft part of STATUS: fixed for a standalone node, published by the Raft thread
/// in a cluster.
struct RaftLines {
    role: &'static str,
    term: u64,
    leader: String,
    leader_id: String,
    commit_index: u64,
    voters: String,
    learners: String,
}

/// The STATUS text of a standalone node: `name=value` lines.
pub fn standalone_text(info: &NodeInfo, counters: &Counters, metrics: &Metrics) -> String {
    let applied = counters.applied_index.load(Ordering::Relaxed);
    let raft = RaftLines {
        role: "standalone",
        term: 0,
        leader: info.addr.clone(),
        leader_id: info.node_id.to_string(),
        commit_index: applied,
        voters: format!("{}@{}", info.node_id, info.addr),
        learners: String::new(),
    };
    text(info, counters, metrics, &raft)
}

/// The STATUS text of a cluster node: Raft facts from the Raft thread's last publication.
pub fn cluster_text(
    info: &NodeInfo,
    counters: &Counters,
    metrics: &Metrics,
    view: &crate::cluster::view::ClusterView,
) -> String {
    let facts = view.facts();
    // A joining node names the leader it asks to add it: a client given its address
    // goes there.
    let leader = match view.standing() {
        Standing::Joining(id, addr) => Some((id, addr)),
        _ => facts.leader_id.map(|id| (id, view.addr_of(id))),
    };
    let raft = RaftLines {
        role: view.role_text(facts.role),
        term: facts.term,
        leader: leader.as_ref().map(|(_, addr)| addr.clone()).unwrap_or_default(),
        leader_id: leader.map_or(String::new(), |(id, _)| id.to_string()),
        commit_index: facts.commit_index,
        voters: view.members_text(&facts.voters),
        learners: view.members_text(&facts.learners),
    };
    text(info, counters, metrics, &raft)
}

/// The answer to the admin op MEMBERS (docs/protocol.md): this node's view of the
/// configuration, with each member's address and recorded process incarnation.
///
/// ```text
/// node_id=2            role=follower        term=7
/// leader_id=1          leader=10.0.0.1:5225 commit_index=812
/// leader_heard_ms=N    (a node that does not lead) how long ago it last heard from a
///                      leader: how old its view is; absent if it never heard from one
/// self=ADDR           this node's own client address (TICKETING_CLUSTER_SELF)
/// member=ID ROLE ADDR incarnation=HEX|unrecorded [heard_ms=N | unreachable_ms=N |
///                      unheard_ms=N]
///                      one line per voter, then learner; the leader adds how long
///                      ago it last heard from each: unreachable_ms past three
///                      heartbeat intervals, heard_ms before — unheard_ms instead for
///                      a member it has had no answer from since it began
///                      replicating to it
/// joining=ID@ADDR      (a node that knows no configuration yet) the leader a member
///                      named, which it asks to add it
/// retired=ID,...       nodes removed by a committed configuration
/// standbys=ID,...      (leader) learners caught up, ready to replace a dead voter
/// autopilot=on dead_after_ms=N | off | paused dead_after_ms=N (…)
/// ```
pub fn members_text(info: &NodeInfo, view: &crate::cluster::view::ClusterView) -> String {
    let facts = view.facts();
    let autopilot = view.autopilot();
    let mut text = String::with_capacity(256);
    let _ = writeln!(text, "node_id={}", info.node_id);
    let _ = writeln!(text, "self={}", view.addr_of(info.node_id));
    let _ = writeln!(text, "role={}", view.role_text(facts.role));
    let _ = writeln!(text, "term={}", facts.term);
    let _ = writeln!(text, "leader_id={}", facts.leader_id.map_or(String::new(), |id| id.to_string()));
    let _ = writeln!(text, "leader={}", facts.leader_id.map(|id| view.addr_of(id)).unwrap_or_default());
    let _ = writeln!(text, "commit_index={}", facts.commit_index);
    if let Some(ms) = view.leader_heard_ms() {
        let _ = writeln!(text, "leader_heard_ms={ms}");
    }
    if let Standing::Joining(id, addr) = view.standing() {
        let _ = writeln!(text, "joining={id}@{addr}");
    }
    for (role, ids) in [("voter", &facts.voters), ("learner", &facts.learners)] {
        for id in ids {
            let incarnation = match view.record_of(*id) {
                Some(r) if r.incarnation != 0 => format!("{:016x}", r.incarnation),
                _ => "unrecorded".into(),
            };
            let addr = view.addr_of(*id);
            let _ = write!(text, "member={id} {role} {addr} incarnation={incarnation}");
            match autopilot.heard_ms.iter().find(|(n, _)| n == id) {
                Some((_, ms)) if *ms > autopilot.unreachable_after_ms => {
                    let _ = write!(text, " unreachable_ms={ms}");
                }
                Some((_, ms)) if autopilot.unheard.contains(id) => {
                    let _ = write!(text, " unheard_ms={ms}");
                }
                Some((_, ms)) => {
                    let _ = write!(text, " heard_ms={ms}");
                }
                None => {}
            }
            text.push('\n');
        }
    }
    if facts.role == Some(crate::raft::Role::Leader) {
        let standbys: Vec<String> = autopilot.standbys.iter().map(u64::to_string).collect();
        let _ = writeln!(text, "standbys={}", standbys.join(","));
    }
    let _ = match (autopilot.dead_ms, autopilot.paused) {
        (None, _) => writeln!(text, "autopilot=off"),
        (Some(ms), false) => writeln!(text, "autopilot=on dead_after_ms={ms}"),
        (Some(ms), true) => writeln!(text, "autopilot=paused dead_after_ms={ms} (an admin replace runs)"),
    };
    let retired: Vec<String> = view.admission().retired.iter().map(u64::to_string).collect();
    let _ = writeln!(text, "retired={}", retired.join(","));
    text
}

fn text(info: &NodeInfo, counters: &Counters, metrics: &Metrics, raft: &RaftLines) -> String {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let mut text = String::with_capacity(512);
    let mut line = |name: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(text, "{name}={value}");
    };
    line("node_id", &info.node_id);
    line("role", &raft.role);
    line("term", &raft.term);
    line("leader", &raft.leader);
    line("leader_id", &raft.leader_id);
    line("commit_index", &raft.commit_index);
    line("applied_index", &get(&counters.applied_index));
    line("voters", &raft.voters);
    line("learners", &raft.learners);
    line("domain", &get(&counters.domain));
    line("cluster_name", &info.cluster_name);
    line("last_token", &get(&counters.last_token));
    line("keys_held", &get(&counters.keys_held));
    line("waiters", &get(&counters.waiters));
    line("connections", &get(&counters.connections));
    line("uptime_s", &info.started.elapsed().as_secs());
    line("version", &env!("CARGO_PKG_VERSION"));
    // Counted by this node while it leads (docs/metrics.md): summed over the nodes, the
    // cluster's figures. `ticketing top` turns them into rates.
    let lock = &metrics.lock;
    line("grants_total", &(lock.grants.immediate.get() + lock.grants.handoff.get()));
    line("handoffs_total", &lock.grants.handoff.get());
    line("lease_expiries_total", &lock.lease_expiries.get());
    line("pooled_holds", &get(&counters.pooled_holds));
    line("permits_in_use", &get(&counters.permits_in_use));
    text
}
