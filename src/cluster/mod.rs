//! Cluster mode: the Raft thread (a mio loop), the peer port, and the threads that
//! dial and accept peer connections. The lock side is the same lock-table thread as
//! standalone, fed by the Raft thread instead of a loopback log.
//!
//! This file only names the parts: `start` (binding the peer port and starting the
//! threads), `handles` (the running side the server holds, and how it stops),
//! `dialer` and `accept` (peer connections out and in) and `first_contact` (the
//! founding rule both apply). Why nothing else lives here: every part would import
//! this file while it names the parts, an import circle.

pub mod explain;
pub mod join;
pub mod net;
pub mod peer;
pub mod raft_thread;
pub mod stranger;
pub mod view;

mod accept;
mod dialer;
mod first_contact;
mod handles;
mod start;

pub use accept::{PEER_HANDSHAKES_MAX, PEER_HANDSHAKES_PER_IP_MAX};
pub use dialer::DialerKit;
pub use handles::ClusterHandles;
pub use start::{start, ClusterStart};
