//! The leader's projection: the applied state plus the commands proposed and not yet
//! applied, kept as an override per key that differs (module docs of `table`). Reading
//! the projected holder, making and settling an override, the next token, and ending
//! a key's own projected hold (handing its permit on through the lines).

use super::stats::push_capped;
use super::{LockTable, Override, Projected};
use crate::lock::command::{Command, HoldGrant, Origin};
use crate::lock::lines::Want;
use crate::lock::store::{OwnerId, SlotId};

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
            self.overrides.insert(slot, Override { holder, in_flight: 0 });
        }
        self.overrides.get_mut(&slot).expect("just made")
    }

    /// Drops the override of `slot` once it says nothing the applied state does not
    /// and the key has no line.
    pub(super) fn settle(&mut self, slot: SlotId) {
        let done =
            self.overrides.get(&slot).is_some_and(|ov| ov.in_flight == 0) && self.lines.pool(slot).is_none();
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

    /// Ends the key's own projected hold in `slot` (the caller checked there is one) for
    /// a command about to be proposed: stops its lease timer and, if the key has a
    /// line, hands its permit on; returns the grants that makes, in arrival order.
    pub(super) fn end_hold(&mut self, slot: SlotId, now_ms: u64, unix_us: u64) -> Vec<HoldGrant> {
        let ov = self.override_mut(slot);
        let Projected::Held { owner: old_owner, token: old_token } = ov.holder else {
            debug_assert!(false, "end_hold without a projected holder");
            return Vec::new();
        };
        ov.in_flight += 1;
        ov.holder = Projected::Free;
        self.projected_held -= 1;
        push_capped(&mut self.stats.holds_us, unix_us.saturating_sub(old_token));
        if self.leases.get(slot.0).is_some_and(|t| t.order == old_token) {
            self.leases.remove(slot.0);
        }
        self.state.owners_mut().release(old_owner);
        if self.lines.pool(slot).is_none() {
            return Vec::new();
        }
        let granted = self.lines.free(&[Want { key: slot, count: 1, capacity: 1 }], now_ms);
        let next = self.project_grants(granted, now_ms, unix_us);
        self.settle(slot);
        next
    }

    /// The command that ends the key's own hold `token` on `key` (a release by `owner`
    /// answered at `origin`, or an expiry) and makes the grants `next`: the v1 command
    /// when it says it all (no grant, or one of this key alone), else an `End`.
    pub(super) fn ending(
        &self,
        key: String,
        token: u64,
        owner: Option<String>,
        origin: Option<Origin>,
        mut next: Vec<HoldGrant>,
    ) -> Command {
        let same_key = matches!(next.as_slice(), [g] if g.is_plain() && g.parts[0].key == key);
        if next.is_empty() || same_key {
            let next = next.pop().map(|g| g.grant);
            return match (owner, origin) {
                (Some(owner), Some(origin)) => Command::Release { key, owner, token, origin, next },
                _ => Command::Expire { key, token, next },
            };
        }
        Command::End { key, token, owner, origin, next }
    }
}
