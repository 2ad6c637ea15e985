//! The records of pooled holds (counted and multi-key) in the applied state: what each
//! key has in use and each hold takes. What applying does with them is `pools.rs`.

use std::collections::{BTreeMap, HashMap};

use crate::lock::command::Part;
use crate::lock::store::{OwnerId, SlotId};

/// What a key with pooled holds has in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolKey {
    pub capacity: u32,
    /// Permits held.
    pub in_use: u32,
    /// Pooled holds on the key.
    pub holds: u32,
}

/// One pooled hold: its owner, lease and keys (slot, count, capacity).
#[derive(Clone, Debug)]
pub struct PooledHold {
    pub owner: OwnerId,
    pub lease_ms: u32,
    pub parts: Box<[(SlotId, u32, u32)]>,
}

/// A pooled hold with its strings, copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PooledHolder {
    pub owner: String,
    pub token: u64,
    pub lease_ms: u32,
    pub parts: Vec<Part>,
}

/// The pooled holds of a state and the keys they hold.
#[derive(Clone, Default)]
pub(crate) struct Pools {
    pub keys: HashMap<SlotId, PoolKey>,
    /// By token: in grant order, which is the order snapshots and walks use.
    pub holds: BTreeMap<u64, PooledHold>,
    /// Permits held on all keys by these holds (the sum of every key's `in_use`).
    pub permits: u64,
}
