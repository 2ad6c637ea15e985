//! The network and process faults both simulators inject (the Raft-level one in
//! `sim/mod.rs`, the lock-level one in `cluster_sim.rs`): one injector, so the two
//! cannot drift apart. Each world applies what it owns (its nodes' pause clocks,
//! crashes, wall clocks) from what `step` decides.

use ticketing::raft::NodeId;

use super::{Net, Rng};

/// What `step` decided that the world itself must carry out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decided {
    /// This node pauses (its loops stop, its sockets buffer) until then.
    pub pause: Option<(NodeId, u64)>,
    /// Crash one node now (the world chooses which, and whether it may).
    pub crash: bool,
}

/// One step of faults over the nodes `ids`: a partition heals when its time is up and
/// a new one may start (symmetric and one-way cuts, `random_partition`); a random link
/// breaks; one direction between two nodes cannot be dialed for a while; a node pauses
/// for 0.1–3 s; a node crashes (one in a thousand steps).
///
/// `break_per_mille`: the chance of a link break, and separately of a one-way dial
/// outage; `partition_until`: the world's record of when the current partition heals.
pub fn step(
    rng: &mut Rng,
    net: &mut Net<impl Clone>,
    partition_until: &mut u64,
    break_per_mille: u64,
    ids: &[NodeId],
    now: u64,
) -> Decided {
    if now >= *partition_until && !net.blocked.is_empty() {
        net.blocked.clear();
    }
    if net.blocked.is_empty() && rng.chance(3) {
        *partition_until = now + rng.range(300, 4000);
        let cut = super::random_partition(rng, ids);
        net.blocked.extend(cut);
    }
    if rng.chance(break_per_mille) {
        net.break_random_link(now);
    }
    if rng.chance(break_per_mille) {
        // One direction cannot be dialed for a while: a one-way link.
        let a = ids[rng.below(ids.len() as u64) as usize];
        let b = ids[rng.below(ids.len() as u64) as usize];
        let until = now + rng.range(100, 3000);
        if a != b {
            net.block_dials(a, b, until, now);
        }
    }
    let mut decided = Decided::default();
    if rng.chance(2) {
        let x = ids[rng.below(ids.len() as u64) as usize];
        let until = now + rng.range(100, 3000);
        net.set_paused(x, until);
        decided.pause = Some((x, until));
    }
    decided.crash = rng.chance(1);
    decided
}
