//! What time does to the table: waits that elapse answer `T`, leases that run out
//! are expired (handing the key on), and when the next of these is due.

use super::stats::push_capped;
use super::{LockTable, Output, Reply};
use crate::lock::command::Command;
use crate::lock::store::SlotId;
use crate::proto::Response;

impl LockTable {
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
            let own = self.leases.first().map(|t| t.deadline_ms);
            let pooled = self.pool_leases.first().map(|t| t.deadline_ms);
            let lease = match (own, pooled) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
            .filter(|&d| d <= now_ms);
            let wait = self.waits.first().map(|t| t.deadline_ms).filter(|&d| d <= now_ms);
            match (lease, wait) {
                (None, None) => break,
                (Some(l), Some(w)) if w < l => self.tick_wait(now_ms, unix_us, out),
                (Some(l), _) if own == Some(l) => self.tick_lease(now_ms, unix_us, out),
                (Some(_), _) => self.tick_pool_lease(now_ms, unix_us, out),
                (None, Some(_)) => self.tick_wait(now_ms, unix_us, out),
            }
        }
        for (place, &w) in self.lines.places_due(now_ms) {
            if let Some(waiter) = self.waiters[w as usize].as_ref() {
                let response = Response::InLine { ahead: place.ahead, grants_per_ks: place.grants_per_ks };
                out.replies.push(Reply { conn: waiter.conn, id: waiter.id, response });
            }
        }
    }

    /// Handles the earliest pooled lease timer (the caller checked it is due).
    fn tick_pool_lease(&mut self, now_ms: u64, unix_us: u64, out: &mut Output) {
        let Some(timer) = self.pool_leases.pop() else {
            return;
        };
        let token = timer.order;
        let key = match self.pooled.get(&token) {
            Some(p) => self.state.key(p.parts[0].key).to_owned(),
            None => crate::invariant::violated(
                "the lease timers match the holders",
                format_args!("the lease timer of pooled hold {token} ran out; no such hold is projected"),
            ),
        };
        let next = self.end_pooled(token, now_ms, unix_us);
        out.proposals.push_back(Command::End { key, token, owner: None, origin: None, next });
    }

    /// Handles the earliest lease timer (the caller checked it is due).
    fn tick_lease(&mut self, now_ms: u64, unix_us: u64, out: &mut Output) {
        let Some(timer) = self.leases.pop() else {
            return;
        };
        let (slot, token) = (SlotId(timer.id), timer.order);
        // A hold that ended took its timer with it (`end_hold`), so a timer that runs
        // out is always that of the key's projected holder.
        let projected = self.projected(slot).map(|(_, t)| t);
        crate::invariant!(
            projected == Some(token),
            "the lease timers match the holders",
            "the lease timer of slot {slot:?} under token {token} ran out; projected holder's token {projected:?}"
        );
        let key = self.state.key(slot).to_owned();
        let next = self.end_hold(slot, now_ms, unix_us);
        out.proposals.push_back(self.ending(key, token, None, None, next));
    }

    /// Handles the earliest wait timer (the caller checked it is due).
    fn tick_wait(&mut self, now_ms: u64, unix_us: u64, out: &mut Output) {
        let Some(timer) = self.waits.first().copied() else {
            return;
        };
        let waiter = self.drop_waiter(timer.id, now_ms, unix_us, out);
        push_capped(&mut self.stats.waits_ms, now_ms.saturating_sub(waiter.since_ms));
        out.replies.push(Reply { conn: waiter.conn, id: waiter.id, response: Response::Timeout });
    }

    /// The earliest moment `tick` has work to do, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let wait = self.waits.first().map(|t| t.deadline_ms);
        let lease = self.leases.first().map(|t| t.deadline_ms);
        let pooled = self.pool_leases.first().map(|t| t.deadline_ms);
        [wait, lease, pooled, self.lines.next_place_due()].into_iter().flatten().min()
    }
}
