//! The Raft consensus core: a pure, deterministic state machine.
//!
//! # Model
//!
//! `Raft` never touches a socket, a thread, a clock or the OS random source.
//! Everything comes in through four doors and goes out through one:
//!
//! ```text
//!   tick(now_ms)              ─┐
//!   step(from, msg, now_ms)    ├─> Raft ──> ready() -> Ready { messages, committed,
//!   propose / read_index / …   │                               snapshot, read_states,
//!   compact(applied, snapshot)─┘                               role_changed, removed,
//!                                                               autopilot }
//! ```
//!
//! - Time is the caller's monotonic milliseconds (`now_ms`); the core only
//!   compares it with deadlines it set itself.
//! - Randomness (election timeouts) comes from a SplitMix64 seeded by the
//!   caller, so a run is replayable from (seed, inputs).
//! - Log and vote are volatile by design: a restarted process must come back
//!   under a new `NodeId` (docs/operations.md), so there is no persistence step.
//! - Group commit: `propose` only appends to the leader's log. AppendEntries
//!   are built when the application calls `ready()`, so everything proposed
//!   between two `ready()` calls travels in one message per follower (up to
//!   `max_append_entries` / `max_append_bytes`).
//!
//! # Consuming `Ready`
//!
//! Call `ready()` after every batch of inputs and handle its fields in this
//! order: (1) send `messages` (any order, best effort); (2) if `snapshot` is
//! set, replace the application state with it; (3) apply `committed` in
//! order; (4) answer `read_states` `(ctx, index)` once the application has
//! applied up to `index`; (5) react to `role_changed` / `removed`.
//!
//! # Features
//!
//! PreVote (a pre-candidate stands back for a better-ranked one), CheckQuorum
//! by time of last answer with the leader-lease vote rule, AppendEntries with
//! conflict-term back-tracking, pipelined replication with a per-follower
//! in-flight window (a real bound) and probe mode, a no-op per term, commit of
//! current-term entries only, heartbeats carrying the commit index, snapshots
//! with log compaction and chunked InstallSnapshot, learners, joint consensus
//! (enter with `propose_membership`, leave automatically once committed),
//! removal notices (the leader answers every message of a non-member),
//! planned hand-over (`transfer_leader`, `successor`, `Ready::handover`; a
//! leader that removes itself hands over too), ReadIndex, autopilot (the
//! leader replaces a dead voter by a caught-up learner and removes dead
//! learners, `autopilot.rs`), and planned stops (`stop`: a stopping node tells
//! the others, is never handed leadership, and may ask to be swapped for a
//! standby first, `stopping.rs`). See docs/raft.md.

mod autopilot;
mod core;
mod election;
mod inputs;
pub mod log;
pub mod membership;
pub mod message;
pub mod progress;
mod ready;
mod reconfig;
mod replication;
pub mod rng;
mod snapshot;
mod stopping;
mod types;
pub mod wire;

pub use self::core::{Raft, Transfer};
pub use self::membership::Membership;
pub use self::message::{Entry, EntryKind, Message, Snapshot, SnapshotMeta};
pub use self::ready::{AutopilotEvent, Ready, RoleChange};
pub use self::types::{
    NodeId, RaftConfig, RaftError, Role, APPEND_BYTES_MAX_DEFAULT, APPEND_ENTRIES_MAX_DEFAULT,
    AUTOPILOT_DEAD_MS_DEFAULT, COMMIT_NOTICE_MIN_MS, ELECTION_MS_DEFAULT, HEARTBEAT_MS_DEFAULT,
    INFLIGHT_MAX_DEFAULT, SNAPSHOT_CHUNK_BYTES_DEFAULT, STANDBY_LAG_MAX,
};
