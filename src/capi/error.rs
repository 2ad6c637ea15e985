//! The error kinds of the C ABI and the `ticketing_error` object: one mapping from each
//! client error to a kind, in one place, so every binding reports the same kind for the
//! same outcome.

use std::ffi::{c_int, CStr, CString};

use super::abi::*;
use crate::client::{AcquireError, BuildError, ClientError, ReleaseError};

/// A failed call, before it becomes a `ticketing_error` for the caller.
#[derive(Debug)]
#[doc(hidden)]
pub struct Failure {
    pub kind: ticketing_kind,
    pub message: String,
    pub leader: Option<String>,
    pub cause: c_int,
    pub retryable: bool,
    /// Kept for `ticketing_resolve`: an indeterminate acquire's state.
    pub acquire: Option<Box<AcquireError>>,
    /// A handle of the parent's used in a forked child: the caller gets
    /// [`AFTER_FORK`](super::handle::AFTER_FORK), nothing allocated.
    pub after_fork: bool,
}

impl Failure {
    fn plain(kind: ticketing_kind, message: String) -> Failure {
        Failure { kind, message, leader: None, cause: 0, retryable: false, acquire: None, after_fork: false }
    }

    /// A handle made before a fork, used in the child (made without allocating: the
    /// message is [`ErrorHandle::AFTER_FORK`]'s).
    pub fn after_fork() -> Failure {
        Failure { after_fork: true, ..Failure::plain(TICKETING_UNAVAILABLE, String::new()) }
    }

    /// A bad argument from the caller: nothing was sent.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::plain(TICKETING_INVALID, message.into())
    }

    /// A refused configuration (its message names the setting to fix).
    pub(crate) fn config(message: impl Into<String>) -> Failure {
        Failure::plain(TICKETING_CONFIG, message.into())
    }

    /// Something the library needed from the system failed (a pipe, a thread).
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::plain(TICKETING_INTERNAL, message.into())
    }

    /// A Rust panic caught at the boundary.
    pub fn panic(payload: &(dyn std::any::Any + Send)) -> Failure {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        Failure::plain(TICKETING_INTERNAL, format!("internal error in libticketing (a bug): {what}"))
    }
}

impl From<AcquireError> for Failure {
    fn from(e: AcquireError) -> Failure {
        let kind = match &e {
            AcquireError::Busy => TICKETING_BUSY,
            AcquireError::Timeout => TICKETING_TIMEOUT,
            AcquireError::NotLeader { .. } => TICKETING_NOT_LEADER,
            AcquireError::Invalid(_) => TICKETING_INVALID,
            AcquireError::Overloaded => TICKETING_OVERLOADED,
            AcquireError::Unavailable { .. } => TICKETING_UNAVAILABLE,
            AcquireError::Indeterminate(_) => TICKETING_INDETERMINATE,
            AcquireError::Cancelled => TICKETING_CANCELLED,
            // Not retryable (is_retryable says no): the message says what to do.
            AcquireError::Forked(_) => TICKETING_UNAVAILABLE,
        };
        let leader = match &e {
            AcquireError::NotLeader { leader } => leader.clone(),
            _ => None,
        };
        Failure {
            kind,
            message: e.to_string(),
            leader,
            cause: e.indeterminate_cause().map_or(0, |c| ticketing_cause::of(c) as c_int),
            retryable: e.is_retryable(),
            acquire: (kind == TICKETING_INDETERMINATE).then(|| Box::new(e)),
            after_fork: false,
        }
    }
}

impl From<ReleaseError> for Failure {
    fn from(e: ReleaseError) -> Failure {
        let kind = match &e {
            ReleaseError::QueueFull => TICKETING_QUEUE_FULL,
            ReleaseError::Unconfirmed => TICKETING_UNCONFIRMED,
            ReleaseError::Unavailable { .. } => TICKETING_UNAVAILABLE,
            ReleaseError::Invalid(_) => TICKETING_INVALID,
            ReleaseError::Cancelled => TICKETING_CANCELLED,
            ReleaseError::Forked(_) => TICKETING_UNAVAILABLE,
        };
        // Never sent, and a new try may get through (not a lasting mistake).
        let retryable = matches!(e, ReleaseError::Unavailable { lasting: false, .. });
        Failure { retryable, ..Failure::plain(kind, e.to_string()) }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        let kind = match &e {
            ClientError::Unavailable { .. } => TICKETING_UNAVAILABLE,
            ClientError::NoAnswer => TICKETING_NO_ANSWER,
            ClientError::NotLeader { .. } => TICKETING_NOT_LEADER,
            ClientError::Invalid(_) => TICKETING_INVALID,
            ClientError::Overloaded => TICKETING_OVERLOADED,
            ClientError::Protocol(_) => TICKETING_PROTOCOL,
            ClientError::Refused(_) => TICKETING_REFUSED,
            ClientError::Cancelled => TICKETING_CANCELLED,
            ClientError::Forked(_) => TICKETING_UNAVAILABLE,
        };
        let leader = match &e {
            ClientError::NotLeader { leader } => leader.clone(),
            _ => None,
        };
        Failure { leader, retryable: e.is_retryable(), ..Failure::plain(kind, e.to_string()) }
    }
}

impl From<BuildError> for Failure {
    fn from(e: BuildError) -> Failure {
        Failure::config(e.to_string())
    }
}

/// A C string of `text`; a NUL inside (a server's message could hold one) becomes U+FFFD.
pub(crate) fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{fffd}")).unwrap_or_default()
}

/// An error's message: made for the failure, or a fixed text.
#[doc(hidden)]
pub enum Message {
    Made(CString),
    Fixed(&'static CStr),
}

impl Message {
    pub fn as_ptr(&self) -> *const std::ffi::c_char {
        match self {
            Message::Made(text) => text.as_ptr(),
            Message::Fixed(text) => text.as_ptr(),
        }
    }
}

/// `ticketing_error`: what a failed call hands the caller.
#[doc(hidden)]
pub struct ErrorHandle {
    pub kind: ticketing_kind,
    pub message: Message,
    pub leader: Option<CString>,
    pub cause: c_int,
    pub retryable: bool,
    pub acquire: Option<Box<AcquireError>>,
}

impl ErrorHandle {
    /// The error of a call given a handle of the parent's in a forked child
    /// ([`AFTER_FORK`](super::handle::AFTER_FORK)). No process id in it: it is made
    /// once, before any fork.
    pub const AFTER_FORK: ErrorHandle = ErrorHandle {
        kind: TICKETING_UNAVAILABLE,
        message: Message::Fixed(
            c"this client was created in another process before a fork; this process cannot use it (nor a \
              lock, future or queue made before the fork): create a new client in this process, with its own \
              owner",
        ),
        leader: None,
        cause: 0,
        retryable: false,
        acquire: None,
    };
}

impl From<Failure> for ErrorHandle {
    fn from(f: Failure) -> ErrorHandle {
        ErrorHandle {
            kind: f.kind,
            message: Message::Made(c_string(&f.message)),
            leader: f.leader.as_deref().map(c_string),
            cause: f.cause,
            retryable: f.retryable,
            acquire: f.acquire,
        }
    }
}
