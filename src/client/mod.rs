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
//! docs/client.md says when that is safe and how long every call can block.

mod backoff;
mod builder;
mod conn;
mod error;
mod lock;
mod pool;
mod release;
mod supervisor;
mod tls;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::proto::frame::{TopKey, TOP_KEYS_MAX};
pub use backoff::{Backoff, BACKOFF_INITIAL, BACKOFF_MAX};
pub use builder::{
    split_addrs, ClientBuilder, COMMIT_MARGIN, CONNECT_WAIT_MIN, DEFAULT_ADDR, REQUEST_TIMEOUT_DEFAULT,
};
pub use conn::{CONNECT_TIMEOUT, WRITE_TIMEOUT};
pub use error::{AcquireError, BuildError, ClientError, Indeterminate, IndeterminateCause, ReleaseError};
pub use lock::{HolderInfo, Lock, LockParts, ReleaseOutcome};
pub use pool::{LEADER_WAIT, LEARNED_ADDRS_MAX, RETIRE_GRACE, SEED_FALLBACK_AFTER};
pub use release::{RELEASE_DEADLINE, RELEASE_QUEUE_CAPACITY};
pub use supervisor::{IDLE_PING_DEFAULT, MEMBERSHIP_REFRESH, PING_ANSWER_TIMEOUT};

use conn::{Reply, ReplyCell, SendError, Session, Waiter};
use pool::Pool;
use release::{Job, Origin};

/// How often `Client::close` looks whether the releases are done.
const CLOSE_POLL: Duration = Duration::from_millis(10);
/// Pause before asking again after an `M` that named no leader (an election runs).
const MOVED_PAUSE: Duration = Duration::from_millis(100);

use crate::proto::frame::{encode_acquire, encode_request, ErrorCode, Request, Response};
use crate::proto::limits::{KEY_LEN_MAX, KEY_LEN_MIN, LEASE_S_MAX, LEASE_S_MIN, WAIT_MS_MAX};

/// A handle on the lock service. Cheap to clone; all clones share the connections.
/// The background threads stop once the last clone and the last [`Lock`] are gone
/// and the release queue is empty.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    pool: Arc<Pool>,
    owner: String,
    addrs: Vec<String>,
    request_timeout: Duration,
    commit_margin: Duration,
    /// Shared by every owner view of one client: the last one gone closes the pool.
    _closer: Arc<Closer>,
}

/// Closes the release queue when the last handle on a pool is gone.
struct Closer(Arc<Pool>);

impl Drop for Closer {
    fn drop(&mut self) {
        // Never blocks: the release worker finishes what is queued, then stops the
        // connection threads.
        self.0.close_release_queue();
    }
}

/// What [`Client::resolve`] found out about an indeterminate ACQUIRE.
#[derive(Debug)]
#[non_exhaustive]
pub enum Resolution {
    /// The key is held by the acquire's owner: the grant did happen. The lock is
    /// adopted; its deadline is the instant before the QUERY was sent plus the lease
    /// the leader reported left, so never later than the server's expiry.
    Held(Lock),
    /// The key is not held by that owner (free, or someone else's), or the client is
    /// already releasing the late grant. Nothing to do.
    NotHeld,
    /// Could not be told within the timeout (no leader answered, or the window in which
    /// the grant could still happen did not pass in time).
    Unknown,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("addrs", &self.inner.addrs).field("owner", &self.inner.owner).finish()
    }
}

