//! What the core hands its driver after a batch of inputs ([`Ready`]): messages to
//! send, a snapshot to install, entries to apply, confirmed reads, role changes and the
//! autopilot's changes (docs/raft.md).

use super::message::{Entry, Message, Snapshot};
use super::types::{NodeId, Role};

/// Outputs accumulated since the previous `ready()` call.
#[derive(Debug, Default)]
pub struct Ready {
    /// Messages to send: (destination, message). Best effort; may be dropped.
    pub messages: Vec<(NodeId, Message)>,
    /// A snapshot this follower installed: restore the application from it
    /// BEFORE applying `committed` (all of which come after it).
    pub snapshot: Option<Snapshot>,
    /// Newly committed entries, in index order, to apply.
    pub committed: Vec<Entry>,
    /// Confirmed ReadIndex requests: (ctx, index). Serve the read once the
    /// application has applied `index`.
    pub read_states: Vec<(u64, u64)>,
    /// Set when (role, term, leader) changed since the last `ready()`.
    pub role_changed: Option<RoleChange>,
    /// Leader only: `Some(true)` when it began handing leadership over since
    /// the last `ready()` (proposals are refused with
    /// `RaftError::HandingOver` from then on), `Some(false)` when that ended
    /// and it still leads (propose what was held). Losing leadership is
    /// reported by `role_changed` alone.
    pub handover: Option<bool>,
    /// True from the moment this node learned it is not in the committed
    /// configuration any more (level, not edge: stays true).
    pub removed: bool,
    /// Leader only: configuration changes autopilot (or a stopping node's
    /// leave) proposed since the last `ready()` (appended, not yet committed),
    /// in order.
    pub autopilot: Vec<AutopilotEvent>,
}

/// A configuration change autopilot proposed (docs/raft.md "Autopilot").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutopilotEvent {
    /// Voter `dead`, unheard for `unreachable_ms`, is being swapped for
    /// learner `standby`: the joint configuration was appended at
    /// `config_index` (the leader leaves it by itself once it commits).
    Replacing { dead: NodeId, standby: NodeId, unreachable_ms: u64, config_index: u64 },
    /// Learner `learner`, unheard for `unreachable_ms`, is being removed by the
    /// configuration appended at `config_index`.
    RemovingLearner { learner: NodeId, unreachable_ms: u64, config_index: u64 },
    /// Voter `leaving` said it is about to stop and asked to leave
    /// (`Message::Stopping { leave: true }`): it is being swapped for learner
    /// `standby`, the joint configuration appended at `config_index`.
    ReplacingStopping { leaving: NodeId, standby: NodeId, config_index: u64 },
    /// Learner `learner` said it is about to stop and asked to leave: it is being
    /// removed by the configuration appended at `config_index`, which frees its
    /// standby place at once.
    RemovingStopping { learner: NodeId, config_index: u64 },
}

/// A change of role, term or known leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChange {
    pub role: Role,
    pub term: u64,
    pub leader: Option<NodeId>,
}
