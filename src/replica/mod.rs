//! The lock side of a node: the lock table connected to a log.
//!
//! `Replica` is a pure, deterministic state machine like the table it wraps. Requests
//! go in; commands to append come out as [`ToLog`]; the log answers with
//! [`Replica::on_appended`], [`Replica::on_rejected`], [`Replica::on_committed`],
//! read confirmations and role changes. In a cluster the log is Raft (on its own
//! thread); standalone it is a log that commits on append. Either way the answers to
//! clients come from here, by these rules (docs/protocol.md §8, docs/guarantees.md §3):
//!
//! - Only a leader whose term's no-op has been applied executes requests; until then
//!   they are held back, and a non-leader answers `M` with the leader's address.
//! - A command's answer is sent when it is applied, to the node and connection that
//!   asked (its origin).
//! - A command the log refused to append answers `M`: it was not executed.
//! - After this node stops leading, a command that was appended is answered from the
//!   log when its index commits: the real answer if it committed with the same term,
//!   `M` if another entry took its place. Whatever is still unknown 5 s after
//!   leadership was lost is answered `U`, and a later commit of it stays silent.
//! - QUERY is linearizable: it is answered only after the log confirmed leadership
//!   (ReadIndex) and this node applied everything committed before the read.
//! - While the leader hands leadership over (a transfer, or its own removal), requests
//!   wait and commands the log did not take are held, never failed for the hand-over's
//!   sake: when it ends with this node still leading they are proposed in the order
//!   they were planned; when another node leads they are answered `M` (never
//!   appended). See [`Replica::on_handover`], [`Replica::on_deferred`] and, for the
//!   log's side, [`AppendGate`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

mod answers;
mod gate;
mod owed;

pub use gate::AppendGate;

use crate::lock::codec::encode_snapshot;
use crate::lock::{Command, ConnId, LockState, LockTable, Output, Reply, TableConfig};
use crate::proto::{Request, Response};
use owed::{owed_by, Pending};

/// How long after losing leadership an unresolved request is answered `U` (docs/protocol.md §8).
pub const UNKNOWN_AFTER_MS: u64 = 5_000;
/// Requests held back while a new leader applies its no-op; more are answered `E 4`.
pub const HELD_BACK_MAX: usize = 65_536;
/// Key slots a snapshot encodes per step ([`Replica::snapshot_step`]): about 1 ms of
/// the lock-table thread's time, so encoding a million keys never holds requests up
/// for longer than that at a time.
pub const SNAPSHOT_SLICE_SLOTS: usize = 4096;

/// What the replica asks of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToLog {
    /// Append `command` if this node still leads `term` (a command planned under an
    /// older leadership must never enter a newer term's log); answer with
    /// `on_appended(seq, ..)` or `on_rejected(seq)`.
    Append { seq: u64, term: u64, command: Command },
    /// Confirm leadership for a read; answer with `on_read_ready(ctx, index)` or
    /// `on_read_failed(ctx)`.
    ReadIndex { ctx: u64 },
}

/// The node's role as the replica needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRole {
    /// Leading `term`; requests are served once `noop_index` is applied. If no fencing
    /// domain is recorded yet, this leader records `new_domain` (a fresh random
    /// non-zero number from the caller).
    Leader { term: u64, noop_index: u64, new_domain: u64 },
    /// Not leading; `leader_addr` is the leader's client address, empty if unknown.
    NotLeader { leader_addr: String },
}

/// What a read answers once the node has applied up to its read index.
#[derive(Debug)]
pub(super) enum Read {
    /// QUERY of a key.
    Holder(String),
    /// POOL of a key.
    Pool(String),
}

