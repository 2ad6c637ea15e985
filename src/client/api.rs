//! [`Client`]: the calls an application makes. Each one checks its arguments, starts
//! an operation of the core and waits for its outcome (docs/client.md, "Public API").

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admin::Founding;
use super::calls::{acquired, check_acquire, check_owner, far, holder, pool_info, resolution, Resolution};
use super::core::{Outcome, Target};
use super::error::{unexpected, AcquireError, BuildError, ClientError, ReleaseError};
use super::io::dial::Words;
use super::io::Handle;
use super::lock::{check_key, release_now, Lock, LockParts};
use super::outcome::{HolderInfo, PoolInfo, ReleaseOutcome};
use crate::proto::frame::{Request, Response, TopKey, TOP_KEYS_MAX};

/// How often `Client::close` looks whether the background work is done.
const CLOSE_POLL: Duration = Duration::from_millis(10);

/// A handle on the lock service. Cheap to clone; all clones share the connections.
/// The background threads stop once the last clone and the last [`Lock`] are gone
/// and the background work (releases, orphan checks) is done.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    handle: Handle,
    owner: Arc<str>,
    addrs: Vec<String>,
    request_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("addrs", &self.inner.addrs).field("owner", &self.inner.owner).finish()
    }
}

impl Client {
    pub(crate) fn new(
        handle: Handle,
        owner: String,
        addrs: Vec<String>,
        request_timeout: Duration,
    ) -> Client {
        Client { inner: Arc::new(Inner { handle, owner: Arc::from(owner), addrs, request_timeout }) }
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    /// How this client's messages name what its caller wrote (its binding's words).
    pub(crate) fn words(&self) -> &'static Words {
        self.inner.handle.shared.dialer.names.words
    }

    pub(crate) fn owner_arc(&self) -> &Arc<str> {
        &self.inner.owner
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The owner string this client acquires and releases as.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The configured addresses (the seeds).
    pub fn addrs(&self) -> &[String] {
        &self.inner.addrs
    }

    /// The same client (connections, release queue) acquiring and releasing as
    /// `owner`. Cheap. Use one owner per logical caller — for example the client's
    /// owner plus a per-acquire suffix — when [`Client::resolve`] is to tell an
    /// indeterminate acquire's grant from another grant to the same owner.
    pub fn with_owner(&self, owner: impl Into<String>) -> Result<Client, BuildError> {
        let owner = owner.into();
        check_owner(&owner)?;
        let mut inner = (*self.inner).clone();
        inner.owner = Arc::from(owner);
        Ok(Client { inner: Arc::new(inner) })
    }

    /// Waits until the client's background work — releases still to make (dropped
    /// locks, late grants, releases in progress, each confirmed or given up at its 5 s
    /// deadline) and indeterminate acquires still to settle (docs/client.md, "No grant
    /// left orphaned") — is done, or `timeout` passes, then drops this handle. True
    /// when none was left. The connections close once the last handle is gone. Blocks
    /// at most `timeout`.
    pub fn close(self, timeout: Duration) -> bool {
        if self.handle().shared.is_forked() {
            return true; // the parent's background work is the parent's
        }
        let end = far(Instant::now(), timeout);
        loop {
            if self.handle().shared.state().core.outstanding() == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            std::thread::sleep(CLOSE_POLL.min(end - now));
        }
    }

    /// Turns the parts of a lock (from [`Lock::into_parts`]) back into a [`Lock`] of
    /// this client: for a lock handed between threads or kept across a restart of the
    /// component that took it (not of the process: the deadline is an `Instant`).
    pub fn adopt(&self, parts: LockParts) -> Lock {
        // A holder with this token is a caller's now, never a lost grant.
        if !self.handle().shared.is_forked() {
            self.handle().shared.state().core.adopted(parts.token, parts.deadline, std::time::Instant::now());
        }
        Lock::from_parts(self.handle().clone(), parts)
    }

    /// Acquires `key` for `lease` (whole seconds, 1..=250), queueing at most `wait`
    /// (0..=300 s; zero means one immediate try).
    ///
    /// Blocks until the server answers: at most `max(wait, CONNECT_WAIT_MIN)` to put
    /// the request on a connection (3 s at least, so a fresh client can connect), then
    /// what was left of `wait` plus the commit margin for the answer. See the
    /// [module docs](super) for what each outcome means.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: &ticketing::client::Client) -> Result<(), ticketing::client::AcquireError> {
    /// let lock = client.acquire("seat:42", Duration::from_secs(30), Duration::from_secs(5))?;
    /// assert!(lock.remaining() <= Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, key: &str, lease: Duration, wait: Duration) -> Result<Lock, AcquireError> {
        self.acquire_by(key, lease, wait, None)
    }

