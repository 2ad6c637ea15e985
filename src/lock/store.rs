//! Compact storage for lock state: every key is stored once, in a stable slot, and
//! every owner string once, interned with a reference count.
//!
//! Why slots: the applied state, the leader's projection, the lease timers and a
//! snapshot being encoded all refer to a key by its slot number (4 bytes) instead of
//! holding copies of the string, and a slot keeps its number while it is in use, so a
//! snapshot can walk the slots in order across many rounds (docs/architecture.md §2).
//!
//! Why interned owners: a client library uses one owner string for all the locks it
//! takes, so a million locks typically share a handful of owners.
//!
//! Both are pure data structures: no clock, no randomness that changes behaviour (the
//! hash seeds only decide where an entry sits in the index, never which slot or id a
//! key or owner gets: those come from free lists, so equal histories give equal slots).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

/// The number of a key's slot. Stable while the key is held or the leader's
/// projection refers to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(pub u32);

impl SlotId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An interned owner string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerId(pub u32);

/// Owner strings, each stored once, with a count of the holders, waiters and projected
/// holders that use it; an owner nobody uses is forgotten and its id reused.
#[derive(Clone, Default)]
pub struct Owners {
    names: Vec<OwnerEntry>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
}

#[derive(Clone)]
struct OwnerEntry {
    name: Box<str>,
    refs: u32,
}

impl Owners {
    /// The id of `name`, with one more reference to it.
    pub fn intern(&mut self, name: &str) -> OwnerId {
        let hash = self.hasher.hash_one(name);
        let names = &self.names;
        if let Some(&id) = self.index.find(hash, |&id| &*names[id as usize].name == name) {
            self.names[id as usize].refs += 1;
            return OwnerId(id);
        }
        let entry = OwnerEntry { name: name.into(), refs: 1 };
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = entry;
                id
            }
            None => {
                self.names.push(entry);
                u32::try_from(self.names.len() - 1).expect("fewer than 2^32 owners")
            }
        };
        let (names, hasher) = (&self.names, &self.hasher);
        self.index.insert_unique(hash, id, |&id| hasher.hash_one(&*names[id as usize].name));
        OwnerId(id)
    }

    /// One more reference to `id`.
    pub fn retain(&mut self, id: OwnerId) {
        self.names[id.0 as usize].refs += 1;
    }

    /// One reference fewer; the last one forgets the owner.
    pub fn release(&mut self, id: OwnerId) {
        let entry = &mut self.names[id.0 as usize];
        debug_assert!(entry.refs > 0, "owner {id:?} released more often than retained");
        entry.refs -= 1;
        if entry.refs > 0 {
            return;
        }
        let hash = self.hasher.hash_one(&*entry.name);
        let name = std::mem::take(&mut entry.name);
        if let Ok(found) = self.index.find_entry(hash, |&i| i == id.0) {
            found.remove();
        }
        drop(name);
        self.free.push(id.0);
    }

    pub fn name(&self, id: OwnerId) -> &str {
        &self.names[id.0 as usize].name
    }

    /// Owners in use.
    pub fn len(&self) -> usize {
        self.names.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// References held to `id` (for invariant checks).
    pub fn refs(&self, id: OwnerId) -> u32 {
        self.names[id.0 as usize].refs
    }
}

/// One key slot: the key and, while it is held, its holder. 32 bytes.
#[derive(Clone)]
pub(super) struct Slot {
    /// Empty while the slot is free.
    pub key: Box<str>,
    /// The holder's token; 0 while nobody holds the key (tokens start at 1).
    pub token: u64,
    pub owner: OwnerId,
    pub lease_ms: u32,
}

impl Slot {
    /// A free slot (an empty `Box<str>` does not allocate).
    fn free() -> Slot {
        Slot { key: Box::default(), token: 0, owner: OwnerId(0), lease_ms: 0 }
    }

    pub fn is_held(&self) -> bool {
        self.token != 0
    }
}

/// Key slots: stable numbers for keys, a hash index from key to slot, a free list.
/// A slot is in use while its key is held or pinned (the leader's projection refers
/// to it); otherwise it is free and its number may go to another key.
#[derive(Clone, Default)]
pub(super) struct Slots {
    pub slots: Vec<Slot>,
    /// One bit per slot: pinned by the leader's projection.
    pinned: Vec<u64>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
    /// Bytes of all keys in use (for sizing a snapshot before encoding it).
    pub key_bytes: usize,
}

