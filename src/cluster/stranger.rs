//! What a node steps from a **stranger**: a node that neither its active nor its
//! committed configuration names, that no committed configuration of its log ever
//! named (a removed node is no stranger: it is refused), and that is not the learner
//! an `admin replace` on this leader is adding.
//!
//! Why strangers are heard at all: a voter whose log lags behind a configuration change
//! does not know a new voter, yet that voter may need its vote — after the leader that
//! added it died, the cluster can otherwise stay leaderless for good. The rule below
//! lets exactly that through, and nothing that could disturb a cluster with a live
//! leader (docs/protocol-cluster.md §2, docs/security.md §3):
//!
//! - only while this node does not lead and has heard from no leader within an election
//!   timeout ([`Raft::has_live_leader`]);
//! - only vote requests: PreVote, and Vote without the transfer flag (a stranger cannot
//!   have been sent `TimeoutNow` by a leader this node follows);
//! - and, once this node voted for the stranger in its current term, that node's
//!   messages as leader of that term (not `TimeoutNow`) — how the lagging voter catches
//!   up from the leader it elected, and learns the configuration that names it.
//!
//! Answers to a stranger go back on the connection it opened: its address is never
//! taken from its PEER HELLO, so a node is never made to dial an address a stranger
//! chose. Pure: the simulators apply the same function.

use crate::raft::{Message, NodeId, Raft};

/// Is `from` a stranger to `raft` (see the module docs)? `admitted` are the nodes the
/// transport admits besides the configurations (the learner being added, configured
/// peers before any configuration is known).
pub fn is_stranger(raft: &Raft, from: NodeId, admitted: impl Fn(NodeId) -> bool) -> bool {
    let committed = raft.committed_membership().1;
    !raft.membership().contains(from)
        && !committed.contains(from)
        && !raft.committed_configs().any(|c| c.contains(from))
        && !admitted(from)
}

/// May message `msg` of stranger `from` be stepped into `raft` now?
pub fn stranger_may_step(raft: &Raft, from: NodeId, msg: &Message) -> bool {
    let config_known = !raft.membership().all_nodes().is_empty();
    if !config_known || raft.is_leader() {
        return false;
    }
    match msg {
        Message::PreVote { .. } | Message::Vote { transfer: false, .. } => !raft.has_live_leader(),
        Message::TimeoutNow { .. } => false,
        m if m.is_from_leader() => raft.voted_for() == Some(from) && m.term() == raft.term(),
        _ => false,
    }
}
