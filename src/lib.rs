//! Ticketing: a FIFO lock service with leases, direct hand-off and fencing tokens.
pub mod raft;
