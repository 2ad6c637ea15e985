//! What every operation of the core is given and what it gives back.
//!
//! An operation (an acquire, a release, a read-only request, a resolve) is a small
//! state machine. It reacts to its start, to the answer of a request it sent, to the
//! end of the session that carried one, and to its timer; each reaction returns
//! [`Next`]: wait (until an instant, or for an event), or done with an [`Outcome`].
//! It acts on the world only through [`Cx`]: the connections ([`Net`]), the orphan
//! records, the tokens handed to callers, and the background releases it asks for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claims::Claims;
use super::ids::OpId;
use super::net::{Net, NetEvent};
use super::orphans::Orphans;
use crate::client::error::{AcquireError, ClientError, ReleaseError};
use crate::client::outcome::ReleaseOutcome;
use crate::proto::frame::Response;

/// A request written and not answered within its budget closes its connection only
/// when nothing at all arrived since, and not before this long (the PING's own
/// allowance): a short budget proves nothing about a path that is merely slow.
pub const PING_ANSWER_TIMEOUT: Duration = Duration::from_millis(1500);

/// The core's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The configured addresses (validated `host:port`).
    pub seeds: Vec<String>,
    /// TLS is on: a learned address must have a host that can be a TLS name.
    pub tls: bool,
    /// Extra time, after the wait, for an ACQUIRE's answer.
    pub commit_margin: Duration,
    /// A session that received nothing for this long is PINGed.
    pub idle_ping: Duration,
    /// The client was given a cluster name: each connection's node was checked to
    /// report it before the session started (docs/client.md, "One cluster per client").
    pub named: bool,
    /// How messages name the addresses' setting and the cluster name's, in the
    /// caller's words (`TICKETING_ADDRS`, `Config.Addrs`, ...).
    pub seeds_setting: &'static str,
    pub name_setting: &'static str,
}

/// A granted lock, as the core hands it to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub token: u64,
    /// The lease the server granted (at most the one asked for).
    pub lease: Duration,
    /// The local deadline: the instant before the first byte was written, plus the lease.
    pub deadline: Instant,
}

/// What `resolve` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The acquire's grant happened and is now the caller's.
    Held(Granted),
    NotHeld,
    Unknown,
}

/// The end of an operation, for its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acquire(Result<Granted, AcquireError>),
    Release(Result<ReleaseOutcome, ReleaseError>),
    Read(Result<Response, ClientError>),
    Resolve(Resolved),
}

/// What the I/O around the core must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<W> {
    /// See [`NetEvent`].
    Net(NetEvent),
    /// The operation `op` ended: hand `outcome` to the caller waiting as `waker`.
    Complete { waker: W, op: OpId, outcome: Outcome },
    /// A waiting hold's place in line, for its caller's function (outside the lock).
    Place(crate::client::place::PlaceNews),
    /// The client closed and its background work is done: stop every thread.
    Shutdown,
}

/// What an operation does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Not done; call `on_timer` at this instant (None: only events move it).
    Wait(Option<Instant>),
    Done(Outcome),
}

/// Why a release exists (for logs and for the tokens handed to callers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `Lock::release`, `Client::release`: the caller waits for the outcome.
    Explicit,
    /// A dropped `Lock`.
    Dropped,
    /// A grant no caller holds: a late `G`, one that arrived after its lease, or one an
    /// orphan check found.
    Compensation,
}

/// A release an operation wants made in the background.
#[derive(Clone, Debug)]
pub(crate) struct ReleaseJob {
    pub(crate) key: String,
    pub(crate) owner: Arc<str>,
    pub(crate) token: u64,
    pub(crate) origin: Origin,
    /// Until when the server's lease may still hold the key (see `ReleaseOp::new`).
    pub(crate) until: Option<Instant>,
}

/// What operations act on: the connections, the orphan records, what the client has a
/// stake in (`claims.rs`), and the background releases asked for.
pub(crate) struct World {
    pub(crate) net: Net,
    pub(crate) orphans: Orphans,
    pub(crate) claims: Claims,
    pub(crate) jobs: Vec<ReleaseJob>,
}

impl World {
    /// The world as operation `op` sees it at `now`.
    pub(crate) fn cx<'a>(&'a mut self, config: &'a Config, now: Instant, op: OpId, closing: bool) -> Cx<'a> {
        Cx {
            net: &mut self.net,
            orphans: &mut self.orphans,
            claims: &mut self.claims,
            jobs: &mut self.jobs,
            config,
            now,
            op,
            closing,
        }
    }
}

/// The world as an operation sees it.
pub(crate) struct Cx<'a> {
    pub(crate) net: &'a mut Net,
    pub(crate) orphans: &'a mut Orphans,
    pub(crate) claims: &'a mut Claims,
    pub(crate) jobs: &'a mut Vec<ReleaseJob>,
    pub(crate) config: &'a Config,
    pub(crate) now: Instant,
    /// The operation's own id (what its requests wait under).
    pub(crate) op: OpId,
    /// The client is closing (background work gives up sooner).
    pub(crate) closing: bool,
}
