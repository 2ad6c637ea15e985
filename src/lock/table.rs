//! The leader's lock table: applied state + wait queues + lease timers + projection.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::command::{Command, Grant, Origin};
use super::state::{Effect, LockState};
use super::ConnId;
use crate::proto::{ErrorCode, Response, TopKey};

/// Settings of one table.
#[derive(Clone, Debug)]
pub struct TableConfig {
    /// This node's id: the origin of the commands it proposes.
    pub node: u64,
    /// This process's incarnation: answers go only to the process that asked.
    pub incarnation: u64,
    /// Waiters queued on one key at most; one more gets `B`.
    pub waiters_per_key_max: usize,
    /// Keys held or queued for at most, node-wide; an ACQUIRE of one more key gets
    /// `E 4`. It bounds the lock state's memory and the snapshot's size.
    pub keys_max: usize,
}

/// An answer for one request of one connection of this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub conn: ConnId,
    pub id: u32,
    pub response: Response,
}

/// What one call into the table produced: answers to send now, and commands to put in
/// the log (whose answers come when they are applied).
#[derive(Debug, Default)]
pub struct Output {
    pub replies: Vec<Reply>,
    pub proposals: VecDeque<Command>,
}

/// A queued ACQUIRE.
#[derive(Clone, Debug)]
struct Waiter {
    seq: u64,
    conn: ConnId,
    id: u32,
    owner: String,
    lease_ms: u32,
    deadline_ms: u64,
    /// When it joined the queue (for TOP KEYS' oldest wait).
    since_ms: u64,
}

/// The leader's view of one key: the projected holder (granted, perhaps not applied
/// yet) and the FIFO queue behind it.
#[derive(Debug, Default)]
struct KeyView {
    holder: Option<ProjectedHolder>,
    queue: VecDeque<Waiter>,
}

#[derive(Debug)]
struct ProjectedHolder {
    owner: String,
    token: u64,
    /// Set when the grant is applied: lease timers run from that moment.
    deadline_ms: Option<u64>,
}

/// The lock table of one node. See the module docs of [`crate::lock`].
#[derive(Debug)]
pub struct LockTable {
    config: TableConfig,
    state: LockState,
    /// True while this node leads (always, in standalone mode).
    leading: bool,
    /// Where clients should go while this node does not lead; empty when unknown.
    leader_hint: String,
    /// Projection of the leader: keys with a holder or waiters. Empty on followers.
    keys: HashMap<String, KeyView>,
    /// Highest token proposed (≥ the applied `last_token`).
    last_token_proposed: u64,
    /// Wait deadlines: (deadline, waiter seq) → key.
    wait_timers: BTreeSet<(u64, u64, String)>,
    /// Lease deadlines of applied holds: (deadline, token, key).
    lease_timers: BTreeSet<(u64, u64, String)>,
    /// Waiters of each connection: (seq, key), so a closed connection leaves its queues.
    conn_waiters: HashMap<ConnId, Vec<(u64, String)>>,
    waiters_total: usize,
    next_seq: u64,
    effects: Vec<Effect>,
}

impl LockTable {
    /// A table that does not lead yet (call [`LockTable::become_leader`]).
    pub fn new(config: TableConfig) -> Self {
        LockTable {
            config,
            state: LockState::default(),
            leading: false,
            leader_hint: String::new(),
            keys: HashMap::new(),
            last_token_proposed: 0,
            wait_timers: BTreeSet::new(),
            lease_timers: BTreeSet::new(),
            conn_waiters: HashMap::new(),
            waiters_total: 0,
            next_seq: 1,
            effects: Vec::new(),
        }
    }

    pub fn state(&self) -> &LockState {
        &self.state
    }

    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// Waiters queued on all keys.
    pub fn waiters(&self) -> usize {
        self.waiters_total
    }

    fn origin(&self, conn: ConnId, id: u32) -> Origin {
        Origin { node: self.config.node, incarnation: self.config.incarnation, conn, id }
    }

    /// The next fencing token: `max(last + 1, now in Unix µs)` (docs/fencing.md).
    fn next_token(&mut self, unix_us: u64) -> u64 {
        let token = (self.last_token_proposed + 1).max(unix_us);
        self.last_token_proposed = token;
        token
    }

    fn not_leader(&self, conn: ConnId, id: u32, out: &mut Output) {
        let leader = self.leader_hint.clone();
        out.replies.push(Reply { conn, id, response: Response::Moved { leader } });
    }