/// The lock side of one node. See the module docs.
#[derive(Debug)]
pub struct Replica {
    node: u64,
    table: LockTable,
    role: LogRole,
    /// True once the leader applied its no-op and the table leads.
    serving: bool,
    applied_index: u64,
    held_back: VecDeque<(ConnId, u32, Request)>,
    /// The leader is handing leadership over: requests are held, commands too.
    handing_over: bool,
    /// Commands the log did not take (deferred) or that were planned after one it did
    /// not take, by seq: proposed again, in order, once no hand-over is under way.
    deferred: BTreeMap<u64, (u64, Command)>,
    pending: HashMap<u64, Pending>,
    /// (index, seq) of each pending command the log appended.
    //
    // Fix: this was a map index → seq. One index can hold two of our pending commands:
    // a deposed leader's uncommitted entry at index i is cut off by a newer term, this
    // node leads again and appends a new command at i before i commits. The new seq
    // replaced the old one in the map, so the old command was never resolved when i
    // committed (no answer at all while this node kept leading; U only after a later
    // loss of leadership). Keyed by (index, seq), the commit at i answers the old one
    // M (another entry took its place) and the new one from the apply.
    by_index: BTreeSet<(u64, u64)>,
    /// When unresolved commands are given up as `U` (set on losing leadership).
    unknown_deadline: Option<u64>,
    /// QUERYs and POOLs waiting for their ReadIndex: ctx → (conn, id, what is read).
    reads_waiting: HashMap<u64, (ConnId, u32, Read)>,
    /// QUERYs confirmed at a read index, waiting for this node to apply up to it.
    reads_ready: BTreeMap<(u64, u64), (ConnId, u32, Read)>,
    next_seq: u64,
    next_ctx: u64,
    scratch: Output,
    /// The applied index of the snapshot being encoded, if one is.
    snapshot_index: Option<u64>,
    /// The last TOP KEYS list (the longest [`TOP_KEYS_MAX`] queues) and when it was
    /// made: see [`Replica::top_keys`].
    top_keys_cache: Option<(u64, Vec<crate::proto::TopKey>)>,
}

/// How long a TOP KEYS list is served again before the queues are walked anew.
pub const TOP_KEYS_CACHE_MS: u64 = 250;

/// What one call produced: answers for this node's connections, requests to the log.
#[derive(Debug, Default)]
pub struct ReplicaOutput {
    pub replies: Vec<Reply>,
    pub to_log: Vec<ToLog>,
}

impl Replica {
    pub fn new(config: TableConfig) -> Replica {
        Replica {
            node: config.node,
            table: LockTable::new(config),
            role: LogRole::NotLeader { leader_addr: String::new() },
            serving: false,
            applied_index: 0,
            held_back: VecDeque::new(),
            handing_over: false,
            deferred: BTreeMap::new(),
            pending: HashMap::new(),
            by_index: BTreeSet::new(),
            unknown_deadline: None,
            reads_waiting: HashMap::new(),
            reads_ready: BTreeMap::new(),
            next_seq: 1,
            next_ctx: 1,
            scratch: Output::default(),
            snapshot_index: None,
            top_keys_cache: None,
        }
    }

    pub fn node(&self) -> u64 {
        self.node
    }

    pub fn state(&self) -> &LockState {
        self.table.state()
    }

    /// What the lock table counted (monitoring; see [`LockTable::stats_mut`]).
    pub fn table_stats(&mut self) -> &mut crate::lock::table::TableStats {
        self.table.stats_mut()
    }

    pub fn table(&self) -> &LockTable {
        &self.table
    }

    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// True while the log says this node leads (serving or not yet).
    pub fn is_leader(&self) -> bool {
        matches!(self.role, LogRole::Leader { .. })
    }

    /// True while this node leads and serves requests.
    pub fn serving(&self) -> bool {
        self.serving
    }

    /// True while this leader hands leadership over and holds requests.
    pub fn handing_over(&self) -> bool {
        self.handing_over
    }

    /// The applied state as snapshot bytes, at [`Replica::applied_index`], in one go.
    /// The lock-table thread uses [`Replica::begin_snapshot`] instead, which never
    /// stops it for long.
    pub fn snapshot(&self) -> Vec<u8> {
        encode_snapshot(self.table.state())
    }

