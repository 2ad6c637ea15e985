//! What a node that is not part of a cluster yet learns from its first peers, and when
//! that stops it (exit 2): a founder that meets an existing domain, and a node whose
//! name or peer secret its peers do not share (docs/operations.md "Mistakes at start").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::peer::PeerHello;

/// How a configured peer answered this node before it knew a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The handshake went through: it shares this node's secret and name.
    Agreed,
    /// It holds another peer secret (it refused ours, or its proof does not match).
    OtherSecret,
    /// It has another cluster name; the words say which two.
    OtherName(String),
}

/// A node may found a domain only with peers that have none yet, and only with peers
/// that share its name and its peer secret. The first contacts decide:
///
/// - a peer that reports a fencing domain means the cluster already exists, and this
///   process, started to found it, has either started after the cluster formed or
///   restarted after a crash under a NodeId that already ran. Either way it must not
///   take part;
/// - a peer with another `TICKETING_CLUSTER_NAME` or another peer secret belongs to
///   another cluster, or one of the two was given the wrong value. A joining node stops
///   once every configured peer has answered and none agreed (one peer that agrees
///   shows the node is right and that peer list names a stranger, which it keeps
///   refusing and logging). A founder stops once too many founders disagree for it to
///   be part of a majority: of three founders of which one has a typo, the one with the
///   typo stops and the other two found the cluster.
///
/// A node that is part of a configuration never stops for these: it keeps refusing the
/// odd peer, and says so in its log.
pub(super) struct FirstContact {
    /// Started with `TICKETING_CLUSTER_STATE=new`.
    pub(super) started_new: bool,
    /// Founding a domain: started with `new`, or told to by FOUND (`ticketing admin
    /// found`) while waiting to join.
    pub(super) founding: AtomicBool,
    /// Set once a handshake with a peer without a domain (or any, once we have one)
    /// succeeded: from then on this node is part of the domain being founded.
    pub(super) made: AtomicBool,
    /// The founders configured (this node included); 0 for a joining node.
    pub(super) founders: usize,
    /// The peers this node dials by id (this node left out).
    pub(super) peers: usize,
    /// Each configured peer's last answer, by node id.
    verdicts: Mutex<BTreeMap<u64, (String, Verdict)>>,
}

impl FirstContact {
    pub(super) fn new(started_new: bool, founders: usize, peers: usize) -> FirstContact {
        FirstContact {
            started_new,
            founding: AtomicBool::new(started_new),
            made: AtomicBool::new(false),
            founders,
            peers,
            verdicts: Mutex::new(BTreeMap::new()),
        }
    }

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
        if ours == 0 && theirs != 0 {
            return Err(format!(
                "TICKETING_CLUSTER_STATE: node {peer_id} at {peer_addr} reports fencing domain {theirs}: the \
                 cluster already exists, so this node, started with TICKETING_CLUSTER_STATE=new, cannot found \
                 it (it started after the cluster formed, or it ran before and lost its state). Start it again \
                 with TICKETING_CLUSTER_STATE=join and TICKETING_NODE_ID=auto (or unset): it joins under a new \
                 NodeId as a standby, and the leader's autopilot swaps it for the dead voter (docs/deploy.md)"
            ));
        }
        Ok(())
    }

    /// Records how configured peer `peer` at `addr` answered this node's dial.
    /// `config_known`: this node knows a configuration (then nothing is fatal for a
    /// joining node; a founder knows its own from the start).
    /// `Err` is the fatal message (see the type's docs).
    pub(super) fn verdict(
        &self,
        peer: u64,
        addr: &str,
        verdict: Verdict,
        config_known: bool,
    ) -> Result<(), String> {
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        verdicts.insert(peer, (addr.to_owned(), verdict));
        // A founder knows its bootstrap configuration from the start: it is part of the
        // cluster once a handshake with a founder went through (`made`).
        let founding = self.founding.load(Ordering::SeqCst);
        if self.made.load(Ordering::SeqCst) || (config_known && !founding) {
            return Ok(());
        }
        let differ: Vec<(u64, &str, &Verdict)> = verdicts
            .iter()
            .filter(|(_, (_, v))| *v != Verdict::Agreed)
            .map(|(id, (addr, v))| (*id, addr.as_str(), v))
            .collect();
        if founding && self.founders > 0 {
            // Founders beside this one that may disagree while it is still in a majority.
            let tolerated = self.founders - (self.founders / 2 + 1);
            if differ.len() <= tolerated {
                return Ok(());
            }
        } else if verdicts.len() < self.peers || differ.len() < verdicts.len() {
            // A joining node: some peer has not answered yet, or one agreed.
            return Ok(());
        }
        Err(fatal_words(&differ))
    }
}

