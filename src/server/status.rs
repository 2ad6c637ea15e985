//! What STATUS reports (SPEC §2.5). The lock-table thread publishes its figures in
//! atomics after every batch, so connection threads answer STATUS without asking it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Figures published by the lock-table thread and the accept loop.
#[derive(Debug, Default)]
pub struct Counters {
    pub applied_index: AtomicU64,
    pub keys_held: AtomicU64,
    pub waiters: AtomicU64,
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
    pub started: Instant,
}

/// The STATUS text of a standalone node: `name=value` lines.
pub fn standalone_text(info: &NodeInfo, counters: &Counters) -> String {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let applied = get(&counters.applied_index);
    let mut text = String::with_capacity(512);
    let mut line = |name: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(text, "{name}={value}");
    };
    line("node_id", &info.node_id);
    line("role", &"standalone");
    line("term", &0);
    line("leader", &info.addr);
    line("leader_id", &info.node_id);
    line("commit_index", &applied);
    line("applied_index", &applied);
    line("voters", &format!("{}@{}", info.node_id, info.addr));
    line("learners", &"");
    line("domain", &get(&counters.domain));
    line("last_token", &get(&counters.last_token));
    line("keys_held", &get(&counters.keys_held));
    line("waiters", &get(&counters.waiters));
    line("connections", &get(&counters.connections));
    line("uptime_s", &info.started.elapsed().as_secs());
    line("version", &env!("CARGO_PKG_VERSION"));
    text
}

/// The STATUS text of a cluster node: Raft facts from the Raft thread's last publication.
pub fn cluster_text(
    info: &NodeInfo,
    counters: &Counters,
    view: &crate::cluster::view::ClusterView,
) -> String {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let facts = view.facts();
    let mut text = String::with_capacity(512);
    let mut line = |name: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(text, "{name}={value}");
    };
    let leader = facts
        .leader_id
        .map(|id| view.addr_of(id))
        .unwrap_or_default();
    line("node_id", &info.node_id);
    line("role", &crate::cluster::view::role_name(facts.role));
    line("term", &facts.term);
    line("leader", &leader);
    line(
        "leader_id",
        &facts.leader_id.map_or(String::new(), |id| id.to_string()),
    );
    line("commit_index", &facts.commit_index);
    line("applied_index", &get(&counters.applied_index));
    line("voters", &view.members_text(&facts.voters));
    line("learners", &view.members_text(&facts.learners));
    line("domain", &get(&counters.domain));
    line("last_token", &get(&counters.last_token));
    line("keys_held", &get(&counters.keys_held));
    line("waiters", &get(&counters.waiters));
    line("connections", &get(&counters.connections));
    line("uptime_s", &info.started.elapsed().as_secs());
    line("version", &env!("CARGO_PKG_VERSION"));
    text
}
