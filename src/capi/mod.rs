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

mod boundary;
mod client;
mod error;
mod error_getters;
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
use std::ptr;

use boundary::guard;

pub use client::*;
pub use error::*;
pub use error_getters::*;
pub use future::*;
#[doc(hidden)]
pub use handle::{ErrorPtr, Tagged};
pub use lock::*;
pub use queue::*;

/// `TICKETING_ABI_VERSION` of include/ticketing.h.
pub const ABI_VERSION: u32 = 1;

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

/// `ticketing_wait_check_fn`: `(ctx) -> int`; nonzero stops the wait.
pub type WaitCheckFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Longest `slice_ms` of `ticketing_set_wait_check`.
pub const WAIT_SLICE_MS_MAX: i64 = 60_000;

/// `ticketing_set_wait_check`: the calling thread's blocking calls that wait longer
/// than `slice_ms` call `check(ctx)` every `slice_ms`; nonzero cancels the operation
/// and ends the call with its cancelled outcome. NULL removes the check.
///
/// # Safety
/// `check` is NULL or a function that may be called with `ctx` on this thread, until
/// a later call on it replaces it.
#[no_mangle]
pub unsafe extern "C" fn ticketing_set_wait_check(
    check: Option<WaitCheckFn>,
    ctx: *mut c_void,
    slice_ms: i64,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let Some(check) = check else {
            crate::client::set_wait_check(None);
            return Ok(());
        };
        if !(1..=WAIT_SLICE_MS_MAX).contains(&slice_ms) {
            return Err(Failure::invalid(format!("slice_ms is {slice_ms}; must be 1..={WAIT_SLICE_MS_MAX}")));
        }
        crate::client::set_wait_check(Some(crate::client::WaitCheck {
            // SAFETY: the host's function with its own context, on this thread (header
            // contract).
            check: Box::new(move || unsafe { check(ctx) } != 0),
            slice: std::time::Duration::from_millis(slice_ms as u64),
        }));
        Ok(())
    })
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