    /// The answer to TOP KEYS: the leader's queues (monitoring, not a linearizable
    /// read: the queues live on the leader only), or `M` on a follower.
    ///
    /// Walking the queues costs O(keys with waiters) on the lock-table thread, and any
    /// client may ask: the list of the longest [`TOP_KEYS_MAX`] queues is made at most
    /// once per [`TOP_KEYS_CACHE_MS`] and served to every asker in between (cut to its
    /// `n`), so askers cannot make the thread walk the queues more often than that.
    pub fn top_keys(&mut self, n: u8, now_ms: u64) -> Response {
        if let LogRole::NotLeader { leader_addr } = &self.role {
            self.top_keys_cache = None;
            return Response::Moved { leader: leader_addr.clone() };
        }
        let fresh = matches!(&self.top_keys_cache, Some((at, _)) if now_ms < at + TOP_KEYS_CACHE_MS);
        if !fresh {
            let keys = self.table.top_keys(usize::from(crate::proto::TOP_KEYS_MAX), now_ms);
            self.top_keys_cache = Some((now_ms, keys));
        }
        let keys = self.top_keys_cache.as_ref().map_or(&[][..], |(_, k)| &k[..]);
        Response::TopKeys { keys: keys[..keys.len().min(usize::from(n))].to_vec() }
    }

    /// Starts encoding a snapshot of the applied state at [`Replica::applied_index`];
    /// [`Replica::snapshot_step`] goes on with it while commands keep being applied.
    pub fn begin_snapshot(&mut self) {
        self.table.begin_snapshot();
        self.snapshot_index = Some(self.applied_index);
    }

