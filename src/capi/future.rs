//! Futures (`ticketing_future`): an operation started without a waiting thread
//! (`ticketing_*_start`), whose outcome the program blocks on, polls, hears of through
//! a callback or a completion queue, or cancels — FoundationDB's `FDBFuture` shape
//! over the client's `*_then` calls (`client::Pending`). No thread is created or kept
//! per future. The one place a thread waits for an operation is here
//! ([`FutureHandle::wait`]): `ticketing_future_block_until_ready`, and every blocking
//! call, which is its future started and waited for ([`run`]).

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::abi::*;
use super::boundary::{getter, guard, put, required};
use super::client::Holder;
use super::error::Failure;
use super::handle::{self, Kind, Opaque, Tagged};
use super::operation::{self, acquire_args, Op, Operation, Value};
use super::queue::{PlaceBox, QueueHandle};
use crate::client::Pending;

/// `ticketing_callback`: `(future, ctx)`.
pub(crate) type CallbackFn = unsafe extern "C" fn(*mut ticketing_future, *mut c_void);

/// Called once when `future` is ready, with the ctx given to ticketing_future_set_callback.
#[allow(non_camel_case_types)]
pub type ticketing_callback = Option<unsafe extern "C" fn(future: *mut ticketing_future, ctx: *mut c_void)>;

/// Who hears that the future is ready (set once).
enum Notify {
    None,
    Callback(CallbackFn, *mut c_void),
    Queue(Arc<Tagged<QueueHandle>>, u64),
}

// SAFETY: the context pointer is the program's, only handed back to its own callback,
// which the header says may run on any thread.
unsafe impl Send for Notify {}

struct State {
    /// `None` until ready.
    result: Option<Result<Value, Failure>>,
    ready: bool,
    notify: Notify,
    /// Set once `ticketing_future_set_callback` or `_set_queue` was called.
    notify_set: bool,
}

/// `ticketing_future`.
#[doc(hidden)]
pub struct FutureHandle {
    op: Op,
    state: Mutex<State>,
    became_ready: Condvar,
    /// The operation, to cancel it; dropped once it is ready.
    pending: Mutex<Option<Pending>>,
    /// A queued hold's places in line (ticketing_hold_start_queued).
    places: Option<Arc<PlaceBox>>,
}

impl Kind for FutureHandle {
    const TAG: u64 = 0x7469_636b_2d66_7574; // "tick-fut"
    const NAME: &'static str = "ticketing_future";
}

impl Opaque for ticketing_future {
    type Value = FutureHandle;
}

impl FutureHandle {
    fn new(op: Op, places: Option<Arc<PlaceBox>>) -> FutureHandle {
        FutureHandle {
            op,
            places,
            state: Mutex::new(State { result: None, ready: false, notify: Notify::None, notify_set: false }),
            became_ready: Condvar::new(),
            pending: Mutex::new(None),
        }
    }

