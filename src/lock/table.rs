//! The leader's lock table: applied state + wait queues + lease timers + projection.
//!
//! Storage: the applied state stores each key once, in a slot (`store.rs`). The
//! projection keeps an *override* only for a key whose projected holder differs from
//! the applied one (a command about it is proposed and not applied yet) or that has
//! waiters; every other key's projected holder is its applied holder. Overrides,
//! waiters and timers refer to keys by slot and to owners by interned id. A key held
//! by a million idle clients costs the leader one lease timer (24 bytes) beyond the
//! applied state.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::command::{Command, Grant, Origin};
use super::state::{Effect, LockState};
use super::store::{OwnerId, SlotId};
use super::timers::{Timer, TimerQueue};
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

/// What the table counted since the caller last cleared it ([`LockTable::stats_mut`]), for monitoring
/// (docs/metrics.md). Only a leading table counts: followers apply the same commands
/// and would count every grant once per node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Grants of a free key, applied.
    pub grants_immediate: u64,
    /// Grants to the head of a queue by a release or an expiry, applied.
    pub grants_handoff: u64,
    /// Holds ended by their lease running out, applied.
    pub lease_expiries: u64,
    /// How long each waiter that left its queue (handed the key, or its wait ran out)
    /// had waited, in ms.
    pub waits_ms: Vec<u64>,
    /// How long each hold that ended (released or expired) had lasted, in µs, from the
    /// grant's token: tokens are microsecond timestamps at least (docs/protocol.md), so
    /// this never overstates a hold, and it counts a hold granted by an earlier leader
    /// from its grant.
    pub holds_us: Vec<u64>,
}

impl TableStats {
    pub fn clear(&mut self) {
        self.grants_immediate = 0;
        self.grants_handoff = 0;
        self.lease_expiries = 0;
        self.waits_ms.clear();
        self.holds_us.clear();
    }
}

/// Most observations [`TableStats`] keeps of each kind between two clears
/// ([`LockTable::stats_mut`]): a driver that never takes them (a test, a simulator) does
/// not make it grow without bound.
pub const STATS_OBSERVATIONS_MAX: usize = 1 << 16;

fn push_capped(list: &mut Vec<u64>, value: u64) {
    if list.len() < STATS_OBSERVATIONS_MAX {
        list.push(value);
    }
}

/// A queued ACQUIRE.
#[derive(Clone, Debug)]
struct Waiter {
    conn: ConnId,
    id: u32,
    /// Holds one reference to the interned owner.
    owner: OwnerId,
    lease_ms: u32,
    slot: SlotId,
    /// When it joined the queue (for TOP KEYS' oldest wait).
    since_ms: u64,
}

/// The projected holder of a key with an override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Projected {
    Free,
    /// Holds one reference to the interned owner.
    Held {
        owner: OwnerId,
        token: u64,
    },
}

/// What the leader knows of a key beyond its applied state. Pins the key's slot.
#[derive(Debug)]
struct Override {
    holder: Projected,
    /// Commands proposed about this key that change its holder and are not applied
    /// yet. At 0, the projected holder is the applied one.
    in_flight: u32,
    /// Waiters, FIFO (indexes into `LockTable::waiters`).
    queue: VecDeque<u32>,
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
    /// Keys whose projection differs from the applied state or that have waiters.
    /// Ordered, so that leaving leadership answers waiters in the same order on every
    /// run. Empty on followers.
    overrides: BTreeMap<SlotId, Override>,
    /// Keys the projection holds (held or queued for: a key with waiters is held).
    projected_held: usize,
    /// Highest token proposed (≥ the applied `last_token`).
    last_token_proposed: u64,
    /// Lease deadlines of applied holds that are still the projected ones, by slot;
    /// `order` is the token.
    leases: TimerQueue,
    /// Wait deadlines, by waiter index; `order` is the waiter's sequence number.
    waits: TimerQueue,
    waiters: Vec<Option<Waiter>>,
    free_waiters: Vec<u32>,
    /// Waiters of each connection, so a closed connection leaves its queues.
    conn_waiters: HashMap<ConnId, Vec<u32>>,
    waiters_total: usize,
    /// Keys with at least one waiter.
    queued_keys: usize,
    next_seq: u64,
    effects: Vec<Effect>,
    stats: TableStats,
}

