//! The C ABI over the official client: the functions of `include/ticketing.h`
//! (docs/c.md), exported by the crate's `cdylib` (libticketing.so) and `staticlib`
//! (libticketing.a).
//!
//! Each function wraps one call of [`crate::client`], named in its doc comment, and
//! adds only what a C boundary needs: checking handles, pointers and UTF-8, turning
//! durations in milliseconds into `Duration`s (the client checks their ranges),
//! mapping each error to a kind (`error.rs`), and catching panics. No request is built,
//! retried or timed here.
//!
//! Handles are tagged, reference-counted Rust values behind opaque pointers
//! (`handle.rs`): `ticketing_client` holds a [`Client`](crate::client::Client) (itself
//! `Send + Sync`), `ticketing_lock` a [`Lock`](crate::client::Lock) behind a mutex
//! (a release takes it out for its length), `ticketing_error` an immutable
//! [`ErrorHandle`]. The functions live beside their handle: `client.rs`, `lock.rs`,
//! `error.rs`; the logger and the panic hook in `logging.rs`.
//!
//! Each operation (acquire, the two releases, query, resolve) is written once, in
//! `operation.rs`: its arguments, its start, what its outcome puts out. Its future's
//! start and getter (`future.rs`) and its blocking call (`blocking.rs`) are made of
//! those, and a blocking call is its future started and waited for in the one place a
//! thread waits (`future.rs`), so a blocking call and its future cannot differ. The
//! counted and multi-key hold (`hold.rs`) and the pool read (`pool.rs`) are built the
//! same way from the same pieces, each in a file of its own with its C types.

// The declared values first, then the functions in the order the header shows them.
mod abi;

mod client;

mod blocking;

mod future;

mod operation;

mod queue;

mod lock;

mod hold;

mod pool;

mod error_getters;

mod host;

// What the functions share.
mod boundary;
mod error;
mod handle;
mod logging;
#[cfg(test)]
mod tests;

use std::ffi::{c_char, c_int, CStr};

pub use abi::*;
pub use blocking::*;
pub use client::*;
pub use error::*;
pub use error_getters::*;
pub use future::*;
#[doc(hidden)]
pub use handle::Tagged;
pub use hold::*;
pub use host::*;
pub use lock::*;
pub use pool::*;
pub use queue::*;

/// The library's ABI version: TICKETING_ABI_VERSION of the header it was built with.
#[no_mangle]
pub extern "C" fn ticketing_version() -> u32 {
    TICKETING_ABI_VERSION
}

/// The library's release, e.g. "0.2.0" (the crate's version). Static string.
#[no_mangle]
pub extern "C" fn ticketing_version_string() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

/// The name of a status or error kind: "ok", "busy", "timeout", "not_leader", "invalid",
/// "overloaded", "unavailable", "indeterminate", "no_answer", "unconfirmed",
/// "queue_full", "protocol", "refused", "config", "internal", "cancelled". Static
/// string.
///
/// Every *_name function (this one, ticketing_cause_name,
/// ticketing_release_outcome_name, ticketing_resolution_name) returns NULL for a number
/// outside its table, and a name for each number in it, without a gap: kinds from 0,
/// the others from 1. A binding reads a table by asking from its first number until
/// NULL, so a value added to the library reaches it with no edit.
#[no_mangle]
pub extern "C" fn ticketing_kind_name(kind: c_int) -> *const c_char {
    name_of(&ticketing_kind::ALL, 0, kind, ticketing_kind::name)
}

/// 1 when an error of this kind means the operation certainly did not take effect (an
/// acquire: the key is NOT held by this call; a release: not sent), 0 when its effect is
/// not known (TICKETING_INDETERMINATE, TICKETING_UNCONFIRMED, TICKETING_PROTOCOL,
/// TICKETING_INTERNAL), for TICKETING_OK and for any other number. A binding reads it
/// for every kind rather than keeping a table of its own.
#[no_mangle]
pub extern "C" fn ticketing_kind_is_definitive(kind: c_int) -> c_int {
    ticketing_kind::of(kind).map_or(0, |k| c_int::from(k != TICKETING_OK && k.is_definitive()))
}

/// The name of a TICKETING_CAUSE_* value: "connection_lost", "server_unknown",
/// "no_answer", "protocol_violation", "expired_on_arrival", "cancelled"; NULL for any
/// other number (0: not indeterminate). Static string.
#[no_mangle]
pub extern "C" fn ticketing_cause_name(cause: c_int) -> *const c_char {
    name_of(&ticketing_cause::ALL, 1, cause, ticketing_cause::name)
}

/// The name of a release outcome: "released", "not_holder", "released_or_expired";
/// NULL for any other number. Static string.
#[no_mangle]
pub extern "C" fn ticketing_release_outcome_name(outcome: c_int) -> *const c_char {
    name_of(&ticketing_release_outcome::ALL, 1, outcome, ticketing_release_outcome::name)
}

/// The name of a resolution: "held", "not_held", "unknown" (TICKETING_UNKNOWN, a
/// resolution like the others); NULL for any other number. Static string.
#[no_mangle]
pub extern "C" fn ticketing_resolution_name(resolution: c_int) -> *const c_char {
    name_of(&ticketing_resolution::ALL, 1, resolution, ticketing_resolution::name)
}
