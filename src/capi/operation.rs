//! Each operation of the C ABI once — acquire, the two releases, query, resolve: its
//! arguments read and checked, its start, and what its outcome puts in the caller's
//! out-parameters. The blocking call (`ticketing_acquire`), the future's start
//! (`ticketing_acquire_start`) and its getter (`ticketing_future_get_lock`) are each
//! made of these: a blocking call is its future started and waited for in one place
//! (`future::run`), read by the getter's own `put_*`.

use std::ffi::{c_char, c_int};
use std::sync::Arc;
use std::time::Duration;

use super::abi::*;
use super::boundary::{duration, duration_ns, put, text};
use super::client::Holder;
use super::error::Failure;
use super::handle;
use super::lock::{outcome_code, LockHandle};
use super::queue::PlaceBox;
use crate::client::{
    check_acquire_args, check_key_arg, ClientError, HolderInfo, Lock, Pending, PoolInfo, ReleaseError,
    ReleaseOutcome, Resolution,
};

/// Which operation a future carries, and so which `ticketing_future_get_*` reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Acquire,
    Release,
    Query,
    Resolve,
    Pool,
}

impl Op {
    pub(super) fn getter(self) -> &'static str {
        match self {
            Op::Acquire => "ticketing_future_get_lock",
            Op::Release => "ticketing_future_get_release",
            Op::Query => "ticketing_future_get_query",
            Op::Resolve => "ticketing_future_get_resolve",
            Op::Pool => "ticketing_future_get_pool",
        }
    }
}

/// A ready future's outcome, until it is taken.
pub(super) enum Value {
    Lock(Lock),
    Released(ReleaseOutcome),
    Query(Option<HolderInfo>),
    Resolved(c_int, Option<Lock>),
    Pool(PoolInfo),
}

/// What an operation calls once with its outcome.
pub(super) type Done = Box<dyn FnOnce(Result<Value, Failure>) + Send>;

/// An operation whose arguments were accepted: `start` starts it with the completion
/// that hears its outcome.
pub(super) struct Operation<'a> {
    pub(super) op: Op,
    pub(super) start: Box<dyn FnOnce(Done) -> Pending + 'a>,
    /// A hold's places in line, kept for ticketing_future_take_place (queued holds only).
    pub(super) places: Option<Arc<PlaceBox>>,
}

impl<'a> Operation<'a> {
    pub(super) fn new(op: Op, start: impl FnOnce(Done) -> Pending + 'a) -> Operation<'a> {
        Operation { op, start: Box::new(start), places: None }
    }
}

/// An acquire's arguments, checked by the client's rule (limits of the lease, the wait
/// and the key) before any I/O.
///
/// # Safety
/// `key` is NULL or a C string.
pub(super) unsafe fn acquire_args<'a>(
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
) -> Result<(&'a str, Duration, Duration), Failure> {
    let key = unsafe { text(key, "key") }?;
    let lease = duration_ns(lease_ns, "lease")?;
    let wait = duration_ns(wait_ns, "wait")?;
    check_acquire_args(key, lease, wait)?;
    Ok((key, lease, wait))
}

/// ticketing_acquire's operation (Client::acquire_then).
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string.
pub(super) unsafe fn acquire<'a>(
    client: *const ticketing_client,
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let (key, lease, wait) = unsafe { acquire_args(key, lease_ns, wait_ns) }?;
    Ok(Operation::new(Op::Acquire, move |done| {
        client
            .value
            .client
            .acquire_then(key, lease, wait, move |r| done(r.map(Value::Lock).map_err(Failure::from)))
    }))
}

/// ticketing_lock_release's operation (Lock::release_then, keeping the lock): the lock
/// is taken out of its handle until the outcome comes, then released for good or, after
/// an error other than TICKETING_INVALID, put back, releasable again.
///
/// # Safety
/// `lock` is NULL or a lock handle.
pub(super) unsafe fn lock_release<'a>(lock: *mut ticketing_lock) -> Result<Operation<'a>, Failure> {
    let lock = unsafe { handle::hold(lock.cast_const(), "lock") }?;
    let taken = lock.value.take_for_release()?;
    Ok(Operation::new(Op::Release, move |done| {
        taken.release_keeping(move |back, result| {
            lock.value.after_release(back);
            done(result.map(Value::Released).map_err(Failure::from))
        })
    }))
}

