//! The applied lock state and its pure `apply`.
//!
//! Storage (src/lock/store.rs): each key once, in a stable slot with its holder
//! (32 bytes plus the key's bytes), owners interned. The leader's projection
//! (`table.rs`) refers to keys by slot and may *pin* a slot it needs while its key is
//! not held; pins never change what this state says (holders, equality, snapshots).
//!
//! Encoding the state as a snapshot, in slices while commands keep being applied:
//! `slices.rs`.

use std::collections::BTreeMap;

mod cursor;
mod pooled;
mod pools;
mod slices;

pub use pooled::{PoolKey, PooledHold, PooledHolder};

use super::command::{Command, Grant, Origin};
use super::store::{OwnerId, Owners, SlotId, Slots};
use crate::proto::Response;
use cursor::SnapshotCursor;

/// The current holder of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub token: u64,
    pub lease_ms: u32,
}

/// The current holder of a key, borrowed from the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderRef<'a> {
    pub owner: &'a str,
    pub owner_id: OwnerId,
    pub token: u64,
    pub lease_ms: u32,
}

impl HolderRef<'_> {
    pub fn to_holder(&self) -> Holder {
        Holder { owner: self.owner.to_owned(), token: self.token, lease_ms: self.lease_ms }
    }
}

/// What applying a command did, for the node that drives the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Answer the request behind `origin` (on the node it came from).
    Reply(Origin, Response),
    /// The key in `slot` now has a holder with this token and lease (start its lease
    /// timer).
    Granted { slot: SlotId, token: u64, lease_ms: u32 },
    /// The hold `token` on the key in `slot` ended (released or expired). The slot may
    /// be free by the time the effect is read.
    Ended { slot: SlotId, token: u64 },
    /// A pooled hold (counted or multi-key) was granted under `token`.
    PoolGranted { token: u64, lease_ms: u32 },
    /// The pooled hold `token` ended (released or expired).
    PoolEnded { token: u64 },
}

/// A cluster member as the log records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberRecord {
    /// Its client address.
    pub addr: String,
    /// The process that runs this node id; 0 while not known.
    pub incarnation: u64,
}

/// Holders of all held keys and the highest token ever granted. Every node holds the
/// same `LockState` after applying the same commands.
#[derive(Clone, Default)]
pub struct LockState {
    slots: Slots,
    owners: Owners,
    /// Keys held.
    held: usize,
    last_token: u64,
    /// The fencing domain; 0 until the first leader recorded one.
    domain: u64,
    /// Cluster members (address and incarnation), replicated so that every node (and
    /// every future leader) can reach every member and knows which process runs it.
    members: BTreeMap<u64, MemberRecord>,
    /// Counted and multi-key holds (`pools.rs`).
    pools: pooled::Pools,
    /// A snapshot being encoded in slices.
    snapshot: Option<Box<SnapshotCursor>>,
}

impl PartialEq for LockState {
    /// Equal holders, tokens, domain and members; slot numbers and pins do not count.
    fn eq(&self, other: &LockState) -> bool {
        self.held == other.held
            && self.last_token == other.last_token
            && self.domain == other.domain
            && self.members == other.members
            && self.pooled_eq(other)
            && self.holders().all(|(key, h)| {
                other
                    .holder_ref(key)
                    .is_some_and(|o| (o.owner, o.token, o.lease_ms) == (h.owner, h.token, h.lease_ms))
            })
    }
}

impl Eq for LockState {}