    /// ACQUIRE: grant a free key, answer `B`, or queue behind the holder.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        conn: ConnId,
        id: u32,
        lease_s: u8,
        wait_ms: u32,
        key: &str,
        owner: &str,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        if !self.leading {
            return self.not_leader(conn, id, out);
        }
        let lease_ms = u32::from(lease_s) * 1000;
        let view = self.keys.get(key);
        if view.is_none() && self.keys.len() >= self.config.keys_max {
            let message =
                format!("the node's limit of {} held or queued keys is reached", self.config.keys_max);
            out.replies.push(Reply {
                conn,
                id,
                response: Response::Error { code: ErrorCode::Overloaded, message },
            });
            return;
        }
        let free = view.is_none_or(|v| v.holder.is_none());
        if free {
            let token = self.next_token(unix_us);
            let origin = self.origin(conn, id);
            let view = self.keys.entry(key.to_owned()).or_default();
            debug_assert!(view.queue.is_empty(), "a free key has no waiters");
            view.holder = Some(ProjectedHolder { owner: owner.to_owned(), token, deadline_ms: None });
            let grant = Grant { owner: owner.to_owned(), token, lease_ms, origin };
            out.proposals.push_back(Command::Grant { key: key.to_owned(), grant });
            return;
        }
        let view = self.keys.get_mut(key).expect("a held key has a view");
        if wait_ms == 0 || view.queue.len() >= self.config.waiters_per_key_max {
            out.replies.push(Reply { conn, id, response: Response::Busy });
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let deadline_ms = now_ms + u64::from(wait_ms);
        view.queue.push_back(Waiter {
            seq,
            conn,
            id,
            owner: owner.to_owned(),
            lease_ms,
            deadline_ms,
            since_ms: now_ms,
        });
        self.wait_timers.insert((deadline_ms, seq, key.to_owned()));
        self.conn_waiters.entry(conn).or_default().push((seq, key.to_owned()));
        self.waiters_total += 1;
    }

    /// RELEASE: always through the log, so a deposed leader can never answer `N` for a
    /// token a newer leader made current. When it releases the projected holder, the
    /// same command hands the key to the queue head.
    #[allow(clippy::too_many_arguments)]
    pub fn release(
        &mut self,
        conn: ConnId,
        id: u32,
        token: u64,
        key: &str,
        owner: &str,
        unix_us: u64,
        out: &mut Output,
    ) {
        if !self.leading {
            return self.not_leader(conn, id, out);
        }
        let origin = self.origin(conn, id);
        let matches = matches!(
            self.keys.get(key).and_then(|v| v.holder.as_ref()),
            Some(h) if h.owner == owner && h.token == token
        );
        let next = if matches { self.end_hold(key, unix_us) } else { None };
        out.proposals.push_back(Command::Release {
            key: key.to_owned(),
            owner: owner.to_owned(),
            token,
            origin,
            next,
        });
    }

    /// Ends the projected hold on `key`: stops its lease timer and moves the queue head
    /// (if any) into the holder's place with a fresh token; returns that grant.
    fn end_hold(&mut self, key: &str, unix_us: u64) -> Option<Grant> {
        let view = self.keys.get_mut(key)?;
        let old = view.holder.take()?;
        if let Some(deadline) = old.deadline_ms {
            self.lease_timers.remove(&(deadline, old.token, key.to_owned()));
        }
        let Some(waiter) = view.queue.pop_front() else {
            self.keys.remove(key);
            return None;
        };
        let token = self.next_token(unix_us);
        let view = self.keys.get_mut(key).expect("still present");
        view.holder = Some(ProjectedHolder { owner: waiter.owner.clone(), token, deadline_ms: None });
        self.forget_waiter(&waiter, key);
        Some(Grant {
            owner: waiter.owner,
            token,
            lease_ms: waiter.lease_ms,
            origin: self.origin(waiter.conn, waiter.id),
        })
    }

    /// Drops a waiter that has left its queue from the timer and connection indexes.
    fn forget_waiter(&mut self, waiter: &Waiter, key: &str) {
        self.wait_timers.remove(&(waiter.deadline_ms, waiter.seq, key.to_owned()));
        if let Some(list) = self.conn_waiters.get_mut(&waiter.conn) {
            list.retain(|(seq, _)| *seq != waiter.seq);
            if list.is_empty() {
                self.conn_waiters.remove(&waiter.conn);
            }
        }
        self.waiters_total -= 1;
    }