/// ticketing_release's operation (Client::release_then).
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string.
pub(super) unsafe fn release<'a>(
    client: *const ticketing_client,
    key: *const c_char,
    token: u64,
) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let key = unsafe { text(key, "key") }?;
    check_key_arg(key).map_err(ReleaseError::Invalid)?;
    Ok(Operation::new(Op::Release, move |done| {
        client
            .value
            .client
            .release_then(key, token, move |r| done(r.map(Value::Released).map_err(Failure::from)))
    }))
}

/// ticketing_query's operation (Client::query_then).
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string.
pub(super) unsafe fn query<'a>(
    client: *const ticketing_client,
    key: *const c_char,
) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let key = unsafe { text(key, "key") }?;
    check_key_arg(key).map_err(ClientError::Invalid)?;
    Ok(Operation::new(Op::Query, move |done| {
        client.value.client.query_then(key, move |r| done(r.map(Value::Query).map_err(Failure::from)))
    }))
}

/// ticketing_resolve's operation (Client::resolve_then). Any error but an
/// indeterminate acquire is definitive: TICKETING_NOT_HELD at once.
///
/// # Safety
/// `client` and `error` are NULL or handles of their kinds.
pub(super) unsafe fn resolve<'a>(
    client: *const ticketing_client,
    error: *const ticketing_error,
    timeout_ms: i64,
) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let error = unsafe { handle::hold_error(error, "error") }?;
    let timeout = duration(timeout_ms, "timeout_ms")?;
    let value = |resolution| match resolution {
        Resolution::Held(lock) => Value::Resolved(TICKETING_HELD as c_int, Some(lock)),
        Resolution::NotHeld => Value::Resolved(TICKETING_NOT_HELD as c_int, None),
        Resolution::Unknown => Value::Resolved(TICKETING_UNKNOWN as c_int, None),
    };
    Ok(Operation::new(Op::Resolve, move |done| match error.as_ref().and_then(|e| e.value.acquire.as_ref()) {
        Some(attempt) => client.value.client.resolve_then(attempt, timeout, move |r| done(Ok(value(r)))),
        None => {
            done(Ok(value(Resolution::NotHeld)));
            Pending::ended()
        }
    }))
}

/// An acquire's outcome: *lock_out, a new lock handle.
///
/// # Safety
/// `lock_out` is writable.
pub(super) unsafe fn put_lock(value: Value, lock_out: *mut *mut ticketing_lock) -> Result<(), Failure> {
    let Value::Lock(lock) = value else { unreachable!("an acquire's value") };
    unsafe { put(lock_out, handle::into_raw(LockHandle::new(lock))) };
    Ok(())
}

/// A release's outcome: *outcome_out (may be NULL), TICKETING_RELEASED, ...
///
/// # Safety
/// `outcome_out` is NULL or writable.
pub(super) unsafe fn put_release(value: Value, outcome_out: *mut c_int) -> Result<(), Failure> {
    let Value::Released(outcome) = value else { unreachable!("a release's value") };
    unsafe { put(outcome_out, outcome_code(outcome)) };
    Ok(())
}

/// A query's outcome: *held_out, and *holder_out (may be NULL) filled when held.
///
/// # Safety
/// `held_out` is writable; `holder_out` NULL or writable.
pub(super) unsafe fn put_query(
    value: Value,
    held_out: *mut c_int,
    holder_out: *mut Holder,
) -> Result<(), Failure> {
    let Value::Query(holder) = value else { unreachable!("a query's value") };
    if let (Some(info), Some(out)) = (&holder, unsafe { holder_out.as_mut() }) {
        out.fill(info);
    }
    unsafe { put(held_out, c_int::from(holder.is_some())) };
    Ok(())
}

/// A resolve's outcome: *resolution_out, and *lock_out the adopted lock when held.
///
/// # Safety
/// Both out-pointers are writable.
pub(super) unsafe fn put_resolve(
    value: Value,
    resolution_out: *mut c_int,
    lock_out: *mut *mut ticketing_lock,
) -> Result<(), Failure> {
    let Value::Resolved(code, lock) = value else { unreachable!("a resolve's value") };
    if let Some(lock) = lock {
        unsafe { put(lock_out, handle::into_raw(LockHandle::new(lock))) };
    }
    unsafe { put(resolution_out, code) };
    Ok(())
}