    /// [`Client::acquire`] that sends nothing after `send_by`: with no connection
    /// until then it ends `Unavailable` (the CLI keeps its retries within its budget).
    pub(crate) fn acquire_by(
        &self,
        key: &str,
        lease: Duration,
        wait: Duration,
        send_by: Option<Instant>,
    ) -> Result<Lock, AcquireError> {
        let lease_s = check_acquire(key, lease, wait)?;
        if let Some(why) = self.handle().shared.forked() {
            return Err(AcquireError::Forked(why));
        }
        let owner = &self.inner.owner;
        let outcome = self.handle().shared.call::<AcquireError>(|core, waker, now| {
            Ok(core.acquire(waker, key, owner, lease_s, wait, send_by, now))
        })?;
        acquired(self.handle(), key, owner, outcome)
    }

    /// Finds out, without sending the ACQUIRE again, whether an indeterminate
    /// acquire (`err`) holds its key after all.
    ///
    /// It takes the acquire over from the client's background check: a `G` of it that
    /// still arrives comes to this call. It waits until the window in which the grant
    /// could still happen has passed — the instant the acquire's frame was written
    /// plus its wait plus the commit margin — and then QUERYs the leader (linearizable;
    /// `M` is followed).
    ///
    /// Returns [`Resolution::Held`] when the key's holder is the acquire's owner under
    /// a token no caller of this client holds, [`Resolution::NotHeld`] otherwise,
    /// [`Resolution::Unknown`] when the window does not end within `timeout` or no
    /// leader answers — then the background check goes on and releases a grant it
    /// finds. Blocks at most `timeout`.
    ///
    /// Safe only when the owner was not used for another acquire of the same key
    /// meanwhile by another client (a holder with that owner could be that other
    /// grant): give each logical caller its own owner, e.g. [`Client::with_owner`] with
    /// a per-acquire suffix. Any other error than `Indeterminate` is definitive:
    /// `NotHeld`.
    pub fn resolve(&self, err: &AcquireError, timeout: Duration) -> Resolution {
        let AcquireError::Indeterminate(attempt) = err else {
            return Resolution::NotHeld;
        };
        if self.handle().shared.is_forked() {
            return Resolution::Unknown;
        }
        let outcome = self
            .handle()
            .shared
            .call::<()>(|core, waker, now| Ok(core.resolve(waker, attempt, far(now, timeout), now)));
        match outcome {
            Ok(outcome) => resolution(self.handle(), attempt, outcome),
            Err(()) => Resolution::Unknown,
        }
    }

    /// Releases `key` held by this client's owner under `token`, through the release
    /// queue's bound, and waits for the outcome. Blocks at most the release deadline
    /// (5 s).
    ///
    /// Use [`Lock::release`] when you have the handle; this is for a token kept
    /// elsewhere (the CLI's `release` command).
    pub fn release(&self, key: &str, token: u64) -> Result<ReleaseOutcome, ReleaseError> {
        release_now(self.handle(), &self.inner.owner, key, token)
    }

    /// Who holds `key`, linearizably (answered by the leader). `None` when free.
    /// Blocks at most the request timeout (default 10 s).
    pub fn query(&self, key: &str) -> Result<Option<HolderInfo>, ClientError> {
        check_key(key).map_err(ClientError::Invalid)?;
        holder(self.read(Request::Query { key: key.to_owned() }, Target::Any)?)
    }

    /// What `key` has as a pool (linearizable, like [`Client::query`]): its capacity,
    /// permits in use, holds and waiters, and its oldest holds.
    pub fn pool(&self, key: &str) -> Result<PoolInfo, ClientError> {
        check_key(key).map_err(ClientError::Invalid)?;
        pool_info(self.read(Request::Pool { key: key.to_owned() }, Target::Any)?)
    }