impl Client {
    /// Starts a configuration. See [`ClientBuilder`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
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
        builder::check_owner(&owner)?;
        let mut inner = (*self.inner).clone();
        inner.owner = owner;
        Ok(Client { inner: Arc::new(inner) })
    }

    /// Waits until every release this client still has to make (dropped locks, late
    /// grants, releases in progress) is finished — confirmed or given up at its 5 s
    /// deadline — or `timeout` passes, then drops this handle. True when none was
    /// left. The connections close once the last handle is gone. Blocks at most
    /// `timeout`.
    pub fn close(self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let pool = &self.inner.pool;
        loop {
            if pool.release_outstanding.load(std::sync::atomic::Ordering::Acquire) == 0 {
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
        Lock::from_parts(self.clone(), parts)
    }

    /// Acquires `key` for `lease` (whole seconds, 1..=250), queueing at most `wait`
    /// (0..=300 s; zero means one immediate try).
    ///
    /// Blocks until the server answers: at most `max(wait, CONNECT_WAIT_MIN)` to put
    /// the request on a connection (3 s at least, so a fresh client can connect), then
    /// what was left of `wait` plus the commit margin for the answer. See the
    /// [module docs](self) for what each outcome means.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: &ticketing::client::Client) -> Result<(), ticketing::client::AcquireError> {
    /// let lock = client.acquire("seat:42", Duration::from_secs(30), Duration::from_secs(5))?;
    /// assert!(lock.remaining() <= Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, key: &str, lease: Duration, wait: Duration) -> Result<Lock, AcquireError> {
        let lease_s = lease_seconds(lease).map_err(AcquireError::Invalid)?;
        check_key(key).map_err(AcquireError::Invalid)?;
        if wait.as_millis() > u128::from(WAIT_MS_MAX) {
            return Err(AcquireError::Invalid(format!(
                "wait is {} ms; must be 0..={WAIT_MS_MAX}",
                wait.as_millis()
            )));
        }
        let pool = &self.inner.pool;
        let start = Instant::now();
        let wait_end = start + wait;
        let send_end = start + wait.max(CONNECT_WAIT_MIN);
        let indeterminate = |cause, sent_at, wait, late_grant| {
            AcquireError::Indeterminate(Indeterminate {
                cause,
                key: key.to_owned(),
                owner: self.inner.owner.clone(),
                lease,
                wait,
                sent_at,
                late_grant,
            })
        };
        let mut frame = Vec::with_capacity(32 + key.len() + self.inner.owner.len());
        let (reply, sent_at, wait_sent) = loop {
            let Some(session) = pool.wait_for_session(send_end) else {
                return Err(AcquireError::Unavailable { last_error: pool.last_error() });
            };
            let wait_left = wait_end.saturating_duration_since(Instant::now());
            frame.clear();
            encode_acquire(&mut frame, 0, lease_s, wait_left.as_millis() as u32, key, &self.inner.owner);
            let cell = ReplyCell::fresh();
            let (id, sent_at) = match session.send(&pool.ids, Waiter::Caller(Arc::clone(&cell)), &mut frame) {
                Ok(sent) => sent,
                // Not one byte left this process: another connection may carry it.
                Err(_) => continue,
            };
            let answer_deadline = sent_at + wait_left + self.inner.commit_margin;
            let reply = match cell.wait(Some(answer_deadline)) {
                Some((_, reply)) => reply,
                None => {
                    if let Some(late_grant) = session.compensate(id, key, &self.inner.owner) {
                        if session.silent_since(sent_at) {
                            // Nothing at all came back since the request was written: the
                            // node or the path is dead, not just slow. Redial it.
                            log::warn!(
                                "{} answered nothing within the request's budget; reconnecting",
                                session.peer
                            );
                            session.kill();
                        }
                        return Err(indeterminate(
                            IndeterminateCause::NoAnswer,
                            sent_at,
                            wait_left,
                            Some(late_grant),
                        ));
                    }
                    // The reader took the answer just now; it is on its way.
                    cell.wait(None).map_or(Reply::Lost, |(_, reply)| reply)
                }
            };
            if matches!(reply, Reply::Unsent) && Instant::now() < send_end {
                // The connection broke before a byte of it was written: another may carry it.
                continue;
            }
            break (reply, sent_at, wait_left);
        };
        match reply {
            Reply::Answer(Response::Granted { token, lease_ms }) => {
                let granted = lease.min(Duration::from_millis(u64::from(lease_ms)));
                let deadline = sent_at + granted;
                if Instant::now() >= deadline {
                    // The lease may already have ended on the server: such a lock is of no
                    // use, and returning it would invite a write after the expiry.
                    log::warn!("grant of {key:?} (token {token}) arrived after its lease; releasing it");
                    if let Err(e) = pool.enqueue_release(Job::compensation(
                        key.to_owned(),
                        self.inner.owner.clone(),
                        token,
                    )) {
                        log::warn!("cannot release the expired grant: {e}; its lease ends it");
                    }
                    let fired = Some(conn::LateGrant::fired());
                    return Err(indeterminate(
                        IndeterminateCause::ExpiredOnArrival,
                        sent_at,
                        wait_sent,
                        fired,
                    ));
                }
                Ok(Lock::new(
                    self.clone(),
                    key.to_owned(),
                    self.inner.owner.clone(),
                    token,
                    deadline,
                    granted,
                ))
            }
            Reply::Answer(Response::Busy) => Err(AcquireError::Busy),
            Reply::Answer(Response::Timeout) => Err(AcquireError::Timeout),
            Reply::Answer(Response::Moved { leader }) => {
                Err(AcquireError::NotLeader { leader: Some(leader).filter(|l| !l.is_empty()) })
            }
            Reply::Answer(Response::Unknown) => {
                Err(indeterminate(IndeterminateCause::ServerUnknown, sent_at, wait_sent, None))
            }
            Reply::Answer(Response::Error { code, message }) => Err(match code {
                ErrorCode::Overloaded => AcquireError::Overloaded,
                ErrorCode::Invalid => AcquireError::Invalid(message),
                other => AcquireError::Invalid(format!("server error {}: {message}", other.to_u8())),
            }),
            Reply::Answer(other) => {
                log::warn!("answer {other:?} to an ACQUIRE");
                Err(indeterminate(IndeterminateCause::ProtocolViolation, sent_at, wait_sent, None))
            }
            Reply::Lost => Err(indeterminate(IndeterminateCause::ConnectionLost, sent_at, wait_sent, None)),
            Reply::Unsent => Err(AcquireError::Unavailable { last_error: pool.last_error() }),
        }
    }

    /// Finds out, without sending the ACQUIRE again, whether an indeterminate
    /// acquire (`err`) holds its key after all.
    ///
    /// It first stops the client from releasing a grant of that acquire that still
    /// arrives, then waits until the window in which such a grant could still happen
    /// has passed — the acquire's send instant plus its wait plus the commit margin
    /// (a proposal a deposed leader made is settled by then: the server answers `U`
    /// 5 s after losing leadership, and a new leader commits or drops it before it
    /// serves) — and then QUERYs the leader (linearizable; `M` is followed).
    ///
    /// Returns [`Resolution::Held`] when the key's holder is the acquire's owner,
    /// [`Resolution::NotHeld`] otherwise, [`Resolution::Unknown`] when the window does
    /// not end within `timeout` or no leader answers. Blocks at most `timeout`.
    ///
    /// Safe only when the owner was not used for another acquire of the same key
    /// meanwhile (a holder with that owner could be that other grant): give each
    /// logical caller its own owner, e.g. [`Client::with_owner`] with a per-acquire
    /// suffix. Any other error than `Indeterminate` is definitive: `NotHeld`.
    pub fn resolve(&self, err: &AcquireError, timeout: Duration) -> Resolution {
        let AcquireError::Indeterminate(attempt) = err else {
            return Resolution::NotHeld;
        };
        let start = Instant::now();
        let end = start + timeout;
        if let Some(late_grant) = &attempt.late_grant {
            if !late_grant.disarm() {
                // The late G came and is being released: it is not the caller's.
                return Resolution::NotHeld;
            }
        }
        let settled = attempt.sent_at + attempt.wait + self.inner.commit_margin;
        if settled > end {
            return Resolution::Unknown;
        }
        self.inner.pool.sleep(settled.saturating_duration_since(Instant::now()));
        let asked = Instant::now();
        match self.query_until(&attempt.key, end) {
            Ok(Some(holder)) if holder.owner == attempt.owner => {
                let parts = LockParts {
                    key: attempt.key.clone(),
                    owner: attempt.owner.clone(),
                    token: holder.token,
                    deadline: asked + holder.remaining,
                    lease: attempt.lease,
                };
                Resolution::Held(self.adopt(parts))
            }
            Ok(_) => Resolution::NotHeld,
            Err(_) => Resolution::Unknown,
        }
    }

    /// Releases `key` held by this client's owner under `token`, through the release
    /// queue's bound, and waits for the outcome: the calling thread sends the RELEASE
    /// itself and retries it like the release worker does. Blocks at most
    /// [`RELEASE_DEADLINE`] (5 s).
    ///
    /// Use [`Lock::release`] when you have the handle; this is for a token kept
    /// elsewhere (the CLI's `release` command).
    pub fn release(&self, key: &str, token: u64) -> Result<ReleaseOutcome, ReleaseError> {
        self.release_as(&self.inner.owner, key, token)
    }

    /// [`Client::release`] under `owner` (a lock keeps the owner it was granted to).
    pub(crate) fn release_as(
        &self,
        owner: &str,
        key: &str,
        token: u64,
    ) -> Result<ReleaseOutcome, ReleaseError> {
        check_key(key).map_err(ReleaseError::Invalid)?;
        release::release_now(&self.inner.pool, key, owner, token)
    }

    /// Hands a release to the queue without waiting (what dropping a [`Lock`] does).
    pub(crate) fn release_in_background(&self, owner: &str, key: &str, token: u64) {
        let job = Job::new(key.to_owned(), owner.to_owned(), token, Origin::Dropped, None);
        if let Err(e) = self.inner.pool.enqueue_release(job) {
            log::warn!("dropped lock on {key:?} (token {token}) not released: {e}; its lease will end it");
        }
    }

    /// Who holds `key`, linearizably (answered by the leader). `None` when free.
    /// Blocks at most the request timeout (default 10 s).
    pub fn query(&self, key: &str) -> Result<Option<HolderInfo>, ClientError> {
        self.query_until(key, Instant::now() + self.inner.request_timeout)
    }

    fn query_until(&self, key: &str, deadline: Instant) -> Result<Option<HolderInfo>, ClientError> {
        check_key(key).map_err(ClientError::Invalid)?;
        let request = Request::Query { key: key.to_owned() };
        match self.call_until(&request, |_| true, deadline)? {
            Response::Free => Ok(None),
            Response::Holder { token, remaining_ms, waiters, owner } => Ok(Some(HolderInfo {
                owner,
                token,
                remaining: Duration::from_millis(u64::from(remaining_ms)),
                waiters,
            })),
            other => Err(unexpected(other)),
        }
    }

    /// The STATUS text (`name=value` lines, docs/protocol.md) of one node: the
    /// leader's when known, else any connected node's. Blocks at most the request
    /// timeout.
    pub fn status(&self) -> Result<String, ClientError> {
        match self.call(&Request::Status, |_| true)? {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// The STATUS text of the node at `addr`. An address the client dials uses its
    /// connection; any other gets a one-off connection. Blocks at most the request
    /// timeout (plus, for a one-off, 3 s per resolved address to connect and 5 s for
    /// the handshake).
    pub fn status_of(&self, addr: &str) -> Result<String, ClientError> {
        let dialed = self.inner.pool.route().slots.iter().any(|slot| slot.addr == addr);
        let response = if dialed {
            self.call(&Request::Status, |slot| slot.addr == addr)?
        } else {
            self.one_off(addr, &Request::Status)?
        };
        match response {
            Response::Status { text } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// `admin replace` (docs/operations.md): asks the leader to swap voter `old` for the node
    /// `new`, already started with `TICKETING_CLUSTER_STATE=join` and reachable at client
    /// address `new_addr`. Waits up to `timeout` for the change to commit and returns the
    /// leader's report. Follows `M` to the leader, and asks again when leadership moved
    /// during the change. Blocks at most `timeout` plus one connection's connect and
    /// handshake (8 s).
    pub fn replace_member(
        &self,
        old: u64,
        new: u64,
        new_addr: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let request = Request::Replace { old, new, addr: new_addr.to_owned() };
        let deadline = Instant::now() + timeout;
        let mut target: Option<String> = None;
        let mut last = ClientError::Unavailable;
        while Instant::now() < deadline {
            let candidates: Vec<String> = match &target {
                Some(leader) => vec![leader.clone()],
                None => self.known_addrs(),
            };
            target = None;
            for addr in candidates {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.one_off_within(&addr, &request, left) {
                    Ok(Response::Status { text }) => return Ok(text),
                    Ok(other) => return Err(unexpected(other)),
                    Err(ClientError::NotLeader { leader: Some(leader) }) => {
                        target = Some(leader);
                        break;
                    }
                    Err(ClientError::Refused(why)) if why.contains("stopped leading") => {
                        last = ClientError::Refused(why);
                        break;
                    }
                    Err(e @ (ClientError::Refused(_) | ClientError::Invalid(_))) => return Err(e),
                    Err(e) => last = e,
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last)
    }

    /// The addresses this client cannot connect to right now, each with why its last
    /// attempt failed (connection refused, the auth token, TLS, ...), for messages that
    /// name the cause. Empty when every address it tried is connected.
    pub fn connection_errors(&self) -> Vec<(String, String)> {
        self.inner.pool.connection_errors()
    }

    /// True while at least one connection to a node is up.
    pub fn is_connected(&self) -> bool {
        self.inner.pool.any_live()
    }

    /// `admin transfer-leader` (docs/operations.md): asks the leader to hand leadership
    /// to voter `target`, or (`None`) to the voter it chooses, and waits until another
    /// node leads. Returns the new leader as `ID@ADDR`. Follows `M` to the leader. Blocks
    /// at most `timeout` plus one connection's connect and handshake (8 s).
    pub fn transfer_leader(&self, target: Option<u64>, timeout: Duration) -> Result<String, ClientError> {
        let request = Request::TransferLeader { target };
        let deadline = Instant::now() + timeout;
        let mut at: Option<String> = None;
        let mut last = ClientError::Unavailable;
        while Instant::now() < deadline {
            let candidates: Vec<String> = match at.take() {
                Some(leader) => vec![leader],
                None => self.known_addrs(),
            };
            for addr in candidates {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.one_off_within(&addr, &request, left) {
                    Ok(Response::Status { text }) => {
                        let leader = text.lines().find_map(|l| l.strip_prefix("leader=")).unwrap_or("");
                        return Ok(leader.to_owned());
                    }
                    Ok(other) => return Err(unexpected(other)),
                    Err(ClientError::NotLeader { leader: Some(leader) }) => {
                        at = Some(leader);
                        break;
                    }
                    Err(e @ (ClientError::Refused(_) | ClientError::Invalid(_))) => return Err(e),
                    Err(e) => last = e,
                }
            }
            if at.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(last)
    }

    /// The admin op MEMBERS: the membership as a node sees it (the leader's connection
    /// first), as `name=value` lines (docs/protocol.md). Needs a client built with the
    /// operator secret; others get [`ClientError::Refused`]. Blocks at most the request
    /// timeout.
    pub fn members(&self) -> Result<String, ClientError> {
        match self.call(&Request::Members, |_| true)? {
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
        match self.call(&Request::TopKeys { n }, |_| true)? {
            Response::TopKeys { keys } => Ok(keys),
            other => Err(unexpected(other)),
        }
    }

    /// Round-trips a PING to one node and returns the time it took. Blocks at most the
    /// request timeout.
    pub fn ping(&self) -> Result<Duration, ClientError> {
        let start = Instant::now();
        match self.call(&Request::Ping, |_| true)? {
            Response::Pong => Ok(start.elapsed()),
            other => Err(unexpected(other)),
        }
    }

    /// Fault injection for tests: the next `count` request writes fail before their
    /// first byte reaches the socket (the socket is shut down for writing), exactly as
    /// a connection that broke between two requests.
    #[doc(hidden)]
    pub fn inject_write_failures(&self, count: usize) {
        self.inner.pool.faults.store(count, std::sync::atomic::Ordering::Release);
    }

    /// Every address the client knows: the leader's first, then the dialed ones, then
    /// the seeds.
    fn known_addrs(&self) -> Vec<String> {
        let route = self.inner.pool.route();
        let mut addrs: Vec<String> = route.hint.iter().cloned().collect();
        for addr in route.slots.iter().map(|s| &s.addr).chain(self.inner.addrs.iter()) {
            if !addrs.contains(addr) {
                addrs.push(addr.clone());
            }
        }
        addrs
    }

    /// For tests: the next request id the client will try (ids still pending on a
    /// connection are skipped).
    #[doc(hidden)]
    pub fn set_next_request_id(&self, id: u32) {
        self.inner.pool.ids.store(id, std::sync::atomic::Ordering::Release);
    }

    /// Sends a read-only request and waits for its answer. Read-only requests are safe
    /// to send again, so a lost connection or an `M` means another try within the
    /// budget (after an `M`, at the leader it named).
    fn call(&self, request: &Request, accept: impl Fn(&pool::Slot) -> bool) -> Result<Response, ClientError> {
        self.call_until(request, accept, Instant::now() + self.inner.request_timeout)
    }

    fn call_until(
        &self,
        request: &Request,
        accept: impl Fn(&pool::Slot) -> bool,
        deadline: Instant,
    ) -> Result<Response, ClientError> {
        let pool = &self.inner.pool;
        let mut sent_once = false;
        let mut moved: Option<ClientError> = None;
        let mut frame = Vec::with_capacity(64);
        loop {
            let Some(session) = pool.wait_among(deadline, &accept) else {
                return Err(match moved {
                    Some(e) => e,
                    None if sent_once => ClientError::NoAnswer,
                    None => ClientError::Unavailable,
                });
            };
            frame.clear();
            encode_request(&mut frame, 0, request);
            let cell = ReplyCell::fresh();
            let (id, sent_at) = match session.send(&pool.ids, Waiter::Caller(Arc::clone(&cell)), &mut frame) {
                Ok(sent) => sent,
                Err(SendError::NotSent) => continue,
            };
            sent_once = true;
            match cell.wait(Some(deadline)) {
                Some((_, Reply::Answer(response))) => match check_answer(response) {
                    Err(e @ ClientError::NotLeader { .. }) => {
                        // Not executed: ask again where the `M` pointed (the reader moved
                        // the hint). With no leader named, pause: an election is running.
                        if matches!(e, ClientError::NotLeader { leader: None }) {
                            pool.sleep(MOVED_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
                        }
                        moved = Some(e);
                    }
                    other => return other,
                },
                Some((_, Reply::Lost | Reply::Unsent)) => continue,
                None => {
                    session.forget(id);
                    if session.silent_since(sent_at) {
                        log::warn!(
                            "{} answered nothing within the request's budget; reconnecting",
                            session.peer
                        );
                        session.kill();
                    }
                    return Err(ClientError::NoAnswer);
                }
            }
        }
    }

    /// One request on a fresh connection to `addr`, closed afterwards.
    fn one_off(&self, addr: &str, request: &Request) -> Result<Response, ClientError> {
        self.one_off_within(addr, request, self.inner.request_timeout)
    }

    /// Like `one_off`, waiting up to `timeout` for the answer.
    fn one_off_within(
        &self,
        addr: &str,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let host = builder::host_of(addr)
            .ok_or_else(|| ClientError::Invalid(format!("address {addr:?} is not host:port")))?;
        let pool = &self.inner.pool;
        let (session, reader) = pool.connect(addr, &host).map_err(|e| {
            log::debug!("one-off connection: {e}");
            ClientError::Unavailable
        })?;
        let session: Arc<Session> = session;
        let mut frame = Vec::new();
        encode_request(&mut frame, 0, request);
        let cell = ReplyCell::fresh();
        if session.send(&pool.ids, Waiter::Caller(Arc::clone(&cell)), &mut frame).is_err() {
            return Err(ClientError::Unavailable);
        }
        let reader_session = Arc::clone(&session);
        let reader_pool = Arc::clone(pool);
        let thread = std::thread::spawn(move || {
            conn::read_loop(&reader_pool, &reader_session, reader);
        });
        let answer = cell.wait(Some(Instant::now() + timeout));
        session.kill();
        let _ = thread.join();
        match answer {
            Some((_, Reply::Answer(response))) => check_answer(response),
            _ => Err(ClientError::NoAnswer),
        }
    }
}

fn check_answer(response: Response) -> Result<Response, ClientError> {
    match response {
        Response::Moved { leader } => {
            Err(ClientError::NotLeader { leader: Some(leader).filter(|l| !l.is_empty()) })
        }
        Response::Error { code: ErrorCode::Overloaded, .. } => Err(ClientError::Overloaded),
        Response::Error { code: ErrorCode::Invalid, message } => Err(ClientError::Invalid(message)),
        Response::Error { code: ErrorCode::Refused, message } => Err(ClientError::Refused(message)),
        Response::Error { code, message } => {
            Err(ClientError::Protocol(format!("server error {}: {message}", code.to_u8())))
        }
        other => Ok(other),
    }
}

fn unexpected(response: Response) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {response:?}"))
}

/// The lease in whole seconds within docs/protocol.md §9, or why not.
fn lease_seconds(lease: Duration) -> Result<u8, String> {
    let secs = lease.as_secs();
    if lease.subsec_nanos() != 0 || secs < u64::from(LEASE_S_MIN) || secs > u64::from(LEASE_S_MAX) {
        return Err(format!("lease must be whole seconds in {LEASE_S_MIN}..={LEASE_S_MAX}, not {lease:?}"));
    }
    Ok(secs as u8)
}

fn check_key(key: &str) -> Result<(), String> {
    if key.len() < KEY_LEN_MIN || key.len() > KEY_LEN_MAX {
        return Err(format!("key is {} bytes; must be {KEY_LEN_MIN}..={KEY_LEN_MAX}", key.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_whole_seconds_in_range() {
        assert_eq!(lease_seconds(Duration::from_secs(1)), Ok(1));
        assert_eq!(lease_seconds(Duration::from_secs(250)), Ok(250));
        assert!(lease_seconds(Duration::ZERO).is_err());
        assert!(lease_seconds(Duration::from_secs(251)).is_err());
        assert!(lease_seconds(Duration::from_millis(1500)).is_err());
    }

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
