//! Requests through the lines (docs/architecture.md, "Lines"): a HOLD of one or more
//! keys with a count each, and an ACQUIRE of a key that has a line; the grants they
//! and freed permits make, and the end of a pooled hold.

use super::stats::push_capped;
use super::{LockTable, Output, Pooled, Projected, Reply, Waiter};
use crate::lock::command::{Command, Grant, HoldGrant, Part};
use crate::lock::lines::{Asked, Granted, Want};
use crate::lock::store::SlotId;
use crate::lock::timers::Timer;
use crate::lock::ConnId;
use crate::proto::frame::PoolHolder;
use crate::proto::limits::POOL_HOLDERS_LISTED_MAX;
use crate::proto::{ErrorCode, Response};

impl LockTable {
    /// HOLD: `parts` (1–16 distinct keys, each with its count and capacity; the
    /// decoder checked the ranges) all at once for `lease_s` seconds, waiting up to
    /// `wait_ms`; `place`: tell the waiter its place in line.
    #[allow(clippy::too_many_arguments)]
    pub fn hold(
        &mut self,
        conn: ConnId,
        id: u32,
        lease_s: u8,
        wait_ms: u32,
        owner: &str,
        parts: Vec<Part>,
        place: bool,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        if !self.leading {
            return self.not_leader(conn, id, out);
        }
        let before = (out.replies.len(), out.proposals.len());
        self.hold_request(conn, id, lease_s, wait_ms, owner, parts, place, now_ms, unix_us, out);
        // What became of it, from what it produced: a proposal is its grant; else its
        // first answer says (a place in line, or none, when it queued).
        let holds = &mut self.stats.holds;
        match out.replies[before.0..].first().map(|r| &r.response) {
            _ if out.proposals.len() > before.1 => holds.granted += 1,
            Some(Response::Busy) => holds.busy += 1,
            Some(Response::Error { .. }) => holds.refused += 1,
            _ => holds.queued += 1,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn hold_request(
        &mut self,
        conn: ConnId,
        id: u32,
        lease_s: u8,
        wait_ms: u32,
        owner: &str,
        parts: Vec<Part>,
        place: bool,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        let plain = matches!(parts.as_slice(), [p] if p.capacity == 1);
        if plain && !place {
            let part = parts.into_iter().next().expect("one part");
            return self.acquire(conn, id, lease_s, wait_ms, part.key, owner, now_ms, unix_us, out);
        }
        // Pooled holds and waiters count against the node's limit like held keys do,
        // once per key they name: a request is taken only if all of its keys fit.
        if self.load() + parts.len() > self.config.keys_max {
            let message = format!(
                "the node's limit of {} held or queued keys and holds is reached",
                self.config.keys_max
            );
            out.replies.push(Reply {
                conn,
                id,
                response: Response::Error { code: ErrorCode::Overloaded, message },
            });
            return;
        }
        let lease_ms = u32::from(lease_s) * 1000;
        self.request(conn, id, lease_ms, wait_ms, owner, parts, place, now_ms, unix_us, out);
    }

    /// A request through the lines: granted at once, queued, `B`, or refused (`E 1`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn request(
        &mut self,
        conn: ConnId,
        id: u32,
        lease_ms: u32,
        wait_ms: u32,
        owner: &str,
        parts: Vec<Part>,
        place: bool,
        now_ms: u64,
        unix_us: u64,
        out: &mut Output,
    ) {
        let mut wants = Vec::with_capacity(parts.len());
        let mut outside = Vec::with_capacity(parts.len());
        for part in &parts {
            let slot = self.state.pin(&part.key);
            self.override_mut(slot);
            outside.push((slot, u32::from(self.projected(slot).is_some())));
            wants.push(Want { key: slot, count: part.count, capacity: part.capacity });
        }
        let owner = self.state.owners_mut().intern(owner);
        let w = self.new_waiter(Waiter { conn, id, owner, lease_ms, seq: 0, since_ms: now_ms });
        let held = |slot: SlotId| outside.iter().find(|(s, _)| *s == slot).map_or(0, |(_, n)| *n);
        let asked = self.lines.ask(wants.clone(), wait_ms > 0, place, w, now_ms, held);
        match asked {
            Err((refusal, w)) => {
                self.discard_waiter(w);
                let message = refusal.message_naming(|at| format!("{:?}", parts[at].key));
                out.replies.push(Reply {
                    conn,
                    id,
                    response: Response::Error { code: ErrorCode::Invalid, message },
                });
            }
            Ok(Asked::Busy(w)) => {
                self.discard_waiter(w);
                out.replies.push(Reply { conn, id, response: Response::Busy });
            }
            Ok(Asked::Granted(w)) => {
                let hold = self.project_grant(w, &wants, now_ms, unix_us);
                out.proposals.push_back(Command::Hold { hold });
            }
            Ok(Asked::Queued { seq, ahead }) => {
                let waiter = self.waiters[w as usize].as_mut().expect("just made");
                waiter.seq = seq;
                self.waits.insert(Timer { deadline_ms: now_ms + u64::from(wait_ms), order: seq, id: w });
                self.conn_waiters.entry(conn).or_default().push(w);
                if place {
                    let grants_per_ks = self.lines.grants_per_ks(seq, now_ms);
                    out.replies.push(Reply { conn, id, response: Response::InLine { ahead, grants_per_ks } });
                }
            }
        }
        for want in &wants {
            self.settle(want.key);
        }
    }

    /// Puts a waiter in the waiter list (its owner reference with it).
    fn new_waiter(&mut self, waiter: Waiter) -> u32 {
        match self.free_waiters.pop() {
            Some(w) => {
                self.waiters[w as usize] = Some(waiter);
                w
            }
            None => {
                self.waiters.push(Some(waiter));
                (self.waiters.len() - 1) as u32
            }
        }
    }

    /// Forgets a waiter that never queued (granted at once, busy or refused) and its
    /// owner reference.
    fn discard_waiter(&mut self, w: u32) {
        let waiter = self.waiters[w as usize].take().expect("a waiter just made");
        self.free_waiters.push(w);
        self.state.owners_mut().release(waiter.owner);
    }

    /// The grants the lines made, as the projection takes them.
    pub(super) fn project_grants(
        &mut self,
        granted: Vec<Granted<SlotId, u32>>,
        now_ms: u64,
        unix_us: u64,
    ) -> Vec<HoldGrant> {
        granted.into_iter().map(|g| self.project_grant(g.payload, &g.wants, now_ms, unix_us)).collect()
    }

    /// Waiter `w` is granted `wants` (the lines counted the permits): the projection
    /// takes the hold — the key's own holder for one key of capacity 1, a pooled hold
    /// otherwise — under a fresh token; returns the grant to propose.
    pub(super) fn project_grant(
        &mut self,
        w: u32,
        wants: &[Want<SlotId>],
        now_ms: u64,
        unix_us: u64,
    ) -> HoldGrant {
        let waiter = if self.waiters[w as usize].as_ref().is_some_and(|x| x.seq != 0) {
            self.forget_waiter(w)
        } else {
            let waiter = self.waiters[w as usize].take().expect("a waiter just made");
            self.free_waiters.push(w);
            waiter
        };
        if waiter.seq != 0 {
            push_capped(&mut self.stats.waits_ms, now_ms.saturating_sub(waiter.since_ms));
        }
        let token = self.next_token(unix_us);
        let plain = matches!(wants, [x] if x.capacity == 1);
        // The waiter's reference to its owner passes to the projected hold.
        if plain {
            let ov = self.override_mut(wants[0].key);
            debug_assert_eq!(ov.holder, Projected::Free, "the lines granted a key held on its own");
            ov.holder = Projected::Held { owner: waiter.owner, token };
            ov.in_flight += 1;
            self.projected_held += 1;
        } else {
            let timer = match self.free_pool_timers.pop() {
                Some(t) => {
                    self.pool_timer_tokens[t as usize] = token;
                    t
                }
                None => {
                    self.pool_timer_tokens.push(token);
                    (self.pool_timer_tokens.len() - 1) as u32
                }
            };
            let pooled = Pooled { owner: waiter.owner, parts: wants.to_vec(), timer };
            self.pooled_parts += wants.len();
            self.pooled.insert(token, pooled);
        }
        let parts = wants
            .iter()
            .map(|x| Part { key: self.state.key(x.key).to_owned(), count: x.count, capacity: x.capacity })
            .collect();
        let grant = Grant {
            owner: self.state.owners().name(waiter.owner).to_owned(),
            token,
            lease_ms: waiter.lease_ms,
            origin: self.origin(waiter.conn, waiter.id),
        };
        HoldGrant { grant, parts }
    }

    /// Ends the projected pooled hold `token` (the caller checked there is one): its
    /// timer stops and its permits go to the waiters that now meet the rule; returns
    /// their grants, in arrival order.
    pub(super) fn end_pooled(&mut self, token: u64, now_ms: u64, unix_us: u64) -> Vec<HoldGrant> {
        let Some(p) = self.pooled.remove(&token) else {
            debug_assert!(false, "end_pooled of a hold not projected");
            return Vec::new();
        };
        self.pooled_parts -= p.parts.len();
        self.pool_leases.remove(p.timer);
        self.free_pool_timers.push(p.timer);
        push_capped(&mut self.stats.holds_us, unix_us.saturating_sub(token));
        self.state.owners_mut().release(p.owner);
        let granted = self.lines.free(&p.parts, now_ms);
        let next = self.project_grants(granted, now_ms, unix_us);
        for part in &p.parts {
            self.settle(part.key);
        }
        next
    }

    /// POOL, answered from the applied state and the lines (the caller made sure this
    /// node leads and applied everything committed before the read, as for QUERY).
    pub fn pool(&self, key: &str, now_ms: u64) -> Response {
        let empty = Response::Pool {
            capacity: 0,
            in_use: 0,
            holds: 0,
            waiters: 0,
            oldest_wait_ms: 0,
            holders: vec![],
        };
        let Some(slot) = self.state.slot_of(key) else { return empty };
        let (waiters, oldest_wait_ms) = match self.lines.pool(slot) {
            Some((_, _, waiters)) if waiters > 0 => {
                let oldest = self
                    .lines
                    .queued()
                    .find(|q| q.0 == slot)
                    .and_then(|q| self.waiters[*q.4 as usize].as_ref())
                    .map_or(0, |w| now_ms.saturating_sub(w.since_ms));
                (waiters as u32, oldest.min(u64::from(u32::MAX)) as u32)
            }
            _ => (0, 0),
        };
        let mut holders = Vec::new();
        let (capacity, in_use, holds) = if let Some(h) = self.state.holder_at(slot) {
            let remaining_ms = match self.query(key, now_ms) {
                Response::Holder { remaining_ms, .. } => remaining_ms,
                _ => 0,
            };
            holders.push(PoolHolder { token: h.token, count: 1, remaining_ms, owner: h.owner.to_owned() });
            (1, 1, 1)
        } else if let Some(pk) = self.state.pool_key(slot) {
            for (token, hold, count) in self.state.pooled_on(slot).take(POOL_HOLDERS_LISTED_MAX) {
                let remaining_ms = self.pooled_remaining_ms(token, hold.lease_ms, now_ms);
                let owner = self.state.owners().name(hold.owner).to_owned();
                holders.push(PoolHolder { token, count, remaining_ms, owner });
            }
            (pk.capacity, pk.in_use, pk.holds)
        } else {
            match self.lines.pool(slot) {
                Some((capacity, _, _)) if waiters > 0 => (capacity, 0, 0),
                _ => return empty,
            }
        };
        Response::Pool { capacity, in_use, holds, waiters, oldest_wait_ms, holders }
    }

    /// Lease time left of pooled hold `token` (its full lease when this node does not
    /// lead it, or its timer is not started yet).
    pub(super) fn pooled_remaining_ms(&self, token: u64, lease_ms: u32, now_ms: u64) -> u32 {
        let timer =
            self.pooled.get(&token).and_then(|p| self.pool_leases.get(p.timer)).filter(|t| t.order == token);
        match timer {
            Some(t) => t.deadline_ms.saturating_sub(now_ms).min(u64::from(u32::MAX)) as u32,
            None if self.leading && !self.pooled.contains_key(&token) => 0,
            None => lease_ms,
        }
    }
}
