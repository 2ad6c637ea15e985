//! The ABI's declared values, each once: the kinds of a status, the causes of an
//! indeterminate acquire, the outcomes of a release and of a resolve, the log levels and
//! the limits of the arguments. include/ticketing.h is generated from these declarations
//! (scripts/c-header.sh), and the bindings read the names and flags from the library
//! (`ticketing_kind_name`, `ticketing_kind_is_definitive`, ...), so nothing here is typed
//! a second time anywhere.

use std::ffi::{c_char, c_int, CStr};

use crate::client::{IndeterminateCause, ReleaseOutcome};

/// The ABI version this header describes; ticketing_version() returns the library's. A
/// binding checks that the two are equal before its first call. Version 2: an acquire's
/// lease and wait are nanoseconds. Version 3: a *_name function returns NULL for a
/// number outside its table (the end of the table), never a name.
pub const TICKETING_ABI_VERSION: u32 = 3;

/// Nanoseconds in a second: an acquire's lease and wait are nanoseconds
/// (`30 * TICKETING_NS_PER_S`), so that every binding passes its own duration type
/// exactly and the library alone decides (a lease is whole seconds to the nanosecond,
/// a wait at most 300 s to the nanosecond).
pub const TICKETING_NS_PER_S: i64 = 1_000_000_000_i64;
/// Nanoseconds in a millisecond.
pub const TICKETING_NS_PER_MS: i64 = 1_000_000_i64;

/// Seed addresses a client takes at most (`addrs_len`); a larger count is
/// TICKETING_INVALID before anything is read.
pub const TICKETING_ADDRS_MAX: usize = 64;
/// Bytes of a client secret at most (`auth_token_len`); at least 16.
pub const TICKETING_AUTH_TOKEN_LEN_MAX: usize = 4096;
/// Bytes of a key at most (UTF-8; at least 1).
pub const TICKETING_KEY_LEN_MAX: usize = 255;
/// Bytes of an owner at most (UTF-8, no control characters; at least 1).
pub const TICKETING_OWNER_LEN_MAX: usize = 255;
/// The shortest lease, in seconds (leases are whole seconds).
pub const TICKETING_LEASE_S_MIN: i64 = 1;
/// The longest lease, in seconds.
pub const TICKETING_LEASE_S_MAX: i64 = 250;
/// The longest wait of an acquire, in seconds (0 is one immediate try).
pub const TICKETING_WAIT_S_MAX: i64 = 300;
/// Keys a hold names at most (`parts_len`, 1 to this).
pub const TICKETING_HOLD_KEYS_MAX: usize = 16;
/// The largest capacity of a key (its permits); a key's capacity is 1 to this, and
/// 1 is the key's exclusive lock.
pub const TICKETING_CAPACITY_MAX: u32 = 1_000_000;
/// Holds a pool answer lists at most (`ticketing_pool_info.holders`): the oldest.
pub const TICKETING_POOL_HOLDERS_MAX: usize = 8;
/// The longest `slice_ms` of ticketing_set_wait_check.
pub const TICKETING_WAIT_SLICE_MS_MAX: i64 = 60_000;

