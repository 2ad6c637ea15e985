//! Pooled holds in the applied state: every counted or multi-key hold recorded once,
//! under its token, with the permits in use of each key it holds (docs/architecture.md,
//! "Lines"). A hold of one key of capacity 1 is not pooled: it is the key's own holder.

use std::collections::HashMap;

use super::pooled::{PoolKey, PooledHold, PooledHolder};
use super::{Effect, LockState};
use crate::lock::command::{HoldGrant, Part};
use crate::lock::store::SlotId;
use crate::proto::Response;

impl LockState {
    /// Every pooled hold as a snapshot records it, in token order.
    pub(crate) fn pooled_records(&self) -> Vec<(String, u64, u32, Vec<Part>)> {
        self.pools
            .holds
            .keys()
            .filter_map(|t| self.pooled_holder(*t))
            .map(|h| (h.owner, h.token, h.lease_ms, h.parts))
            .collect()
    }

    /// Pooled holds, in token order.
    pub fn pooled_holds(&self) -> impl Iterator<Item = (u64, &PooledHold)> {
        self.pools.holds.iter().map(|(t, h)| (*t, h))
    }

    /// The pooled hold `token`.
    pub fn pooled_hold(&self, token: u64) -> Option<&PooledHold> {
        self.pools.holds.get(&token)
    }

    /// The pooled hold `token`, with its strings.
    pub fn pooled_holder(&self, token: u64) -> Option<PooledHolder> {
        let h = self.pools.holds.get(&token)?;
        Some(PooledHolder {
            owner: self.owners.name(h.owner).to_owned(),
            token,
            lease_ms: h.lease_ms,
            parts: h
                .parts
                .iter()
                .map(|&(slot, count, capacity)| Part { key: self.key(slot).to_owned(), count, capacity })
                .collect(),
        })
    }

    /// The pooled holds on the key in `slot`, in token order (O(pooled holds)).
    pub fn pooled_on(&self, slot: SlotId) -> impl Iterator<Item = (u64, &PooledHold, u32)> {
        self.pools
            .holds
            .iter()
            .filter_map(move |(t, h)| h.parts.iter().find(|p| p.0 == slot).map(|p| (*t, h, p.1)))
    }

    /// What the key in `slot` has in pooled holds.
    pub fn pool_key(&self, slot: SlotId) -> Option<PoolKey> {
        self.pools.keys.get(&slot).copied()
    }

    /// Keys with pooled holds.
    pub fn pooled_keys(&self) -> usize {
        self.pools.keys.len()
    }

    /// Pooled holds held (O(1)).
    pub fn pooled_count(&self) -> usize {
        self.pools.holds.len()
    }

    /// Permits held on all keys by pooled holds (O(1)).
    pub fn permits_in_use(&self) -> u64 {
        self.pools.permits
    }

    /// Frees `slot` unless a holder, a pooled hold or a pin uses it.
    pub(super) fn free_slot_if_unused(&mut self, slot: SlotId) {
        if !self.pools.keys.contains_key(&slot) {
            self.slots.free_if_unused(slot);
        }
    }

    /// Grants `hold`: a plain one as its key's holder, any other as a pooled hold.
    pub(super) fn grant_hold<S: AsRef<str>>(&mut self, hold: &HoldGrant<S>, effects: &mut Vec<Effect>) {
        if hold.is_plain() {
            let slot = self.grant(hold.parts[0].key.as_ref(), &hold.grant, effects);
            self.free_slot_if_unused(slot);
            return;
        }
        let token = hold.grant.token;
        crate::invariant!(
            token > self.last_token,
            "fencing tokens strictly increase",
            "a committed hold under token {token} after token {}",
            self.last_token
        );
        let mut parts = Vec::with_capacity(hold.parts.len());
        for part in &hold.parts {
            let key = part.key.as_ref();
            let slot = self.slots.find_or_add(key);
            let inline = self.slots.slots[slot.index()].is_held();
            let pk = self.pools.keys.entry(slot).or_insert(PoolKey {
                capacity: part.capacity,
                in_use: 0,
                holds: 0,
            });
            crate::invariant!(
                pk.capacity == part.capacity && !inline && pk.in_use + part.count <= pk.capacity,
                "permits held within capacity",
                "a committed hold of {} of {key:?} (capacity {}) under token {token}; the key has capacity {}, {} in use, a holder of its own: {inline}",
                part.count,
                part.capacity,
                pk.capacity,
                pk.in_use
            );
            pk.in_use += part.count;
            pk.holds += 1;
            self.pools.permits += u64::from(part.count);
            parts.push((slot, part.count, part.capacity));
        }
        self.last_token = token;
        let owner = self.owners.intern(hold.grant.owner.as_ref());
        let lease_ms = hold.grant.lease_ms;
        self.pools.holds.insert(token, PooledHold { owner, lease_ms, parts: parts.into() });
        effects.push(Effect::PoolGranted { token, lease_ms });
        effects.push(Effect::Reply(hold.grant.origin, Response::Granted { token, lease_ms }));
    }

