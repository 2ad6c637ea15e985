//! The Raft core's own vocabulary, below every file that uses it: a node's id, the
//! tunables and their documented defaults, a node's role, why a proposal or a change is
//! refused.

/// A node's identity. Never reused within a fencing domain (docs/operations.md).
pub type NodeId = u64;

/// Tunables. `RaftConfig::new(id)` gives the documented defaults (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct RaftConfig {
    pub id: NodeId,
    /// Leader heartbeat period.
    pub heartbeat_ms: u64,
    /// Base election timeout; the actual timeout is uniform in
    /// `[election_ms, election_ms + election_ms * 3 / 20)`. Also the
    /// check-quorum period and the leader-lease length.
    pub election_ms: u64,
    /// Most entries in one AppendEntries.
    pub max_append_entries: usize,
    /// Most payload bytes in one AppendEntries (the first entry always goes).
    pub max_append_bytes: usize,
    /// Most unacknowledged AppendEntries per follower in replicate mode.
    pub max_inflight: usize,
    /// Bytes of snapshot data per InstallSnapshot chunk.
    pub snapshot_chunk_bytes: usize,
    /// Run a pre-vote round before bumping the term.
    pub pre_vote: bool,
    /// Leaders step down without a quorum; followers in contact with a leader
    /// ignore vote requests (leader lease).
    pub check_quorum: bool,
    /// Autopilot (`src/raft/autopilot.rs`, docs/raft.md "Autopilot"): the
    /// leader replaces a voter it has not heard from for this long by a
    /// caught-up learner, and removes a learner unheard for this long.
    /// `None`: off.
    pub autopilot_dead_ms: Option<u64>,
}

/// Default heartbeat period (docs/configuration.md).
pub const HEARTBEAT_MS_DEFAULT: u64 = 200;
/// Default base election timeout (docs/configuration.md).
pub const ELECTION_MS_DEFAULT: u64 = 2000;
/// The shortest delay before a commit-only heartbeat (see
/// [`RaftConfig::commit_notice_ms`]).
pub const COMMIT_NOTICE_MIN_MS: u64 = 5;
/// Default cap on entries per AppendEntries.
pub const APPEND_ENTRIES_MAX_DEFAULT: usize = 512;
/// Default cap on payload bytes per AppendEntries (1 MiB).
pub const APPEND_BYTES_MAX_DEFAULT: usize = 1 << 20;
/// Default in-flight window per follower.
pub const INFLIGHT_MAX_DEFAULT: usize = 64;
/// Default snapshot chunk size (256 KiB).
pub const SNAPSHOT_CHUNK_BYTES_DEFAULT: usize = 256 << 10;
/// Default `RaftConfig::autopilot_dead_ms`: 30 s, fifteen default election
/// timeouts (docs/raft.md "Autopilot").
pub const AUTOPILOT_DEAD_MS_DEFAULT: u64 = 30_000;
/// Autopilot promotes a learner only when its match index plus this reaches
/// the leader's commit index (the same bound `admin replace` waits for).
pub const STANDBY_LAG_MAX: u64 = 64;

impl RaftConfig {
    /// documented defaults (docs/configuration.md) for node `id`.
    pub fn new(id: NodeId) -> RaftConfig {
        RaftConfig {
            id,
            heartbeat_ms: HEARTBEAT_MS_DEFAULT,
            election_ms: ELECTION_MS_DEFAULT,
            max_append_entries: APPEND_ENTRIES_MAX_DEFAULT,
            max_append_bytes: APPEND_BYTES_MAX_DEFAULT,
            max_inflight: INFLIGHT_MAX_DEFAULT,
            snapshot_chunk_bytes: SNAPSHOT_CHUNK_BYTES_DEFAULT,
            pre_vote: true,
            check_quorum: true,
            autopilot_dead_ms: Some(AUTOPILOT_DEAD_MS_DEFAULT),
        }
    }

    /// How long a follower's commit index may lag the leader's before the leader
    /// sends it a heartbeat for that alone: a tenth of the heartbeat period, at
    /// least [`COMMIT_NOTICE_MIN_MS`], at most the heartbeat period (20 ms by
    /// default). Why wait at all: a follower answers no client, so it need not
    /// learn a commit at once, and an append sent meanwhile carries the commit
    /// index anyway; sending it at once cost a second exchange per follower for
    /// every entry at low rates (docs/raft.md "Commit propagation").
    pub fn commit_notice_ms(&self) -> u64 {
        (self.heartbeat_ms / 10).max(COMMIT_NOTICE_MIN_MS).min(self.heartbeat_ms)
    }
}

/// What a node currently is. `Learner` means "not a voter in my active
/// configuration" (a learner, a node still joining, or a removed node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
    Learner,
}

/// Why a request to the core was refused. Nothing was appended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RaftError {
    /// Only the leader accepts this; `leader` is the last known leader.
    NotLeader { leader: Option<NodeId> },
    /// This leader is handing leadership over: a transfer is under way, or it
    /// appended a configuration in which it is no voter. Nothing was failed:
    /// hold the request and propose it again here when `Ready::handover`
    /// reports the end (`Some(false)`, still leading), or redirect it once
    /// `role_changed` says another node leads.
    HandingOver,
    /// A configuration change is appended but not yet committed.
    ConfigChangePending,
    /// The requested configuration makes no sense (reason given).
    InvalidConfig(&'static str),
    /// The proposal is larger than `wire::ENTRY_DATA_MAX_BYTES`.
    EntryTooLarge,
}

impl std::fmt::Display for RaftError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RaftError::NotLeader { leader: Some(l) } => write!(f, "not the leader (leader is {l})"),
            RaftError::NotLeader { leader: None } => write!(f, "not the leader (leader unknown)"),
            RaftError::HandingOver => write!(f, "leadership is being handed over"),
            RaftError::ConfigChangePending => write!(f, "a configuration change is in flight"),
            RaftError::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            RaftError::EntryTooLarge => write!(f, "entry too large"),
        }
    }
}

impl std::error::Error for RaftError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults a node runs with unless configured otherwise: the periods in
    /// docs/configuration.md, and the sizes that keep a snapshot or a catch-up moving in
    /// few round trips.
    #[test]
    fn the_defaults_are_the_documented_ones() {
        let cfg = RaftConfig::new(7);
        assert_eq!((cfg.id, cfg.heartbeat_ms, cfg.election_ms), (7, 200, 2_000));
        assert_eq!((cfg.max_append_entries, cfg.max_append_bytes), (512, 1024 * 1024));
        assert_eq!((cfg.max_inflight, cfg.snapshot_chunk_bytes), (64, 256 * 1024));
        assert!(cfg.pre_vote && cfg.check_quorum);
        assert_eq!(cfg.autopilot_dead_ms, Some(30_000));
        assert_eq!(cfg.commit_notice_ms(), 20);
    }

    /// What an operator reads when a change or a proposal is refused.
    #[test]
    fn each_refusal_says_why() {
        let cases = [
            (RaftError::NotLeader { leader: Some(3) }, "not the leader (leader is 3)"),
            (RaftError::NotLeader { leader: None }, "not the leader (leader unknown)"),
            (RaftError::HandingOver, "leadership is being handed over"),
            (RaftError::ConfigChangePending, "a configuration change is in flight"),
            (RaftError::InvalidConfig("no voters"), "invalid configuration: no voters"),
            (RaftError::EntryTooLarge, "entry too large"),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
