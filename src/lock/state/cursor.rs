//! The record of a snapshot being encoded in slices: where the walk over the key slots
//! is, what is encoded so far, and the pre-images of slots that changed before the walk
//! reached them (the walk itself is `slices.rs`).

use std::collections::HashMap;

use crate::lock::store::{Owners, SlotId, Slots};

/// A snapshot being encoded in slices (see the module docs).
#[derive(Clone)]
pub struct SnapshotCursor {
    /// Header and the holders emitted so far.
    pub out: Vec<u8>,
    /// The next slot to emit.
    pub next: u32,
    /// Slots at `begin_snapshot`; later ones were free then.
    pub end: u32,
    /// Holders still to emit.
    pub left: usize,
    /// Slots in `next..end` that changed since `begin_snapshot`: their holder then
    /// (`None`: not held).
    pub pre_images: HashMap<u32, Option<PreImage>>,
    /// The member records at `begin_snapshot`, encoded (later changes are not in it).
    pub trailer: Vec<u8>,
}

#[derive(Clone)]
pub struct PreImage {
    pub key: Box<str>,
    pub owner: Box<str>,
    pub token: u64,
    pub lease_ms: u32,
}

impl SnapshotCursor {
    pub fn keep_pre_image(&mut self, slot: SlotId, slots: &Slots, owners: &Owners) {
        if slot.0 < self.next || slot.0 >= self.end || self.pre_images.contains_key(&slot.0) {
            return;
        }
        let s = &slots.slots[slot.index()];
        let pre = s.is_held().then(|| PreImage {
            key: s.key.clone(),
            owner: owners.name(s.owner).into(),
            token: s.token,
            lease_ms: s.lease_ms,
        });
        self.pre_images.insert(slot.0, pre);
    }
}
