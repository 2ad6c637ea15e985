//! Ticketing: a FIFO lock service with leases, direct hand-off and fencing tokens.

pub mod capi;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod invariant;
pub mod lock;
pub mod lograte;
pub mod messages;
pub mod metrics;
pub mod proto;
pub mod raft;
pub mod random;
pub mod replica;
pub mod resolve;
pub mod server;
pub mod slots;
mod sys;
pub mod tls;
pub mod tls_verdict;
pub mod transport;
