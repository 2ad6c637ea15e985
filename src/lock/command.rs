//! Commands: the entries of the replicated log that change lock state.

use super::ConnId;

/// Where the answer to a command must go: the node (and process incarnation) that
/// received the request, its connection, and the request id. Every node applies every
/// command; only the node whose identity matches answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    pub node: u64,
    pub incarnation: u64,
    pub conn: ConnId,
    pub id: u32,
}

/// A grant written by the leader: the token is chosen at proposal time and carried in
/// the entry, so applying never invents one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub owner: String,
    pub token: u64,
    pub lease_ms: u32,
    pub origin: Origin,
}

/// One lock state change. A release or an expiry and the grant to the next waiter are
/// ONE command, so a key is never free while someone waits and nobody jumps the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Grant a free key.
    Grant { key: String, grant: Grant },
    /// Release `key` if (owner, token) holds it, then hand it to `next`.
    Release { key: String, owner: String, token: u64, origin: Origin, next: Option<Grant> },
    /// Record cluster member `node`: the process (`incarnation`, a random number each
    /// process start) that runs it, and its client address. The first incarnation
    /// recorded for a node id stays: every member then refuses that id from any other
    /// process (a node that lost its state must never come back under its id).
    /// Incarnation 0 means "not known" (records from older versions): it changes only
    /// the address.
    SetMember { node: u64, incarnation: u64, addr: String },
    /// Record the fencing domain chosen by the first leader (ignored once one is set).
    SetDomain { domain: u64 },
    /// End the hold `token` on `key` because its lease ran out, then hand it to `next`.
    Expire { key: String, token: u64, next: Option<Grant> },
}