    /// The hold's places in line, when it was started by ticketing_hold_start_queued.
    pub(super) fn places(&self) -> Option<&PlaceBox> {
        self.places.as_deref()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pending(&self) -> MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the future is ready (true) or `until` passes (false; `None`: as long
    /// as it takes). The one place a thread waits for an operation, as a blocking call
    /// of the Rust client waits: the calling thread's wait check (ticketing_set_wait_check)
    /// is asked every slice, and a nonzero answer cancels the operation by the rule of
    /// ticketing_future_cancel, which makes the future ready; a little past the
    /// operation's deadline the waiter drives the client's time itself (the timer thread
    /// is late on a starved machine).
    fn wait(&self, until: Option<Instant>) -> bool {
        let check = crate::client::wait_check();
        let mut check_at = check.as_ref().map(|c| Instant::now() + c.slice);
        loop {
            // Cloned out: a cancel completes the future, which takes the slot.
            let pending = self.pending().clone();
            let late_at = pending.as_ref().and_then(Pending::late_at);
            if self.ready_by([until, check_at, late_at].into_iter().flatten().min()) {
                return true;
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) {
                return false;
            }
            if let (Some(check), Some(at)) = (&check, check_at) {
                if now >= at {
                    // The host says stop (its signal handler raised, its thread was
                    // interrupted): cancelled, its cancelled outcome ready on the way.
                    if (check.check)() {
                        pending.as_ref().map(Pending::cancel);
                    }
                    check_at = Some(Instant::now() + check.slice);
                }
            }
            if late_at.is_some_and(|at| now >= at) {
                pending.as_ref().map(Pending::drive_late);
            }
        }
    }

    /// Is the future ready by `until` (`None`: waits until it is)?
    fn ready_by(&self, until: Option<Instant>) -> bool {
        let mut state = self.state();
        while !state.ready {
            state = match until {
                None => self.became_ready.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(until) => {
                    let now = Instant::now();
                    if now >= until {
                        return false;
                    }
                    self.became_ready.wait_timeout(state, until - now).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
        true
    }
}

/// Makes `future` ready with `result` and tells whoever asked to hear of it, after
/// letting go of the future's own lock. Runs once, on the thread that ended the
/// operation.
fn complete(future: &Arc<Tagged<FutureHandle>>, result: Result<Value, Failure>) {
    let notify = {
        let mut state = future.value.state();
        state.result = Some(result);
        state.ready = true;
        std::mem::replace(&mut state.notify, Notify::None)
    };
    future.value.became_ready.notify_all();
    *future.value.pending() = None;
    deliver(future, notify);
}

fn deliver(future: &Arc<Tagged<FutureHandle>>, notify: Notify) {
    match notify {
        Notify::None => {}
        // SAFETY: the program's callback with its own context (header contract).
        Notify::Callback(callback, ctx) => unsafe { callback(handle::as_ptr(future), ctx) },
        Notify::Queue(queue, tag) => queue.value.push(tag),
    }
}

/// A new future of `operation`, started with the completion that makes it ready.
fn begin(operation: Operation<'_>) -> Arc<Tagged<FutureHandle>> {
    let future = handle::new_arc(FutureHandle::new(operation.op, operation.places));
    let for_completion = Arc::clone(&future);
    // The completion may run inside `start` (an outcome known at once) or on another
    // thread at any moment. The pending slot is held across the look at `ready` and the
    // store, and a completion clears the slot after it set `ready`: so it clears it
    // after this stored it, never before.
    let pending = (operation.start)(Box::new(move |result| complete(&for_completion, result)));
    let mut slot = future.value.pending();
    if !future.value.state().ready {
        *slot = Some(pending);
    }
    drop(slot);
    future
}

/// A `ticketing_*_start` function: the operation `accepted` makes — or its refused
/// arguments, and then no future — started as a future for the caller.
///
/// # Safety
/// Out-pointers NULL or writable.
pub(super) unsafe fn start<'a>(
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
    accepted: impl FnOnce() -> Result<Operation<'a>, Failure>,
) -> c_int {
    unsafe { put(future_out, std::ptr::null_mut()) };
    guard(error_out, || {
        let future_out = required(future_out, "future_out")?;
        unsafe { put(future_out, handle::give(begin(accepted()?))) };
        Ok(())
    })
}

/// A blocking call: `operation` started as its future, waited for in the one place
/// ([`FutureHandle::wait`]) and its outcome taken as its getter takes it. The calling
/// thread writes the request itself, as it waits at once (`client::waiting_after`).
pub(super) fn run(operation: Operation<'_>) -> Result<Value, Failure> {
    let op = operation.op;
    let future = crate::client::waiting_after(|| begin(operation));
    future.value.wait(None);
    take(&future, op)
}

/// The checks ticketing_acquire_start makes of its arguments (the limits of the lease,
/// the wait and the key), alone: no client, no future, no I/O. TICKETING_OK, or
/// TICKETING_INVALID naming the argument. A binding that shortens the wait it starts with
/// (to its caller's deadline) checks the caller's own arguments here first, so that an
/// argument is refused alike whatever the deadline. Never blocks.
///
/// # Safety
/// `key` is NULL or a C string; `error_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire_check(
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || unsafe { acquire_args(key, lease_ns, wait_ns) }.map(|_| ()))
}

/// The futures of ticketing_acquire, ticketing_lock_release, ticketing_release,
/// ticketing_query and ticketing_resolve (read with ticketing_future_get_lock, _release,
/// _release, _query, _resolve). ticketing_lock_release_start takes the lock out of its
/// handle until the future is ready; afterwards the handle is released for good or, after
/// an error other than TICKETING_INVALID, releasable again. Never block.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire_start(
    client: *const ticketing_client,
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || operation::acquire(client, key, lease_ns, wait_ns)) }
}