    /// QUERY, answered from the applied state. (In a cluster the caller first makes
    /// sure this node still leads and has applied everything committed before the read.)
    pub fn query(&self, key: &str, now_ms: u64) -> Response {
        let Some(holder) = self.state.holder(key) else {
            return Response::Free;
        };
        let view = self.keys.get(key);
        let remaining_ms = match view.and_then(|v| v.holder.as_ref()) {
            Some(p) if p.token == holder.token => match p.deadline_ms {
                Some(deadline) => deadline.saturating_sub(now_ms),
                None => u64::from(holder.lease_ms),
            },
            // A release or expiry of this hold is proposed: it is as good as gone.
            _ => 0,
        };
        Response::Holder {
            token: holder.token,
            remaining_ms: remaining_ms.min(u64::from(u32::MAX)) as u32,
            waiters: view.map_or(0, |v| v.queue.len()) as u32,
            owner: holder.owner.clone(),
        }
    }

    /// The `n` keys with the most waiters (ties: the longer oldest wait, then the key),
    /// with their holder as the applied state has it. O(keys with waiters).
    pub fn top_keys(&self, n: usize, now_ms: u64) -> Vec<TopKey> {
        let mut queued: Vec<(&String, &KeyView)> =
            self.keys.iter().filter(|(_, v)| !v.queue.is_empty()).collect();
        let oldest = |v: &KeyView| v.queue.front().map_or(0, |w| now_ms.saturating_sub(w.since_ms));
        let order = |a: &(&String, &KeyView), b: &(&String, &KeyView)| {
            b.1.queue.len().cmp(&a.1.queue.len()).then(oldest(b.1).cmp(&oldest(a.1))).then(a.0.cmp(b.0))
        };
        if queued.len() > n {
            queued.select_nth_unstable_by(n, order);
            queued.truncate(n);
        }
        queued.sort_unstable_by(order);
        queued
            .into_iter()
            .map(|(key, view)| {
                let (token, owner, remaining_ms) = match self.query(key, now_ms) {
                    Response::Holder { token, owner, remaining_ms, .. } => (token, owner, remaining_ms),
                    _ => (0, String::new(), 0),
                };
                TopKey {
                    key: key.clone(),
                    waiters: view.queue.len().min(u32::MAX as usize) as u32,
                    oldest_wait_ms: oldest(view).min(u64::from(u32::MAX)) as u32,
                    token,
                    owner,
                    remaining_ms,
                }
            })
            .collect()
    }

    /// Time passes: waits that elapsed answer `T`; leases that ran out are expired
    /// (handing the key to the next waiter in the same command). Due timers are taken
    /// in deadline order; on a tie the lease goes first, so a waiter whose wait ends at
    /// the very moment the lease does gets the key.
    //
    // Fix: this used to run every due lease before any due wait. When `tick` came late
    // (a busy leader, a coarse timer), a waiter whose wait had ended BEFORE the lease
    // ran out was handed the key instead of `T` ("wait elapsed before your turn").
    pub fn tick(&mut self, now_ms: u64, unix_us: u64, out: &mut Output) {
        if !self.leading {
            return;
        }
        loop {
            let lease = self.lease_timers.first().map(|t| t.0).filter(|&d| d <= now_ms);
            let wait = self.wait_timers.first().map(|t| t.0).filter(|&d| d <= now_ms);
            match (lease, wait) {
                (None, None) => break,
                (Some(l), Some(w)) if w < l => self.tick_wait(out),
                (Some(_), _) => self.tick_lease(unix_us, out),
                (None, Some(_)) => self.tick_wait(out),
            }
        }
    }

    /// Handles the earliest lease timer (the caller checked it is due).
    fn tick_lease(&mut self, unix_us: u64, out: &mut Output) {
        let Some((_, token, key)) = self.lease_timers.pop_first() else {
            return;
        };
        let current = matches!(
            self.keys.get(&key).and_then(|v| v.holder.as_ref()),
            Some(h) if h.token == token
        );
        if current {
            let next = self.end_hold(&key, unix_us);
            out.proposals.push_back(Command::Expire { key, token, next });
        }
    }

    /// Handles the earliest wait timer (the caller checked it is due).
    fn tick_wait(&mut self, out: &mut Output) {
        let Some((_, seq, key)) = self.wait_timers.first().cloned() else {
            return;
        };
        let Some(view) = self.keys.get_mut(&key) else {
            self.wait_timers.pop_first();
            return;
        };
        let Some(pos) = view.queue.iter().position(|w| w.seq == seq) else {
            self.wait_timers.pop_first();
            return;
        };
        let waiter = view.queue.remove(pos).expect("position is valid");
        // Removes the timer, too.
        self.forget_waiter(&waiter, &key);
        out.replies.push(Reply { conn: waiter.conn, id: waiter.id, response: Response::Timeout });
    }

