//! The frames of counted and multi-key holds (docs/protocol.md §5.7–5.8): a HOLD's keys
//! and their checks, and the holders a POOL answer lists.

use super::fields::{key_field, owner_field, Cursor, DecodeError};
use super::limits::*;

/// One key of a HOLD: the key, the permits it takes and the key's capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldPart {
    pub key: String,
    pub count: u32,
    pub capacity: u32,
}

/// One holder in a POOL answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolHolder {
    pub token: u64,
    /// Permits of the key it holds.
    pub count: u32,
    /// Lease time it has left, in ms.
    pub remaining_ms: u32,
    pub owner: String,
}

/// A decoded HOLD: lease_s, wait_ms, place in line, owner, keys.
pub(super) type HoldFields = (u8, u32, bool, String, Vec<HoldPart>);

/// Decodes a HOLD's body (after op and id): structure first, then each field in the
/// order docs/protocol.md §5.7 gives.
pub(super) fn decode_hold(id: u32, cur: &mut Cursor<'_>) -> Result<HoldFields, DecodeError> {
    let lease_s = cur.u8()?;
    let wait_ms = cur.u32()?;
    let flags = cur.u8()?;
    let owner = cur.str8()?;
    let n = cur.u8()?;
    let mut raw = Vec::with_capacity(usize::from(n).min(HOLD_KEYS_MAX));
    for _ in 0..n {
        let count = cur.u32()?;
        let capacity = cur.u32()?;
        raw.push((cur.str8()?, count, capacity));
    }
    cur.finish()?;
    if !(LEASE_S_MIN..=LEASE_S_MAX).contains(&lease_s) {
        return Err(DecodeError::Invalid { id, reason: "lease_s must be 1..=250" });
    }
    if wait_ms > WAIT_MS_MAX {
        return Err(DecodeError::Invalid { id, reason: "wait_ms must be 0..=300000" });
    }
    if flags & !1 != 0 {
        return Err(DecodeError::Invalid { id, reason: "flags: only bit 0 (place in line) is defined" });
    }
    let owner = owner_field(id, owner)?;
    if raw.is_empty() || raw.len() > HOLD_KEYS_MAX {
        return Err(DecodeError::Invalid { id, reason: "keys: a HOLD names 1 to 16 keys" });
    }
    let mut parts: Vec<HoldPart> = Vec::with_capacity(raw.len());
    for (key, count, capacity) in raw {
        if !(1..=CAPACITY_MAX).contains(&capacity) {
            return Err(DecodeError::Invalid { id, reason: "capacity must be 1..=1000000" });
        }
        if count == 0 || count > capacity {
            return Err(DecodeError::Invalid { id, reason: "count must be 1..=capacity" });
        }
        let key = key_field(id, key)?;
        if parts.iter().any(|p| p.key == key) {
            return Err(DecodeError::Invalid { id, reason: "keys: a key is named twice" });
        }
        parts.push(HoldPart { key, count, capacity });
    }
    Ok((lease_s, wait_ms, flags & 1 != 0, owner, parts))
}