/// The status of a call: `TICKETING_OK`, or the kind of its error. Functions return it as
/// an `int`; ticketing_kind_name() gives its name.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ticketing_kind {
    /// Success.
    TICKETING_OK = 0,
    /// acquire: `B`, the key is held and the wait was 0 (or its queue is full). Not acquired.
    TICKETING_BUSY = 1,
    /// acquire: `T`, the wait ran out before this caller's turn. Not acquired.
    TICKETING_TIMEOUT = 2,
    /// `M`: the node does not lead and did not execute the request; the client sends the
    /// next one to the leader it named (ticketing_error_leader). Retry.
    TICKETING_NOT_LEADER = 3,
    /// A field out of its limits (docs/protocol.md), a NULL or non-UTF-8 argument, or `E 1`.
    TICKETING_INVALID = 4,
    /// `E 4`: the server has too many requests pending. Not executed; retry later.
    TICKETING_OVERLOADED = 5,
    /// No connection could take the request in time: nothing was sent. The message names
    /// the last connection error (refused, the auth token, TLS). Retry.
    TICKETING_UNAVAILABLE = 6,
    /// acquire: the request was sent and no definitive answer came (connection lost, `U`,
    /// no answer within wait + 5 s). The key MAY be held: do not enter the critical
    /// section. ticketing_resolve finds out later; when nobody resolves it, the client
    /// finds out by itself and releases a grant that happened anyway (no grant is left
    /// orphaned).
    TICKETING_INDETERMINATE = 7,
    /// query: sent, but no answer within the request timeout (10 s).
    TICKETING_NO_ANSWER = 8,
    /// release: no `R` or `N` within the release deadline (5 s). The key may still be held;
    /// the client keeps checking in the background and releases it once a leader answers,
    /// while its lease may run.
    TICKETING_UNCONFIRMED = 9,
    /// release: the release queue is full; nothing was sent. The lease ends the hold.
    TICKETING_QUEUE_FULL = 10,
    /// The server broke the protocol (an answer of the wrong kind).
    TICKETING_PROTOCOL = 11,
    /// `E 5`: a request refused by the server; the message says why.
    TICKETING_REFUSED = 12,
    /// ticketing_client_new: the configuration was refused (no address, a bad address, a
    /// short auth token, a bad owner, an unreadable CA file, ...).
    TICKETING_CONFIG = 13,
    /// A Rust panic was caught: a bug in libticketing (or the system refused a pipe or a
    /// thread).
    TICKETING_INTERNAL = 14,
    /// A future's operation was cancelled before it was sent (an acquire: not acquired), or
    /// a cancelled query or release (a release goes on in the background).
    TICKETING_CANCELLED = 15,
}

pub use ticketing_kind::*;

impl ticketing_kind {
    /// Every kind, in the order of its number.
    pub(crate) const ALL: [ticketing_kind; 16] = [
        TICKETING_OK,
        TICKETING_BUSY,
        TICKETING_TIMEOUT,
        TICKETING_NOT_LEADER,
        TICKETING_INVALID,
        TICKETING_OVERLOADED,
        TICKETING_UNAVAILABLE,
        TICKETING_INDETERMINATE,
        TICKETING_NO_ANSWER,
        TICKETING_UNCONFIRMED,
        TICKETING_QUEUE_FULL,
        TICKETING_PROTOCOL,
        TICKETING_REFUSED,
        TICKETING_CONFIG,
        TICKETING_INTERNAL,
        TICKETING_CANCELLED,
    ];

    /// Its name: the C name without `TICKETING_`, in lower case (`ticketing_kind_name`).
    pub fn name(self) -> &'static CStr {
        match self {
            TICKETING_OK => c"ok",
            TICKETING_BUSY => c"busy",
            TICKETING_TIMEOUT => c"timeout",
            TICKETING_NOT_LEADER => c"not_leader",
            TICKETING_INVALID => c"invalid",
            TICKETING_OVERLOADED => c"overloaded",
            TICKETING_UNAVAILABLE => c"unavailable",
            TICKETING_INDETERMINATE => c"indeterminate",
            TICKETING_NO_ANSWER => c"no_answer",
            TICKETING_UNCONFIRMED => c"unconfirmed",
            TICKETING_QUEUE_FULL => c"queue_full",
            TICKETING_PROTOCOL => c"protocol",
            TICKETING_REFUSED => c"refused",
            TICKETING_CONFIG => c"config",
            TICKETING_INTERNAL => c"internal",
            TICKETING_CANCELLED => c"cancelled",
        }
    }

    /// True when an error of this kind means the operation certainly did not take effect
    /// (an acquire: the key is not held by this call; a release: not sent); false for an
    /// indeterminate acquire, an unconfirmed release, a protocol violation and an internal
    /// error, whose effect is not known (`ticketing_kind_is_definitive`).
    pub fn is_definitive(self) -> bool {
        !matches!(
            self,
            TICKETING_INDETERMINATE | TICKETING_UNCONFIRMED | TICKETING_PROTOCOL | TICKETING_INTERNAL
        )
    }

    /// The kind numbered `n`, if any.
    pub fn of(n: c_int) -> Option<ticketing_kind> {
        usize::try_from(n).ok().and_then(|n| Self::ALL.get(n)).copied()
    }
}