impl std::fmt::Debug for LockState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holders: BTreeMap<&str, (&str, u64, u32)> =
            self.holders().map(|(k, h)| (k, (h.owner, h.token, h.lease_ms))).collect();
        f.debug_struct("LockState")
            .field("holders", &holders)
            .field("last_token", &self.last_token)
            .field("domain", &self.domain)
            .field("members", &self.members)
            .field(
                "pooled",
                &self.pools.holds.keys().filter_map(|t| self.pooled_holder(*t)).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl LockState {
    /// A state from its parts (a decoded snapshot); `None` if a key appears twice.
    /// Keys get slots in the order given.
    pub fn from_parts(holders: Vec<(String, Holder)>, last_token: u64, domain: u64) -> Option<LockState> {
        let mut state = LockState { last_token, domain, ..LockState::default() };
        for (key, holder) in holders {
            if !state.restore_holder(&key, &holder.owner, holder.token, holder.lease_ms) {
                return None;
            }
        }
        Some(state)
    }

    /// Adds a decoded holder; false if `key` is held already.
    pub(super) fn restore_holder(&mut self, key: &str, owner: &str, token: u64, lease_ms: u32) -> bool {
        let slot = self.slots.find_or_add(key);
        if self.slots.slots[slot.index()].is_held() || token == 0 {
            return false;
        }
        let owner = self.owners.intern(owner);
        let s = &mut self.slots.slots[slot.index()];
        (s.owner, s.token, s.lease_ms) = (owner, token, lease_ms);
        self.held += 1;
        true
    }

    /// The same state with these member records (a decoded snapshot).
    pub fn with_members(mut self, members: BTreeMap<u64, MemberRecord>) -> LockState {
        self.members = members;
        self
    }

    /// Recorded cluster members, by node id.
    pub fn members(&self) -> &BTreeMap<u64, MemberRecord> {
        &self.members
    }

    /// The fencing domain (0 until recorded).
    pub fn domain(&self) -> u64 {
        self.domain
    }

    /// The holder of `key`, copied out.
    pub fn holder(&self, key: &str) -> Option<Holder> {
        self.holder_ref(key).map(|h| h.to_holder())
    }

    /// The holder of `key`.
    pub fn holder_ref(&self, key: &str) -> Option<HolderRef<'_>> {
        self.holder_at(self.slots.find(key)?)
    }

    /// The holder of the key in `slot`.
    pub fn holder_at(&self, slot: SlotId) -> Option<HolderRef<'_>> {
        let s = self.slots.slots.get(slot.index())?;
        s.is_held().then(|| HolderRef {
            owner: self.owners.name(s.owner),
            owner_id: s.owner,
            token: s.token,
            lease_ms: s.lease_ms,
        })
    }

    /// Every held key with its holder, in slot order.
    pub fn holders(&self) -> impl Iterator<Item = (&str, HolderRef<'_>)> {
        self.slots.slots.iter().filter(|s| s.is_held()).map(|s| {
            let holder = HolderRef {
                owner: self.owners.name(s.owner),
                owner_id: s.owner,
                token: s.token,
                lease_ms: s.lease_ms,
            };
            (&*s.key, holder)
        })
    }

    /// Held slots with token and lease, in slot order (the leader's lease timers).
    pub(super) fn held_slots(&self) -> impl Iterator<Item = (SlotId, u64, u32)> + '_ {
        self.slots
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_held())
            .map(|(i, s)| (SlotId(i as u32), s.token, s.lease_ms))
    }

    /// The slot of `key`, if it is held or pinned.
    pub fn slot_of(&self, key: &str) -> Option<SlotId> {
        self.slots.find(key)
    }

    /// The key in `slot` (empty for a free slot).
    pub fn key(&self, slot: SlotId) -> &str {
        &self.slots.slots[slot.index()].key
    }

    pub fn keys_held(&self) -> usize {
        self.held
    }

    /// Interned owners (of holders, and of the leader's waiters and projected holders).
    pub fn owners(&self) -> &Owners {
        &self.owners
    }

    pub(super) fn owners_mut(&mut self) -> &mut Owners {
        &mut self.owners
    }

    /// The slot of `key`, kept for the leader's projection until `unpin` even while
    /// nobody holds the key.
    pub(super) fn pin(&mut self, key: &str) -> SlotId {
        let slot = self.slots.find_or_add(key);
        self.slots.set_pinned(slot, true);
        slot
    }

    /// Pins a slot in use (see `pin`).
    pub(super) fn pin_slot(&mut self, slot: SlotId) {
        self.slots.set_pinned(slot, true);
    }

    pub(super) fn is_pinned(&self, slot: SlotId) -> bool {
        self.slots.is_pinned(slot)
    }

    /// Slots pinned by the leader's projection.
    pub(super) fn pinned_count(&self) -> usize {
        self.slots.pinned_count()
    }

    /// The projection no longer refers to `slot`.
    pub(super) fn unpin(&mut self, slot: SlotId) {
        self.slots.set_pinned(slot, false);
        self.free_slot_if_unused(slot);
    }

    /// Key slots in use or free (slot numbers are below this).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The highest token ever granted in this domain (0 before the first grant).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Applies one committed command. Pure and deterministic: the result depends only
    /// on the state and the command, never on the node or the time.
    ///
    /// The leader's projection guarantees that a proposed grant finds its key free and
    /// its token above `last_token`. Should that ever not hold, the node stops on a
    /// violated invariant (src/invariant.rs) rather than break mutual exclusion or
    /// token order, or answer from a state it cannot trust.
    pub fn apply<S: AsRef<str>>(&mut self, command: &Command<S>, effects: &mut Vec<Effect>) {
        match command {
            Command::Grant { key, grant } => {
                let slot = self.grant(key.as_ref(), grant, effects);
                self.free_slot_if_unused(slot);
            }
            Command::Hold { hold } => self.grant_hold(hold, effects),
            Command::End { key, token, owner, origin, next } => {
                let key = key.as_ref();
                let owner = owner.as_ref().map(|o| o.as_ref());
                let mut ended = self.end_pooled(*token, owner, effects);
                let slot = self.slots.find(key);
                if !ended {
                    if let Some(slot) = slot.filter(|&s| {
                        self.holder_at(s)
                            .is_some_and(|h| h.token == *token && owner.is_none_or(|o| o == h.owner))
                    }) {
                        self.end_hold(slot);
                        effects.push(Effect::Ended { slot, token: *token });
                        ended = true;
                    }
                }
                if let Some(origin) = origin {
                    let response = if ended { Response::Released } else { Response::NotHolder };
                    effects.push(Effect::Reply(*origin, response));
                }
                for hold in next {
                    self.grant_hold(hold, effects);
                }
                if let Some(slot) = self.slots.find(key) {
                    self.free_slot_if_unused(slot);
                }
            }
            Command::SetMember { node, incarnation, addr } => {
                let record = self.members.entry(*node).or_default();
                // A node id belongs to the first process recorded for it; a record for
                // another process changes nothing.
                if *incarnation != 0 && record.incarnation != 0 && record.incarnation != *incarnation {
                    return;
                }
                if record.incarnation == 0 {
                    record.incarnation = *incarnation;
                }
                record.addr.clear();
                record.addr.push_str(addr.as_ref());
            }
            Command::SetDomain { domain } => {
                // The first recorded domain stays: a domain is never replaced.
                if self.domain == 0 {
                    self.domain = *domain;
                }
            }
            Command::Release { key, owner, token, origin, next } => {
                let key = key.as_ref();
                let slot = self.slots.find(key);
                let matches = slot
                    .and_then(|s| self.holder_at(s))
                    .is_some_and(|h| h.owner == owner.as_ref() && h.token == *token);
                match slot {
                    Some(slot) if matches => {
                        self.end_hold(slot);
                        effects.push(Effect::Ended { slot, token: *token });
                        effects.push(Effect::Reply(*origin, Response::Released));
                    }
                    _ => effects.push(Effect::Reply(*origin, Response::NotHolder)),
                }
                self.hand_over(key, slot, next, effects);
            }
            Command::Expire { key, token, next } => {
                let key = key.as_ref();
                let slot = self.slots.find(key);
                if let Some(slot) = slot.filter(|&s| self.holder_at(s).is_some_and(|h| h.token == *token)) {
                    self.end_hold(slot);
                    effects.push(Effect::Ended { slot, token: *token });
                }
                self.hand_over(key, slot, next, effects);
            }
        }
    }

    /// Grants `next` (if any), then frees the key's slot if nothing uses it any more.
    fn hand_over<S: AsRef<str>>(
        &mut self,
        key: &str,
        slot: Option<SlotId>,
        next: &Option<Grant<S>>,
        effects: &mut Vec<Effect>,
    ) {
        let granted = next.as_ref().map(|next| self.grant(key, next, effects));
        if let Some(slot) = slot.or(granted) {
            self.free_slot_if_unused(slot);
        }
    }

    fn end_hold(&mut self, slot: SlotId) {
        self.before_change(slot);
        let s = &mut self.slots.slots[slot.index()];
        let owner = s.owner;
        s.token = 0;
        self.owners.release(owner);
        self.held -= 1;
    }

    /// Grants `key`, which must be free, under a token above every earlier one;
    /// returns its slot.
    fn grant<S: AsRef<str>>(&mut self, key: &str, grant: &Grant<S>, effects: &mut Vec<Effect>) -> SlotId {
        let held = self
            .slots
            .find(key)
            .is_some_and(|s| self.slots.slots[s.index()].is_held() || self.pools.keys.contains_key(&s));
        crate::invariant!(
            !held,
            "at most one holder per key",
            "a committed grant of {key:?} under token {} while it is held",
            grant.token
        );
        crate::invariant!(
            grant.token > self.last_token,
            "fencing tokens strictly increase",
            "a committed grant of {key:?} under token {} after token {}",
            grant.token,
            self.last_token
        );
        self.last_token = grant.token;
        let slot = self.slots.find_or_add(key);
        self.before_change(slot);
        let owner = self.owners.intern(grant.owner.as_ref());
        let s = &mut self.slots.slots[slot.index()];
        (s.owner, s.token, s.lease_ms) = (owner, grant.token, grant.lease_ms);
        self.held += 1;
        effects.push(Effect::Granted { slot, token: grant.token, lease_ms: grant.lease_ms });
        effects.push(Effect::Reply(
            grant.origin,
            Response::Granted { token: grant.token, lease_ms: grant.lease_ms },
        ));
        slot
    }

    /// Walks every slot (O(keys)) and stops the node, naming the invariant, if one is
    /// broken: each held key in the one slot its key is found at (at most one holder
    /// per key), every holder's token at most the last token granted and not 0, the
    /// held count right. Debug builds run it after a snapshot is restored; the
    /// simulators through [`crate::lock::LockTable::check_invariants`].
    pub fn check_invariants(&self) {
        let mut held = 0;
        for (i, s) in self.slots.slots.iter().enumerate().filter(|(_, s)| s.is_held()) {
            held += 1;
            let found = self.slots.find(&s.key);
            crate::invariant!(
                found == Some(SlotId(i as u32)),
                "at most one holder per key",
                "key {:?} held in slot {i}, found at {found:?}",
                s.key
            );
            crate::invariant!(
                s.token <= self.last_token && s.token != 0,
                "fencing tokens strictly increase",
                "key {:?} held under token {}, last token {}",
                s.key,
                s.token,
                self.last_token
            );
        }
        crate::invariant!(
            held == self.held,
            "the state's counts match what it holds",
            "{held} keys held, {} counted",
            self.held
        );
        self.check_pooled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: u64, incarnation: u64, addr: &str) -> Command {
        Command::SetMember { node, incarnation, addr: addr.into() }
    }

    #[test]
    fn a_node_id_belongs_to_the_first_process_recorded_for_it() {
        let mut state = LockState::default();
        let mut effects = Vec::new();
        // An address without an incarnation (an older version's record), then the
        // process, then a move of that process to another address.
        state.apply(&member(3, 0, "a:1"), &mut effects);
        state.apply(&member(3, 42, "a:1"), &mut effects);
        state.apply(&member(3, 42, "b:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "b:1".into(), incarnation: 42 });
        // Another process under the same id changes nothing, not even the address.
        state.apply(&member(3, 43, "evil:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "b:1".into(), incarnation: 42 });
        // An incarnation-less record still moves the address of the recorded process.
        state.apply(&member(3, 0, "c:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "c:1".into(), incarnation: 42 });
        assert!(effects.is_empty());
    }

    fn holder(owner: &str, token: u64) -> Holder {
        Holder { owner: owner.into(), token, lease_ms: 1000 }
    }

    /// A restored state (a decoded snapshot) has exactly the parts given: the holders,
    /// the last token and the fencing domain; a part that cannot be a state refuses it.
    #[test]
    fn from_parts_keeps_every_part_and_refuses_an_impossible_one() {
        let holders = vec![("a".to_string(), holder("x", 5)), ("b".to_string(), holder("y", 9))];
        let state = LockState::from_parts(holders.clone(), 9, 7).expect("a possible state");
        assert_eq!((state.domain(), state.last_token(), state.keys_held(), state.slot_count()), (7, 9, 2, 2));
        // What a simulator prints when a state differs.
        let shown = format!("{state:?}");
        assert!(shown.contains(r#""a": ("x", 5, 1000)"#) && shown.contains("domain: 7"), "{shown}");
        assert_eq!(state.holder("a"), Some(holder("x", 5)));
        assert_eq!(state.holder("b"), Some(holder("y", 9)));
        // One key held twice, or a hold under token 0 (never granted): not a state.
        let twice = vec![("a".to_string(), holder("x", 5)), ("a".to_string(), holder("y", 6))];
        assert!(LockState::from_parts(twice, 9, 7).is_none());
        assert!(LockState::from_parts(vec![("a".to_string(), holder("x", 0))], 9, 7).is_none());
        let members = BTreeMap::from([(3, MemberRecord { addr: "b:1".into(), incarnation: 42 })]);
        let with = state.clone().with_members(members.clone());
        assert_eq!(with.members(), &members);
        assert!(state.members().is_empty());
    }

    /// The fencing domain is recorded once: the first SetDomain stays.
    #[test]
    fn the_first_domain_recorded_stays() {
        let mut state = LockState::default();
        let mut effects = Vec::new();
        assert_eq!(state.domain(), 0);
        state.apply(&Command::<String>::SetDomain { domain: 7 }, &mut effects);
        assert_eq!(state.domain(), 7);
        state.apply(&Command::<String>::SetDomain { domain: 8 }, &mut effects);
        assert_eq!(state.domain(), 7);
        assert!(effects.is_empty());
    }

    /// A pinned slot (the leader's projection refers to it) stays while nobody holds
    /// its key, and is freed when unpinned.
    #[test]
    fn a_pinned_slot_stays_until_unpinned() {
        let mut state = LockState::default();
        let slot = state.pin("a");
        assert!(state.is_pinned(slot));
        assert_eq!((state.pinned_count(), state.slot_count()), (1, 1));
        state.unpin(slot);
        assert!(!state.is_pinned(slot));
        assert_eq!(state.pinned_count(), 0);
    }

    /// A committed grant the leader's projection should never propose — on a held key,
    /// or under a token not above the last — stops the node in every build, naming the
    /// invariant it would break (a committed log that grants a held key).
    #[test]
    fn an_impossible_grant_violates_an_invariant() {
        let state = LockState::from_parts(vec![("a".to_string(), holder("x", 5))], 5, 7).unwrap();
        let origin = Origin { node: 1, incarnation: 1, conn: 1, id: 1 };
        let cases = [
            ("a", 6, "invariant violated: at most one holder per key: a committed grant of \"a\" under token 6"),
            ("b", 5, "invariant violated: fencing tokens strictly increase: a committed grant of \"b\" under token 5 after token 5"),
        ];
        for (key, token, expected) in cases {
            let grant = Grant { owner: "y".to_string(), token, lease_ms: 1000, origin };
            let command = Command::Grant { key: key.to_string(), grant };
            let mut after = state.clone();
            let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                after.apply(&command, &mut Vec::new());
            }))
            .expect_err("an impossible grant applied");
            let message = payload.downcast_ref::<String>().map(String::as_str).unwrap_or("");
            assert!(message.starts_with(expected), "{key} under {token}: {message}");
        }
        // The same grants on a free key under a later token are fine.
        let mut after = state.clone();
        let grant = Grant { owner: "y".to_string(), token: 6, lease_ms: 1000, origin };
        after.apply(&Command::Grant { key: "b".to_string(), grant }, &mut Vec::new());
        after.check_invariants();
        assert_eq!(after.holder("b"), Some(Holder { owner: "y".into(), token: 6, lease_ms: 1000 }));
    }

    /// The walk the simulators run after every step names each rule a state can break:
    /// a key held in two slots, a hold under a token above the last one granted, a held
    /// count that is not what the slots hold.
    #[test]
    fn the_walk_names_each_broken_rule() {
        let good = LockState::from_parts(vec![("a".to_string(), holder("x", 5))], 5, 7).unwrap();
        good.check_invariants();
        let mut twice = good.clone();
        let copy = twice.slots.slots[0].clone();
        twice.slots.slots.push(copy);
        twice.held += 1;
        let mut ahead = good.clone();
        ahead.last_token = 4;
        let mut miscounted = good.clone();
        miscounted.held = 2;
        let cases = [
            (twice, "invariant violated: at most one holder per key: key \"a\" held in slot 1, found at Some(SlotId(0))"),
            (ahead, "invariant violated: fencing tokens strictly increase: key \"a\" held under token 5, last token 4"),
            (miscounted, "invariant violated: the state's counts match what it holds: 1 keys held, 2 counted"),
        ];
        for (state, expected) in cases {
            let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.check_invariants()))
                .expect_err(expected);
            let message = payload.downcast_ref::<String>().map(String::as_str).unwrap_or("");
            assert!(message.starts_with(expected), "{message}");
        }
    }

    /// Equality is what the simulators and the snapshot tests compare states by: each
    /// part that differs alone makes two states differ.
    #[test]
    fn states_differing_in_any_one_part_are_not_equal() {
        let base = || vec![("a".to_string(), holder("x", 5)), ("b".to_string(), holder("y", 9))];
        let state = LockState::from_parts(base(), 9, 7).unwrap();
        assert!(state == LockState::from_parts(base(), 9, 7).unwrap());
        let mut one_holder = base();
        one_holder.pop();
        let mut other_owner = base();
        other_owner[0].1.owner = "z".into();
        let mut other_token = base();
        other_token[0].1.token = 6;
        let mut other_lease = base();
        other_lease[0].1.lease_ms = 2000;
        let mut other_key = base();
        other_key[1].0 = "c".into();
        let members = BTreeMap::from([(3, MemberRecord { addr: "b:1".into(), incarnation: 42 })]);
        let differing = [
            ("a holder fewer", LockState::from_parts(one_holder, 9, 7).unwrap()),
            ("another owner", LockState::from_parts(other_owner, 9, 7).unwrap()),
            ("another token", LockState::from_parts(other_token, 9, 7).unwrap()),
            ("another lease", LockState::from_parts(other_lease, 9, 7).unwrap()),
            ("another key", LockState::from_parts(other_key, 9, 7).unwrap()),
            ("another last token", LockState::from_parts(base(), 10, 7).unwrap()),
            ("another domain", LockState::from_parts(base(), 9, 8).unwrap()),
            ("member records", LockState::from_parts(base(), 9, 7).unwrap().with_members(members)),
        ];
        for (what, other) in differing {
            assert!(state != other, "{what}: equal");
            assert!(other != state, "{what}: equal the other way round");
        }
    }
}
