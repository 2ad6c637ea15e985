//! What a node steps from a **stranger**: a node that neither its active nor its
//! committed configuration names, that no committed configuration of its log ever
//! named (a removed node is no stranger: it is refused), and that is not the learner
//! an `admin replace` on this leader is adding.
//!
//! Why strangers are heard at all: a node whose log lags behind a configuration change
//! does not know the voters it added. One of them may need its vote — after the leader
//! that added it died, the cluster can otherwise stay leaderless for good — and one of
//! them may lead, and the lagging node can only catch up from it. The rule below lets
//! exactly that through, and nothing that could disturb a node with a live leader
//! (docs/protocol-cluster.md §2, docs/security.md §3):
//!
//! - never by a leader, and only while this node has heard from no leader within an
//!   election timeout ([`Raft::has_live_leader`]): vote requests — PreVote, and Vote
//!   without the transfer flag (a stranger cannot have been sent `TimeoutNow` by a
//!   leader this node follows) — and a leader's messages for our term or a later one
//!   (Append, Heartbeat, InstallSnapshot; never `TimeoutNow`);
//! - and, once this node follows the stranger as its leader, that leader's messages:
//!   how the lagging node catches up, and learns the configuration that names the
//!   stranger — from then on it is a member like any other.
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
        m if m.is_from_leader() => {
            m.term() >= raft.term() && (!raft.has_live_leader() || raft.leader_id() == Some(from))
        }
        _ => false,
    }
}
