//! The client's error types. Each one says what happened to the request on the
//! server, because that is what the caller must decide on: an [`AcquireError`] is
//! either *definitive* (the lock is certainly not held by this call) or
//! [`AcquireError::Indeterminate`] (it may be held; do not enter the critical section).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::ids::OrphanId;
use crate::proto::frame::HoldPart;

/// Why an ACQUIRE got no definitive answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndeterminateCause {
    /// The connection broke after bytes of the request were written.
    ConnectionLost,
    /// The server answered `U`: proposed, but it cannot learn whether it committed.
    ServerUnknown,
    /// No answer within the wait plus the commit margin.
    NoAnswer,
    /// The server broke the protocol (an answer of the wrong kind).
    ProtocolViolation,
    /// The `G` arrived after the lock's local deadline had passed: the lease may have
    /// ended already. The client releases that grant in the background.
    ExpiredOnArrival,
    /// The caller cancelled the acquire after it was sent (a cancelled future or task).
    /// Nothing is sent again; a grant that happens anyway is released by the client
    /// (docs/client.md, "No grant left orphaned").
    Cancelled,
}

impl fmt::Display for IndeterminateCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IndeterminateCause::ConnectionLost => "the connection broke after the request was sent",
            IndeterminateCause::ServerUnknown => "the server cannot tell whether the request committed (U)",
            IndeterminateCause::NoAnswer => "no answer within the wait plus the commit margin",
            IndeterminateCause::ProtocolViolation => "the server sent an answer of the wrong kind",
            IndeterminateCause::ExpiredOnArrival => {
                "the grant arrived after its lease had run out locally; it is being released"
            }
            IndeterminateCause::Cancelled => {
                "cancelled after the request was sent; a grant that happens anyway is released by the client"
            }
        })
    }
}

/// An ACQUIRE whose outcome is unknown: why, and what
/// [`Client::resolve`](super::Client::resolve) needs to find out later without sending
/// it again.
#[derive(Clone, Debug)]
pub struct Indeterminate {
    pub(crate) cause: IndeterminateCause,
    // Boxed and shared strings keep `AcquireError` (and every `Result` of an acquire)
    // small.
    pub(crate) key: Box<str>,
    pub(crate) owner: Arc<str>,
    /// The lease asked for, in whole seconds (1 to 250), which keeps the error small.
    pub(crate) lease_s: u8,
    pub(crate) wait: Duration,
    pub(crate) sent_at: Instant,
    /// When a grant of it can no longer happen: the instant its frame was handed to
    /// the socket, plus its wait, plus the commit margin.
    pub(crate) settle_at: Instant,
    /// The client's record of it (None when its grant is already being released).
    pub(crate) orphan: Option<OrphanId>,
    /// A hold's keys, counts and capacities (None for an acquire): a lock `resolve`
    /// finds is the whole hold. A thin pointer keeps the error small.
    pub(crate) parts: Option<Arc<Vec<HoldPart>>>,
}

impl Indeterminate {
    /// Why no definitive answer came.
    pub fn cause(&self) -> IndeterminateCause {
        self.cause
    }
    /// The key the ACQUIRE asked for.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The owner it was sent with.
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// The lease it asked for.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_s))
    }
    /// The wait it was sent with.
    pub fn wait(&self) -> Duration {
        self.wait
    }
    /// The instant taken just before its first byte was written.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }
    /// When a grant of it can no longer happen (the frame's write, plus its wait,
    /// plus the commit margin): [`Client::resolve`](super::Client::resolve) QUERYs
    /// then, and so does the client itself when nobody resolves it.
    pub fn settle_at(&self) -> Instant {
        self.settle_at
    }
}

/// Equal when cause, key, owner, lease and wait are (the instants and the
/// orphan record are not compared).
impl PartialEq for Indeterminate {
    fn eq(&self, other: &Self) -> bool {
        (self.cause, &self.key, &self.owner, self.lease_s, self.wait)
            == (other.cause, &other.key, &other.owner, other.lease_s, other.wait)
    }
}

impl Eq for Indeterminate {}

impl fmt::Display for Indeterminate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cause)
    }
}

