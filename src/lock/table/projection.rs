//! The leader's projection: the applied state plus the commands proposed and not yet
//! applied, kept as an override per key that differs (module docs of `table`). Reading
//! the projected holder, making and settling an override, the next token, and ending
//! a projected hold (handing the key to the queue head).

use super::stats::push_capped;
use super::{LockTable, Override, Projected};
use crate::lock::command::Grant;
use crate::lock::store::{OwnerId, SlotId};
use std::collections::VecDeque;

impl LockTable {
    /// The projected holder (owner, token) of the key in `slot`.
    pub(super) fn projected(&self, slot: SlotId) -> Option<(OwnerId, u64)> {
        match self.overrides.get(&slot) {
            Some(ov) => match ov.holder {
                Projected::Held { owner, token } => Some((owner, token)),
                Projected::Free => None,
            },
            None => self.state.holder_at(slot).map(|h| (h.owner_id, h.token)),
        }
    }

    /// The override of `slot`, made from the applied holder if there is none.
    pub(super) fn override_mut(&mut self, slot: SlotId) -> &mut Override {
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
    pub(super) fn settle(&mut self, slot: SlotId) {
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

    /// The next fencing token: `max(last + 1, now in Unix µs)` (docs/fencing.md).
    pub(super) fn next_token(&mut self, unix_us: u64) -> u64 {
        let token = (self.last_token_proposed + 1).max(unix_us);
        self.last_token_proposed = token;
        token
    }

    /// Ends the projected hold on the key in `slot` (the caller checked there is one)
    /// for a command about to be proposed: stops its lease timer and moves the queue
    /// head (if any) into the holder's place with a fresh token; returns that grant.
    pub(super) fn end_hold(&mut self, slot: SlotId, now_ms: u64, unix_us: u64) -> Option<Grant> {
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
}