impl Slots {
    pub fn find(&self, key: &str) -> Option<SlotId> {
        let hash = self.hasher.hash_one(key);
        self.index.find(hash, |&s| &*self.slots[s as usize].key == key).map(|&s| SlotId(s))
    }

    /// The slot of `key`, taken from the free list (or added) when it has none.
    pub fn find_or_add(&mut self, key: &str) -> SlotId {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        if let Some(&s) = self.index.find(hash, |&s| &*slots[s as usize].key == key) {
            return SlotId(s);
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::free());
                if self.pinned.len() * 64 < self.slots.len() {
                    self.pinned.push(0);
                }
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 key slots")
            }
        };
        self.slots[s as usize].key = key.into();
        self.key_bytes += key.len();
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.insert_unique(hash, s, |&s| hasher.hash_one(&*slots[s as usize].key));
        SlotId(s)
    }

    /// Frees `slot` if it is neither held nor pinned.
    pub fn free_if_unused(&mut self, slot: SlotId) {
        let s = slot.index();
        if self.slots[s].is_held() || self.is_pinned(slot) || self.slots[s].key.is_empty() {
            return;
        }
        let key = std::mem::take(&mut self.slots[s].key);
        self.key_bytes -= key.len();
        let hash = self.hasher.hash_one(&*key);
        if let Ok(found) = self.index.find_entry(hash, |&i| i == slot.0) {
            found.remove();
        }
        self.free.push(slot.0);
    }

    pub fn is_pinned(&self, slot: SlotId) -> bool {
        self.pinned[slot.index() / 64] & (1 << (slot.index() % 64)) != 0
    }

    pub fn set_pinned(&mut self, slot: SlotId, pinned: bool) {
        let bit = 1u64 << (slot.index() % 64);
        if pinned {
            self.pinned[slot.index() / 64] |= bit;
        } else {
            self.pinned[slot.index() / 64] &= !bit;
        }
    }

    pub fn pinned_count(&self) -> usize {
        self.pinned.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Slots in use or free: slot numbers are below this.
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An owner is stored once while anyone uses it, forgotten (name, index entry and
    /// all) with its last reference, and its id goes to the next new owner.
    #[test]
    fn an_owner_lives_as_long_as_its_references() {
        let mut owners = Owners::default();
        assert!(owners.is_empty());
        let x = owners.intern("x");
        assert_eq!(owners.intern("x"), x);
        let y = owners.intern("y");
        assert_ne!(x, y);
        assert_eq!((owners.len(), owners.refs(x), owners.refs(y)), (2, 2, 1));
        assert!(!owners.is_empty());
        owners.release(x);
        assert_eq!((owners.len(), owners.name(x)), (2, "x"));
        owners.release(x);
        owners.release(y);
        assert!(owners.is_empty());
        assert_eq!(owners.index.len(), 0, "a forgotten owner leaves no index entry");
        assert_eq!(owners.name(x), "", "its name is dropped");
        let z = owners.intern("z");
        assert!(z == x || z == y, "an id is reused");
        assert_eq!((owners.len(), owners.index.len()), (1, 1));
    }

    /// A slot nobody holds or pins is freed: its key forgotten, its bytes uncounted, its
    /// number reused by the next key; the pin bits grow one word per 64 slots.
    #[test]
    fn an_unused_slot_is_freed_and_reused() {
        let mut slots = Slots::default();
        let a = slots.find_or_add("aa");
        let b = slots.find_or_add("bbb");
        assert_eq!(slots.find_or_add("aa"), a);
        assert_eq!((slots.find("bbb"), slots.key_bytes), (Some(b), 5));
        slots.set_pinned(b, true);
        slots.free_if_unused(b);
        assert_eq!(slots.find("bbb"), Some(b), "a pinned slot stays");
        slots.set_pinned(b, false);
        slots.slots[a.index()].token = 4;
        slots.free_if_unused(a);
        assert_eq!(slots.find("aa"), Some(a), "a held slot stays");
        slots.free_if_unused(b);
        assert_eq!((slots.find("bbb"), slots.key_bytes, slots.index.len()), (None, 2, 1));
        assert_eq!(slots.find_or_add("ccc"), b, "the freed number goes to the next key");
        assert_eq!((slots.key_bytes, slots.len()), (5, 2));
        // Pin bits: one u64 per 64 slots, no more.
        for (n, words) in [(64, 1), (65, 2), (128, 2), (129, 3)] {
            while slots.len() < n {
                let key = format!("k{}", slots.len());
                slots.find_or_add(&key);
            }
            assert_eq!(slots.pinned.len(), words, "{n} slots");
        }
    }
}
