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

use crate::lock::codec::encode_snapshot;
use crate::lock::{Command, ConnId, LockState, LockTable, Output, Reply, TableConfig};
use crate::proto::{Request, Response};

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

/// The log's half of deferral (it lives with the Raft core, e.g. on the Raft thread):
/// keeps a leader's appends in the order the replica planned them across a hand-over.
///
/// A leader that hands leadership over refuses proposals (`RaftError::HandingOver`);
/// the log then answers the replica [`Replica::on_deferred`] and the replica proposes
/// the command again later. Commands the replica sent before it heard of the hand-over
/// are still on their way; were one of them taken while an earlier one is deferred, the
/// log would hold them out of order (a later token before an earlier one). So while any
/// deferred command has not come back and been appended, every later one is deferred
/// too — `admit` says no.
///
/// Use, for each `ToLog::Append { seq, term, command }` on a leader of `term`:
/// `if !gate.admit(seq)` → `gate.deferred(seq)`, deferred; else propose: `Ok` →
/// `gate.appended(seq)`, `Err(HandingOver)` → `gate.deferred(seq)`, deferred; a refusal
/// for any other reason → rejected. `reset` when leadership is lost or a new term
/// begins (the replica answers what it held).
#[derive(Debug, Default, Clone)]
pub struct AppendGate {
    /// Commands deferred and not appended since. Bounded by the replica's outstanding
    /// commands: each comes back once the hand-over ends.
    waiting: BTreeSet<u64>,
}

impl AppendGate {
    /// May command `seq` be proposed now? Not while an earlier command waits.
    pub fn admit(&self, seq: u64) -> bool {
        self.waiting.first().is_none_or(|w| seq <= *w)
    }

    /// Command `seq` was deferred.
    pub fn deferred(&mut self, seq: u64) {
        self.waiting.insert(seq);
    }

    /// Command `seq` was appended.
    pub fn appended(&mut self, seq: u64) {
        self.waiting.remove(&seq);
    }

    /// Leadership ended or a new term began: nothing waits any more.
    pub fn reset(&mut self) {
        self.waiting.clear();
    }
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

/// A command that was handed to the log and whose answers are still owed.
#[derive(Debug)]
struct Pending {
    /// Requests of this node the command answers.
    owed: Owed,
    /// (index, term) once the log appended it.
    at: Option<(u64, u64)>,
    /// Answered `U` already: a later commit must stay silent.
    abandoned: bool,
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
    /// QUERYs waiting for their ReadIndex: ctx → (conn, id, key).
    reads_waiting: HashMap<u64, (ConnId, u32, String)>,
    /// QUERYs confirmed at a read index, waiting for this node to apply up to it.
    reads_ready: BTreeMap<(u64, u64), (ConnId, u32, String)>,
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