/// The future of ticketing_lock_release (read with ticketing_future_get_release); see ticketing_acquire_start.
///
/// # Safety
/// `lock` is NULL or a lock handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_release_start(
    lock: *mut ticketing_lock,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || operation::lock_release(lock)) }
}

/// The future of ticketing_release (read with ticketing_future_get_release); see ticketing_acquire_start.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_release_start(
    client: *const ticketing_client,
    key: *const c_char,
    token: u64,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || operation::release(client, key, token)) }
}

/// The future of ticketing_query (read with ticketing_future_get_query); see ticketing_acquire_start.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_query_start(
    client: *const ticketing_client,
    key: *const c_char,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || operation::query(client, key)) }
}

/// The future of ticketing_resolve (read with ticketing_future_get_resolve); see ticketing_acquire_start.
///
/// # Safety
/// `client` and `error` are NULL or handles of their kinds; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_resolve_start(
    client: *const ticketing_client,
    error: *const ticketing_error,
    timeout_ms: i64,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || operation::resolve(client, error, timeout_ms)) }
}

/// 1 once the future is ready, else 0. Never blocks.
///
/// # Safety
/// `future` is NULL or a future handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_is_ready(future: *const ticketing_future) -> c_int {
    getter(0, || unsafe { handle::peek(future) }.map_or(0, |f| c_int::from(f.state().ready)))
}

/// Waits until the future is ready (*ready_out 1) or timeout_ms passes (*ready_out 0); a
/// negative timeout_ms waits as long as it takes (every operation ends by its own
/// deadline). ready_out may be NULL. The wait is the blocking calls' own: the calling
/// thread's wait check (ticketing_set_wait_check), when it says stop, cancels the
/// operation, which makes the future ready. Blocks at most timeout_ms.
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_block_until_ready(
    future: *const ticketing_future,
    timeout_ms: i64,
    ready_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let future = unsafe { handle::hold(future, "future") }?;
        let until = u64::try_from(timeout_ms).ok().map(|ms| Instant::now() + Duration::from_millis(ms));
        let ready = future.value.wait(until);
        unsafe { put(ready_out, c_int::from(ready)) };
        Ok(())
    })
}

/// Sets who hears of the future: at once (on this thread, before returning) when it
/// is ready already.
fn set_notify(future: &Arc<Tagged<FutureHandle>>, notify: Notify) -> Result<(), Failure> {
    let now = {
        let mut state = future.value.state();
        if state.notify_set {
            return Err(Failure::invalid(
                "the future has a callback or a queue already (each future takes one, once)",
            ));
        }
        state.notify_set = true;
        if state.ready {
            notify
        } else {
            state.notify = notify;
            Notify::None
        }
    };
    deliver(future, now);
    Ok(())
}

/// Calls callback(future, ctx) once when the future is ready (see "Callbacks" above).
/// One callback or queue per future: a second is TICKETING_INVALID. Never blocks but for
/// running the callback itself when the future is ready already.
///
/// # Safety
/// `future` is NULL or a future handle; `callback` may be called from any thread with
/// `ctx`; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_set_callback(
    future: *mut ticketing_future,
    callback: ticketing_callback,
    ctx: *mut c_void,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        let callback = callback.ok_or_else(|| Failure::invalid("callback is NULL"))?;
        set_notify(&future, Notify::Callback(callback, ctx))
    })
}