impl PartialEq<ticketing_kind> for c_int {
    fn eq(&self, kind: &ticketing_kind) -> bool {
        *self == *kind as c_int
    }
}

impl From<ticketing_kind> for c_int {
    fn from(kind: ticketing_kind) -> c_int {
        kind as c_int
    }
}

/// Why an acquire is indeterminate (ticketing_error_cause); 0 for an error of another kind.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ticketing_cause {
    /// The connection broke after bytes were written.
    TICKETING_CAUSE_CONNECTION_LOST = 1,
    /// `U`: the server cannot tell whether it committed.
    TICKETING_CAUSE_SERVER_UNKNOWN = 2,
    /// Nothing within wait + the commit margin (5 s).
    TICKETING_CAUSE_NO_ANSWER = 3,
    /// An answer of the wrong kind.
    TICKETING_CAUSE_PROTOCOL_VIOLATION = 4,
    /// `G` came after the lease had run out locally.
    TICKETING_CAUSE_EXPIRED_ON_ARRIVAL = 5,
    /// Its future was cancelled after it was sent.
    TICKETING_CAUSE_CANCELLED = 6,
}

pub use ticketing_cause::*;

impl ticketing_cause {
    /// Every cause, in the order of its number (from 1).
    pub(crate) const ALL: [ticketing_cause; 6] = [
        TICKETING_CAUSE_CONNECTION_LOST,
        TICKETING_CAUSE_SERVER_UNKNOWN,
        TICKETING_CAUSE_NO_ANSWER,
        TICKETING_CAUSE_PROTOCOL_VIOLATION,
        TICKETING_CAUSE_EXPIRED_ON_ARRIVAL,
        TICKETING_CAUSE_CANCELLED,
    ];

    /// The cause of the client's own words.
    pub(crate) fn of(cause: IndeterminateCause) -> ticketing_cause {
        match cause {
            IndeterminateCause::ConnectionLost => TICKETING_CAUSE_CONNECTION_LOST,
            IndeterminateCause::ServerUnknown => TICKETING_CAUSE_SERVER_UNKNOWN,
            IndeterminateCause::NoAnswer => TICKETING_CAUSE_NO_ANSWER,
            IndeterminateCause::ProtocolViolation => TICKETING_CAUSE_PROTOCOL_VIOLATION,
            IndeterminateCause::ExpiredOnArrival => TICKETING_CAUSE_EXPIRED_ON_ARRIVAL,
            IndeterminateCause::Cancelled => TICKETING_CAUSE_CANCELLED,
        }
    }

    /// Its name: the C name without `TICKETING_CAUSE_`, in lower case (`ticketing_cause_name`).
    pub fn name(self) -> &'static CStr {
        match self {
            TICKETING_CAUSE_CONNECTION_LOST => c"connection_lost",
            TICKETING_CAUSE_SERVER_UNKNOWN => c"server_unknown",
            TICKETING_CAUSE_NO_ANSWER => c"no_answer",
            TICKETING_CAUSE_PROTOCOL_VIOLATION => c"protocol_violation",
            TICKETING_CAUSE_EXPIRED_ON_ARRIVAL => c"expired_on_arrival",
            TICKETING_CAUSE_CANCELLED => c"cancelled",
        }
    }
}