/// Why [`Client::acquire`](super::Client::acquire) did not return a lock.
///
/// Every variant except [`Indeterminate`](AcquireError::Indeterminate) is
/// *definitive*: this call certainly does not hold the key. `Indeterminate` means the
/// request reached a server and its outcome is unknown: the key may be held under a
/// token this process never learned. The caller MUST NOT enter the critical section;
/// the server's lease is the safety net (and a grant that arrives late is released by
/// the client's release queue).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// `B`: the key is held and the wait was 0, or its wait queue is full.
    Busy,
    /// `T`: the wait elapsed before this caller's turn; it left the queue.
    Timeout,
    /// `M`: the node is not the leader and did not execute the request. The client
    /// remembers the hint and sends the next request to that leader.
    NotLeader {
        /// The leader's client address, when the node knew it.
        leader: Option<String>,
    },
    /// A field is outside the limits of docs/protocol.md §9 (checked before any I/O), or the server
    /// answered `E 1`.
    Invalid(String),
    /// `E 4`: the server has too many requests pending; try again later.
    Overloaded,
    /// No connection could take the request within the wait budget: nothing was sent.
    /// With `lasting`, it ended at once: every connection failed with a mistake that
    /// trying again cannot fix (the secret, a certificate, TLS on one side only, a
    /// port of another kind).
    Unavailable {
        /// Why the last connection attempt failed, when one did (refused, TLS, the
        /// server rejected the auth token, ...).
        last_error: Option<String>,
        /// Trying again cannot help until the configuration is fixed.
        lasting: bool,
    },
    /// The request was (at least partly) sent and its outcome is unknown.
    /// [`Client::resolve`](super::Client::resolve) can find out later.
    Indeterminate(Indeterminate),
    /// The caller cancelled the acquire before it was put on a connection: nothing was
    /// sent (a cancelled acquire that was sent is `Indeterminate` with cause
    /// [`IndeterminateCause::Cancelled`]).
    Cancelled,
    /// Called in a process forked after the client was made: refused before anything
    /// was touched (the sockets are the parent's). The text says what to do.
    Forked(String),
}

impl AcquireError {
    /// True when the key is certainly not held by this call: everything except
    /// [`AcquireError::Indeterminate`].
    pub fn is_definitive(&self) -> bool {
        !matches!(self, AcquireError::Indeterminate(_))
    }

    /// True for `Busy` and `Timeout`: the key is held by someone else.
    pub fn is_contended(&self) -> bool {
        matches!(self, AcquireError::Busy | AcquireError::Timeout)
    }

    /// The cause, for an [`AcquireError::Indeterminate`].
    pub fn indeterminate_cause(&self) -> Option<IndeterminateCause> {
        match self {
            AcquireError::Indeterminate(i) => Some(i.cause),
            _ => None,
        }
    }

