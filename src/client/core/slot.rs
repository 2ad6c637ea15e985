//! One address the client dials ([`Slot`]): its current session, its dialing state and
//! backoff, the node and fencing domain it last reported, and whether it is retired.

use std::time::Instant;

use super::ids::SlotId;
use super::session::Session;
use crate::client::backoff::Backoff;

/// One address the client dials, and its current session, if any.
pub(crate) struct Slot {
    pub(crate) id: SlotId,
    pub(crate) addr: String,
    /// Configured by the user, not learned.
    pub(crate) seed: bool,
    pub(crate) session: Option<Session>,
    pub(super) dialing: bool,
    /// When to dial next (no session, not dialing).
    pub(super) next_dial: Option<Instant>,
    /// A connection attempt of this slot has ended (see [`LEADER_WAIT`](super::routing::LEADER_WAIT)).
    pub(super) tried: bool,
    /// The node id of the last WELCOME on this slot; 0 before any.
    pub(crate) node: u64,
    /// The fencing domain its node last reported (WELCOME, STATUS); 0 before any. Kept
    /// when the connection ends: the address stays of that domain until it reports
    /// another (`domains.rs`).
    pub(crate) domain: u64,
    /// Its current session's node reported no domain yet (a follower that has not
    /// applied its leader's first entry, a cluster not founded): when to ask STATUS again.
    pub(super) reprobe_at: Option<Instant>,
    /// The leader its current session's node named when it reported no domain: the
    /// address is of that leader's domain until it reports its own (`domains.rs`).
    pub(super) named_leader: Option<String>,
    /// Its current session's node said (STATUS `role=waiting` or `joining`) that it is
    /// in no cluster yet: it has no domain to report, and serves nothing.
    pub(super) outside: bool,
    /// When the slot was added (the wait for seeds to settle counts from it).
    pub(super) added: Instant,
    pub(super) retired_at: Option<Instant>,
    /// Retired because its node left the voter set (not a second slot to a voter).
    pub(super) left: bool,
    /// Why the last attempt failed (cleared when one works).
    pub(crate) last_error: Option<String>,
    /// The last attempt failed with a mistake that trying again cannot fix
    /// ([`DialFailure::lasting`](super::net::DialFailure::lasting)).
    pub(super) lasting: bool,
    /// How far the attempt under way got, when that says something (a TCP connection
    /// taken but no greeting: the server may wait for TLS).
    pub(super) note: Option<String>,
    pub(super) backoff: Backoff,
}

impl Slot {
    pub(super) fn retired(&self) -> bool {
        self.retired_at.is_some()
    }

    pub(super) fn live(&self) -> Option<&Session> {
        self.session.as_ref().filter(|s| s.usable())
    }

    /// Does the address `leader` (from WELCOME, `M` or STATUS) name this slot?
    pub(super) fn is(&self, leader: &str) -> bool {
        leader == self.addr || self.live().is_some_and(|s| s.peer == leader)
    }
}
