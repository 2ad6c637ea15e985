//! What a node counts, for Prometheus (docs/metrics.md).
//!
//! Every figure is an atomic the thread that owns the event bumps with a relaxed
//! add: counting never takes a lock on the lock path, and the scrape (on its own
//! thread, [`http`]) reads them all and renders the text exposition format 0.0.4.
//! Histograms are fixed buckets of atomic counts. Labels are of low cardinality only:
//! kinds, codes, roles and member NodeIds — never a key or an owner.

pub mod http;
pub mod process;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds of the latency histograms, in seconds: 100 µs to 5 min, about three
/// buckets per decade (waits in a queue last up to 300 s, holds up to 250 s).
pub const SECONDS_BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0,
];

/// A histogram of durations with the fixed [`SECONDS_BUCKETS`].
#[derive(Debug)]
pub struct Histogram {
    /// Observations per bucket (not cumulative; the last is +Inf).
    buckets: [AtomicU64; SECONDS_BUCKETS.len() + 1],
    count: AtomicU64,
    /// Sum in microseconds (integer, so an atomic add suffices).
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration of `us` microseconds.
    pub fn observe_us(&self, us: u64) {
        let seconds = us as f64 / 1e6;
        let i = SECONDS_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(SECONDS_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let mut cumulative = 0;
        for (i, bound) in SECONDS_BUCKETS.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.buckets[SECONDS_BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        // The count is the +Inf bucket: the two can never disagree in one scrape.
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// Grants by how they came.
#[derive(Debug, Default)]
pub struct GrantKinds {
    /// The key was free.
    pub immediate: Counter,
    /// Handed over by a release or an expiry to the head of the queue.
    pub handoff: Counter,
}

/// HOLD requests by outcome (the `outcome` label, [`HOLD_OUTCOMES`]).
#[derive(Debug, Default)]
pub struct HoldCounters {
    pub granted: Counter,
    pub queued: Counter,
    pub busy: Counter,
    pub refused: Counter,
}

/// The values of the `outcome` label of `ticketing_hold_requests_total`.
pub const HOLD_OUTCOMES: [&str; 4] = ["granted", "queued", "busy", "refused"];

/// The lock side (counted by the lock-table thread on the leader; answers are counted
/// where they are answered).
#[derive(Debug, Default)]
pub struct LockMetrics {
    pub grants: GrantKinds,
    pub busy: Counter,
    pub wait_timeouts: Counter,
    pub releases: Counter,
    pub not_holder: Counter,
    /// Holds that ended because the lease ran out: a client that died (or hung) holding
    /// a lock.
    pub lease_expiries: Counter,
    pub moved: Counter,
    pub unknown: Counter,
    /// `E` answers by code (index = code, 1..=5; 0 for any other).
    pub errors: [Counter; 6],
    pub keys_held: Gauge,
    pub waiters: Gauge,
    pub keys_with_waiters: Gauge,
    /// Counted and multi-key holds held (applied state).
    pub pooled_holds: Gauge,
    /// Permits those holds take on all keys (applied state).
    pub permits_in_use: Gauge,
    /// HOLD requests by what became of them when they arrived.
    pub holds: HoldCounters,
    /// Places in line (`I` frames) sent to waiters.
    pub places_sent: Counter,
    /// Grants of more than one key at once.
    pub multi_key_grants: Counter,
    /// From joining a queue to the grant or the timeout.
    pub wait_seconds: Histogram,
    /// From the grant to the release or the expiry.
    pub hold_seconds: Histogram,
}

impl Metrics {
    /// Counts one answer to a client: by kind, and every `E 4` (whoever sent it: the
    /// connection's pending bound, the node's key limit, a leader not serving yet) as
    /// refused for overload.
    pub fn count_answer(&self, response: &crate::proto::Response) {
        self.lock.count_answer(response);
        if let crate::proto::Response::Error { code: crate::proto::ErrorCode::Overloaded, .. } = response {
            self.server.overloaded.inc();
        }
    }
}

impl LockMetrics {
    /// Counts one answer to a client by what it says (grants and expiries are counted
    /// from the lock table, which knows how they came).
    pub fn count_answer(&self, response: &crate::proto::Response) {
        use crate::proto::Response;
        match response {
            Response::Busy => self.busy.inc(),
            Response::Timeout => self.wait_timeouts.inc(),
            Response::Released => self.releases.inc(),
            Response::NotHolder => self.not_holder.inc(),
            Response::Moved { .. } => self.moved.inc(),
            Response::Unknown => self.unknown.inc(),
            Response::InLine { .. } => self.places_sent.inc(),
            Response::Error { code, .. } => {
                let code = usize::from(code.to_u8());
                self.errors[if code < self.errors.len() { code } else { 0 }].inc();
            }
            _ => {}
        }
    }
}

/// Roles, as the `role` label says them: a Raft learner is a `standby`, the word every
/// view uses (docs/metrics.md).
pub const ROLES: [&str; 5] = ["leader", "follower", "candidate", "standby", "standalone"];

/// The index in [`ROLES`] of the leader.
pub const ROLE_LEADER: u64 = 0;

/// The Raft side (set by the Raft thread).
#[derive(Debug, Default)]
pub struct RaftMetrics {
    pub term: Gauge,
    /// Index into [`ROLES`].
    pub role: Gauge,
    /// 0 when no leader is known.
    pub leader_id: Gauge,
    /// Voters of the node's configuration (while a change runs, the incoming set's).
    pub voters: Gauge,
    /// Standbys (Raft learners) of the node's configuration.
    pub standbys: Gauge,
    /// Leader only: voters heard within an election timeout, itself included.
    pub healthy_voters: Gauge,
    /// Leader only: standbys caught up and heard, ready to take a voter's place.
    pub ready_standbys: Gauge,
    pub leader_changes: Counter,
    pub commit_index: Gauge,
    pub applied_index: Gauge,
    pub proposals_pending: Gauge,
    pub elections_started: Counter,
    pub snapshots_sent: Counter,
    pub snapshot_bytes_sent: Counter,
    pub snapshots_installed: Counter,
    pub snapshot_bytes_installed: Counter,
    /// From the proposal to the commit, on the leader.
    pub commit_seconds: Histogram,
    /// Per peer: (node id, entries behind the leader's last index — leader only, link up).
    pub peers: Mutex<Vec<PeerFigures>>,
}

/// One peer's figures as the Raft thread last published them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerFigures {
    pub node: u64,
    /// Entries the peer is behind the leader's last index (leader only).
    pub match_lag: Option<u64>,
    /// An outbound link to it is established.
    pub link_up: bool,
}

/// Why a client handshake failed (the `reason` label).
/// `closed`: the client went away mid-handshake, after it had sent part of it. One that
/// closes before sending any byte is no failure: [`ServerMetrics::abandoned`].
pub const HANDSHAKE_FAILURES: [&str; 5] = ["auth", "timeout", "tls", "protocol", "closed"];

/// The client port (counted by the accept loop and the connection threads).
#[derive(Debug, Default)]
pub struct ServerMetrics {
    pub connections_handshake: Gauge,
    pub connections_authenticated: Gauge,
    /// By [`HANDSHAKE_FAILURES`].
    pub handshake_failures: [Counter; 5],
    /// Connections the client closed before it sent a byte of its handshake: a port
    /// probe, a client that went away (a one-shot command that ended while it still
    /// dialed other nodes). Not failures.
    pub abandoned: Counter,
    pub requests_pending: Gauge,
    /// Requests answered `E 4` for too many pending, or connections refused at accept.
    pub overloaded: Counter,
    pub connections_refused: Counter,
}

/// Everything a node counts.
#[derive(Debug, Default)]
pub struct Metrics {
    pub lock: LockMetrics,
    pub raft: RaftMetrics,
    pub server: ServerMetrics,
    /// Cluster mode (Raft figures are rendered only then).
    pub cluster: std::sync::atomic::AtomicBool,
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn single(out: &mut String, name: &str, help: &str, kind: &str, value: u64) {
    header(out, name, help, kind);
    let _ = writeln!(out, "{name} {value}");
}

fn labelled(out: &mut String, name: &str, help: &str, kind: &str, label: &str, values: &[(&str, u64)]) {
    header(out, name, help, kind);
    for (l, v) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{l}\"}} {v}");
    }
}

impl Metrics {
    /// The text exposition format 0.0.4, with the process figures of `process`.
    pub fn render(&self, process: &process::ProcessFigures) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.render_lock(&mut out);
        if self.cluster.load(Ordering::Relaxed) {
            self.render_raft(&mut out);
        }
        self.render_server(&mut out);
        process.render(&mut out);
        out
    }

    fn render_lock(&self, out: &mut String) {
        let l = &self.lock;
        labelled(
            out,
            "ticketing_grants_total",
            "Locks granted, by kind: immediate (the key was free) or handoff (to the head of the queue).",
            "counter",
            "kind",
            &[("immediate", l.grants.immediate.get()), ("handoff", l.grants.handoff.get())],
        );
        let counters: [(&str, &str, &Counter); 7] = [
            ("ticketing_busy_total", "ACQUIREs answered B (held and no wait, or the queue full).", &l.busy),
            ("ticketing_wait_timeouts_total", "Waiters whose wait ran out (answered T).", &l.wait_timeouts),
            ("ticketing_releases_total", "Releases committed (answered R).", &l.releases),
            ("ticketing_not_holder_total", "Releases answered N (not the holder).", &l.not_holder),
            (
                "ticketing_lease_expiries_total",
                "Holds ended by their lease running out: clients that died or hung holding a lock.",
                &l.lease_expiries,
            ),
            ("ticketing_moved_total", "Requests answered M (not the leader, not executed).", &l.moved),
            (
                "ticketing_unknown_total",
                "Requests answered U (outcome unknown after a leader change).",
                &l.unknown,
            ),
        ];
        for (name, help, c) in counters {
            single(out, name, help, "counter", c.get());
        }
        let codes: Vec<(String, u64)> = (1..=5)
            .map(|c| (c.to_string(), l.errors[c].get()))
            .chain([("other".to_string(), l.errors[0].get())])
            .collect();
        let codes: Vec<(&str, u64)> = codes.iter().map(|(c, v)| (c.as_str(), *v)).collect();
        labelled(
            out,
            "ticketing_errors_total",
            "E answers, by code (docs/protocol.md §7).",
            "counter",
            "code",
            &codes,
        );
        single(out, "ticketing_keys_held", "Keys with a holder (applied state).", "gauge", l.keys_held.get());
        single(
            out,
            "ticketing_waiters",
            "Requests waiting in line on all keys, ACQUIREs and HOLDs (leader).",
            "gauge",
            l.waiters.get(),
        );
        single(
            out,
            "ticketing_keys_with_waiters",
            "Keys with at least one waiter (leader).",
            "gauge",
            l.keys_with_waiters.get(),
        );
        single(
            out,
            "ticketing_pooled_holds",
            "Counted and multi-key holds held (applied state).",
            "gauge",
            l.pooled_holds.get(),
        );
        single(
            out,
            "ticketing_permits_in_use",
            "Permits held by counted and multi-key holds, on all keys (applied state).",
            "gauge",
            l.permits_in_use.get(),
        );
        let h = &l.holds;
        let outcomes = [h.granted.get(), h.queued.get(), h.busy.get(), h.refused.get()];
        let outcomes: Vec<(&str, u64)> = HOLD_OUTCOMES.iter().copied().zip(outcomes).collect();
        labelled(
            out,
            "ticketing_hold_requests_total",
            "HOLD requests by what became of them on arrival: granted at once, queued, busy (B), refused (E).",
            "counter",
            "outcome",
            &outcomes,
        );
        single(
            out,
            "ticketing_places_sent_total",
            "Places in line (IN LINE frames) sent to waiting requests.",
            "counter",
            l.places_sent.get(),
        );
        single(
            out,
            "ticketing_multi_key_grants_total",
            "Grants of more than one key at once, under one token.",
            "counter",
            l.multi_key_grants.get(),
        );
        l.wait_seconds.render(
            out,
            "ticketing_wait_seconds",
            "Time from joining a key's queue to the grant or the timeout.",
        );
        l.hold_seconds.render(
            out,
            "ticketing_hold_seconds",
            "Time a lock was held: from its grant to its release or expiry.",
        );
    }

    fn render_raft(&self, out: &mut String) {
        let r = &self.raft;
        single(out, "ticketing_raft_term", "The node's current term.", "gauge", r.term.get());
        let role = r.role.get() as usize;
        let roles: Vec<(&str, u64)> =
            ROLES.iter().enumerate().map(|(i, name)| (*name, u64::from(i == role))).collect();
        labelled(out, "ticketing_raft_role", "1 for the node's current role.", "gauge", "role", &roles);
        // The id as a label: a 63-bit id does not survive a float sample value.
        header(
            out,
            "ticketing_raft_leader",
            "1, labelled with the leader's NodeId as this node knows it.",
            "gauge",
        );
        if r.leader_id.get() != 0 {
            let _ = writeln!(out, "ticketing_raft_leader{{node_id=\"{}\"}} 1", r.leader_id.get());
        }
        single(
            out,
            "ticketing_raft_leader_id",
            "Deprecated (a float cannot hold every NodeId): use ticketing_raft_leader. The leader's NodeId; 0 when none.",
            "gauge",
            r.leader_id.get(),
        );
        single(out, "ticketing_raft_voters", "Voters of the node's configuration.", "gauge", r.voters.get());
        single(
            out,
            "ticketing_raft_standbys",
            "Standbys (learners) of the node's configuration.",
            "gauge",
            r.standbys.get(),
        );
        if r.role.get() == ROLE_LEADER {
            single(
                out,
                "ticketing_raft_healthy_voters",
                "Leader only: voters heard within an election timeout, the leader included.",
                "gauge",
                r.healthy_voters.get(),
            );
            single(
                out,
                "ticketing_raft_ready_standbys",
                "Leader only: standbys caught up and heard, ready to take a voter's place.",
                "gauge",
                r.ready_standbys.get(),
            );
        }
        single(
            out,
            "ticketing_raft_leader_changes_total",
            "Times the leader this node knows changed.",
            "counter",
            r.leader_changes.get(),
        );
        single(out, "ticketing_raft_commit_index", "The node's commit index.", "gauge", r.commit_index.get());
        single(
            out,
            "ticketing_raft_applied_index",
            "The last index the lock side applied.",
            "gauge",
            r.applied_index.get(),
        );
        single(
            out,
            "ticketing_raft_proposals_pending",
            "Entries appended by this leader and not committed yet.",
            "gauge",
            r.proposals_pending.get(),
        );
        single(
            out,
            "ticketing_raft_elections_started_total",
            "Elections (not pre-votes) this node started.",
            "counter",
            r.elections_started.get(),
        );
        single(
            out,
            "ticketing_raft_snapshots_sent_total",
            "Snapshots this node sent to lagging peers.",
            "counter",
            r.snapshots_sent.get(),
        );
        single(
            out,
            "ticketing_raft_snapshot_bytes_sent_total",
            "Bytes of those snapshots.",
            "counter",
            r.snapshot_bytes_sent.get(),
        );
        single(
            out,
            "ticketing_raft_snapshots_installed_total",
            "Snapshots this node installed from a leader.",
            "counter",
            r.snapshots_installed.get(),
        );
        single(
            out,
            "ticketing_raft_snapshot_bytes_installed_total",
            "Bytes of those snapshots.",
            "counter",
            r.snapshot_bytes_installed.get(),
        );
        r.commit_seconds.render(
            out,
            "ticketing_raft_commit_seconds",
            "Time from a proposal to its commit, on the leader.",
        );
        let peers = r.peers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        header(
            out,
            "ticketing_raft_peer_link_up",
            "1 while this node has an outbound link to the peer.",
            "gauge",
        );
        for p in &peers {
            let _ =
                writeln!(out, "ticketing_raft_peer_link_up{{peer=\"{}\"}} {}", p.node, u64::from(p.link_up));
        }
        header(
            out,
            "ticketing_raft_peer_match_lag",
            "Entries a peer is behind the leader's last index (leader only).",
            "gauge",
        );
        for p in &peers {
            if let Some(lag) = p.match_lag {
                let _ = writeln!(out, "ticketing_raft_peer_match_lag{{peer=\"{}\"}} {lag}", p.node);
            }
        }
    }

    fn render_server(&self, out: &mut String) {
        let s = &self.server;
        labelled(
            out,
            "ticketing_client_connections",
            "Client connections open, by phase.",
            "gauge",
            "phase",
            &[
                ("handshake", s.connections_handshake.get()),
                ("authenticated", s.connections_authenticated.get()),
            ],
        );
        let reasons: Vec<(&str, u64)> =
            HANDSHAKE_FAILURES.iter().zip(&s.handshake_failures).map(|(r, c)| (*r, c.get())).collect();
        labelled(
            out,
            "ticketing_handshake_failures_total",
            "Client handshakes that failed, by reason.",
            "counter",
            "reason",
            &reasons,
        );
        single(
            out,
            "ticketing_client_connections_abandoned_total",
            "Client connections closed by the client before it sent a byte of its handshake (no failure).",
            "counter",
            s.abandoned.get(),
        );
        single(
            out,
            "ticketing_requests_pending",
            "Requests handed to the lock side and not answered yet.",
            "gauge",
            s.requests_pending.get(),
        );
        single(
            out,
            "ticketing_overloaded_total",
            "Requests answered E 4 because too many were pending (on the connection or the node).",
            "counter",
            s.overloaded.get(),
        );
        single(
            out,
            "ticketing_connections_refused_total",
            "Client connections closed at accept: a connection or handshake cap was reached.",
            "counter",
            s.connections_refused.get(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_a_sum_and_a_count() {
        let h = Histogram::default();
        for us in [50, 1_000, 1_000, 400_000_000] {
            h.observe_us(us);
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "test");
        assert!(out.contains("x_seconds_bucket{le=\"0.0001\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"300\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"), "{out}");
        assert!(out.contains("x_seconds_sum 400.00205\n"), "{out}");
    }
}