    /// True when the request was certainly not executed and trying again soon may
    /// succeed: `NotLeader` (the client now routes to the leader it named),
    /// `Overloaded`, `Unavailable` unless `lasting`.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            AcquireError::NotLeader { .. }
                | AcquireError::Overloaded
                | AcquireError::Unavailable { lasting: false, .. }
        )
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Busy => write!(f, "busy: the key is held (or its queue is full)"),
            AcquireError::Timeout => write!(f, "timeout: the wait elapsed before our turn"),
            AcquireError::NotLeader { leader: Some(l) } => {
                write!(f, "not the leader (leader is {l}); the request was not executed")
            }
            AcquireError::NotLeader { leader: None } => {
                write!(f, "not the leader (leader unknown); the request was not executed")
            }
            AcquireError::Invalid(why) => write!(f, "invalid request: {why}"),
            AcquireError::Overloaded => write!(f, "server overloaded; try again later"),
            AcquireError::Unavailable { last_error, lasting } => unavailable(f, last_error, *lasting),
            AcquireError::Indeterminate(cause) => {
                write!(f, "indeterminate: {cause}; the lock may be held, do not enter the critical section")
            }
            AcquireError::Cancelled => write!(f, "cancelled before it was sent: not acquired"),
            AcquireError::Forked(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for AcquireError {}

/// The text of every `Unavailable`: nothing was sent, and why no connection could
/// take the request.
fn unavailable(f: &mut fmt::Formatter<'_>, last_error: &Option<String>, lasting: bool) -> fmt::Result {
    if lasting {
        write!(f, "no server can be used: nothing was sent, and trying again will not help until the last connection error is fixed")?;
    } else {
        write!(
            f,
            "no server reachable in time: nothing was sent (check the addresses, the auth token and that a server runs)"
        )?;
    }
    match last_error {
        Some(e) => write!(f, "; last connection error: {e}"),
        None => Ok(()),
    }
}

/// Why a release was not confirmed.
///
/// A release is reported successful only after the server answered `R` (or `N`, as
/// [`ReleaseOutcome::NotHolder`](super::ReleaseOutcome::NotHolder)). Without either,
/// the lock may still be held until its lease ends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The release queue is full; nothing was enqueued. The lease will end the hold.
    QueueFull,
    /// No connection could take the release before its deadline, or (`lasting`) every
    /// connection failed with a mistake that trying again cannot fix: it was never
    /// sent. The key stays held until its lease ends (the client keeps an orphan
    /// record, as for `Unconfirmed`).
    Unavailable {
        /// Why the last connection attempt failed, when one did.
        last_error: Option<String>,
        /// Trying again cannot help until the configuration is fixed.
        lasting: bool,
    },
    /// No `R` or `N` within the release deadline (5 s from enqueue). The key may still
    /// be held; the client keeps an orphan record of the token and releases it once a
    /// leader answers, while its lease may run (docs/client.md, "Releases").
    Unconfirmed,
    /// The server answered `E 1`: the key or owner is outside the limits of docs/protocol.md §9.
    Invalid(String),
    /// The caller stopped waiting (a cancelled future or task): the release goes on in
    /// the background, under the same deadline and orphan record as a dropped lock's.
    Cancelled,
    /// Called in a process forked after the client was made: nothing was sent (the
    /// parent's own client releases its locks). The text says what to do.
    Forked(String),
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::QueueFull => write!(
                f,
                "release queue full; the release was not sent and the lock is held until its lease ends"
            ),
            ReleaseError::Unavailable { last_error, lasting } => {
                unavailable(f, last_error, *lasting)?;
                write!(f, "; the lock stays held until its lease ends")
            }
            ReleaseError::Unconfirmed => write!(
                f,
                "release not confirmed within its deadline; the lock may still be held (the client keeps \
                 checking and releases it once a leader answers, while its lease may run)"
            ),
            ReleaseError::Invalid(why) => write!(f, "invalid release: {why}"),
            ReleaseError::Cancelled => {
                write!(f, "cancelled: the caller stopped waiting; the release goes on in the background")
            }
            ReleaseError::Forked(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// Errors of the read-only requests (QUERY, STATUS, PING).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientError {
    /// No connection could take the request in time: nothing was sent. With
    /// `lasting`, it ended at once: every connection failed with a mistake that trying
    /// again cannot fix.
    Unavailable {
        /// Why the last connection attempt failed, when one did.
        last_error: Option<String>,
        /// Trying again cannot help until the configuration is fixed.
        lasting: bool,
    },
    /// The request was sent but no answer came in time (or the connection broke).
    NoAnswer,
    /// `M`: the node is not the leader and did not execute the request.
    NotLeader { leader: Option<String> },
    /// A field is outside the limits of docs/protocol.md §9, or the server answered `E 1`.
    Invalid(String),
    /// `E 4`: the server has too many requests pending.
    Overloaded,
    /// The server answered something the protocol does not allow here.
    Protocol(String),
    /// `E 5`: a membership change was refused; the text says why.
    Refused(String),
    /// The caller cancelled the request (a cancelled future or task); a read changes
    /// nothing on the server.
    Cancelled,
    /// Called in a process forked after the client was made: nothing was sent. The text
    /// says what to do.
    Forked(String),
}

impl ClientError {
    /// True when waiting longer might have helped (`NoAnswer`, `Unavailable` unless
    /// `lasting`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Unavailable { lasting: false, .. } | ClientError::NoAnswer)
    }

    /// True when the request was certainly not executed and trying again soon may
    /// succeed: `NotLeader`, `Overloaded`, `Unavailable` unless `lasting`.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClientError::NotLeader { .. }
                | ClientError::Overloaded
                | ClientError::Unavailable { lasting: false, .. }
        )
    }

    /// `Unavailable` with no cause known (a request that found no connection).
    pub(crate) fn unavailable() -> ClientError {
        ClientError::Unavailable { last_error: None, lasting: false }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Unavailable { last_error, lasting } => unavailable(f, last_error, *lasting),
            ClientError::NoAnswer => write!(f, "no answer in time"),
            ClientError::NotLeader { leader: Some(l) } => {
                write!(f, "not the leader (leader is {l})")
            }
            ClientError::NotLeader { leader: None } => write!(f, "not the leader (leader unknown)"),
            ClientError::Invalid(why) => write!(f, "invalid request: {why}"),
            ClientError::Overloaded => write!(f, "server overloaded; try again later"),
            ClientError::Protocol(why) => write!(f, "protocol error: {why}"),
            ClientError::Refused(why) => write!(f, "refused: {why}"),
            ClientError::Cancelled => write!(f, "cancelled"),
            ClientError::Forked(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ClientError {}

/// An answer of a kind the request does not allow.
pub(crate) fn unexpected(response: crate::proto::frame::Response) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {response:?}"))
}

/// Why [`ClientBuilder::build`](super::ClientBuilder::build) refused the configuration.
/// No I/O other than reading the named files happens before this is returned.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// No address was given.
    NoAddrs,
    /// An address is not `host:port`.
    BadAddr(String),
    /// No auth token was given.
    NoAuthToken,
    /// The auth token is shorter than 16 bytes.
    AuthTokenTooShort(usize),
    /// The owner is empty, longer than 255 bytes, or has control characters.
    BadOwner(String),
    /// A file (auth token or CA bundle) could not be read. `setting` names where the
    /// path came from: the environment variable, or the builder method.
    File { setting: &'static str, path: std::path::PathBuf, error: std::io::Error },
    /// The CA bundle has no usable certificate, or TLS could not be configured.
    Tls(String),
    /// A background thread could not be started (the process is out of threads).
    Thread(std::io::Error),
    /// A time setting (`request_timeout`, `commit_margin`, `idle_ping`) is out of range.
    Setting(String),
    /// The cluster name is not 1 to 63 ASCII letters, digits, `.`, `_` and `-`.
    BadClusterName(String),
}

/// How one caller spells the settings a refused configuration names: the Go module's
/// `Config.Addrs`, the Java builder's `authToken`, the C ABI's `owner` argument.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SettingWords {
    /// The seed addresses.
    pub(crate) addrs: &'static str,
    /// The client secret.
    pub(crate) auth_token: &'static str,
    /// The owner.
    pub(crate) owner: &'static str,
    /// The cluster's name.
    pub(crate) cluster_name: &'static str,
}

