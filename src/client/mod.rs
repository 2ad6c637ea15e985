//! The official blocking client (docs/client.md).
//!
//! ```no_run
//! use std::time::Duration;
//! use ticketing::client::{AcquireError, Client, ReleaseOutcome};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder()
//!     .addrs(["10.0.0.1:5225", "10.0.0.2:5225", "10.0.0.3:5225"])
//!     .auth_token("a secret of at least 16 bytes")
//!     .owner("seat-service-7")
//!     .build()?;
//!
//! match client.acquire("seat:42", Duration::from_secs(30), Duration::from_secs(5)) {
//!     Ok(lock) => {
//!         // Critical section: pass lock.token() to every write it makes.
//!         println!("holding {} with fencing token {}", lock.key(), lock.token());
//!         match lock.release()? {
//!             ReleaseOutcome::Released => {}
//!             ReleaseOutcome::NotHolder => eprintln!("the lease had already ended"),
//!             other => eprintln!("{other}"),
//!         }
//!     }
//!     Err(e) if e.is_definitive() => eprintln!("not acquired: {e}"),
//!     Err(e) => eprintln!("outcome unknown, NOT entering the critical section: {e}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Outcomes
//!
//! [`Client::acquire`] returns a [`Lock`] only on the server's `G`, which is sent
//! after the grant committed. Every [`AcquireError`] is *definitive* — the key is
//! certainly not held by this call — except [`AcquireError::Indeterminate`]: the
//! request reached a server (at least one byte of it was written) and no definitive
//! answer came, because the connection broke, the server answered `U`, or nothing came
//! back within the wait plus [`COMMIT_MARGIN`]. Then the key may be held under a token
//! this process never learned: do not enter the critical section. The server's lease
//! ends such a hold; a `G` that still arrives later is released at once.
//!
//! An ACQUIRE is sent again on another connection only while *no byte of it* was
//! written; once written it is never resent, so one call never queues twice. `B`, `T`,
//! `M`, `E` are returned at once. `M` also tells the client where the leader is: the
//! next request goes there.
//!
//! # Connections
//!
//! The configured addresses are seeds: one live member is enough. The client dials the
//! leader that WELCOME, STATUS or an `M` names, follows the leader's voter set (one
//! connection per member, two when there is one), PINGs a connection that received
//! nothing for a second and closes it when nothing comes back within 1.5 s, and
//! reconnects forever with a backoff from 0.1 s doubling to 3.2 s. Any number of
//! threads share one [`Client`] (it is `Clone + Send + Sync`); their requests are
//! pipelined, written together when they meet, and answers matched by request id.
//!
//! # Releases
//!
//! [`Lock::release`] and [`Client::release`] send the RELEASE from the calling thread;
//! dropped locks and late grants go to a background worker. All count against one
//! bound ([`RELEASE_QUEUE_CAPACITY`]) and are retried until the server answers `R` or
//! `N`, for at most [`RELEASE_DEADLINE`]. A release is never reported successful
//! without `R`/`N`.
//!
//! # Resolving
//!
//! [`Client::resolve`] finds out whether an indeterminate acquire holds its key after
//! all, with a QUERY once the grant can no longer happen, never by sending it again.
//! An indeterminate acquire nobody resolves is resolved by the client itself, and a
//! grant it finds is released: no grant is left orphaned. docs/client.md says when
//! that is safe and how long every call can block.
//!
//! # Structure
//!
//! Layers, each importing only those below it (`tests/layout.rs` checks it):
//!
//! 1. leaves: [`error`](AcquireError) types, [`outcome`](ReleaseOutcome) data,
//!    [`Backoff`];
//! 2. `core/`: every decision, as a deterministic state machine with no I/O
//!    ([`core::Core`]), driven by the I/O below and by the client simulator;
//! 3. `io/`: sockets, threads and the clock around the core;
//! 4. `lock.rs` ([`Lock`] and the releases), then `calls.rs` (argument checks and
//!    what an outcome means), `api.rs` ([`Client`]), `admin.rs`, `direct.rs` (one
//!    request per connection to the one node asked, for views of every node), and
//!    `callback.rs` (the same calls ending in a callback, [`Pending`]);
//! 5. `builder.rs` ([`ClientBuilder`]) and `tls.rs`.
//!
//! Threads: the callers; one connection thread per dialed address
//! (`ticketing-conn-ADDR`), which dials and reads; one timer thread
//! (`ticketing-timer`); per connection, a writer thread (`ticketing-flush`) started
//! the first time a thread that must not wait meets a full socket or TLS.
//!
//! Locks, in the order they may be taken: the client's state mutex (the core, the
//! connections, the connection threads' queues) — held only for bookkeeping, never
//! across a socket read, write or dial; a connection's write half (only the session's
//! writer of the moment, named by the core, after the state mutex was let go); with
//! TLS, the connection's TLS state (inside the write half's use, or for the moment the
//! reader decrypts, never across a socket read); a caller's reply cell (a moment, to
//! put or take an outcome). Nothing else is shared.

mod admin;
mod api;
mod backoff;
mod builder;
mod callback;
mod calls;
// The client's decisions as a state machine: public for the client simulator
// (tests/client_sim.rs), not for applications.
#[doc(hidden)]
pub mod core;
mod direct;
mod error;
mod hold;
mod io;
mod lock;
mod outcome;
mod place;
mod tls;

pub use crate::proto::frame::TopKey;
pub use admin::{FoundNode, Founding};
pub use api::Client;
pub use builder::{ClientBuilder, COMMIT_MARGIN, DEFAULT_ADDR, REQUEST_TIMEOUT_DEFAULT};
pub use callback::Pending;
pub use calls::Resolution;
pub use core::RELEASE_DEADLINE;
pub use error::{AcquireError, BuildError, ClientError, Indeterminate, IndeterminateCause, ReleaseError};
pub use hold::Hold;
pub use lock::{Lock, LockParts};
pub use outcome::{HolderInfo, PoolHolding, PoolInfo, ReleaseOutcome};
pub use place::Place;

// The client's tuning, for the tests and the docs' figures: not settings.
#[doc(hidden)]
pub use crate::proto::frame::TOP_KEYS_MAX;
#[doc(hidden)]
pub use backoff::{Backoff, BACKOFF_INITIAL, BACKOFF_MAX};
#[doc(hidden)]
pub use builder::split_addrs;
#[doc(hidden)]
pub use core::{
    CONNECT_WAIT_MIN, IDLE_PING_DEFAULT, LEADER_WAIT, LEARNED_ADDRS_MAX, MEMBERSHIP_REFRESH,
    PING_ANSWER_TIMEOUT, RELEASE_QUEUE_CAPACITY, RETIRE_GRACE, SEED_FALLBACK_AFTER,
};
#[doc(hidden)]
pub use io::dial::{CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT};
#[doc(hidden)]
pub use io::WRITE_DEADLINE;

pub(crate) use calls::check_acquire as check_acquire_args;
pub(crate) use direct::Direct;
pub(crate) use hold::check_hold as check_hold_args;
pub(crate) use io::dial::{
    Words, CLI_WORDS, C_WORDS, ENV_WORDS, GO_WORDS, JAVA_WORDS, NODE_WORDS, PYTHON_WORDS,
};
pub(crate) use io::{set_wait_check, wait_check, waiting_after, WaitCheck};
pub(crate) use lock::check_key as check_key_arg;

/// The longest blocking write of one batch (the name of earlier versions).
#[doc(hidden)]
pub const WRITE_TIMEOUT: std::time::Duration = WRITE_DEADLINE;
