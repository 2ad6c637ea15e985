//! Ticketing: a FIFO lock service with leases, direct hand-off and fencing tokens.
//!
//! The crate's face is three modules:
//!
//! - [`client`]: the official client — [`client::Client`], its builder, [`client::Lock`]
//!   and the errors (docs/client.md);
//! - [`server`]: the server's entry points, [`server::run_from_env`] (what `ticketing
//!   server` runs) and [`server::Server`] (docs/configuration.md);
//! - [`capi`]: the C ABI of `include/ticketing.h` (docs/c.md), which the other
//!   languages' libraries use.
//!
//! Every other module is the implementation: public only so that the `ticketing`
//! binary, the integration tests and the simulators reach the pure cores, hidden from
//! the documentation, and no promise to anyone else. `tests/public_api.rs` fails when a
//! public item appears on the face without being listed there with a reason.

pub mod capi;
pub mod client;
pub mod server;

#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod cluster;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod established;
#[doc(hidden)]
pub mod invariant;
#[doc(hidden)]
pub mod lock;
#[doc(hidden)]
pub mod lograte;
#[doc(hidden)]
pub mod messages;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod proto;
#[doc(hidden)]
pub mod raft;
#[doc(hidden)]
pub mod raft_waker;
#[doc(hidden)]
pub mod random;
#[doc(hidden)]
pub mod replica;
#[doc(hidden)]
pub mod resolve;
#[doc(hidden)]
pub mod slots;
mod sys;
#[doc(hidden)]
pub mod tls;
#[doc(hidden)]
pub mod tls_verdict;
#[doc(hidden)]
pub mod transport;
