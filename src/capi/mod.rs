//! The C ABI over the official client: the functions of `include/ticketing.h`
//! (docs/c.md), exported by the crate's `cdylib` (libticketing.so) and `staticlib`
//! (libticketing.a).
//!
//! Each function wraps one call of [`crate::client`], named in its doc comment, and
//! adds only what a C boundary needs: checking handles, pointers and UTF-8, turning
//! durations in milliseconds into [`Duration`]s (the client checks their ranges),
//! mapping each error to a kind (`error.rs`), and catching panics. No request is built,
//! retried or timed here.
//!
//! Handles are tagged, reference-counted Rust values behind opaque pointers
//! (`handle.rs`): `ticketing_client` holds a [`Client`](crate::client::Client) (itself
//! `Send + Sync`), `ticketing_lock` a [`Lock`](crate::client::Lock) behind a mutex
//! (a release takes it out for its length), `ticketing_error` an immutable
//! [`ErrorHandle`]. The functions live beside their handle: `client.rs`, `lock.rs`,
//! `error.rs`; the logger and the panic hook in `logging.rs`.

mod client;
mod error;
mod future;
mod handle;
#[cfg(test)]
mod header_check;
mod lock;
mod logging;
mod queue;
#[cfg(test)]
mod tests;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::Duration;

pub use client::*;
pub use error::*;
pub use future::*;
pub use handle::Tagged;
pub use lock::*;
pub use queue::*;

/// `TICKETING_ABI_VERSION` of include/ticketing.h.
pub const ABI_VERSION: u32 = 1;

/// Seed addresses a client takes at most (`ticketing_client_new`'s `addrs_len`).
pub const ADDRS_MAX: usize = 64;
/// Bytes of a client secret at most (`auth_token_len`).
pub const AUTH_TOKEN_LEN_MAX: usize = 4096;

/// Runs `body` for a function that returns a status: a panic becomes
/// `TICKETING_INTERNAL` (logged, never printed), and a failure is handed out through
/// `error_out` when the caller asked for it.
fn guard(error_out: *mut *mut ErrorPtr, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    logging::quiet_panics();
    let result = logging::in_call(|| catch_unwind(AssertUnwindSafe(body)))
        .unwrap_or_else(|panic| Err(Failure::panic(&*panic)));
    let (kind, failure) = match result {
        Ok(()) => (TICKETING_OK, None),
        Err(failure) => (failure.kind, Some(failure)),
    };
    if !error_out.is_null() {
        let handle = failure.map_or(ptr::null_mut(), |f| handle::into_raw(ErrorHandle::from(f)));
        // SAFETY: the caller passes a valid `ticketing_error **` or NULL (header rules).
        unsafe { *error_out = handle };
    }
    kind
}

/// Runs a getter: a panic gives `fallback`.
fn getter<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    logging::quiet_panics();
    logging::in_call(|| catch_unwind(AssertUnwindSafe(body))).unwrap_or(fallback)
}

/// The UTF-8 string behind `p`, or why not.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid during the call.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// Like [`text`], with NULL meaning "not given".
///
/// # Safety
/// As [`text`].
unsafe fn optional_text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    // SAFETY: by the caller's contract.
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { text(p, what) }.map(Some)
    }
}

/// A non-negative duration in milliseconds; the client checks its range.
fn duration(ms: i64, what: &str) -> Result<Duration, Failure> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| Failure::invalid(format!("{what} is {ms} ms; it must not be negative")))
}

/// Writes `value` to `out` when `out` is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// `out`, or a failure naming it when it is NULL.
fn required<T>(out: *mut T, what: &str) -> Result<*mut T, Failure> {
    if out.is_null() {
        Err(Failure::invalid(format!("{what} is NULL")))
    } else {
        Ok(out)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `uint32_t ticketing_version(void)`: the ABI version, [`ABI_VERSION`].
#[no_mangle]
pub extern "C" fn ticketing_version() -> u32 {
    ABI_VERSION
}

/// `const char *ticketing_version_string(void)`: the crate's version.
#[no_mangle]
pub extern "C" fn ticketing_version_string() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

/// `const char *ticketing_kind_name(int kind)`.
#[no_mangle]
pub extern "C" fn ticketing_kind_name(kind: c_int) -> *const c_char {
    usize::try_from(kind).ok().and_then(|k| KIND_NAMES.get(k)).copied().unwrap_or(c"unknown").as_ptr()
}

/// `ticketing_set_logger`: the library's log records (and its caught panics) go to
/// `log_fn` from now on, up to `max_level`; NULL turns them off again.
///
/// # Safety
/// `log_fn` is NULL or a function that may be called from any thread with `ctx`, until
/// a later call replaces it; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_set_logger(
    log_fn: Option<logging::LogFn>,
    ctx: *mut c_void,
    max_level: c_int,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || logging::set_logger(log_fn, ctx, max_level))
}

/// `ticketing_test_panic`: for the library's own tests of the rule that a panic stays
/// off the host's standard error: panics in the calling thread's call, or on a thread
/// named as the client's own are, and reports it as `TICKETING_INTERNAL`.
#[no_mangle]
pub extern "C" fn ticketing_test_panic(on_client_thread: c_int) -> c_int {
    guard(ptr::null_mut(), || {
        if on_client_thread == 0 {
            panic!("a test panic (ticketing_test_panic, in the call)");
        }
        let thread = std::thread::Builder::new()
            .name("ticketing-test".into())
            .spawn(|| -> () { panic!("a test panic (ticketing_test_panic, on a client thread)") })
            .map_err(|e| Failure::invalid(format!("cannot start a thread: {e}")))?;
        thread.join().map_err(|panic| Failure::panic(&*panic))
    })
}
