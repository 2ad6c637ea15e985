//! What every function of the C ABI does at the boundary: catching panics, handing a
//! failure out through `error_out`, and reading C arguments (strings, durations,
//! out-pointers) into Rust values or a failure that names the argument.

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::Duration;

use super::abi::ticketing_error;
use super::abi::TICKETING_OK;
use super::error::{ErrorHandle, Failure};
use super::handle;
use super::logging;

/// Runs `body` for a function that returns a status: a panic becomes
/// `TICKETING_INTERNAL` (logged, never printed), and a failure is handed out through
/// `error_out` when the caller asked for it.
pub fn guard(
    error_out: *mut *mut ticketing_error,
    body: impl FnOnce() -> Result<(), Failure>,
) -> std::ffi::c_int {
    logging::quiet_panics();
    let result = logging::in_call(|| catch_unwind(AssertUnwindSafe(body)))
        .unwrap_or_else(|panic| Err(Failure::panic(&*panic)));
    let (kind, failure) = match result {
        Ok(()) => (TICKETING_OK, None),
        Err(failure) => (failure.kind, Some(failure)),
    };
    if !error_out.is_null() {
        let handle = match failure {
            None => ptr::null_mut(),
            // Not a new allocation: it may be a forked child's call.
            Some(f) if f.after_fork => ptr::addr_of!(handle::AFTER_FORK).cast_mut().cast(),
            Some(f) => handle::into_raw(ErrorHandle::from(f)),
        };
        // SAFETY: the caller passes a valid `ticketing_error **` or NULL (header rules).
        unsafe { *error_out = handle };
    }
    kind as std::ffi::c_int
}

/// Runs a getter: a panic gives `fallback`.
pub fn getter<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    logging::quiet_panics();
    logging::in_call(|| catch_unwind(AssertUnwindSafe(body))).unwrap_or(fallback)
}

/// The UTF-8 string behind `p`, or why not.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid during the call.
pub unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
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
pub unsafe fn optional_text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    // SAFETY: by the caller's contract.
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { text(p, what) }.map(Some)
    }
}

/// A lease or a wait in nanoseconds, as every binding passes them (exact for its own
/// duration type): the one conversion; the client checks the range (a lease is whole
/// seconds, a wait at most 300 s, both to the nanosecond). `what` is the caller's word.
pub fn duration_ns(ns: i64, what: &str) -> Result<Duration, Failure> {
    u64::try_from(ns)
        .map(Duration::from_nanos)
        .map_err(|_| Failure::invalid(format!("{what} is {} s; it must not be negative", ns as f64 / 1e9)))
}

/// A local timeout (a close's, a resolve's, a wait's) in milliseconds, not negative; the
/// client checks its range. Every binding rounds its own finer duration up to it
/// (docs/architecture.md, "Durations across the ABI").
pub fn duration(ms: i64, what: &str) -> Result<Duration, Failure> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| Failure::invalid(format!("{what} is {ms} ms; it must not be negative")))
}

/// Writes `value` to `out` when `out` is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// `out`, or a failure naming it when it is NULL.
pub fn required<T>(out: *mut T, what: &str) -> Result<*mut T, Failure> {
    if out.is_null() {
        Err(Failure::invalid(format!("{what} is NULL")))
    } else {
        Ok(out)
    }
}

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