/// The outcome of a release (*outcome_out). All three mean the key is no longer held
/// under the lock's token.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ticketing_release_outcome {
    /// `R`: released; the next waiter has it, or it is free.
    TICKETING_RELEASED = 1,
    /// `N`: not the holder: the lease had already ended.
    TICKETING_NOT_HOLDER = 2,
    /// `N` after an earlier attempt's answer was lost.
    TICKETING_RELEASED_OR_EXPIRED = 3,
}

pub use ticketing_release_outcome::*;

impl ticketing_release_outcome {
    /// Every outcome, in the order of its number (from 1).
    pub(crate) const ALL: [ticketing_release_outcome; 3] =
        [TICKETING_RELEASED, TICKETING_NOT_HOLDER, TICKETING_RELEASED_OR_EXPIRED];

    /// The outcome of the client's own words.
    pub(crate) fn of(outcome: ReleaseOutcome) -> ticketing_release_outcome {
        match outcome {
            ReleaseOutcome::Released => TICKETING_RELEASED,
            ReleaseOutcome::NotHolder => TICKETING_NOT_HOLDER,
            ReleaseOutcome::ReleasedOrExpired => TICKETING_RELEASED_OR_EXPIRED,
        }
    }

    /// Its name: the C name without `TICKETING_`, in lower case.
    pub fn name(self) -> &'static CStr {
        match self {
            TICKETING_RELEASED => c"released",
            TICKETING_NOT_HOLDER => c"not_holder",
            TICKETING_RELEASED_OR_EXPIRED => c"released_or_expired",
        }
    }
}

/// The outcome of ticketing_resolve (*resolution_out).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ticketing_resolution {
    /// The grant did happen: *lock_out holds it.
    TICKETING_HELD = 1,
    /// Certainly not held by that acquire.
    TICKETING_NOT_HELD = 2,
    /// Still unknown: do not enter the critical section.
    TICKETING_UNKNOWN = 3,
}

pub use ticketing_resolution::*;

impl ticketing_resolution {
    /// Every resolution, in the order of its number (from 1).
    pub(crate) const ALL: [ticketing_resolution; 3] = [TICKETING_HELD, TICKETING_NOT_HELD, TICKETING_UNKNOWN];

    /// Its name: the C name without `TICKETING_`, in lower case.
    pub fn name(self) -> &'static CStr {
        match self {
            TICKETING_HELD => c"held",
            TICKETING_NOT_HELD => c"not_held",
            TICKETING_UNKNOWN => c"unknown",
        }
    }
}

/// The levels of ticketing_set_logger, as the Rust `log` crate's.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ticketing_log_level {
    /// No records.
    TICKETING_LOG_OFF = 0,
    TICKETING_LOG_ERROR = 1,
    TICKETING_LOG_WARN = 2,
    TICKETING_LOG_INFO = 3,
    TICKETING_LOG_DEBUG = 4,
    TICKETING_LOG_TRACE = 5,
}

pub use ticketing_log_level::*;

// The handles: opaque types C holds pointers to. The functions take the tagged values
// these stand for (`handle.rs`); cbindgen.toml names each function's pointer type after
// one of these.

/// A client: connections, the release queue and background threads, shared by every
/// thread that holds the pointer.
#[allow(non_camel_case_types)]
pub struct ticketing_client {
    _opaque: [u8; 0],
}

/// A held lock (key, owner, fencing token, local deadline).
#[allow(non_camel_case_types)]
pub struct ticketing_lock {
    _opaque: [u8; 0],
}

/// A failed call's kind, message and details. Immutable.
#[allow(non_camel_case_types)]
pub struct ticketing_error {
    _opaque: [u8; 0],
}

