//! Ticketing: a FIFO lock service with leases, direct hand-off and fencing tokens.

pub mod cluster;
pub mod lock;
pub mod proto;
pub mod raft;
pub mod replica;
pub mod server;
pub mod transport;
