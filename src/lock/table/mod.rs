//! The leader's lock table: applied state + wait queues + lease timers + projection.
//!
//! Storage: the applied state stores each key once, in a slot (`store.rs`). The
//! projection keeps an *override* only for a key whose projected holder differs from
//! the applied one (a command about it is proposed and not applied yet) or that has a
//! line (waiters, or pooled holds: `lines.rs`); every other key's projected holder is
//! its applied holder. Overrides, waiters and timers refer to keys by slot and to
//! owners by interned id. A key held by a million idle clients costs the leader one
//! lease timer (24 bytes) beyond the applied state.

use std::collections::{BTreeMap, HashMap, VecDeque};

mod holds;
mod invariants;
mod leadership;
mod projection;
mod stats;
mod time;
mod waiters;

pub use stats::{HoldOutcomes, TableStats, STATS_OBSERVATIONS_MAX};

use super::command::{Command, Grant, Origin, Part};
use super::lines::{Lines, Seq, Want};
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

/// A queued request (ACQUIRE or HOLD); its keys are in the lines, under `seq`.
#[derive(Clone, Debug)]
struct Waiter {
    conn: ConnId,
    id: u32,
    /// Holds one reference to the interned owner.
    owner: OwnerId,
    lease_ms: u32,
    /// Its arrival number in the lines (0 until it queues).
    seq: Seq,
    /// When it joined the queue (for TOP KEYS' oldest wait).
    since_ms: u64,
}

/// A pooled hold (counted or multi-key) as the leader projects it.
#[derive(Clone, Debug)]
struct Pooled {
    /// Holds one reference to the interned owner.
    owner: OwnerId,
    parts: Vec<Want<SlotId>>,
    /// Its lease timer's id in `pool_leases` (and index in `pool_timer_tokens`).
    timer: u32,
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
    /// Changes of this key's own holder (grants and ends) proposed and not applied
    /// yet. At 0, the projected holder is the applied one.
    in_flight: u32,
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
    /// Keys whose projection differs from the applied state or that have a line.
    /// Ordered, so that walks go the same way on every run. Empty on followers.
    overrides: BTreeMap<SlotId, Override>,
    /// Keys the projection holds with a holder of their own.
    projected_held: usize,
    /// The lines of waiting requests and the permits of every key that has a line
    /// (`lines.rs`); payloads are indexes into `waiters`.
    lines: Lines<SlotId, u32>,
    /// Pooled holds the projection holds, by token.
    pooled: HashMap<u64, Pooled>,
    /// The keys those holds name, summed (a hold of n keys counts n).
    pooled_parts: usize,
    /// Lease deadlines of applied pooled holds still projected; `order` is the token,
    /// `id` the hold's timer id.
    pool_leases: TimerQueue,
    /// The token of each pooled timer id in use; free ids in `free_pool_timers`.
    pool_timer_tokens: Vec<u64>,
    free_pool_timers: Vec<u32>,
    /// Highest token proposed (≥ the applied `last_token`).
    last_token_proposed: u64,
    /// Lease deadlines of applied holds that are still the projected ones, by slot;
    /// `order` is the token.
    leases: TimerQueue,
    /// Wait deadlines, by waiter index; `order` is the waiter's arrival number.
    waits: TimerQueue,
    waiters: Vec<Option<Waiter>>,
    free_waiters: Vec<u32>,
    /// Waiters of each connection, so a closed connection leaves its queues.
    conn_waiters: HashMap<ConnId, Vec<u32>>,
    effects: Vec<Effect>,
    stats: TableStats,
}