impl LockTable {
    /// A table that does not lead yet (call [`LockTable::become_leader`]).
    pub fn new(config: TableConfig) -> Self {
        LockTable {
            config,
            state: LockState::default(),
            leading: false,
            leader_hint: String::new(),
            overrides: BTreeMap::new(),
            projected_held: 0,
            last_token_proposed: 0,
            leases: TimerQueue::default(),
            waits: TimerQueue::default(),
            waiters: Vec::new(),
            free_waiters: Vec::new(),
            conn_waiters: HashMap::new(),
            waiters_total: 0,
            queued_keys: 0,
            next_seq: 1,
            effects: Vec::new(),
            stats: TableStats::default(),
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

    /// Keys with an override in the projection (waiters, or commands in flight).
    pub fn keys_with_waiters(&self) -> usize {
        self.queued_keys
    }

    /// What was counted since the caller last cleared it (see [`TableStats`]). The
    /// caller reads it and calls [`TableStats::clear`], which keeps the buffers: counting
    /// allocates nothing in a steady state.
    pub fn stats_mut(&mut self) -> &mut TableStats {
        &mut self.stats
    }

    pub fn overrides(&self) -> usize {
        self.overrides.len()
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

    /// The projected holder (owner, token) of the key in `slot`.
    fn projected(&self, slot: SlotId) -> Option<(OwnerId, u64)> {
        match self.overrides.get(&slot) {
            Some(ov) => match ov.holder {
                Projected::Held { owner, token } => Some((owner, token)),
                Projected::Free => None,
            },
            None => self.state.holder_at(slot).map(|h| (h.owner_id, h.token)),
        }
    }

    /// The override of `slot`, made from the applied holder if there is none.
    fn override_mut(&mut self, slot: SlotId) -> &mut Override {
        if !self.overrides.contains_key(&slot) {
            let applied = self.state.holder_at(slot).map(|h| (h.owner_id, h.token));
            let holder = match applied {
                Some((owner, token)) => {
                    self.state.owners_mut().retain(owner);
                    Projected::Held { owner, token }
                }
                None => Projected::Free,
            };
            self.state.pin_slot(slot);
            self.overrides.insert(slot, Override { holder, in_flight: 0, queue: VecDeque::new() });
        }
        self.overrides.get_mut(&slot).expect("just made")
    }

    /// Drops the override of `slot` once it says nothing the applied state does not.
    fn settle(&mut self, slot: SlotId) {
        let done = self.overrides.get(&slot).is_some_and(|ov| ov.in_flight == 0 && ov.queue.is_empty());
        if !done {
            return;
        }
        let ov = self.overrides.remove(&slot).expect("present");
        if let Projected::Held { owner, token } = ov.holder {
            debug_assert_eq!(
                self.state.holder_at(slot).map(|h| h.token),
                Some(token),
                "projection = applied"
            );
            self.state.owners_mut().release(owner);
        }
        self.state.unpin(slot);
    }

    /// ACQUIRE: grant a free key, answer `B`, or queue behind the holder.
    ///
    /// `key` and `owner` may be given owned: a grant's command then keeps them instead
    /// of copying (the request's strings were allocated once, when it was read).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        conn: ConnId,
        id: u32,
        lease_s: u8,
        wait_ms: u32,
        key: impl AsRef<str> + Into<String>,
        owner: impl AsRef<str> + Into<String>,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        let (key_str, owner_str) = (key.as_ref(), owner.as_ref());
        if !self.leading {
            return self.not_leader(conn, id, out);
        }
        let lease_ms = u32::from(lease_s) * 1000;
        let held = self.state.slot_of(key_str).filter(|&s| self.projected(s).is_some());
        let Some(slot) = held else {
            if self.projected_held >= self.config.keys_max {
                let message =
                    format!("the node's limit of {} held or queued keys is reached", self.config.keys_max);
                out.replies.push(Reply {
                    conn,
                    id,
                    response: Response::Error { code: ErrorCode::Overloaded, message },
                });
                return;
            }
            let token = self.next_token(unix_us);
            let origin = self.origin(conn, id);
            let slot = self.state.pin(key_str);
            let owner_id = self.state.owners_mut().intern(owner_str);
            let ov = self.override_mut(slot);
            debug_assert!(ov.queue.is_empty(), "a free key has no waiters");
            debug_assert_eq!(ov.holder, Projected::Free);
            ov.holder = Projected::Held { owner: owner_id, token };
            ov.in_flight += 1;
            self.projected_held += 1;
            let grant = Grant { owner: owner.into(), token, lease_ms, origin };
            out.proposals.push_back(Command::Grant { key: key.into(), grant });
            return;
        };
        let queued = self.overrides.get(&slot).map_or(0, |ov| ov.queue.len());
        if wait_ms == 0 || queued >= self.config.waiters_per_key_max {
            out.replies.push(Reply { conn, id, response: Response::Busy });
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let owner = self.state.owners_mut().intern(owner_str);
        let waiter = Waiter { conn, id, owner, lease_ms, slot, since_ms: now_ms };
        let w = match self.free_waiters.pop() {
            Some(w) => {
                self.waiters[w as usize] = Some(waiter);
                w
            }
            None => {
                self.waiters.push(Some(waiter));
                (self.waiters.len() - 1) as u32
            }
        };
        let queue = &mut self.override_mut(slot).queue;
        queue.push_back(w);
        if queue.len() == 1 {
            self.queued_keys += 1;
        }
        self.waits.insert(Timer { deadline_ms: now_ms + u64::from(wait_ms), order: seq, id: w });
        self.conn_waiters.entry(conn).or_default().push(w);
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
        key: impl AsRef<str> + Into<String>,
        owner: impl AsRef<str> + Into<String>,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        if !self.leading {
            return self.not_leader(conn, id, out);
        }
        let origin = self.origin(conn, id);
        let slot = self.state.slot_of(key.as_ref());
        let matches = slot
            .and_then(|s| self.projected(s))
            .is_some_and(|(o, t)| t == token && self.state.owners().name(o) == owner.as_ref());
        let next = match slot {
            Some(slot) if matches => self.end_hold(slot, now_ms, unix_us),
            _ => None,
        };
        out.proposals.push_back(Command::Release {
            key: key.into(),
            owner: owner.into(),
            token,
            origin,
            next,
        });
    }

    /// Ends the projected hold on the key in `slot` (the caller checked there is one)
    /// for a command about to be proposed: stops its lease timer and moves the queue
    /// head (if any) into the holder's place with a fresh token; returns that grant.
    fn end_hold(&mut self, slot: SlotId, now_ms: u64, unix_us: u64) -> Option<Grant> {
        let ov = self.override_mut(slot);
        let Projected::Held { owner: old_owner, token: old_token } = ov.holder else {
            debug_assert!(false, "end_hold without a projected holder");
            return None;
        };
        ov.in_flight += 1;
        let head = ov.queue.pop_front();
        if head.is_some() && ov.queue.is_empty() {
            self.queued_keys -= 1;
        }
        push_capped(&mut self.stats.holds_us, unix_us.saturating_sub(old_token));
        if self.leases.get(slot.0).is_some_and(|t| t.order == old_token) {
            self.leases.remove(slot.0);
        }
        self.state.owners_mut().release(old_owner);
        let Some(w) = head else {
            self.override_mut(slot).holder = Projected::Free;
            self.projected_held -= 1;
            return None;
        };
        let waiter = self.forget_waiter(w);
        push_capped(&mut self.stats.waits_ms, now_ms.saturating_sub(waiter.since_ms));
        let token = self.next_token(unix_us);
        // The waiter's reference to its owner passes to the projected holder.
        self.override_mut(slot).holder = Projected::Held { owner: waiter.owner, token };
        Some(Grant {
            owner: self.state.owners().name(waiter.owner).to_owned(),
            token,
            lease_ms: waiter.lease_ms,
            origin: self.origin(waiter.conn, waiter.id),
        })
    }

    /// Takes waiter `w` out of the waiter list, its timer and its connection's list
    /// (not out of its key's queue: the caller does that). Its owner reference goes to
    /// the caller.
    fn forget_waiter(&mut self, w: u32) -> Waiter {
        let waiter = self.waiters[w as usize].take().expect("a live waiter");
        self.free_waiters.push(w);
        self.waits.remove(w);
        if let Some(list) = self.conn_waiters.get_mut(&waiter.conn) {
            list.retain(|&x| x != w);
            if list.is_empty() {
                self.conn_waiters.remove(&waiter.conn);
            }
        }
        self.waiters_total -= 1;
        waiter
    }

    /// Takes waiter `w` out of its key's queue and forgets it.
    fn drop_waiter(&mut self, w: u32) -> Waiter {
        let slot = self.waiters[w as usize].as_ref().expect("a live waiter").slot;
        if let Some(ov) = self.overrides.get_mut(&slot) {
            if let Some(pos) = ov.queue.iter().position(|&x| x == w) {
                ov.queue.remove(pos);
                if ov.queue.is_empty() {
                    self.queued_keys -= 1;
                }
            }
        }
        let waiter = self.forget_waiter(w);
        self.state.owners_mut().release(waiter.owner);
        self.settle(slot);
        waiter
    }

    /// QUERY, answered from the applied state. (In a cluster the caller first makes
    /// sure this node still leads and has applied everything committed before the read.)
    pub fn query(&self, key: &str, now_ms: u64) -> Response {
        let Some((slot, holder)) = self.state.slot_of(key).and_then(|s| Some((s, self.state.holder_at(s)?)))
        else {
            return Response::Free;
        };
        let current = self.leading && self.projected(slot).is_some_and(|(_, t)| t == holder.token);
        let remaining_ms = if current {
            match self.leases.get(slot.0).filter(|t| t.order == holder.token) {
                Some(timer) => timer.deadline_ms.saturating_sub(now_ms),
                None => u64::from(holder.lease_ms),
            }
        } else {
            // A release or expiry of this hold is proposed: it is as good as gone.
            0
        };
        Response::Holder {
            token: holder.token,
            remaining_ms: remaining_ms.min(u64::from(u32::MAX)) as u32,
            waiters: self.overrides.get(&slot).map_or(0, |ov| ov.queue.len()) as u32,
            owner: holder.owner.to_owned(),
        }
    }

    /// The `n` keys with the most waiters (ties: the longer oldest wait, then the key),
    /// with their holder as the applied state has it. O(keys with waiters).
    pub fn top_keys(&self, n: usize, now_ms: u64) -> Vec<TopKey> {
        let oldest = |ov: &Override| {
            ov.queue
                .front()
                .and_then(|w| self.waiters[*w as usize].as_ref())
                .map_or(0, |w| now_ms.saturating_sub(w.since_ms))
        };
        let mut queued: Vec<(&str, &Override)> = self
            .overrides
            .iter()
            .filter(|(_, ov)| !ov.queue.is_empty())
            .map(|(slot, ov)| (self.state.key(*slot), ov))
            .collect();
        let order = |a: &(&str, &Override), b: &(&str, &Override)| {
            b.1.queue.len().cmp(&a.1.queue.len()).then(oldest(b.1).cmp(&oldest(a.1))).then(a.0.cmp(b.0))
        };
        if queued.len() > n {
            queued.select_nth_unstable_by(n, order);
            queued.truncate(n);
        }
        queued.sort_unstable_by(order);
        queued
            .into_iter()
            .map(|(key, ov)| {
                let (token, owner, remaining_ms) = match self.query(key, now_ms) {
                    Response::Holder { token, owner, remaining_ms, .. } => (token, owner, remaining_ms),
                    _ => (0, String::new(), 0),
                };
                TopKey {
                    key: key.to_owned(),
                    waiters: ov.queue.len().min(u32::MAX as usize) as u32,
                    oldest_wait_ms: oldest(ov).min(u64::from(u32::MAX)) as u32,
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
            let lease = self.leases.first().map(|t| t.deadline_ms).filter(|&d| d <= now_ms);
            let wait = self.waits.first().map(|t| t.deadline_ms).filter(|&d| d <= now_ms);
            match (lease, wait) {
                (None, None) => break,
                (Some(l), Some(w)) if w < l => self.tick_wait(now_ms, out),
                (Some(_), _) => self.tick_lease(now_ms, unix_us, out),
                (None, Some(_)) => self.tick_wait(now_ms, out),
            }
        }
    }

    /// Handles the earliest lease timer (the caller checked it is due).
    fn tick_lease(&mut self, now_ms: u64, unix_us: u64, out: &mut Output) {
        let Some(timer) = self.leases.pop() else {
            return;
        };
        let (slot, token) = (SlotId(timer.id), timer.order);
        if self.projected(slot).is_some_and(|(_, t)| t == token) {
            let next = self.end_hold(slot, now_ms, unix_us);
            let key = self.state.key(slot).to_owned();
            out.proposals.push_back(Command::Expire { key, token, next });
        }
    }

    /// Handles the earliest wait timer (the caller checked it is due).
    fn tick_wait(&mut self, now_ms: u64, out: &mut Output) {
        let Some(timer) = self.waits.first().copied() else {
            return;
        };
        let waiter = self.drop_waiter(timer.id);
        push_capped(&mut self.stats.waits_ms, now_ms.saturating_sub(waiter.since_ms));
        out.replies.push(Reply { conn: waiter.conn, id: waiter.id, response: Response::Timeout });
    }

    /// The earliest moment `tick` has work to do, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let wait = self.waits.first().map(|t| t.deadline_ms);
        let lease = self.leases.first().map(|t| t.deadline_ms);
        match (wait, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A connection closed: its waiters leave their queues silently. Its holds stay:
    /// only a release or the lease ends a hold.
    pub fn conn_closed(&mut self, conn: ConnId) {
        let Some(list) = self.conn_waiters.get(&conn).cloned() else {
            return;
        };
        for w in list {
            self.drop_waiter(w);
        }
    }

    /// Applies one committed command; answers for this node's connections go to `out`.
    /// On the leader, a grant starts its lease timer now.
    pub fn apply<S: AsRef<str>>(&mut self, command: &Command<S>, now_ms: u64, out: &mut Output) {
        let mut effects = std::mem::take(&mut self.effects);
        self.state.apply(command, &mut effects);
        let mut changed = None;
        for effect in effects.drain(..) {
            match effect {
                Effect::Reply(origin, response) => {
                    if origin.node == self.config.node && origin.incarnation == self.config.incarnation {
                        out.replies.push(Reply { conn: origin.conn, id: origin.id, response });
                    }
                }
                Effect::Granted { slot, token, lease_ms } => {
                    changed = Some(slot);
                    if self.leading {
                        match command {
                            Command::Grant { .. } => self.stats.grants_immediate += 1,
                            _ => self.stats.grants_handoff += 1,
                        }
                    }
                    if self.leading && self.projected(slot).is_some_and(|(_, t)| t == token) {
                        let deadline_ms = now_ms + u64::from(lease_ms);
                        self.leases.insert(Timer { deadline_ms, order: token, id: slot.0 });
                    }
                }
                Effect::Ended { slot, .. } => {
                    changed = Some(slot);
                    if self.leading && matches!(command, Command::Expire { .. }) {
                        self.stats.lease_expiries += 1;
                    }
                }
            }
        }
        self.effects = effects;
        // One command changes one key's holder at most; while leading it is one this
        // table proposed and counted in the key's override.
        if let Some(slot) = changed.filter(|_| self.leading) {
            if let Some(ov) = self.overrides.get_mut(&slot) {
                debug_assert!(ov.in_flight > 0, "an applied change this leader did not propose");
                ov.in_flight = ov.in_flight.saturating_sub(1);
                self.settle(slot);
            }
        }
    }

    /// This node now leads, with everything committed so far applied: the projection
    /// starts from the applied state and every held lease restarts with its full length
    /// (never shorter than a client could have assumed).
    pub fn become_leader(&mut self, now_ms: u64) {
        debug_assert!(!self.leading, "call lose_leadership before leading again");
        debug_assert!(self.overrides.is_empty() && self.waiters_total == 0);
        self.leading = true;
        self.leader_hint.clear();
        self.last_token_proposed = self.state.last_token();
        self.projected_held = self.state.keys_held();
        let timers = self
            .state
            .held_slots()
            .map(|(slot, token, lease_ms)| Timer {
                deadline_ms: now_ms + u64::from(lease_ms),
                order: token,
                id: slot.0,
            })
            .collect();
        self.leases.rebuild(timers);
    }

    /// This node no longer leads: waiters that were never proposed get `M` with the new
    /// leader's address (if known); the projection and timers are dropped.
    pub fn lose_leadership(&mut self, leader_hint: &str, out: &mut Output) {
        self.leading = false;
        self.leader_hint = leader_hint.to_owned();
        for (slot, ov) in std::mem::take(&mut self.overrides) {
            for w in ov.queue {
                let waiter = self.waiters[w as usize].take().expect("a live waiter");
                self.state.owners_mut().release(waiter.owner);
                out.replies.push(Reply {
                    conn: waiter.conn,
                    id: waiter.id,
                    response: Response::Moved { leader: leader_hint.to_owned() },
                });
            }
            if let Projected::Held { owner, .. } = ov.holder {
                self.state.owners_mut().release(owner);
            }
            self.state.unpin(slot);
        }
        self.waiters.clear();
        self.free_waiters.clear();
        self.leases.clear();
        self.waits.clear();
        self.conn_waiters.clear();
        self.waiters_total = 0;
        self.queued_keys = 0;
        self.projected_held = 0;
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

    /// Starts encoding a snapshot of the applied state (see [`LockState::begin_snapshot`]).
    pub fn begin_snapshot(&mut self) {
        self.state.begin_snapshot();
    }

    /// Encodes up to `slots_max` more key slots; the snapshot's bytes once done.
    pub fn snapshot_step(&mut self, slots_max: usize) -> Option<Vec<u8>> {
        self.state.snapshot_step(slots_max)
    }

    /// Checks the table's bookkeeping against itself (tests): every owner reference
    /// accounted for, every override pinning its slot, timers only where they belong,
    /// the counts right. O(keys); `Err` names the first thing wrong.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut refs: HashMap<OwnerId, u32> = HashMap::new();
        for (_, h) in self.state.holders() {
            *refs.entry(h.owner_id).or_default() += 1;
        }
        let mut queued = 0;
        let mut queued_keys = 0;
        let mut projected_held = self.state.keys_held();
        for (slot, ov) in &self.overrides {
            if !self.state.is_pinned(*slot) {
                return Err(format!("override of slot {slot:?} does not pin it"));
            }
            let applied = self.state.holder_at(*slot).is_some();
            match ov.holder {
                Projected::Held { owner, .. } => {
                    *refs.entry(owner).or_default() += 1;
                    projected_held += usize::from(!applied);
                }
                Projected::Free => {
                    projected_held -= usize::from(applied);
                    if !ov.queue.is_empty() {
                        return Err(format!("slot {slot:?} has waiters but no projected holder"));
                    }
                }
            }
            if ov.in_flight == 0 && ov.queue.is_empty() {
                return Err(format!("slot {slot:?} has an override that says nothing"));
            }
            queued_keys += usize::from(!ov.queue.is_empty());
            for &w in &ov.queue {
                let Some(waiter) = self.waiters.get(w as usize).and_then(|w| w.as_ref()) else {
                    return Err(format!("slot {slot:?} queues a dead waiter {w}"));
                };
                if waiter.slot != *slot || self.waits.get(w).is_none() {
                    return Err(format!("waiter {w} is not where it should be"));
                }
                *refs.entry(waiter.owner).or_default() += 1;
                queued += 1;
            }
        }
        if self.leading && projected_held != self.projected_held {
            return Err(format!("projected_held {} but counted {projected_held}", self.projected_held));
        }
        if queued != self.waiters_total || self.waits.len() != queued {
            return Err(format!(
                "{queued} queued, {} counted, {} timers",
                self.waiters_total,
                self.waits.len()
            ));
        }
        if queued_keys != self.queued_keys {
            return Err(format!("{queued_keys} keys with waiters, {} counted", self.queued_keys));
        }
        for (owner, n) in &refs {
            if self.state.owners().refs(*owner) != *n {
                return Err(format!(
                    "owner {:?} has {} references, {n} found",
                    self.state.owners().name(*owner),
                    self.state.owners().refs(*owner)
                ));
            }
        }
        if refs.len() != self.state.owners().len() {
            return Err(format!("{} owners interned, {} in use", self.state.owners().len(), refs.len()));
        }
        if self.leading {
            for (slot, token, _) in self.state.held_slots() {
                let current = self.projected(slot).is_some_and(|(_, t)| t == token);
                let timer = self.leases.get(slot.0).is_some_and(|t| t.order == token);
                if current != timer {
                    return Err(format!("slot {slot:?}: projected current {current}, lease timer {timer}"));
                }
            }
        } else if !self.leases.is_empty() || !self.overrides.is_empty() {
            return Err("a follower keeps leases or overrides".into());
        }
        if self.state.pinned_count() != self.overrides.len() {
            return Err(format!(
                "{} slots pinned, {} overrides",
                self.state.pinned_count(),
                self.overrides.len()
            ));
        }
        Ok(())
    }
}
