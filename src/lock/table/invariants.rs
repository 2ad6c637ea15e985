//! The table's invariants that take a walk over all of it (`check_invariants`); the
//! cheap ones are asserted where the table changes (docs/safety.md "Invariants").

use super::waiters::WAITER;
use super::{LockTable, Projected};
use crate::lock::store::OwnerId;
use std::collections::HashMap;

/// The first invariant found broken: its name and what was seen.
type Broken = (&'static str, String);

const LEASES: &str = "the lease timers match the holders";
const COUNTS: &str = "the table's counts match what it holds";
const OWNERS: &str = "owner references counted";
const OVERRIDES: &str = "an override pins its slot and says something";

impl LockTable {
    /// Walks the whole table (O(keys + waiters)) and stops the node, naming the
    /// invariant, if one is broken: the applied state's own
    /// ([`crate::lock::LockState::check_invariants`]); every queued waiter live, queued
    /// once and timed, and no live waiter outside a queue (one handed the key left its
    /// queue); one lease timer per held key whose hold is still the projected one, and
    /// none for any other key; every owner reference, pin and count accounted for.
    /// Debug builds run it where the table is rebuilt (leading, losing leadership,
    /// restoring a snapshot); the simulators and model tests after every step.
    pub fn check_invariants(&self) {
        self.state.check_invariants();
        if let Err((name, detail)) = self.find_broken() {
            crate::invariant::violated(name, format_args!("{detail}"));
        }
    }

    fn find_broken(&self) -> Result<(), Broken> {
        let mut refs: HashMap<OwnerId, u32> = HashMap::new();
        for (_, h) in self.state.holders() {
            *refs.entry(h.owner_id).or_default() += 1;
        }
        let mut queued = 0;
        let mut queued_keys = 0;
        let mut projected_held = self.state.keys_held();
        for (slot, ov) in &self.overrides {
            if !self.state.is_pinned(*slot) {
                return Err((OVERRIDES, format!("override of slot {slot:?} does not pin it")));
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
                        return Err((WAITER, format!("slot {slot:?} has waiters but no projected holder")));
                    }
                }
            }
            if ov.in_flight == 0 && ov.queue.is_empty() {
                return Err((OVERRIDES, format!("slot {slot:?} has an override that says nothing")));
            }
            queued_keys += usize::from(!ov.queue.is_empty());
            for &w in &ov.queue {
                let Some(waiter) = self.waiters.get(w as usize).and_then(|w| w.as_ref()) else {
                    return Err((WAITER, format!("slot {slot:?} queues waiter {w}, which left its queue")));
                };
                if waiter.slot != *slot || self.waits.get(w).is_none() {
                    return Err((WAITER, format!("waiter {w} is not where it should be")));
                }
                *refs.entry(waiter.owner).or_default() += 1;
                queued += 1;
            }
        }
        let live = self.waiters.iter().flatten().count();
        if live != queued || self.free_waiters.iter().any(|&w| self.waiters[w as usize].is_some()) {
            return Err((WAITER, format!("{live} live waiters, {queued} queued")));
        }
        if self.leading && projected_held != self.projected_held {
            return Err((
                COUNTS,
                format!("projected_held {} but counted {projected_held}", self.projected_held),
            ));
        }
        if queued != self.waiters_total || self.waits.len() != queued {
            let detail =
                format!("{queued} queued, {} counted, {} timers", self.waiters_total, self.waits.len());
            return Err((COUNTS, detail));
        }
        if queued_keys != self.queued_keys {
            return Err((COUNTS, format!("{queued_keys} keys with waiters, {} counted", self.queued_keys)));
        }
        for (owner, n) in &refs {
            if self.state.owners().refs(*owner) != *n {
                let name = self.state.owners().name(*owner);
                let has = self.state.owners().refs(*owner);
                return Err((OWNERS, format!("owner {name:?} has {has} references, {n} found")));
            }
        }
        if refs.len() != self.state.owners().len() {
            return Err((
                OWNERS,
                format!("{} owners interned, {} in use", self.state.owners().len(), refs.len()),
            ));
        }
        if self.leading {
            let mut timed = 0;
            for (slot, token, _) in self.state.held_slots() {
                let current = self.projected(slot).is_some_and(|(_, t)| t == token);
                let timer = self.leases.get(slot.0).is_some_and(|t| t.order == token);
                if current != timer {
                    return Err((
                        LEASES,
                        format!("slot {slot:?}: projected current {current}, lease timer {timer}"),
                    ));
                }
                timed += usize::from(timer);
            }
            // Every timer was counted at a held key: none is left for a free one.
            if timed != self.leases.len() {
                return Err((
                    LEASES,
                    format!("{} lease timers, {timed} of them for held keys", self.leases.len()),
                ));
            }
        } else if !self.leases.is_empty() || !self.overrides.is_empty() {
            return Err((LEASES, "a follower keeps leases or overrides".into()));
        }
        if self.state.pinned_count() != self.overrides.len() {
            let detail =
                format!("{} slots pinned, {} overrides", self.state.pinned_count(), self.overrides.len());
            return Err((OVERRIDES, detail));
        }
        Ok(())
    }

    /// [`LockTable::check_invariants`] in debug builds only: the walk is O(keys).
    pub(super) fn debug_check_invariants(&self) {
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }
}