impl LockTable {
    /// A table that does not lead yet (call [`LockTable::become_leader`]).
    pub fn new(config: TableConfig) -> Self {
        LockTable {
            state: LockState::default(),
            leading: false,
            leader_hint: String::new(),
            overrides: BTreeMap::new(),
            projected_held: 0,
            lines: Lines::new(config.waiters_per_key_max),
            pooled: HashMap::new(),
            pooled_parts: 0,
            pool_leases: TimerQueue::default(),
            pool_timer_tokens: Vec::new(),
            free_pool_timers: Vec::new(),
            last_token_proposed: 0,
            leases: TimerQueue::default(),
            waits: TimerQueue::default(),
            waiters: Vec::new(),
            free_waiters: Vec::new(),
            conn_waiters: HashMap::new(),
            effects: Vec::new(),
            stats: TableStats::default(),
            config,
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
        self.lines.waiters()
    }

    /// Keys with at least one waiter.
    pub fn keys_with_waiters(&self) -> usize {
        self.lines.queued_keys()
    }

    /// Pooled holds (counted or multi-key) the projection holds.
    pub fn pooled_holds(&self) -> usize {
        self.pooled.len()
    }

    /// What was counted since the caller last cleared it (see [`TableStats`]). The
    /// caller reads it and calls [`TableStats::clear`], which keeps the buffers: counting
    /// allocates nothing in a steady state.
    pub fn stats_mut(&mut self) -> &mut TableStats {
        &mut self.stats
    }

    /// What counts against the node's limit (`keys_max`): keys with a holder of their
    /// own, plus every pooled hold and every waiting request once per key it names.
    /// Each unit costs at most one held key's bytes in a snapshot (docs/configuration.md).
    pub fn load(&self) -> usize {
        self.projected_held + self.pooled_parts + self.lines.places()
    }

    pub fn overrides(&self) -> usize {
        self.overrides.len()
    }

    fn origin(&self, conn: ConnId, id: u32) -> Origin {
        Origin { node: self.config.node, incarnation: self.config.incarnation, conn, id }
    }

    fn not_leader(&self, conn: ConnId, id: u32, out: &mut Output) {
        let leader = self.leader_hint.clone();
        out.replies.push(Reply { conn, id, response: Response::Moved { leader } });
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
        let held = self
            .state
            .slot_of(key_str)
            .filter(|&s| self.projected(s).is_some() || self.lines.pool(s).is_some());
        let Some(slot) = held else {
            if self.load() >= self.config.keys_max {
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
            debug_assert_eq!(ov.holder, Projected::Free);
            ov.holder = Projected::Held { owner: owner_id, token };
            ov.in_flight += 1;
            self.projected_held += 1;
            let grant = Grant { owner: owner.into(), token, lease_ms, origin };
            out.proposals.push_back(Command::Grant { key: key.into(), grant });
            return;
        };
        let lined = self.lines.pool(slot).is_some();
        if !lined && wait_ms == 0 {
            out.replies.push(Reply { conn, id, response: Response::Busy });
            return;
        }
        let part = Part { key: key.into(), count: 1, capacity: 1 };
        self.request(conn, id, lease_ms, wait_ms, owner_str, vec![part], false, now_ms, unix_us, out);
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
        let own = slot
            .and_then(|s| self.projected(s))
            .is_some_and(|(o, t)| t == token && self.state.owners().name(o) == owner.as_ref());
        // A pooled hold ends by a release naming one of its keys (docs/protocol.md §5.7),
        // not any key: a release of another key under its token is `N`, as for a v1 hold.
        let pooled = self.pooled.get(&token).is_some_and(|p| {
            self.state.owners().name(p.owner) == owner.as_ref()
                && slot.is_some_and(|s| p.parts.iter().any(|w| w.key == s))
        });
        let command = match slot {
            Some(slot) if own => {
                let next = self.end_hold(slot, now_ms, unix_us);
                self.ending(key.into(), token, Some(owner.into()), Some(origin), next)
            }
            _ if pooled => {
                let next = self.end_pooled(token, now_ms, unix_us);
                let (key, owner) = (key.into(), Some(owner.into()));
                Command::End { key, token, owner, origin: Some(origin), next }
            }
            _ => Command::Release { key: key.into(), owner: owner.into(), token, origin, next: None },
        };
        out.proposals.push_back(command);
    }

    /// QUERY, answered from the applied state. (In a cluster the caller first makes
    /// sure this node still leads and has applied everything committed before the read.)
    pub fn query(&self, key: &str, now_ms: u64) -> Response {
        let Some(slot) = self.state.slot_of(key) else { return Response::Free };
        let waiters = self.lines.pool(slot).map_or(0, |p| p.2) as u32;
        let Some(holder) = self.state.holder_at(slot) else {
            // A key of pooled holds: its oldest hold, as a v1 QUERY can say it.
            let Some((token, hold, _)) = self.state.pooled_on(slot).next() else { return Response::Free };
            return Response::Holder {
                token,
                remaining_ms: self.pooled_remaining_ms(token, hold.lease_ms, now_ms),
                waiters,
                owner: self.state.owners().name(hold.owner).to_owned(),
            };
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
            waiters,
            owner: holder.owner.to_owned(),
        }
    }

    /// The `n` keys with the most waiters (ties: the longer oldest wait, then the key),
    /// with their holder as the applied state has it. O(keys with waiters).
    pub fn top_keys(&self, n: usize, now_ms: u64) -> Vec<TopKey> {
        let mut queued: Vec<(&str, usize, u64)> = self
            .lines
            .queued()
            .map(|(slot, _, _, waiters, &w)| {
                let since = self.waiters[w as usize].as_ref().map_or(now_ms, |w| w.since_ms);
                (self.state.key(slot), waiters, now_ms.saturating_sub(since))
            })
            .collect();
        let order = |a: &(&str, usize, u64), b: &(&str, usize, u64)| {
            b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0))
        };
        if queued.len() > n {
            queued.select_nth_unstable_by(n, order);
            queued.truncate(n);
        }
        queued.sort_unstable_by(order);
        queued
            .into_iter()
            .map(|(key, waiters, oldest)| {
                let (token, owner, remaining_ms) = match self.query(key, now_ms) {
                    Response::Holder { token, owner, remaining_ms, .. } => (token, owner, remaining_ms),
                    _ => (0, String::new(), 0),
                };
                TopKey {
                    key: key.to_owned(),
                    waiters: waiters.min(u32::MAX as usize) as u32,
                    oldest_wait_ms: oldest.min(u64::from(u32::MAX)) as u32,
                    token,
                    owner,
                    remaining_ms,
                }
            })
            .collect()
    }

