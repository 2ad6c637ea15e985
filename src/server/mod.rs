//! The server: an accept loop, a thread per client connection, and one lock-table
//! thread that owns all lock state; in a cluster also the Raft thread and the peer
//! port (docs/architecture.md). This file only names the parts:
//!
//! - `node.rs`: `Server`, start-up and shutdown; `process.rs`: `ticketing server`;
//! - `standalone.rs`, `clustered.rs`: each mode's own start-up, from `parts.rs`;
//! - `accept.rs`: the accept loop; `limits.rs`: the connection caps;
//! - `connection.rs` (the reader) and `writer.rs`: one connection's two threads;
//! - `outbox.rs`: what a connection owes and has queued, byte budgets, direct writes;
//! - `inbox.rs`: the lock-table thread's inbox; `lock_thread.rs`: that thread;
//! - `log_link.rs`: where its commands go to be ordered (`LogLink`; the standalone
//!   log), `raft_link.rs`: the cluster's (the Raft thread);
//! - `shared.rs`: what the connection threads share; `status.rs`: STATUS and MEMBERS;
//! - `health.rs`: `/healthz` and `/readyz`; `handshake_log.rs`, `signals.rs`.

mod accept;
mod clustered;
mod connection;
mod handshake_log;
mod health;
mod inbox;
mod limits;
mod lock_thread;
mod log_link;
mod node;
mod outbox;
mod parts;
mod process;
mod raft_link;
mod shared;
#[doc(hidden)]
pub mod signals;
mod standalone;
#[doc(hidden)]
pub mod status;
mod writer;

pub use crate::config::{Config, ConfigError};
pub use node::Server;
pub use process::run_from_env;

// The server's own bounds and plumbing, for the binary and the tests.
#[doc(hidden)]
pub use limits::{Limits, CONNECTIONS_MAX, HANDSHAKES_MAX, HANDSHAKES_PER_IP_MAX, RESERVED_FDS};
#[doc(hidden)]
pub use outbox::{PENDING_PER_CONN_MAX, PENDING_PER_NODE_MAX};
#[doc(hidden)]
pub use process::init_logging;
