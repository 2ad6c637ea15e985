//! The lock-level simulator's counted and multi-key holds (docs/protocol.md §5.7): the
//! HOLD requests and POOL reads its clients send, the holds they keep, and what the
//! nodes answer, told to the checker before their proposals.

use super::*;
use ticketing::lock::Part;
use ticketing::proto::HoldPart;

/// The stock key: a counted key every seed's clients share.
pub(super) const STOCK_KEY: &str = "s";
/// Its capacity; a request now and then states another (and must get `E 1` while the
/// key has holders or waiters).
pub(super) const STOCK_CAPACITY: u32 = 3;

/// A hold a client was granted (a G): its keys, its token, its local deadline.
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub keys: Vec<String>,
    pub token: u64,
    pub deadline: u64,
}

#[derive(Default, Debug, Clone)]
pub(super) struct HoldStats {
    /// HOLD requests sent: counted ones on the stock key, ones of several keys.
    pub counted_sent: u64,
    pub multi_sent: u64,
    /// Grants committed of pooled holds (counted, or of several keys), and of several keys.
    pub pooled_grants: u64,
    pub multi_key_grants: u64,
    /// Places in line heard, capacity refusals (`E 1`), POOL answers checked.
    pub in_line: u64,
    pub refused: u64,
    pub pool_reads: u64,
    /// Waiters found due at quiescence (oldest on their keys, counts free), each then
    /// granted within the bound (inv12).
    pub due_at_quiescence: u64,
}

impl HoldStats {
    pub(super) fn add(&mut self, o: &HoldStats) {
        self.counted_sent += o.counted_sent;
        self.multi_sent += o.multi_sent;
        self.pooled_grants += o.pooled_grants;
        self.multi_key_grants += o.multi_key_grants;
        self.in_line += o.in_line;
        self.refused += o.refused;
        self.pool_reads += o.pool_reads;
        self.due_at_quiescence += o.due_at_quiescence;
    }
}

/// The request a client sends for `asked`.
pub(super) fn request_of(asked: &Asked) -> Request {
    match asked {
        Asked::Acquire { key, owner, lease_ms, wait_ms } => Request::Acquire {
            lease_s: (*lease_ms / 1000) as u8,
            wait_ms: *wait_ms as u32,
            key: key.clone(),
            owner: owner.clone(),
        },
        Asked::Release { key, owner, token } => {
            Request::Release { token: *token, key: key.clone(), owner: owner.clone() }
        }
        Asked::Query { key } => Request::Query { key: key.clone() },
        Asked::Hold { parts, owner, lease_ms, wait_ms, place } => Request::Hold {
            lease_s: (*lease_ms / 1000) as u8,
            wait_ms: *wait_ms as u32,
            place: *place,
            owner: owner.clone(),
            parts: parts
                .iter()
                .map(|p| HoldPart { key: p.key.clone(), count: p.count, capacity: p.capacity })
                .collect(),
        },
        Asked::Pool { key } => Request::Pool { key: key.clone() },
    }
}

impl World {
    /// A HOLD from client `ci`: half the time a counted one on the stock key (1 or 2 of
    /// 3), else one of 2–4 keys in a random order — the exclusive keys plain ACQUIREs
    /// use (one of one) and the stock key — so key sets cross. Waits of 0, up to 2 s
    /// and up to 10 s; a third ask for their place in line.
    pub(super) fn hold_request(&mut self, ci: usize) -> Asked {
        let owner = self.clients[ci].owner.clone();
        let stock = |count: u32, capacity: u32| Part { key: STOCK_KEY.into(), count, capacity };
        let parts = if self.rng.chance(500) {
            self.stats.holds.counted_sent += 1;
            // One in twenty states another capacity (`E 1` while the key is in use).
            let capacity = if self.rng.chance(50) { STOCK_CAPACITY - 1 } else { STOCK_CAPACITY };
            vec![stock(self.rng.range(1, 2) as u32, capacity)]
        } else {
            self.stats.holds.multi_sent += 1;
            let mut pool: Vec<Option<Part>> = KEYS[..self.p.keys]
                .iter()
                .map(|k| Some(Part { key: (*k).into(), count: 1, capacity: 1 }))
                .collect();
            pool.push(Some(stock(self.rng.range(1, 2) as u32, STOCK_CAPACITY)));
            let n = self.rng.range(2, 4).min(pool.len() as u64);
            let mut parts = Vec::new();
            while (parts.len() as u64) < n {
                let i = self.rng.below(pool.len() as u64) as usize;
                parts.extend(pool[i].take());
            }
            parts
        };
        let lease_ms = self.rng.range(1, 3) * 1000;
        let wait_ms = match self.rng.below(3) {
            0 => 0,
            1 => self.rng.range(1, 2000),
            _ => self.rng.range(2000, 10_000),
        };
        let place = self.rng.chance(330);
        Asked::Hold { parts, owner, lease_ms, wait_ms, place }
    }

    /// What node `id`'s lock side answered since `told` (of `out.replies`), told to
    /// the checker; returns how many are told.
    pub(super) fn tell_answers(&mut self, id: NodeId, out: &ReplicaOutput, told: usize) -> usize {
        for r in &out.replies[told..] {
            self.checker.node_answered(id, (r.conn, r.id), &r.response);
        }
        out.replies.len()
    }
}