    /// The earliest moment `tick` has work to do, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let wait = self.wait_timers.first().map(|t| t.0);
        let lease = self.lease_timers.first().map(|t| t.0);
        match (wait, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A connection closed: its waiters leave their queues silently. Its holds stay:
    /// only a release or the lease ends a hold.
    pub fn conn_closed(&mut self, conn: ConnId) {
        let Some(list) = self.conn_waiters.remove(&conn) else {
            return;
        };
        for (seq, key) in list {
            let Some(view) = self.keys.get_mut(&key) else {
                continue;
            };
            if let Some(pos) = view.queue.iter().position(|w| w.seq == seq) {
                let waiter = view.queue.remove(pos).expect("position is valid");
                self.wait_timers.remove(&(waiter.deadline_ms, waiter.seq, key.clone()));
                self.waiters_total -= 1;
            }
        }
    }

    /// Applies one committed command; answers for this node's connections go to `out`.
    /// On the leader, a grant starts its lease timer now.
    pub fn apply(&mut self, command: &Command, now_ms: u64, out: &mut Output) {
        let mut effects = std::mem::take(&mut self.effects);
        self.state.apply(command, &mut effects);
        for effect in effects.drain(..) {
            match effect {
                Effect::Reply(origin, response) => {
                    if origin.node == self.config.node && origin.incarnation == self.config.incarnation {
                        out.replies.push(Reply { conn: origin.conn, id: origin.id, response });
                    }
                }
                Effect::Granted { key, token, lease_ms } => {
                    if !self.leading {
                        continue;
                    }
                    if let Some(holder) = self.keys.get_mut(&key).and_then(|v| v.holder.as_mut()) {
                        if holder.token == token {
                            let deadline = now_ms + u64::from(lease_ms);
                            holder.deadline_ms = Some(deadline);
                            self.lease_timers.insert((deadline, token, key));
                        }
                    }
                }
                Effect::Ended { .. } => {}
            }
        }
        self.effects = effects;
    }

    /// This node now leads, with everything committed so far applied: the projection
    /// starts from the applied state and every held lease restarts with its full length
    /// (never shorter than a client could have assumed).
    pub fn become_leader(&mut self, now_ms: u64) {
        debug_assert!(!self.leading, "call lose_leadership before leading again");
        self.leading = true;
        // Waiters belong to one leadership; none may survive into the next.
        self.wait_timers.clear();
        self.conn_waiters.clear();
        self.waiters_total = 0;
        self.leader_hint.clear();
        self.keys.clear();
        self.lease_timers.clear();
        self.last_token_proposed = self.state.last_token();
        for (key, holder) in self.state.holders() {
            let deadline = now_ms + u64::from(holder.lease_ms);
            self.keys.insert(
                key.clone(),
                KeyView {
                    holder: Some(ProjectedHolder {
                        owner: holder.owner.clone(),
                        token: holder.token,
                        deadline_ms: Some(deadline),
                    }),
                    queue: VecDeque::new(),
                },
            );
            self.lease_timers.insert((deadline, holder.token, key.clone()));
        }
    }

    /// This node no longer leads: waiters that were never proposed get `M` with the new
    /// leader's address (if known); the projection and timers are dropped.
    pub fn lose_leadership(&mut self, leader_hint: &str, out: &mut Output) {
        self.leading = false;
        self.leader_hint = leader_hint.to_owned();
        for (_, view) in self.keys.drain() {
            for waiter in view.queue {
                out.replies.push(Reply {
                    conn: waiter.conn,
                    id: waiter.id,
                    response: Response::Moved { leader: leader_hint.to_owned() },
                });
            }
        }
        self.lease_timers.clear();
        self.wait_timers.clear();
        self.conn_waiters.clear();
        self.waiters_total = 0;
    }

    /// Replaces the applied state (a follower installed a snapshot). Only a node that
    /// does not lead has no projection to keep consistent with it.
    pub fn restore(&mut self, state: LockState) {
        debug_assert!(!self.leading, "a leader never installs a snapshot");
        self.state = state;
    }

    /// Records where the leader is while this node follows.
    pub fn set_leader_hint(&mut self, leader_hint: &str) {
        self.leader_hint = leader_hint.to_owned();
    }
}