/// Puts `tag` on `queue` when the future is ready (at once when it is ready already).
/// One callback or queue per future, as above. Never blocks.
///
/// # Safety
/// `future` and `queue` are NULL or handles of their kinds; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_set_queue(
    future: *mut ticketing_future,
    queue: *mut ticketing_queue,
    tag: u64,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        let queue = unsafe { handle::hold(queue.cast_const(), "queue") }?;
        set_notify(&future, Notify::Queue(queue, tag))
    })
}

/// Stops waiting (see "Cancelling" above): 1 when the operation was still running, 0
/// when it had ended already (or future is not a live future). Never blocks on the
/// network.
///
/// # Safety
/// `future` is NULL or a future handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_cancel(future: *mut ticketing_future) -> c_int {
    getter(0, || {
        let Some(future) = (unsafe { handle::peek(future.cast_const()) }) else { return 0 };
        // Cloned out first: the cancel completes the future on this thread, and the
        // completion takes the pending slot.
        let pending = future.pending().clone();
        c_int::from(pending.is_some_and(|p| p.cancel()))
    })
}

/// The ready result of `future` for the getter `getter`, taken.
pub(super) fn take(future: &Arc<Tagged<FutureHandle>>, op: Op) -> Result<Value, Failure> {
    if future.value.op != op {
        return Err(Failure::invalid(format!(
            "this future is of another operation: read it with {}",
            future.value.op.getter()
        )));
    }
    let mut state = future.value.state();
    if !state.ready {
        return Err(Failure::invalid("the future is not ready yet"));
    }
    state.result.take().unwrap_or_else(|| Err(Failure::invalid("the future's result was taken already")))
}

/// Take the outcome of a ready future (see "Outcomes" above).
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_get_lock(
    future: *mut ticketing_future,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, std::ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        unsafe { operation::put_lock(take(&future, Op::Acquire)?, lock_out) }
    })
}

/// The outcome of a ready release future, as ticketing_lock_release gives it (see ticketing_future_get_lock).
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_get_release(
    future: *mut ticketing_future,
    outcome_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        unsafe { operation::put_release(take(&future, Op::Release)?, outcome_out) }
    })
}

/// The outcome of a ready query future, as ticketing_query gives it (see ticketing_future_get_lock).
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_get_query(
    future: *mut ticketing_future,
    held_out: *mut c_int,
    holder_out: *mut Holder,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let held_out = required(held_out, "held_out")?;
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        unsafe { operation::put_query(take(&future, Op::Query)?, held_out, holder_out) }
    })
}

/// The outcome of a ready resolve future, as ticketing_resolve gives it (see ticketing_future_get_lock).
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_get_resolve(
    future: *mut ticketing_future,
    resolution_out: *mut c_int,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, std::ptr::null_mut()) };
    guard(error_out, || {
        let resolution_out = required(resolution_out, "resolution_out")?;
        let lock_out = required(lock_out, "lock_out")?;
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        unsafe { operation::put_resolve(take(&future, Op::Resolve)?, resolution_out, lock_out) }
    })
}

/// Frees the future; one not ready yet is cancelled first, and its callback or queue
/// hears of nothing any more. An outcome never taken is dropped (a lock in it is
/// released in the background). Never blocks.
///
/// # Safety
/// `future` is NULL or a future handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_free(future: *mut ticketing_future) {
    getter((), || {
        if let Some(f) = unsafe { handle::peek(future.cast_const()) } {
            f.state().notify = Notify::None;
            let pending = f.pending().clone();
            if let Some(pending) = pending {
                pending.cancel();
            }
        }
        unsafe { handle::free(future, "ticketing_future_free") }
    })
}
