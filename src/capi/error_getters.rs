//! The error handle's functions (`ticketing_error_*`): reading a failure's kind,
//! message and details, and freeing it.

use std::ffi::{c_char, c_int};
use std::ptr;

use super::abi::ticketing_error;
use super::abi::TICKETING_INVALID;
use super::boundary::getter;
use super::handle;

/// The kind: one of the TICKETING_* kinds above (never TICKETING_OK).
/// TICKETING_INVALID if error is NULL.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_kind(error: *const ticketing_error) -> c_int {
    unsafe { handle::peek(error) }.map_or(TICKETING_INVALID as c_int, |e| e.kind as c_int)
}

/// What happened and what to do, in words (the Rust error's Display). Valid until the
/// error is freed.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_message(error: *const ticketing_error) -> *const c_char {
    unsafe { handle::peek(error) }.map_or(ptr::null(), |e| e.message.as_ptr())
}

/// For TICKETING_INDETERMINATE: one of the TICKETING_CAUSE_* values
/// (AcquireError::indeterminate_cause); 0 for other kinds.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_cause(error: *const ticketing_error) -> c_int {
    unsafe { handle::peek(error) }.map_or(0, |e| e.cause)
}

/// For TICKETING_NOT_LEADER: the leader's client address when the node knew it; NULL
/// otherwise. Valid until the error is freed.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_leader(error: *const ticketing_error) -> *const c_char {
    unsafe { handle::peek(error) }.and_then(|e| e.leader.as_ref()).map_or(ptr::null(), |l| l.as_ptr())
}

/// 1 when the request was certainly not executed and a new try soon may succeed
/// (NOT_LEADER, OVERLOADED, UNAVAILABLE: AcquireError::is_retryable,
/// ClientError::is_retryable); 0 otherwise.
///
/// # Safety
/// `error` is NULL or an error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_is_retryable(error: *const ticketing_error) -> c_int {
    unsafe { handle::peek(error) }.map_or(0, |e| c_int::from(e.retryable))
}

/// Frees the error.
///
/// # Safety
/// `error` is NULL or an error handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_free(error: *mut ticketing_error) {
    getter((), || unsafe { handle::free(error, "ticketing_error_free") })
}
