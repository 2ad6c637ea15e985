//! The table's invariants that take a walk over all of it (`check_invariants`); the
//! cheap ones are asserted where the table changes (docs/safety.md "Invariants").

use super::waiters::WAITER;
use super::{LockTable, Projected};
use crate::lock::store::{OwnerId, SlotId};
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
        for (_, h) in self.state.pooled_holds() {
            *refs.entry(h.owner).or_default() += 1;
        }
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
                Projected::Free => projected_held -= usize::from(applied),
            }
            if ov.in_flight == 0 && self.lines.pool(*slot).is_none() {
                return Err((OVERRIDES, format!("slot {slot:?} has an override that says nothing")));
            }
        }
        if let Err(detail) = self.lines.find_broken() {
            return Err((WAITER, format!("the lines: {detail}")));
        }
        // Each line's permits in use are the key's own projected holder and the
        // projected pooled holds on it; every key with a line has an override.
        let mut pooled_in_use: HashMap<SlotId, u32> = HashMap::new();
        let parts: usize = self.pooled.values().map(|p| p.parts.len()).sum();
        if parts != self.pooled_parts {
            return Err((COUNTS, format!("pooled holds name {parts} keys, {} counted", self.pooled_parts)));
        }
        for (token, p) in &self.pooled {
            *refs.entry(p.owner).or_default() += 1;
            if self.pool_timer_tokens.get(p.timer as usize) != Some(token) {
                return Err((LEASES, format!("pooled hold {token} has timer id {} of another", p.timer)));
            }
            for part in &p.parts {
                *pooled_in_use.entry(part.key).or_default() += part.count;
            }
        }
        for (slot, in_use) in &pooled_in_use {
            let own = u32::from(self.projected(*slot).is_some());
            match self.lines.pool(*slot) {
                Some((_, used, _)) if used == in_use + own => {}
                other => {
                    return Err((
                        COUNTS,
                        format!("slot {slot:?}: pooled holds take {in_use}, own {own}, the line {other:?}"),
                    ));
                }
            }
        }
        for slot in self.overrides.keys() {
            if let Some((_, used, _)) = self.lines.pool(*slot) {
                let expect = pooled_in_use.get(slot).copied().unwrap_or(0)
                    + u32::from(self.projected(*slot).is_some());
                if used != expect {
                    return Err((
                        COUNTS,
                        format!("slot {slot:?}: the line has {used} in use, the projection {expect}"),
                    ));
                }
            }
        }
        let mut queued = 0;
        for (w, waiter) in self.waiters.iter().enumerate() {
            let Some(waiter) = waiter else { continue };
            if self.lines.wants(waiter.seq).is_none() || self.waits.get(w as u32).is_none() {
                return Err((WAITER, format!("waiter {w} is not where it should be")));
            }
            *refs.entry(waiter.owner).or_default() += 1;
            queued += 1;
        }
        if queued != self.lines.waiters()
            || self.free_waiters.iter().any(|&w| self.waiters[w as usize].is_some())
        {
            return Err((WAITER, format!("{queued} live waiters, {} in the lines", self.lines.waiters())));
        }
        if self.leading && projected_held != self.projected_held {
            return Err((
                COUNTS,
                format!("projected_held {} but counted {projected_held}", self.projected_held),
            ));
        }
        if self.waits.len() != queued {
            return Err((COUNTS, format!("{queued} queued, {} timers", self.waits.len())));
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
            let mut timed = 0;
            for (token, _) in self.state.pooled_holds() {
                let current = self.pooled.get(&token);
                let timer =
                    current.and_then(|p| self.pool_leases.get(p.timer)).is_some_and(|t| t.order == token);
                if current.is_some() != timer {
                    return Err((
                        LEASES,
                        format!("pooled hold {token}: projected {}, lease timer {timer}", current.is_some()),
                    ));
                }
                timed += usize::from(timer);
            }
            if timed != self.pool_leases.len() {
                return Err((
                    LEASES,
                    format!(
                        "{} pooled lease timers, {timed} of them for applied holds",
                        self.pool_leases.len()
                    ),
                ));
            }
        } else if !self.leases.is_empty()
            || !self.overrides.is_empty()
            || !self.pooled.is_empty()
            || self.lines.keys() > 0
        {
            return Err((LEASES, "a follower keeps leases, overrides or lines".into()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::table::{Output, Override, TableConfig};
    use crate::lock::timers::Timer;

    fn config() -> TableConfig {
        TableConfig { node: 1, incarnation: 1, waiters_per_key_max: 8, keys_max: 100 }
    }

    /// A leader's table with a bit of everything: "a" held with one waiter, "b" held
    /// with its release proposed, "c" granted but not applied yet, "d" held plainly.
    fn table() -> LockTable {
        let mut t = LockTable::new(config());
        t.become_leader(0);
        let commit = |t: &mut LockTable, mut out: Output| {
            while let Some(c) = out.proposals.pop_front() {
                t.apply(&c, 0, &mut out);
            }
        };
        let mut tokens = Vec::new();
        for (conn, key, owner) in [(1, "a", "alice"), (2, "b", "carol"), (4, "d", "erin")] {
            let mut out = Output::default();
            t.acquire(conn, 1, 10, 0, key, owner, 0, 1_000_000, &mut out);
            commit(&mut t, out);
            tokens.push(t.state.holder(key).unwrap().token);
        }
        let mut out = Output::default();
        t.acquire(3, 2, 10, 5_000, "a", "bob", 0, 1_000_000, &mut out);
        t.release(2, 3, tokens[1], "b", "carol", 0, 1_000_000, &mut out);
        t.acquire(5, 4, 10, 0, "c", "dave", 0, 1_000_000, &mut out);
        assert_eq!(out.proposals.len(), 2, "b's release and c's grant wait in the log");
        // A pooled hold of two permits of "p" (capacity 3), applied.
        let mut pooled = Output::default();
        let parts = vec![crate::lock::Part { key: "p".to_string(), count: 2, capacity: 3 }];
        t.hold(6, 5, 10, 0, "frank", parts, false, 0, 1_000_000, &mut pooled);
        commit(&mut t, pooled);
        t.check_invariants();
        t
    }

    fn first_waiter(t: &LockTable) -> u32 {
        t.waiters.iter().position(|w| w.is_some()).unwrap() as u32
    }

    fn slot(t: &LockTable, key: &str) -> crate::lock::SlotId {
        t.state.slot_of(key).unwrap()
    }

    fn owner(t: &LockTable, key: &str) -> OwnerId {
        t.state.holders().find(|(k, _)| *k == key).unwrap().1.owner_id
    }

    /// Each rule the walk checks, broken alone, is found and named; through
    /// `check_invariants`, it stops the node with the name.
    #[test]
    fn the_walk_finds_each_broken_rule() {
        type Break = fn(&mut LockTable);
        let cases: [(&str, &str, &str, Break); 15] = [
            ("unpinned override", "does not pin it", OVERRIDES, |t| t.state.unpin(slot(t, "a"))),
            ("a line's permits unlike the projection", "the projection", COUNTS, |t| {
                let s = slot(t, "a");
                t.overrides.get_mut(&s).unwrap().holder = Projected::Free;
                t.projected_held -= 1;
            }),
            ("an override saying nothing", "says nothing", OVERRIDES, |t| {
                let s = slot(t, "d");
                let held =
                    Projected::Held { owner: owner(t, "d"), token: t.state.holder("d").unwrap().token };
                let d = owner(t, "d");
                t.state.pin_slot(s);
                t.state.owners_mut().retain(d);
                t.overrides.insert(s, Override { holder: held, in_flight: 0 });
            }),
            ("a queued waiter gone", "live waiters", WAITER, |t| {
                let w = first_waiter(t);
                let gone = t.waiters[w as usize].take().unwrap();
                t.state.owners_mut().release(gone.owner);
            }),
            ("a queued waiter without its wait timer", "is not where it should be", WAITER, |t| {
                let w = first_waiter(t);
                t.waits.remove(w);
            }),
            ("a live waiter in no line", "is not where it should be", WAITER, |t| {
                let mut stray = t.waiters.iter().flatten().next().unwrap().clone();
                stray.seq = 999;
                t.state.owners_mut().retain(stray.owner);
                t.waiters.push(Some(stray));
            }),
            ("projected holds miscounted", "projected_held", COUNTS, |t| t.projected_held += 1),
            ("a wait timer too many", "timers", COUNTS, |t| {
                t.waits.insert(Timer { deadline_ms: 9, order: 99, id: 77 });
            }),
            ("a pooled hold without its timer id", "timer id", LEASES, |t| {
                let (token, p) = t.pooled.iter_mut().next().unwrap();
                let _ = token;
                p.timer += 1;
            }),
            ("an owner reference too many", "references", OWNERS, |t| {
                let d = owner(t, "d");
                t.state.owners_mut().retain(d);
            }),
            ("an owner nobody uses", "owners interned", OWNERS, |t| {
                t.state.owners_mut().intern("nobody");
            }),
            ("a hold without its lease timer", "projected current true, lease timer false", LEASES, |t| {
                t.leases.remove(slot(t, "d").0);
            }),
            ("a lease timer of a free key", "lease timers, ", LEASES, |t| {
                t.leases.insert(Timer { deadline_ms: 9, order: 99, id: 77 });
            }),
            ("a follower with the leader's overrides", "a follower keeps", LEASES, |t| {
                t.leading = false;
                t.leases.clear();
            }),
            ("a pin without an override", "slots pinned", OVERRIDES, |t| {
                t.state.pin("z");
            }),
        ];
        for (what, detail, name, break_it) in cases {
            let mut t = table();
            break_it(&mut t);
            let found = t.find_broken().expect_err(what);
            assert_eq!(found.0, name, "{what}: {}", found.1);
            assert!(found.1.contains(detail), "{what}: {}", found.1);
            let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.check_invariants()))
                .expect_err(what);
            let message = payload.downcast_ref::<String>().map(String::as_str).unwrap_or("");
            assert!(message.starts_with(&format!("invariant violated: {name}: ")), "{what}: {message}");
        }
    }

    /// Debug builds walk the table where it is rebuilt: a table that starts leading
    /// with an owner nobody uses stops there, naming it.
    #[cfg(debug_assertions)]
    #[test]
    fn debug_builds_walk_the_table_when_it_starts_leading() {
        let mut t = LockTable::new(config());
        t.state.owners_mut().intern("nobody");
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.become_leader(0)))
            .expect_err("a broken table started leading");
        let message = payload.downcast_ref::<String>().map(String::as_str).unwrap_or("");
        assert!(message.starts_with(&format!("invariant violated: {OWNERS}: ")), "{message}");
    }
}
