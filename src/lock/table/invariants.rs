//! The table's invariants, checked by walking all of it.

use super::{LockTable, Projected};
use crate::lock::store::OwnerId;
use std::collections::HashMap;

impl LockTable {
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
