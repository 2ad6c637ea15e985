//! The error handle's functions (`ticketing_error_*`): reading a failure's kind,
//! message and details, and freeing it.

use std::ffi::{c_char, c_int};
use std::ptr;

use super::boundary::getter;
use super::error::TICKETING_INVALID;
use super::handle::{self, ErrorPtr};

/// `ticketing_error_kind`.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_kind(error: *const ErrorPtr) -> c_int {
    unsafe { handle::peek(error) }.map_or(TICKETING_INVALID, |e| e.kind)
}

/// `ticketing_error_message`: the Rust error's `Display`.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_message(error: *const ErrorPtr) -> *const c_char {
    unsafe { handle::peek(error) }.map_or(ptr::null(), |e| e.message.as_ptr())
}

/// `ticketing_error_cause`: wraps [`AcquireError::indeterminate_cause`](crate::client::AcquireError::indeterminate_cause).
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_cause(error: *const ErrorPtr) -> c_int {
    unsafe { handle::peek(error) }.map_or(0, |e| e.cause)
}

/// `ticketing_error_leader`: the leader an `M` named.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_leader(error: *const ErrorPtr) -> *const c_char {
    unsafe { handle::peek(error) }.and_then(|e| e.leader.as_ref()).map_or(ptr::null(), |l| l.as_ptr())
}

/// `ticketing_error_is_retryable`: wraps `is_retryable` of the client's error.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_is_retryable(error: *const ErrorPtr) -> c_int {
    unsafe { handle::peek(error) }.map_or(0, |e| c_int::from(e.retryable))
}

/// `ticketing_error_free`.
///
/// # Safety
/// `error` is NULL or an error handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_free(error: *mut ErrorPtr) {
    getter((), || unsafe { handle::free(error, "ticketing_error_free") })
}
