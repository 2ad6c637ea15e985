//! The lock table: pure, deterministic state machines with no I/O, no threads and no
//! clock reads. Time is always an argument.
//!
//! Two layers, because Raft separates "what was decided" from "what the leader plans":
//!
//! - [`state::LockState`] is the *applied* state every node holds: who holds each key,
//!   with which token and lease, and the highest token ever granted. It changes only by
//!   applying a [`command::Command`], in log order, and applying is a pure function of
//!   (state, command): every node computes the same state and the same answers.
//! - [`table::LockTable`] wraps the applied state with what only the leader keeps:
//!   FIFO wait queues, lease and wait timers, and a *projection* (applied state plus
//!   commands proposed but not yet applied), so two grants of one key are never
//!   proposed and a hand-off always goes to the true queue head.
//!
//! Standalone mode drives the same table with a "log" that commits on append.

mod bytes;
pub mod codec;
pub mod command;
pub mod lines;
mod snapshot;
pub mod state;
pub mod store;
pub mod table;
pub mod timers;

pub use command::{Command, CommandRef, ConnId, Grant, HoldGrant, Origin, Part};
pub use state::{Effect, Holder, HolderRef, LockState, MemberRecord};
pub use store::{OwnerId, SlotId};
pub use table::{LockTable, Output, Reply, TableConfig};