impl BuildError {
    /// The message, naming the setting to fix in `words` (a binding's own terms).
    pub(crate) fn in_words(&self, words: &SettingWords) -> String {
        Named(self, Some(words)).to_string()
    }
}

/// A [`BuildError`]'s message, naming its setting when the caller's words are known.
struct Named<'a>(&'a BuildError, Option<&'a SettingWords>);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // " (Config.Addrs)": the caller's name of a setting, when known.
        let setting = |name: fn(&SettingWords) -> &'static str| match self.1 {
            Some(words) => format!(" ({})", name(words)),
            None => String::new(),
        };
        match self.0 {
            BuildError::NoAddrs => match self.1 {
                Some(words) => write!(f, "no server address given in {}", words.addrs),
                None => write!(f, "no server address given"),
            },
            BuildError::BadAddr(a) => write!(f, "address {a:?}{} is not host:port", setting(|w| w.addrs)),
            BuildError::NoAuthToken => write!(
                f,
                "no auth token given: call ClientBuilder::auth_token (or auth_token_file) with the cluster's \
                 client secret (ClientBuilder::from_env reads TICKETING_AUTH_TOKEN or TICKETING_AUTH_TOKEN_FILE)"
            ),
            BuildError::AuthTokenTooShort(n) => {
                write!(f, "auth token is {n} bytes{}; at least 16 are required", setting(|w| w.auth_token))
            }
            BuildError::BadOwner(why) => write!(f, "bad owner{}: {why}", setting(|w| w.owner)),
            BuildError::File { setting, path, error } => {
                write!(f, "cannot read {} ({setting}): {error}", path.display())
            }
            BuildError::Tls(why) => write!(f, "TLS configuration: {why}"),
            BuildError::Thread(error) => write!(f, "cannot start a client thread: {error}"),
            BuildError::Setting(why) => write!(f, "bad setting: {why}"),
            BuildError::BadClusterName(why) => {
                write!(f, "bad cluster name{}: {why}", setting(|w| w.cluster_name))
            }
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Named(self, None).fmt(f)
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::File { error, .. } | BuildError::Thread(error) => Some(error),
            _ => None,
        }
    }
}
