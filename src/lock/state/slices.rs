//! Encoding the applied state as a snapshot in slices (`begin_snapshot`,
//! `snapshot_step`), so a large state never stops the lock-table thread for long.
//!
//! The slots are walked in order, a few thousand per call, and before a slot that has
//! not been emitted yet changes, its pre-image is kept (copy on write), so the bytes
//! are those of the state at `begin_snapshot` however many commands were applied in
//! between.

use std::collections::HashMap;

use super::cursor::SnapshotCursor;
use super::LockState;
use crate::lock::snapshot;
use crate::lock::store::SlotId;

impl LockState {
    /// Called before the holder of `slot` changes: a snapshot being encoded that has
    /// not reached the slot yet keeps its pre-image.
    pub(super) fn before_change(&mut self, slot: SlotId) {
        if let Some(snapshot) = &mut self.snapshot {
            snapshot.keep_pre_image(slot, &self.slots, &self.owners);
        }
    }

    /// Starts encoding a snapshot of this state as it is now; continue with
    /// [`LockState::snapshot_step`]. A snapshot already under way is dropped.
    pub fn begin_snapshot(&mut self) {
        let mut out = Vec::with_capacity(self.snapshot_size_estimate());
        snapshot::put_header(&mut out, self.domain, self.last_token, self.held as u32);
        let mut trailer = Vec::new();
        let members = self.members.iter().map(|(node, m)| (*node, m.incarnation, m.addr.as_str()));
        snapshot::put_members(&mut trailer, members);
        snapshot::put_pooled(&mut trailer, &self.pooled_records());
        self.snapshot = Some(Box::new(SnapshotCursor {
            out,
            next: 0,
            end: self.slots.len() as u32,
            left: self.held,
            pre_images: HashMap::new(),
            trailer,
        }));
    }

    /// True while a snapshot is being encoded.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Encodes up to `slots_max` more slots of the snapshot under way; returns its
    /// bytes once every slot is done.
    pub fn snapshot_step(&mut self, slots_max: usize) -> Option<Vec<u8>> {
        let snapshot = self.snapshot.as_mut()?;
        let stop = snapshot.end.min(snapshot.next.saturating_add(slots_max.min(u32::MAX as usize) as u32));
        for s in snapshot.next..stop {
            match snapshot.pre_images.remove(&s) {
                Some(Some(pre)) => {
                    snapshot::put_holder(&mut snapshot.out, &pre.key, &pre.owner, pre.token, pre.lease_ms);
                    snapshot.left -= 1;
                }
                Some(None) => {}
                None => {
                    let slot = &self.slots.slots[s as usize];
                    if slot.is_held() {
                        let owner = self.owners.name(slot.owner);
                        snapshot::put_holder(&mut snapshot.out, &slot.key, owner, slot.token, slot.lease_ms);
                        snapshot.left -= 1;
                    }
                }
            }
        }
        snapshot.next = stop;
        if stop < snapshot.end {
            return None;
        }
        let mut snapshot = self.snapshot.take().expect("under way");
        assert_eq!(snapshot.left, 0, "a snapshot emits exactly the holders it counted");
        let trailer = std::mem::take(&mut snapshot.trailer);
        snapshot.out.extend_from_slice(&trailer);
        Some(std::mem::take(&mut snapshot.out))
    }

    /// About how many bytes the snapshot of this state takes (to reserve them once).
    fn snapshot_size_estimate(&self) -> usize {
        let owner_bytes: usize =
            self.holders().take(64).map(|(_, h)| h.owner.len()).sum::<usize>() / self.held.clamp(1, 64);
        32 + self.slots.key_bytes + self.held * (1 + 1 + owner_bytes + 12) + self.members.len() * 280
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Holder, MemberRecord};
    use super::*;
    use crate::lock::command::{Command, Grant, Origin};
    use std::collections::BTreeMap;

    fn holder(owner: &str, token: u64) -> Holder {
        Holder { owner: owner.into(), token, lease_ms: 1000 }
    }

    /// The buffer reserved for a snapshot fits it: not regrown, and not more than about
    /// twice its size (the estimate is a capacity hint; a wrong one costs memory). The
    /// holders' part is counted exactly when the owners are alike: without members,
    /// whose records the estimate rounds up, the reserve is within 64 bytes.
    #[test]
    fn the_snapshot_buffer_is_reserved_about_right() {
        let members = BTreeMap::from([
            (1, MemberRecord { addr: "10.0.0.1:5225".into(), incarnation: 11 }),
            (2, MemberRecord { addr: "10.0.0.2:5225".into(), incarnation: 12 }),
        ]);
        for (count, members, slack) in [(200u64, members, usize::MAX), (2_000, BTreeMap::new(), 64)] {
            let holders: Vec<(String, Holder)> = (1..=count)
                .map(|i| (format!("seat:{i:05}"), holder(&format!("office-{}", i % 7), i)))
                .collect();
            let mut state = LockState::from_parts(holders, count, 7).unwrap().with_members(members);
            assert!(!state.snapshot_in_progress());
            state.begin_snapshot();
            assert!(state.snapshot_in_progress());
            let reserved = state.snapshot.as_ref().unwrap().out.capacity();
            let mut bytes = None;
            while bytes.is_none() {
                bytes = state.snapshot_step(16);
            }
            assert!(!state.snapshot_in_progress());
            let len = bytes.unwrap().len();
            assert!(reserved >= len && reserved <= 2 * len, "reserved {reserved} for {len} bytes");
            assert!(reserved - len <= slack, "reserved {reserved} for {len} bytes");
        }
    }

    /// A snapshot under way keeps the old holder only of a slot it has not emitted yet
    /// and that existed when it began: the others cost memory for nothing.
    #[test]
    fn a_snapshot_keeps_pre_images_only_of_slots_still_to_emit() {
        let holders = vec![("a".to_string(), holder("x", 1)), ("b".to_string(), holder("y", 2))];
        let mut state = LockState::from_parts(holders, 2, 7).unwrap();
        state.begin_snapshot();
        assert!(state.snapshot_step(1).is_none());
        let origin = Origin { node: 1, incarnation: 1, conn: 1, id: 1 };
        let mut effects = Vec::new();
        // "a" was emitted already; "c" is a slot added after the snapshot began.
        let release =
            Command::Release { key: "a".to_string(), owner: "x".to_string(), token: 1, origin, next: None };
        state.apply(&release, &mut effects);
        let grant = Grant { owner: "z".to_string(), token: 3, lease_ms: 1000, origin };
        state.apply(&Command::Grant { key: "c".to_string(), grant }, &mut effects);
        assert!(state.snapshot.as_ref().unwrap().pre_images.is_empty());
        // "b" is still to emit: its holder at the start is kept.
        let release =
            Command::Release { key: "b".to_string(), owner: "y".to_string(), token: 2, origin, next: None };
        state.apply(&release, &mut effects);
        assert_eq!(state.snapshot.as_ref().unwrap().pre_images.len(), 1);
    }
}