    /// True while a snapshot is being encoded.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snapshot_index.is_some()
    }

    /// Encodes up to `slots_max` more key slots of the snapshot under way; once done,
    /// its index and bytes. `None` also when none is under way (an installed snapshot
    /// cancels one).
    pub fn snapshot_step(&mut self, slots_max: usize) -> Option<(u64, Vec<u8>)> {
        let index = self.snapshot_index?;
        let data = self.table.snapshot_step(slots_max)?;
        self.snapshot_index = None;
        Some((index, data))
    }

    /// A client request for the lock table (ACQUIRE, HOLD, RELEASE, QUERY or POOL).
    pub fn request(
        &mut self,
        conn: ConnId,
        id: u32,
        request: Request,
        now_ms: u64,
        unix_us: u64,
        out: &mut ReplicaOutput,
    ) {
        match &self.role {
            LogRole::NotLeader { leader_addr } => {
                let leader = leader_addr.clone();
                out.replies.push(Reply { conn, id, response: Response::Moved { leader } });
            }
            LogRole::Leader { .. } if !self.serving || self.handing_over => {
                if self.held_back.len() >= HELD_BACK_MAX {
                    out.replies.push(Reply { conn, id, response: overloaded() });
                } else {
                    self.held_back.push_back((conn, id, request));
                }
            }
            LogRole::Leader { .. } => self.execute(conn, id, request, now_ms, unix_us, out),
        }
    }

    fn execute(
        &mut self,
        conn: ConnId,
        id: u32,
        request: Request,
        now_ms: u64,
        unix_us: u64,
        out: &mut ReplicaOutput,
    ) {
        let mut scratch = std::mem::take(&mut self.scratch);
        match request {
            Request::Acquire { lease_s, wait_ms, key, owner } => {
                self.table.acquire(conn, id, lease_s, wait_ms, key, owner, now_ms, unix_us, &mut scratch)
            }
            Request::Release { token, key, owner } => {
                self.table.release(conn, id, token, key, owner, now_ms, unix_us, &mut scratch)
            }
            Request::Query { key } => self.read(conn, id, Read::Holder(key), out),
            Request::Pool { key } => self.read(conn, id, Read::Pool(key), out),
            Request::Hold { lease_s, wait_ms, place, owner, parts } => {
                let parts = parts
                    .into_iter()
                    .map(|p| crate::lock::Part { key: p.key, count: p.count, capacity: p.capacity })
                    .collect();
                self.table.hold(
                    conn,
                    id,
                    lease_s,
                    wait_ms,
                    &owner,
                    parts,
                    place,
                    now_ms,
                    unix_us,
                    &mut scratch,
                )
            }
            Request::Status
            | Request::Ping
            | Request::Replace { .. }
            | Request::Members
            | Request::TopKeys { .. }
            | Request::TransferLeader { .. }
            | Request::Join { .. }
            | Request::Found { .. } => {
                // Answered by connection threads or the Raft thread; never silently
                // dropped here.
                scratch.replies.push(Reply {
                    conn,
                    id,
                    response: Response::Error {
                        code: crate::proto::ErrorCode::Invalid,
                        message: "not a lock-table request".into(),
                    },
                });
            }
        }
        self.flush(&mut scratch, out);
        self.scratch = scratch;
    }

    /// Moves the table's answers and proposals into `out`, tracking what each proposal owes.
    fn flush(&mut self, scratch: &mut Output, out: &mut ReplicaOutput) {
        out.replies.append(&mut scratch.replies);
        let term = match self.role {
            LogRole::Leader { term, .. } => term,
            LogRole::NotLeader { .. } => 0,
        };
        while let Some(command) = scratch.proposals.pop_front() {
            let seq = self.next_seq;
            self.next_seq += 1;
            let owed = owed_by(&command, self.node);
            self.pending.insert(seq, Pending { owed, at: None, abandoned: false });
            // Why behind the deferred ones: the log must take commands in the order the
            // table planned them (tokens grow, hand-offs follow releases).
            if self.handing_over || !self.deferred.is_empty() {
                self.deferred.insert(seq, (term, command));
            } else {
                out.to_log.push(ToLog::Append { seq, term, command });
            }
        }
    }

    /// A read (QUERY, POOL) goes to the log for a ReadIndex first.
    fn read(&mut self, conn: ConnId, id: u32, read: Read, out: &mut ReplicaOutput) {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        self.reads_waiting.insert(ctx, (conn, id, read));
        out.to_log.push(ToLog::ReadIndex { ctx });
    }

    /// A client connection closed: its waiters leave their lines (which may let later
    /// requests through: their grants are proposed).
    pub fn conn_closed(&mut self, conn: ConnId, now_ms: u64, unix_us: u64, out: &mut ReplicaOutput) {
        self.held_back.retain(|(c, _, _)| *c != conn);
        let mut scratch = std::mem::take(&mut self.scratch);
        self.table.conn_closed(conn, now_ms, unix_us, &mut scratch);
        self.flush(&mut scratch, out);
        self.scratch = scratch;
    }

    /// Time passes: lease and wait timers (leader), and `U` for commands still unknown
    /// 5 s after leadership was lost.
    pub fn tick(&mut self, now_ms: u64, unix_us: u64, out: &mut ReplicaOutput) {
        if self.serving {
            let mut scratch = std::mem::take(&mut self.scratch);
            self.table.tick(now_ms, unix_us, &mut scratch);
            self.flush(&mut scratch, out);
            self.scratch = scratch;
        }
        if let Some(deadline) = self.unknown_deadline {
            if now_ms >= deadline {
                self.unknown_deadline = None;
                for p in self.pending.values_mut() {
                    if !p.abandoned {
                        p.abandoned = true;
                        for (conn, id) in std::mem::take(&mut p.owed) {
                            out.replies.push(Reply { conn, id, response: Response::Unknown });
                        }
                    }
                }
                // Abandoned commands stay tracked until the log resolves them, so that
                // their late commit stays silent.
            }
        }
    }

    /// The earliest moment `tick` has work to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let table = if self.serving { self.table.next_deadline() } else { None };
        match (table, self.unknown_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Waiters queued on this node (leader only).
    pub fn waiters(&self) -> usize {
        self.table.waiters()
    }

    /// Walks the replica (O(keys + waiters)) and stops the node, naming the invariant,
    /// if one is broken: the lock table's own ([`LockTable::check_invariants`]), and a
    /// replica serves requests only while the log says this node leads. The
    /// simulators call it after every step.
    pub fn check_invariants(&self) {
        self.table.check_invariants();
        crate::invariant!(
            !self.serving || self.is_leader(),
            "a replica serves only while it leads",
            "node {} serves as {:?}",
            self.node,
            self.role
        );
    }
}

fn overloaded() -> Response {
    Response::Error { code: crate::proto::ErrorCode::Overloaded, message: "new leader not ready yet".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica serving while the log says another node leads: the state no input
    /// builds, which the walk must refuse.
    #[test]
    fn the_walk_refuses_a_replica_serving_without_leading() {
        let mut replica =
            Replica::new(TableConfig { node: 1, incarnation: 1, waiters_per_key_max: 8, keys_max: 8 });
        replica.check_invariants();
        replica.serving = true;
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| replica.check_invariants()));
        assert!(walked.is_err());
    }
}
