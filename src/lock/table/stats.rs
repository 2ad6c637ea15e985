//! What a leading table counts for monitoring (docs/metrics.md), bounded between
//! two reads.

/// What the table counted since the caller last cleared it ([`LockTable::stats_mut`](super::LockTable::stats_mut)), for monitoring
/// (docs/metrics.md). Only a leading table counts: followers apply the same commands
/// and would count every grant once per node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Grants of a free key, applied.
    pub grants_immediate: u64,
    /// Grants to the head of a queue by a release or an expiry, applied.
    pub grants_handoff: u64,
    /// Holds ended by their lease running out, applied.
    pub lease_expiries: u64,
    /// Grants of more than one key at once (one token for all of them), applied.
    pub multi_key_grants: u64,
    /// HOLD requests by what became of them when they arrived.
    pub holds: HoldOutcomes,
    /// How long each waiter that left its queue (handed the key, or its wait ran out)
    /// had waited, in ms.
    pub waits_ms: Vec<u64>,
    /// How long each hold that ended (released or expired) had lasted, in µs, from the
    /// grant's token: tokens are microsecond timestamps at least (docs/protocol.md), so
    /// this never overstates a hold, and it counts a hold granted by an earlier leader
    /// from its grant.
    pub holds_us: Vec<u64>,
}

/// HOLD requests by what became of them when they arrived (docs/metrics.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldOutcomes {
    /// Granted at once (proposed).
    pub granted: u64,
    /// Queued to wait.
    pub queued: u64,
    /// Answered `B`: not free and no wait, or a queue full.
    pub busy: u64,
    /// Answered `E` by the lock table: a capacity that differs from the key's (`E 1`)
    /// or the node's limit reached (`E 4`).
    pub refused: u64,
}

impl TableStats {
    pub fn clear(&mut self) {
        self.grants_immediate = 0;
        self.grants_handoff = 0;
        self.lease_expiries = 0;
        self.multi_key_grants = 0;
        self.holds = HoldOutcomes::default();
        self.waits_ms.clear();
        self.holds_us.clear();
    }
}

/// Most observations [`TableStats`] keeps of each kind between two clears
/// ([`LockTable::stats_mut`](super::LockTable::stats_mut)): a driver that never takes them (a test, a simulator) does
/// not make it grow without bound.
pub const STATS_OBSERVATIONS_MAX: usize = 1 << 16;

pub(super) fn push_capped(list: &mut Vec<u64>, value: u64) {
    if list.len() < STATS_OBSERVATIONS_MAX {
        list.push(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clearing forgets every count and observation but keeps the lists' buffers:
    /// counting allocates nothing in a steady state.
    #[test]
    fn clearing_forgets_the_counts_and_keeps_the_buffers() {
        let holds = HoldOutcomes { granted: 1, queued: 2, busy: 3, refused: 4 };
        let mut stats = TableStats {
            grants_immediate: 3,
            grants_handoff: 2,
            lease_expiries: 1,
            multi_key_grants: 5,
            holds,
            ..Default::default()
        };
        for v in 0..100 {
            push_capped(&mut stats.waits_ms, v);
            push_capped(&mut stats.holds_us, v);
        }
        stats.clear();
        assert_eq!(stats, TableStats::default());
        assert!(stats.waits_ms.capacity() >= 100 && stats.holds_us.capacity() >= 100);
    }

    #[test]
    fn observations_stop_at_the_cap() {
        let mut list = Vec::new();
        for v in 0..STATS_OBSERVATIONS_MAX as u64 + 10 {
            push_capped(&mut list, v);
        }
        assert_eq!(list.len(), STATS_OBSERVATIONS_MAX);
        assert_eq!(list.last(), Some(&(STATS_OBSERVATIONS_MAX as u64 - 1)));
    }
}