    /// Ends pooled hold `token` if it is held (by `owner`, when given); true if it was.
    pub(super) fn end_pooled(&mut self, token: u64, owner: Option<&str>, effects: &mut Vec<Effect>) -> bool {
        let Some(hold) = self.pools.holds.get(&token) else { return false };
        if owner.is_some_and(|o| o != self.owners.name(hold.owner)) {
            return false;
        }
        let hold = self.pools.holds.remove(&token).expect("found above");
        for &(slot, count, _) in hold.parts.iter() {
            let pk = self.pools.keys.get_mut(&slot).expect("a pooled hold's key is pooled");
            pk.in_use -= count;
            pk.holds -= 1;
            self.pools.permits -= u64::from(count);
            if pk.holds == 0 {
                self.pools.keys.remove(&slot);
                self.slots.free_if_unused(slot);
            }
        }
        self.owners.release(hold.owner);
        effects.push(Effect::PoolEnded { token });
        true
    }

    /// Adds a decoded pooled hold; false if it cannot be one (a key twice, a count over
    /// capacity, a capacity that differs from the key's, a key held on its own).
    pub(crate) fn restore_pooled(
        &mut self,
        owner: &str,
        token: u64,
        lease_ms: u32,
        parts: &[Part<&str>],
    ) -> bool {
        let valid = token != 0
            && token <= self.last_token
            && !self.pools.holds.contains_key(&token)
            && !parts.is_empty()
            && parts.iter().enumerate().all(|(i, p)| parts[..i].iter().all(|q| q.key != p.key))
            && !matches!(parts, [p] if p.capacity == 1);
        if !valid {
            return false;
        }
        for p in parts {
            let slot = self.slots.find(p.key);
            let inline = slot.is_some_and(|s| self.slots.slots[s.index()].is_held());
            let pk = slot.and_then(|s| self.pools.keys.get(&s)).copied();
            let fits = pk.map_or(p.count <= p.capacity, |k| {
                k.capacity == p.capacity && k.in_use + p.count <= k.capacity
            });
            if inline || !fits || p.count == 0 {
                return false;
            }
        }
        let mut effects = Vec::new();
        let grant = crate::lock::command::Grant {
            owner,
            token,
            lease_ms,
            origin: crate::lock::command::Origin { node: 0, incarnation: 0, conn: 0, id: 0 },
        };
        let last = std::mem::replace(&mut self.last_token, token - 1);
        self.grant_hold(&HoldGrant { grant, parts: parts.to_vec() }, &mut effects);
        self.last_token = last;
        true
    }

    /// The pooled part of the invariants walk: every pooled key's count of permits and
    /// holds is what its holds add up to, within capacity, and no key both pooled and
    /// held on its own.
    pub(super) fn check_pooled(&self) {
        let mut seen: HashMap<SlotId, (u32, u32, u32)> = HashMap::new();
        let mut permits = 0u64;
        for (token, hold) in &self.pools.holds {
            crate::invariant!(
                *token <= self.last_token && *token != 0,
                "fencing tokens strictly increase",
                "pooled hold under token {token}, last token {}",
                self.last_token
            );
            for &(slot, count, capacity) in hold.parts.iter() {
                let e = seen.entry(slot).or_insert((capacity, 0, 0));
                e.1 += count;
                e.2 += 1;
                permits += u64::from(count);
            }
        }
        crate::invariant!(
            permits == self.pools.permits,
            "the state's counts match what it holds",
            "pooled holds take {permits} permits, {} counted",
            self.pools.permits
        );
        crate::invariant!(
            seen.len() == self.pools.keys.len(),
            "the state's counts match what it holds",
            "{} pooled keys held, {} recorded",
            seen.len(),
            self.pools.keys.len()
        );
        for (slot, (capacity, in_use, holds)) in seen {
            let pk = self.pools.keys.get(&slot).copied();
            let inline = self.slots.slots.get(slot.index()).is_some_and(|s| s.is_held());
            crate::invariant!(
                pk == Some(PoolKey { capacity, in_use, holds }) && in_use <= capacity && !inline,
                "permits held within capacity",
                "key {:?}: holds add up to {in_use} of {capacity} permits in {holds} holds, recorded {pk:?}, a holder of its own: {inline}",
                self.key(slot)
            );
        }
    }

    /// Equal pooled holds (owners, leases, keys by name), for state equality.
    pub(super) fn pooled_eq(&self, other: &LockState) -> bool {
        self.pools.holds.len() == other.pools.holds.len()
            && self.pools.holds.keys().all(|t| self.pooled_holder(*t) == other.pooled_holder(*t))
    }
}
