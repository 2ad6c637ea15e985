//! The founding rule: a node started to found a cluster stops when the first peer it
//! meets reports a fencing domain (the cluster exists already).

use std::sync::atomic::{AtomicBool, Ordering};

use super::peer::PeerHello;

/// A `new` node may found a domain only with peers that have none yet. The first
/// peer it completes a handshake with (either direction) decides: a peer that reports
/// a fencing domain means the cluster already exists, and this process, started to
/// found it, has either started after the cluster formed or restarted after a crash
/// under a NodeId that already ran. Either way it must not take part: it stops with
/// exit status 2 and says how to replace it.
pub(super) struct FirstContact {
    /// Started with `TICKETING_CLUSTER_STATE=new`.
    pub(super) started_new: bool,
    /// Founding a domain: started with `new`, or told to by FOUND (`ticketing admin
    /// found`) while waiting to join.
    pub(super) founding: AtomicBool,
    /// Set once a handshake with a peer without a domain (or any, once we have one)
    /// succeeded: from then on this node is part of the domain being founded.
    pub(super) made: AtomicBool,
}

impl FirstContact {
    /// Judges a peer's domain at a successful handshake; `Err` is the fatal message.
    pub(super) fn judge(&self, ours: u64, peer: &PeerHello, peer_addr: &str) -> Result<(), String> {
        self.domain_exists(ours, peer.node_id, peer.domain, peer_addr)?;
        if self.founding.load(Ordering::SeqCst) {
            self.made.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// A peer answered (a handshake, or a refusal after its WELCOME) that fencing domain
    /// `theirs` exists: fatal for a founding node that is not part of a domain yet.
    pub(super) fn domain_exists(
        &self,
        ours: u64,
        peer_id: u64,
        theirs: u64,
        peer_addr: &str,
    ) -> Result<(), String> {
        if !self.founding.load(Ordering::SeqCst) || self.made.load(Ordering::SeqCst) {
            return Ok(());
        }
        let peer = PeerHello { node_id: peer_id, incarnation: 0, domain: theirs, addr: String::new() };
        if ours == 0 && peer.domain != 0 {
            return Err(format!(
                "TICKETING_CLUSTER_STATE: node {} at {peer_addr} reports fencing domain {}: the cluster \
                 already exists, so this node, started with TICKETING_CLUSTER_STATE=new, cannot found it \
                 (it started after the cluster formed, or it ran before and lost its state). Start it \
                 again with TICKETING_CLUSTER_STATE=join and TICKETING_NODE_ID=auto (or unset): it \
                 joins under a new NodeId as a standby, and the leader's autopilot swaps it for the \
                 dead voter (docs/deploy.md)",
                peer.node_id, peer.domain
            ));
        }
        Ok(())
    }
}