    /// A client request for the lock table (ACQUIRE, RELEASE or QUERY).
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
            Request::Query { key } => {
                let ctx = self.next_ctx;
                self.next_ctx += 1;
                self.reads_waiting.insert(ctx, (conn, id, key));
                out.to_log.push(ToLog::ReadIndex { ctx });
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

    /// The log did not append command `seq` (planned under `term`, handed back here)
    /// because the leader is handing leadership over. It is not refused: it is proposed
    /// again, before anything planned after it, once no hand-over is under way (at once
    /// if this replica has not heard of one, or heard it end), or answered `M` if
    /// another node comes to lead.
    pub fn on_deferred(&mut self, seq: u64, term: u64, command: Command, out: &mut ReplicaOutput) {
        if !self.pending.contains_key(&seq) {
            return;
        }
        self.deferred.insert(seq, (term, command));
        self.propose_deferred(out);
    }

    /// The leader began (`true`) or ended (`false`, still leading) a hand-over. While it
    /// lasts, requests are held and new commands wait; when it ends, the commands are
    /// proposed in planning order and the held requests run in arrival order. Losing
    /// leadership instead comes as [`Replica::on_role`], which answers all of them `M`.
    pub fn on_handover(&mut self, active: bool, now_ms: u64, unix_us: u64, out: &mut ReplicaOutput) {
        if !matches!(self.role, LogRole::Leader { .. }) {
            return;
        }
        self.handing_over = active;
        if !active {
            self.propose_deferred(out);
            self.after_apply(now_ms, unix_us, out);
        }
    }

    /// Proposes the deferred commands again, in order, unless a hand-over is under way.
    fn propose_deferred(&mut self, out: &mut ReplicaOutput) {
        if self.handing_over {
            return;
        }
        let LogRole::Leader { term: leading, .. } = self.role else {
            return;
        };
        for (seq, (term, command)) in std::mem::take(&mut self.deferred) {
            // Planned under another leadership: never proposed in this one. (on_role
            // answers those; this only guards the invariant.)
            if term != leading {
                self.on_rejected(seq, out);
                continue;
            }
            out.to_log.push(ToLog::Append { seq, term, command });
        }
    }

    /// Answers `M` for every deferred command: it was never appended.
    fn drop_deferred(&mut self, out: &mut ReplicaOutput) {
        for seq in std::mem::take(&mut self.deferred).into_keys() {
            self.on_rejected(seq, out);
        }
    }

    /// The log appended command `seq` at (index, term).
    pub fn on_appended(&mut self, seq: u64, index: u64, term: u64) {
        if let Some(p) = self.pending.get_mut(&seq) {
            p.at = Some((index, term));
            self.by_index.insert((index, seq));
        }
    }

    /// The log refused command `seq` (this node no longer leads): it was not executed.
    pub fn on_rejected(&mut self, seq: u64, out: &mut ReplicaOutput) {
        if let Some(p) = self.pending.remove(&seq) {
            if !p.abandoned {
                let leader = self.leader_addr();
                for (conn, id) in p.owed {
                    out.replies.push(Reply {
                        conn,
                        id,
                        response: Response::Moved { leader: leader.clone() },
                    });
                }
            }
        }
    }

    fn leader_addr(&self) -> String {
        match &self.role {
            LogRole::NotLeader { leader_addr } => leader_addr.clone(),
            LogRole::Leader { .. } => String::new(),
        }
    }

    /// The entry at `index` (of `term`) committed; `command` is its lock command, or
    /// `None` for a no-op or configuration entry.
    pub fn on_committed<S: AsRef<str>>(
        &mut self,
        index: u64,
        term: u64,
        command: Option<&Command<S>>,
        now_ms: u64,
        unix_us: u64,
        out: &mut ReplicaOutput,
    ) {
        // Commands of ours that were appended at this index or below and not yet resolved
        // were overwritten (a commit at `index` means every index up to it is decided).
        let mut resolved_here: Option<Pending> = None;
        while let Some(&(at, seq)) = self.by_index.first() {
            if at > index {
                break;
            }
            self.by_index.pop_first();
            let Some(p) = self.pending.remove(&seq) else {
                continue;
            };
            let same = p.at == Some((index, term));
            if same {
                resolved_here = Some(p);
            } else if !p.abandoned {
                // Another entry took its place: not executed.
                let leader = self.leader_addr();
                for (conn, id) in p.owed {
                    out.replies.push(Reply {
                        conn,
                        id,
                        response: Response::Moved { leader: leader.clone() },
                    });
                }
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        if let Some(command) = command {
            self.table.apply(command, now_ms, &mut scratch);
        }
        self.applied_index = index;
        let silent = resolved_here.as_ref().is_some_and(|p| p.abandoned);
        if silent {
            scratch.replies.clear();
        }
        // Replies for our origins in commands we do not track any more (e.g. given up
        // as U and then dropped) must not be sent twice; tracked ones are fine.
        out.replies.append(&mut scratch.replies);
        self.scratch = scratch;
        self.after_apply(now_ms, unix_us, out);
    }

    /// A follower installed a snapshot taken at `index`: the state is replaced.
    /// Commands of ours at or below it can no longer be learned: they become `U`.
    pub fn on_snapshot(&mut self, index: u64, state: LockState, out: &mut ReplicaOutput) {
        // A snapshot of ours under way describes a state this one replaces.
        self.snapshot_index = None;
        if self.table.is_leading() {
            // Only another leader sends snapshots: this node has been deposed and
            // hears of its new role next. Its projection refers to the slots and
            // owners of the state being replaced, so it goes now (waiters get `M`,
            // leader not known yet), not with the role change.
            let mut scratch = std::mem::take(&mut self.scratch);
            self.table.lose_leadership("", &mut scratch);
            out.replies.append(&mut scratch.replies);
            self.scratch = scratch;
        }
        self.table.restore(state);
        self.applied_index = index;
        while let Some(&(at, seq)) = self.by_index.first() {
            if at > index {
                break;
            }
            self.by_index.pop_first();
            if let Some(p) = self.pending.remove(&seq) {
                if !p.abandoned {
                    for (conn, id) in p.owed {
                        out.replies.push(Reply { conn, id, response: Response::Unknown });
                    }
                }
            }
        }
    }

    /// After applying: a new leader starts serving once its no-op is applied, and
    /// confirmed reads are answered once their index is applied.
    fn after_apply(&mut self, now_ms: u64, unix_us: u64, out: &mut ReplicaOutput) {
        if let LogRole::Leader { noop_index, new_domain, .. } = self.role {
            if !self.serving && self.applied_index >= noop_index {
                self.serving = true;
                self.table.become_leader(now_ms);
                if self.table.state().domain() == 0 && new_domain != 0 {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    scratch.proposals.push_back(Command::SetDomain { domain: new_domain });
                    self.flush(&mut scratch, out);
                    self.scratch = scratch;
                }
            }
            // Why not while handing over: the requests wait for its end (or for `M`).
            while self.serving && !self.handing_over {
                let Some((conn, id, request)) = self.held_back.pop_front() else {
                    break;
                };
                self.execute(conn, id, request, now_ms, unix_us, out);
            }
        }
        while let Some((&(index, ctx), _)) = self.reads_ready.first_key_value() {
            if index > self.applied_index {
                break;
            }
            let (conn, id, key) = self.reads_ready.remove(&(index, ctx)).expect("present");
            let response = self.table.query(&key, now_ms);
            out.replies.push(Reply { conn, id, response });
        }
    }

    /// The log confirmed this node led when read `ctx` was asked, at commit `index`.
    pub fn on_read_ready(
        &mut self,
        ctx: u64,
        index: u64,
        now_ms: u64,
        unix_us: u64,
        out: &mut ReplicaOutput,
    ) {
        if let Some(read) = self.reads_waiting.remove(&ctx) {
            self.reads_ready.insert((index, ctx), read);
            self.after_apply(now_ms, unix_us, out);
        }
    }

    /// The log could not confirm leadership for read `ctx`: not executed.
    pub fn on_read_failed(&mut self, ctx: u64, out: &mut ReplicaOutput) {
        if let Some((conn, id, _)) = self.reads_waiting.remove(&ctx) {
            let leader = self.leader_addr();
            out.replies.push(Reply { conn, id, response: Response::Moved { leader } });
        }
    }

    /// The node's role changed.
    pub fn on_role(&mut self, role: LogRole, now_ms: u64, unix_us: u64, out: &mut ReplicaOutput) {
        let was_leader = matches!(self.role, LogRole::Leader { .. });
        self.role = role;
        self.handing_over = false;
        match self.role.clone() {
            LogRole::Leader { .. } => {
                // Commands deferred under an earlier leadership were never appended.
                self.drop_deferred(out);
                if self.table.is_leading() {
                    // A new term of leadership: the old one's waiters were never
                    // proposed and are told so.
                    let mut scratch = std::mem::take(&mut self.scratch);
                    self.table.lose_leadership("", &mut scratch);
                    out.replies.append(&mut scratch.replies);
                    self.scratch = scratch;
                }
                self.serving = false;
                self.unknown_deadline = None;
                self.after_apply(now_ms, unix_us, out);
            }
            LogRole::NotLeader { leader_addr } => {
                let mut scratch = std::mem::take(&mut self.scratch);
                if self.table.is_leading() {
                    self.table.lose_leadership(&leader_addr, &mut scratch);
                } else {
                    self.table.set_leader_hint(&leader_addr);
                }
                out.replies.append(&mut scratch.replies);
                self.scratch = scratch;
                self.serving = false;
                self.drop_deferred(out);
                let moved = || Response::Moved { leader: leader_addr.clone() };
                for (conn, id, _) in self.held_back.drain(..) {
                    out.replies.push(Reply { conn, id, response: moved() });
                }
                for (_, (conn, id, _)) in self.reads_waiting.drain() {
                    out.replies.push(Reply { conn, id, response: moved() });
                }
                for (_, (conn, id, _)) in std::mem::take(&mut self.reads_ready) {
                    out.replies.push(Reply { conn, id, response: moved() });
                }
                if was_leader && !self.pending.is_empty() {
                    self.unknown_deadline = Some(now_ms + UNKNOWN_AFTER_MS);
                }
            }
        }
    }

    /// A client connection closed.
    pub fn conn_closed(&mut self, conn: ConnId) {
        self.table.conn_closed(conn);
        self.held_back.retain(|(c, _, _)| *c != conn);
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
}

fn overloaded() -> Response {
    Response::Error { code: crate::proto::ErrorCode::Overloaded, message: "new leader not ready yet".into() }
}

/// The requests (connection, request id) one command answers: at most two (a release
/// and the grant to the next waiter). Inline, so tracking a proposal allocates nothing.
#[derive(Debug, Default)]
struct Owed {
    items: [(ConnId, u32); 2],
    len: usize,
}

impl Owed {
    fn push(&mut self, item: (ConnId, u32)) {
        self.items[self.len] = item;
        self.len += 1;
    }
}

impl IntoIterator for Owed {
    type Item = (ConnId, u32);
    type IntoIter = std::iter::Take<std::array::IntoIter<(ConnId, u32), 2>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len)
    }
}

/// The requests of node `node` that `command` answers when applied.
fn owed_by(command: &Command, node: u64) -> Owed {
    let mut owed = Owed::default();
    let mut add = |o: &crate::lock::Origin| {
        if o.node == node {
            owed.push((o.conn, o.id));
        }
    };
    match command {
        Command::Grant { grant, .. } => add(&grant.origin),
        Command::Release { origin, next, .. } => {
            add(origin);
            if let Some(g) = next {
                add(&g.origin);
            }
        }
        Command::SetDomain { .. } | Command::SetMember { .. } => {}
        Command::Expire { next, .. } => {
            if let Some(g) = next {
                add(&g.origin);
            }
        }
    }
    owed
}