    /// Applies one committed command; answers for this node's connections go to `out`.
    /// On the leader, a grant starts its lease timer now.
    pub fn apply<S: AsRef<str>>(&mut self, command: &Command<S>, now_ms: u64, out: &mut Output) {
        let mut effects = std::mem::take(&mut self.effects);
        self.state.apply(command, &mut effects);
        let handoff = !matches!(command, Command::Grant { .. } | Command::Hold { .. });
        for effect in effects.drain(..) {
            match effect {
                Effect::Reply(origin, response) => {
                    if origin.node == self.config.node && origin.incarnation == self.config.incarnation {
                        out.replies.push(Reply { conn: origin.conn, id: origin.id, response });
                    }
                }
                Effect::Granted { slot, token, lease_ms } => {
                    self.count_grant(handoff);
                    if self.leading && self.projected(slot).is_some_and(|(_, t)| t == token) {
                        let deadline_ms = now_ms + u64::from(lease_ms);
                        self.leases.insert(Timer { deadline_ms, order: token, id: slot.0 });
                    }
                    self.changed(slot);
                }
                Effect::Ended { slot, .. } => {
                    self.count_end(command);
                    self.changed(slot);
                }
                Effect::PoolGranted { token, lease_ms } => {
                    self.count_grant(handoff);
                    let keys = self.state.pooled_hold(token).map_or(0, |h| h.parts.len());
                    if self.leading && keys > 1 {
                        self.stats.multi_key_grants += 1;
                    }
                    if let Some(p) = self.pooled.get(&token).filter(|_| self.leading) {
                        let deadline_ms = now_ms + u64::from(lease_ms);
                        self.pool_leases.insert(Timer { deadline_ms, order: token, id: p.timer });
                    }
                }
                Effect::PoolEnded { .. } => self.count_end(command),
            }
        }
        self.effects = effects;
    }

    /// A change of the own holder of the key in `slot` was applied: while leading, it
    /// is one this table proposed and counted in the key's override.
    fn changed(&mut self, slot: SlotId) {
        if !self.leading {
            return;
        }
        if let Some(ov) = self.overrides.get_mut(&slot) {
            debug_assert!(ov.in_flight > 0, "an applied change this leader did not propose");
            ov.in_flight = ov.in_flight.saturating_sub(1);
            self.settle(slot);
        }
    }

    fn count_grant(&mut self, handoff: bool) {
        if self.leading {
            match handoff {
                false => self.stats.grants_immediate += 1,
                true => self.stats.grants_handoff += 1,
            }
        }
    }

    fn count_end<S>(&mut self, command: &Command<S>) {
        if self.leading && matches!(command, Command::Expire { .. } | Command::End { owner: None, .. }) {
            self.stats.lease_expiries += 1;
        }
    }

    /// Starts encoding a snapshot of the applied state (see [`LockState::begin_snapshot`]).
    pub fn begin_snapshot(&mut self) {
        self.state.begin_snapshot();
    }

    /// Encodes up to `slots_max` more key slots; the snapshot's bytes once done.
    pub fn snapshot_step(&mut self, slots_max: usize) -> Option<Vec<u8>> {
        self.state.snapshot_step(slots_max)
    }
}
