//! The blocking calls: acquire, resolve, release by token, query, and a lock's release.
//! Each is its operation's future started and waited for on the calling thread, in the
//! one place a thread waits ([`run`]), and read by its getter's own code
//! (`operation.rs`): a blocking call and its future cannot differ.

use std::ffi::{c_char, c_int};
use std::ptr;

use super::abi::*;
use super::boundary::{guard, put, required};
use super::client::Holder;
use super::future::run;
use super::operation;

/// Acquires `key` for lease_ns (whole seconds, 1..=250 s, in nanoseconds), queueing at
/// most wait_ns (0..=300 s in nanoseconds; 0 is one immediate try). Wraps
/// Client::acquire, which checks both: as every blocking call here, it is its future
/// (ticketing_acquire_start) started and waited for as
/// ticketing_future_block_until_ready waits, then read as ticketing_future_get_lock
/// reads it.
///
/// TICKETING_OK: *lock_out is the held lock (free it with ticketing_lock_free; release it
/// with ticketing_lock_release first, or freeing it releases it in the background).
/// Definitive, the key is NOT held by this call: TICKETING_BUSY, TICKETING_TIMEOUT,
/// TICKETING_NOT_LEADER, TICKETING_INVALID, TICKETING_OVERLOADED, TICKETING_UNAVAILABLE.
/// TICKETING_INDETERMINATE: it MAY be held; do not enter the critical section; keep the
/// error to pass to ticketing_resolve. lock_out must not be NULL.
///
/// Blocks at most max(wait, 3 s) to put the request on a connection, then what is left
/// of wait plus the commit margin (5 s) for the answer.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire(
    client: *const ticketing_client,
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let value = run(unsafe { operation::acquire(client, key, lease_ns, wait_ns) }?)?;
        unsafe { operation::put_lock(value, lock_out) }
    })
}

/// Finds out, without sending it again, whether the indeterminate acquire `error` (a
/// TICKETING_INDETERMINATE error from ticketing_acquire) holds its key after all. Wraps
/// Client::resolve (ticketing_resolve_start, waited for): it waits until the acquire's
/// grant can no longer happen (its send instant + its wait + 5 s), then asks the leader.
///
/// *resolution_out: TICKETING_HELD (*lock_out is the lock, adopted: free it as any
/// other), TICKETING_NOT_HELD, or TICKETING_UNKNOWN (not known within timeout_ms: do not
/// enter the critical section). Any other kind of error resolves as TICKETING_NOT_HELD.
/// Safe only when the acquire's owner did not acquire the same key meanwhile (see
/// ticketing_client_with_owner). resolution_out and lock_out must not be NULL.
/// Blocks at most timeout_ms.
///
/// # Safety
/// `client` and `error` are NULL or handles of their kinds; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_resolve(
    client: *const ticketing_client,
    error: *const ticketing_error,
    timeout_ms: i64,
    resolution_out: *mut c_int,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let resolution_out = required(resolution_out, "resolution_out")?;
        let lock_out = required(lock_out, "lock_out")?;
        let value = run(unsafe { operation::resolve(client, error, timeout_ms) }?)?;
        unsafe { operation::put_resolve(value, resolution_out, lock_out) }
    })
}

/// Releases `key` held by this handle's owner under `token` (a token kept elsewhere; the
/// CLI's `release`). Wraps Client::release (ticketing_release_start, waited for).
/// Outcomes and errors as ticketing_lock_release. Blocks at most the release deadline,
/// 5 s.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_release(
    client: *const ticketing_client,
    key: *const c_char,
    token: u64,
    outcome_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let value = run(unsafe { operation::release(client, key, token) }?)?;
        unsafe { operation::put_release(value, outcome_out) }
    })
}

/// Who holds `key`, linearizably (answered by the leader). Wraps Client::query
/// (ticketing_query_start, waited for).
/// *held_out is 1 and *holder_out filled when the key is held, 0 when it is free
/// (holder_out untouched). held_out must not be NULL; holder_out may be NULL.
/// Errors: TICKETING_UNAVAILABLE, TICKETING_NO_ANSWER, TICKETING_INVALID, ...
/// Blocks at most the request timeout, 10 s.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_query(
    client: *const ticketing_client,
    key: *const c_char,
    held_out: *mut c_int,
    holder_out: *mut Holder,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let held_out = required(held_out, "held_out")?;
        let value = run(unsafe { operation::query(client, key) }?)?;
        unsafe { operation::put_query(value, held_out, holder_out) }
    })
}

/// Releases the lock and waits for the server's answer. Wraps Lock::release
/// (ticketing_lock_release_start, waited for).
/// *outcome_out (may be NULL): TICKETING_RELEASED, TICKETING_NOT_HOLDER or
/// TICKETING_RELEASED_OR_EXPIRED; the lock is released for good then. Errors:
/// TICKETING_UNCONFIRMED (sent, no answer: the key may still be held; the client keeps
/// checking and releases it), TICKETING_UNAVAILABLE (no server could take it: never
/// sent; at once when every connection failed with a lasting mistake),
/// TICKETING_QUEUE_FULL (never sent), TICKETING_INVALID (released already, a release
/// of it under way on another thread, or refused by the server as invalid).
/// After any error but TICKETING_INVALID the lock stays releasable: call
/// ticketing_lock_release again (a retry after TICKETING_UNCONFIRMED or
/// TICKETING_UNAVAILABLE that gets `N` reports TICKETING_RELEASED_OR_EXPIRED: the first
/// attempt, or the client's own check, may have released it), or
/// free it, which hands the release to the background queue. ticketing_error_is_retryable
/// says whether a retry soon may succeed (1 for a passing TICKETING_UNAVAILABLE and for
/// TICKETING_QUEUE_FULL). The handle stays allocated either way: free it with
/// ticketing_lock_free. Blocks at most the release deadline, 5 s.
///
/// # Safety
/// `lock` is NULL or a lock handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_release(
    lock: *mut ticketing_lock,
    outcome_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let value = run(unsafe { operation::lock_release(lock) }?)?;
        unsafe { operation::put_release(value, outcome_out) }
    })
}
