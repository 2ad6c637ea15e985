//! What the host plugs into the library: its logger, a check that lets its blocking
//! calls answer its signals, and the test of the rule that a panic stays off its
//! standard error.

use std::ffi::{c_int, c_void};
use std::ptr;

use super::abi::*;
use super::boundary::guard;
use super::error::Failure;
use super::logging;

/// Sends the library's log records up to max_level (TICKETING_LOG_OFF..TRACE) to
/// log_fn with ctx; log_fn NULL or max_level TICKETING_LOG_OFF turns them off (the
/// default: the library writes nothing anywhere). log_fn is called on a thread of the
/// library's own ("ticketing-log"), one record at a time, never while the client holds
/// a lock of its own, so it may take the host's locks (Python's GIL) and may call any
/// function here but ticketing_set_logger. Records are queued (4096 at most; more are
/// dropped and counted in a later warning). When this returns, a callback in progress
/// has returned and the previous log_fn is never called again.
/// Errors: TICKETING_INVALID (max_level out of range), TICKETING_CONFIG (the process has
/// a Rust `log` logger of its own: the library's records go there). Blocks at most for a
/// callback in progress.
///
/// # Safety
/// `log_fn` is NULL or a function that may be called from any thread with `ctx`, until
/// a later call replaces it; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_set_logger(
    log_fn: logging::ticketing_log_fn,
    ctx: *mut c_void,
    max_level: c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || logging::set_logger(log_fn, ctx, max_level))
}

/// Called on a waiting thread; nonzero stops the wait.
#[allow(non_camel_case_types)]
pub type ticketing_wait_check_fn = Option<unsafe extern "C" fn(ctx: *mut c_void) -> c_int>;

/// From now on, a blocking call (ticketing_acquire, ticketing_lock_release,
/// ticketing_release, ticketing_query, ticketing_resolve) or a
/// ticketing_future_block_until_ready made by the calling thread that waits longer than
/// slice_ms calls check(ctx) every slice_ms on that thread — to run the
/// host's own signal handling, as the Python package runs Python's (Ctrl-C) on its main
/// thread, or to see that the thread was interrupted. Each thread sets its own check. A nonzero return stops the wait at once: the operation is
/// cancelled by the rule of ticketing_future_cancel (an acquire not yet sent ends
/// TICKETING_CANCELLED; one already sent TICKETING_INDETERMINATE with cause
/// TICKETING_CAUSE_CANCELLED, its grant, if any, released by the client; a query
/// TICKETING_CANCELLED; a resolve TICKETING_UNKNOWN; a release goes on in the background
/// and the call returns TICKETING_CANCELLED, the lock releasable again), and the call
/// returns that outcome (ticketing_future_block_until_ready: the future is ready with
/// it). A call whose outcome comes within slice_ms never calls check.
/// check NULL removes the thread's check. slice_ms is 1..=60 000.
/// Errors: TICKETING_INVALID. Never blocks.
///
/// # Safety
/// `check` is NULL or a function that may be called with `ctx` on this thread, until
/// a later call on it replaces it.
#[no_mangle]
pub unsafe extern "C" fn ticketing_set_wait_check(
    check: ticketing_wait_check_fn,
    ctx: *mut c_void,
    slice_ms: i64,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let Some(check) = check else {
            crate::client::set_wait_check(None);
            return Ok(());
        };
        if !(1..=TICKETING_WAIT_SLICE_MS_MAX).contains(&slice_ms) {
            return Err(Failure::invalid(format!(
                "slice_ms is {slice_ms}; must be 1..={TICKETING_WAIT_SLICE_MS_MAX}"
            )));
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

/// For libticketing's own tests of the rule above: panics inside the library, in this
/// call (on_client_thread 0) or on a thread of the library's own (1), and returns the
/// TICKETING_INTERNAL that the panic becomes. Never useful to an application.
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