/// A pending operation: the outcome to come.
///
/// Each blocking call (ticketing_acquire, ...) has a twin that returns at once with a
/// future (ticketing_acquire_start, ...), the outcome
/// to come (FoundationDB's FDBFuture is the model). The program then blocks on it
/// (ticketing_future_block_until_ready), polls it (ticketing_future_is_ready), hears of it
/// once through a callback (ticketing_future_set_callback) or a completion queue
/// (ticketing_future_set_queue, for event loops), or cancels it; once it is ready, one
/// ticketing_future_get_* takes the outcome, and ticketing_future_free frees it. The
/// operation is the very one of the blocking call: the same routing, resend rule,
/// Indeterminate, deadlines. No thread is created or kept per future: 10 000 acquires
/// waiting in queues cost memory, not threads.
///
/// Starting. A ticketing_*_start function fails (returns an error kind, *future_out
/// NULL) only when its arguments are refused before anything starts — TICKETING_INVALID:
/// NULL, not UTF-8, out of range, the lock already released or being released — and
/// then nothing was sent. Otherwise it returns TICKETING_OK with a new future, which
/// may already be ready (no server can be used, the release queue is full). Starting
/// does no network I/O: a thread of the client writes the request, so the caller may be
/// an event loop.
///
/// Outcomes. ticketing_future_get_lock (acquire), _get_release (both releases),
/// _get_query and _get_resolve return what the blocking call returns, with the same
/// out-parameters, once: the outcome is taken by the first get (a lock handle is the
/// caller's then), and a second get is TICKETING_INVALID, as is a get before the future
/// is ready or the get of another operation's future.
///
/// Cancelling. ticketing_future_cancel stops waiting and makes the future ready at once
/// (its callback runs, possibly on the calling thread before cancel returns): an acquire
/// not yet put on a connection ends TICKETING_CANCELLED (nothing sent, not acquired); an
/// acquire already sent ends TICKETING_INDETERMINATE with cause TICKETING_CAUSE_CANCELLED:
/// it is never sent again, and if the server grants it anyway the client releases that
/// grant by itself (the no-orphan rule), unless ticketing_resolve adopts it first. A query
/// ends TICKETING_CANCELLED; a resolve ends with *resolution_out TICKETING_UNKNOWN (the
/// client's background check goes on); a release goes on in the background (its 5 s
/// deadline, then the client's own check) and its future ends TICKETING_CANCELLED; the
/// lock handle is releasable again (a later release answered `N` reports
/// TICKETING_RELEASED_OR_EXPIRED). Freeing a future that is not ready cancels it.
///
/// Callbacks. A future calls its callback exactly once, when it becomes ready: on a
/// thread of the client (a connection's reader, its timer thread), or on the thread that
/// set the callback — before ticketing_future_set_callback returns — when it is ready
/// already, or on the thread that cancels it. Never while the client holds a lock of its
/// own. The callback must not block: while it runs, that client thread reads nothing
/// else. It may call any function that never blocks (ticketing_future_get_*,
/// ticketing_future_free of its own future, ticketing_*_start, ticketing_lock_free, ...);
/// never a blocking call or ticketing_future_block_until_ready. A program whose
/// callbacks need its own lock (an interpreter's global lock) uses a queue instead.
///
/// Queues. A completion queue gives a program its ready futures as tags it chose,
/// through a file descriptor its event loop watches: no program code runs on the
/// client's threads. The descriptor is readable exactly while tags wait; never read or
/// write it, take the tags with ticketing_queue_take. One queue serves any number of
/// futures, of any client.
#[allow(non_camel_case_types)]
pub struct ticketing_future {
    _opaque: [u8; 0],
}

/// Where ready futures leave their tags.
#[allow(non_camel_case_types)]
pub struct ticketing_queue {
    _opaque: [u8; 0],
}

/// Every name of a numbered table that starts at `first`: `name(n)` for a number of
/// it, NULL for any other — unambiguous, where a name would not be ("unknown" is a
/// resolution's), so a binding reads a table by asking from `first` until NULL.
pub(crate) fn name_of<T: Copy>(
    all: &[T],
    first: c_int,
    n: c_int,
    name: impl Fn(T) -> &'static CStr,
) -> *const c_char {
    n.checked_sub(first)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| all.get(i))
        .map_or(std::ptr::null(), |v| name(*v).as_ptr())
}
