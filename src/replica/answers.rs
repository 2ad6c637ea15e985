//! The log's answers to a replica: a command deferred, appended, refused or
//! committed, a snapshot installed, a read confirmed or failed, the role changed, a
//! hand-over begun or ended — and what each owes the clients (module docs of
//! `replica`).

use super::owed::Pending;
use super::{LogRole, Read, Replica, ReplicaOutput, ToLog, UNKNOWN_AFTER_MS};
use crate::lock::{Command, LockState, Reply};
use crate::proto::Response;

impl Replica {
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
            let (conn, id, read) = self.reads_ready.remove(&(index, ctx)).expect("present");
            let response = match read {
                Read::Holder(key) => self.table.query(&key, now_ms),
                Read::Pool(key) => self.table.pool(&key, now_ms),
            };
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
}