    /// The STATUS text (`name=value` lines, docs/protocol.md) of one node: the
    /// leader's when known, else any connected node's. Blocks at most the request
    /// timeout.
    pub fn status(&self) -> Result<String, ClientError> {
        match self.read(Request::Status, Target::Any)? {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// The STATUS text of the node at `addr`. An address the client dials uses its
    /// connection; any other gets a one-off connection — also one the client stops
    /// dialing while the request waits (its node is no voter: a standby among the
    /// addresses given). Blocks at most the request timeout (plus, for a one-off, 3 s
    /// per resolved address to connect and 5 s for the handshake).
    pub fn status_of(&self, addr: &str) -> Result<String, ClientError> {
        self.usable()?;
        let dials = || self.handle().shared.state().core.dials(addr);
        let one_off =
            || super::admin::one_off(self.handle(), addr, &Request::Status, self.inner.request_timeout);
        let response = if dials() {
            match self.read(Request::Status, Target::Addr(addr.to_owned())) {
                Err(ClientError::Unavailable { lasting: false, .. }) if !dials() => one_off()?,
                other => other?,
            }
        } else {
            one_off()?
        };
        match response {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// `admin replace` (docs/operations.md): asks the leader to swap voter `old` for the
    /// node `new`, already started with `TICKETING_CLUSTER_STATE=join` and reachable at
    /// client address `new_addr`. Waits up to `timeout` for the change to commit and
    /// returns the leader's report. Follows `M` to the leader, and asks again when
    /// leadership moved during the change. Blocks at most `timeout` plus one
    /// connection's connect and handshake (8 s).
    pub fn replace_member(
        &self,
        old: u64,
        new: u64,
        new_addr: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let request = Request::Replace { old, new, addr: new_addr.to_owned() };
        super::admin::replace_member(self.handle(), &self.known_addrs(), &request, timeout)
    }

    /// `admin transfer-leader` (docs/operations.md): asks the leader to hand leadership
    /// to voter `target`, or (`None`) to the voter it chooses, and waits until another
    /// node leads. Returns the new leader as `ID@ADDR`. Follows `M` to the leader. Blocks
    /// at most `timeout` plus one connection's connect and handshake (8 s).
    pub fn transfer_leader(&self, target: Option<u64>, timeout: Duration) -> Result<String, ClientError> {
        super::admin::transfer_leader(self.handle(), &self.known_addrs(), target, timeout)
    }

    /// The admin op MEMBERS asked of the node at `addr` alone, on a one-off connection
    /// (not following `M`): how that node sees the membership. Blocks at most `timeout`.
    pub fn members_at(&self, addr: &str, timeout: Duration) -> Result<String, ClientError> {
        match super::admin::one_off(self.handle(), addr, &Request::Members, timeout)? {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// JOIN (docs/operations.md "Joining"): asks the leader at `leader` — and only it:
    /// an `M` comes back as [`ClientError::NotLeader`] — to add node `node`, reachable at
    /// client address `node_addr`, as a standby learner. Returns the leader's report
    /// once the learner is in the committed configuration. Blocks at most `timeout`.
    pub fn join_cluster(
        &self,
        node: u64,
        node_addr: &str,
        leader: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let request = Request::Join { node, addr: node_addr.to_owned() };
        match super::admin::one_off(self.handle(), leader, &request, timeout)? {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// `admin found` (docs/operations.md "Founding"): asks each node at `addrs` (3 or
    /// 5, started with `TICKETING_CLUSTER_STATE=join`) — and no other address — what it
    /// is, all at once; then, only if each is waiting (knows no cluster), tells each to
    /// found a new cluster of them all. Returns each node's state and, when FOUND was
    /// sent, each node's answer ([`Founding`]). `Err` only for a list that is not 3 or
    /// 5 addresses. Blocks at most `timeout` per step (one step per node for FOUND).
    pub fn found_cluster(&self, addrs: &[String], timeout: Duration) -> Result<Founding, ClientError> {
        super::admin::found_cluster(self.handle(), addrs, timeout)
    }

    /// The addresses this client cannot connect to right now, each with why its last
    /// attempt failed (connection refused, the auth token, TLS, ...), for messages that
    /// name the cause. Empty when every address it tried is connected.
    pub fn connection_errors(&self) -> Vec<(String, String)> {
        if let Some(why) = self.handle().shared.forked() {
            return vec![(String::new(), why)];
        }
        self.handle().shared.state().core.connection_errors()
    }

    /// True while at least one connection to a node is up.
    pub fn is_connected(&self) -> bool {
        !self.handle().shared.is_forked() && self.handle().shared.state().core.is_connected()
    }

    /// The admin op MEMBERS: the membership as a node sees it (the leader's connection
    /// first), as `name=value` lines (docs/protocol.md). Needs a client built with the
    /// operator secret; others get [`ClientError::Refused`]. Blocks at most the request
    /// timeout.
    pub fn members(&self) -> Result<String, ClientError> {
        match self.read(Request::Members, Target::Any)? {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// TOP KEYS: the `n` keys (1..=100) with the longest queues, longest first, as the
    /// leader sees them (followers redirect; waiters live on the leader). Any client may
    /// ask. Blocks at most the request timeout.
    pub fn top_keys(&self, n: u8) -> Result<Vec<TopKey>, ClientError> {
        if n == 0 || n > TOP_KEYS_MAX {
            return Err(ClientError::Invalid(format!("n must be 1..={TOP_KEYS_MAX}, not {n}")));
        }
        match self.read(Request::TopKeys { n }, Target::Any)? {
            Response::TopKeys { keys } => Ok(keys),
            other => Err(unexpected(other)),
        }
    }

    /// Round-trips a PING to one node and returns the time it took. Blocks at most the
    /// request timeout.
    pub fn ping(&self) -> Result<Duration, ClientError> {
        let start = Instant::now();
        match self.read(Request::Ping, Target::Any)? {
            Response::Pong => Ok(start.elapsed()),
            other => Err(unexpected(other)),
        }
    }

    /// Fault injection for tests: the next `count` request writes fail before their
    /// first byte reaches the socket (the socket is shut down for writing), exactly as
    /// a connection that broke between two requests.
    #[doc(hidden)]
    pub fn inject_write_failures(&self, count: usize) {
        self.handle().shared.faults.store(count, std::sync::atomic::Ordering::Release);
    }

    /// For tests: the next request id the client will try (ids still pending on a
    /// connection are skipped).
    #[doc(hidden)]
    pub fn set_next_request_id(&self, id: u32) {
        self.handle().shared.state().core.set_next_request_id(id);
    }

    /// Every address the client knows: the leader's first, then the dialed ones, then
    /// the seeds.
    fn known_addrs(&self) -> Vec<String> {
        let mut addrs = if self.handle().shared.is_forked() {
            Vec::new()
        } else {
            self.handle().shared.state().core.known_addrs()
        };
        for addr in &self.inner.addrs {
            if !addrs.contains(addr) {
                addrs.push(addr.clone());
            }
        }
        addrs
    }

    /// `Err` in a child forked after the client was made (see `Shared::forked`).
    pub(crate) fn usable(&self) -> Result<(), ClientError> {
        match self.handle().shared.forked() {
            Some(why) => Err(ClientError::Forked(why)),
            None => Ok(()),
        }
    }

    /// A read-only request, answered within the request timeout.
    fn read(&self, request: Request, target: Target) -> Result<Response, ClientError> {
        self.usable()?;
        let deadline = Instant::now() + self.inner.request_timeout;
        let outcome = self
            .handle()
            .shared
            .call::<ClientError>(|core, waker, now| Ok(core.read(waker, request, target, deadline, now)))?;
        match outcome {
            Outcome::Read(result) => result,
            other => unreachable!("a read ended with {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_acquires_fail_before_io() {
        // Nothing listens on port 9 of a TEST-NET address; validation answers first.
        let client = Client::builder().addrs(["192.0.2.1:9"]).auth_token("0123456789abcdef").build().unwrap();
        let start = Instant::now();
        let invalid = |r: Result<Lock, AcquireError>| matches!(r, Err(AcquireError::Invalid(_)));
        assert!(invalid(client.acquire("k", Duration::ZERO, Duration::ZERO)));
        assert!(invalid(client.acquire("k", Duration::from_secs(251), Duration::ZERO)));
        assert!(invalid(client.acquire("", Duration::from_secs(1), Duration::ZERO)));
        assert!(invalid(client.acquire("k", Duration::from_secs(1), Duration::from_secs(301))));
        assert!(start.elapsed() < Duration::from_millis(100));
    }
}
