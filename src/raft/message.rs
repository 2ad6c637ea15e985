//! Entries, snapshots and the messages Raft peers exchange.
//!
//! Everything here is plain data: the core produces and consumes these values,
//! `wire.rs` turns them into bytes. A message from the network may be stale,
//! duplicated or nonsensical; the core checks before it believes.

use super::membership::Membership;

/// What a log entry carries. Raft never looks inside `Normal`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Appended by every new leader so it can commit something of its own term.
    Noop,
    /// Application data, opaque to Raft. Shared: the leader hands the same entry to
    /// every follower's AppendEntries and to the application, each without a copy.
    Normal(std::sync::Arc<[u8]>),
    /// A membership configuration; takes effect on the node as soon as it is
    /// appended to the node's log (Raft thesis §4.1), not when committed.
    Config(Membership),
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub term: u64,
    pub index: u64,
    pub kind: EntryKind,
}

impl Entry {
    /// Bytes of payload, used to cap AppendEntries sizes.
    pub fn payload_bytes(&self) -> usize {
        match &self.kind {
            EntryKind::Noop => 0,
            EntryKind::Normal(d) => d.len(),
            EntryKind::Config(m) => m.node_count() * 8,
        }
    }
}

/// What a snapshot stands for: the state after applying entries `..=index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMeta {
    pub index: u64,
    pub term: u64,
    /// The configuration committed at `index` (the latest config entry `<= index`).
    pub membership: Membership,
}

/// A snapshot of the application state machine plus its Raft metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub meta: SnapshotMeta,
    pub data: Vec<u8>,
}

/// Every message between peers. `term` is the sender's current term, except
/// for `PreVote` (the term the sender would campaign in) and a granted
/// `PreVoteResp` (echoes that term).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// "Would you vote for me in `term`?" — changes nobody's state.
    PreVote {
        term: u64,
        last_index: u64,
        last_term: u64,
    },
    PreVoteResp {
        term: u64,
        granted: bool,
    },
    /// A real vote request. `transfer` marks an election started by
    /// `TimeoutNow`: voters then ignore their leader lease.
    Vote {
        term: u64,
        last_index: u64,
        last_term: u64,
        transfer: bool,
    },
    VoteResp {
        term: u64,
        granted: bool,
    },
    /// AppendEntries. An empty `entries` is a probe (or carries `commit`).
    Append {
        term: u64,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
        commit: u64,
    },
    /// On success `index` is the follower's match index (last index of the
    /// accepted message). On rejection `index` echoes the rejected
    /// `prev_index`, and the hints say where to retry: `conflict_term` is the
    /// follower's term at `prev_index` (None when it has no such entry) and
    /// `hint_index` is the first index of that term in its log, or its last
    /// index + 1 when `conflict_term` is None.
    AppendResp {
        term: u64,
        success: bool,
        index: u64,
        conflict_term: Option<u64>,
        hint_index: u64,
    },
    /// Leader liveness + commit index (never beyond the follower's match) +
    /// the read-index round number being confirmed.
    Heartbeat {
        term: u64,
        commit: u64,
        read_seq: u64,
    },
    HeartbeatResp {
        term: u64,
        read_seq: u64,
    },
    /// One chunk of the leader's snapshot, starting at byte `offset`.
    InstallSnapshot {
        term: u64,
        meta: SnapshotMeta,
        offset: u64,
        data: Vec<u8>,
        done: bool,
    },
    /// `next_offset`: the byte the follower wants next for snapshot `index`.
    /// `done`: the follower now holds everything up to `index`.
    InstallSnapshotResp {
        term: u64,
        index: u64,
        next_offset: u64,
        done: bool,
    },
    /// Leadership transfer: "start an election now, skipping pre-vote".
    TimeoutNow {
        term: u64,
    },
    /// "A committed configuration at `config_index` does not contain you."
    Removed {
        term: u64,
        config_index: u64,
    },
    /// "I am about to stop": sent by a node that received SIGTERM to every other
    /// member, and again every heartbeat period until it stops. With `leave` it asks
    /// the leader to swap a standby in for it first. Judged without its term (it says
    /// something about the sender's process, not about any term).
    Stopping {
        term: u64,
        leave: bool,
    },
}

impl Message {
    /// The term the message carries.
    pub fn term(&self) -> u64 {
        match self {
            Message::PreVote { term, .. }
            | Message::PreVoteResp { term, .. }
            | Message::Vote { term, .. }
            | Message::VoteResp { term, .. }
            | Message::Append { term, .. }
            | Message::AppendResp { term, .. }
            | Message::Heartbeat { term, .. }
            | Message::HeartbeatResp { term, .. }
            | Message::InstallSnapshot { term, .. }
            | Message::InstallSnapshotResp { term, .. }
            | Message::TimeoutNow { term }
            | Message::Removed { term, .. }
            | Message::Stopping { term, .. } => *term,
        }
    }

    /// Messages only a leader sends; receiving one tells a node who leads.
    pub fn is_from_leader(&self) -> bool {
        matches!(
            self,
            Message::Append { .. }
                | Message::Heartbeat { .. }
                | Message::InstallSnapshot { .. }
                | Message::TimeoutNow { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size an append is capped by: the data of a normal entry, eight bytes per
    /// node of a configuration, nothing for a no-op.
    #[test]
    fn payload_bytes_counts_what_the_entry_carries() {
        let entry = |kind| Entry { term: 1, index: 1, kind };
        assert_eq!(entry(EntryKind::Noop).payload_bytes(), 0);
        assert_eq!(entry(EntryKind::Normal(vec![7u8; 300].into())).payload_bytes(), 300);
        let config = Membership::with_voters(&[1, 2, 3]);
        assert_eq!(entry(EntryKind::Config(config)).payload_bytes(), 24);
    }
}