/// The exit message for peers that disagree, naming the variable to fix.
fn fatal_words(differ: &[(u64, &str, &Verdict)]) -> String {
    let named: Vec<String> = differ
        .iter()
        .filter_map(|(id, addr, v)| match v {
            Verdict::OtherName(words) => Some(format!("node {id} at {addr}: {words}")),
            _ => None,
        })
        .collect();
    if !named.is_empty() {
        return format!(
            "TICKETING_CLUSTER_NAME: this node's peers belong to another cluster ({}). Give every node of a \
             cluster the same TICKETING_CLUSTER_NAME and each cluster its own, and list only this cluster's \
             nodes in TICKETING_CLUSTER_PEERS (docs/security.md)",
            named.join("; ")
        );
    }
    let secret: Vec<String> = differ.iter().map(|(id, addr, _)| format!("node {id} at {addr}")).collect();
    format!(
        "TICKETING_PEER_AUTH_TOKEN: {} refused this node's peer secret, or proved another: it differs from the \
         cluster's. Give this node the cluster's peer secret (TICKETING_PEER_AUTH_TOKEN or \
         TICKETING_PEER_AUTH_TOKEN_FILE) and start it again",
        secret.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joining_node_stops_once_every_peer_answered_and_none_agreed_and_never_once_configured() {
        let joiner = FirstContact::new(false, 0, 2);
        assert_eq!(joiner.verdict(1, "a:1", Verdict::Agreed, false), Ok(()));
        assert_eq!(
            joiner.verdict(2, "b:1", Verdict::OtherSecret, false),
            Ok(()),
            "a agreed: b is the stranger"
        );
        let joiner = FirstContact::new(false, 0, 2);
        assert_eq!(joiner.verdict(2, "b:1", Verdict::OtherSecret, false), Ok(()), "a has not answered");
        let why = joiner.verdict(1, "a:1", Verdict::OtherSecret, false).unwrap_err();
        assert!(why.starts_with("TICKETING_PEER_AUTH_TOKEN: node 1 at a:1, node 2 at b:1 refused"), "{why}");
        let configured = FirstContact::new(false, 0, 1);
        assert_eq!(configured.verdict(2, "b:1", Verdict::OtherSecret, true), Ok(()));
        // A founder knows its bootstrap configuration: that alone does not make it part
        // of the cluster.
        let founder = FirstContact::new(true, 3, 2);
        let _ = founder.verdict(1, "a:1", Verdict::OtherSecret, true);
        assert!(founder.verdict(2, "b:1", Verdict::OtherSecret, true).is_err());
        let named = FirstContact::new(false, 0, 1);
        let why = named.verdict(2, "b:1", Verdict::OtherName("its name is \"b\"".into()), false).unwrap_err();
        assert!(
            why.starts_with("TICKETING_CLUSTER_NAME: this node's peers belong to another cluster (node 2")
        );
    }

    #[test]
    fn a_founder_stops_only_when_too_few_founders_agree_with_it_for_a_majority() {
        for (founders, tolerated) in [(3, 1), (5, 2)] {
            let founder = FirstContact::new(true, founders, founders - 1);
            for peer in 1..=tolerated as u64 {
                assert_eq!(founder.verdict(peer, "x:1", Verdict::OtherSecret, false), Ok(()));
            }
            assert!(founder.verdict(9, "x:1", Verdict::OtherSecret, false).is_err(), "{founders}");
            // An answer that changed to agreement counts as such.
            let founder = FirstContact::new(true, founders, founders - 1);
            for peer in 1..=tolerated as u64 + 1 {
                let _ = founder.verdict(peer, "x:1", Verdict::OtherSecret, false);
            }
            assert_eq!(founder.verdict(1, "x:1", Verdict::Agreed, false), Ok(()));
        }
        // Part of the domain being founded: never stops.
        let made = FirstContact::new(true, 3, 2);
        made.made.store(true, Ordering::SeqCst);
        assert_eq!(made.verdict(1, "x:1", Verdict::OtherSecret, false), Ok(()));
        assert_eq!(made.verdict(2, "x:1", Verdict::OtherSecret, false), Ok(()));
    }
}
