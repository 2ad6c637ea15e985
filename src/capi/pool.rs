//! A key as a pool in the C ABI (docs/c.md, "Counted and multi-key holds"): what
//! ticketing_pool fills in — capacity, permits in use, holds, waiters, the oldest
//! wait and the oldest holds — its blocking call, its future and the future's getter.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::boundary::{guard, millis, required, text};
use super::client::owner_into;
use super::error::Failure;
use super::future::{run, start, take};
use super::handle;
use super::operation::{Op, Operation, Value};
use crate::client::{check_key_arg, ClientError, PoolHolding, PoolInfo};

const _: () = assert!(TICKETING_POOL_HOLDERS_MAX == crate::proto::limits::POOL_HOLDERS_LISTED_MAX);

/// One hold in a ticketing_pool_info.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy)]
pub struct ticketing_pool_holder {
    /// The hold's fencing token.
    pub token: u64,
    /// Lease left on the leader's clock when it answered.
    pub lease_left_ms: u64,
    /// Permits of the key it holds.
    pub count: u32,
    /// Bytes of owner, without the NUL.
    pub owner_len: u32,
    /// The holder's owner, NUL-terminated.
    pub owner: [c_char; 256],
}

/// What ticketing_pool fills in. The caller owns the storage.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy)]
pub struct ticketing_pool_info {
    /// The key's capacity; 0 when nobody holds the key or waits for it.
    pub capacity: u32,
    /// Permits held.
    pub in_use: u32,
    /// Holds on the key.
    pub holds: u32,
    /// Requests waiting for it.
    pub waiters: u32,
    /// How long the first of them has waited.
    pub oldest_wait_ms: u64,
    /// Entries of `holders` filled in: the oldest holds, at most TICKETING_POOL_HOLDERS_MAX.
    pub holders_len: u32,
    /// The oldest holds, oldest first.
    pub holders: [ticketing_pool_holder; TICKETING_POOL_HOLDERS_MAX],
}

impl ticketing_pool_holder {
    fn fill(&mut self, hold: &PoolHolding) {
        self.token = hold.token;
        self.lease_left_ms = millis(hold.remaining);
        self.count = hold.count;
        self.owner_len = owner_into(&mut self.owner, &hold.owner);
    }
}

impl ticketing_pool_info {
    fn fill(&mut self, info: &PoolInfo) {
        self.capacity = info.capacity;
        self.in_use = info.in_use;
        self.holds = info.holds;
        self.waiters = info.waiters;
        self.oldest_wait_ms = millis(info.oldest_wait);
        let listed = info.holders.len().min(TICKETING_POOL_HOLDERS_MAX);
        for (slot, hold) in self.holders.iter_mut().zip(&info.holders[..listed]) {
            slot.fill(hold);
        }
        self.holders_len = listed as u32;
    }
}

/// ticketing_pool's operation (Client::pool_then).
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string.
unsafe fn pool<'a>(client: *const ticketing_client, key: *const c_char) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let key = unsafe { text(key, "key") }?;
    check_key_arg(key).map_err(ClientError::Invalid)?;
    Ok(Operation::new(Op::Pool, move |done| {
        client.value.client.pool_then(key, move |r| done(r.map(Value::Pool).map_err(Failure::from)))
    }))
}

/// A pool's outcome: *pool_out filled in.
///
/// # Safety
/// `pool_out` is writable.
unsafe fn put_pool(value: Value, pool_out: *mut ticketing_pool_info) -> Result<(), Failure> {
    let Value::Pool(info) = value else { unreachable!("a pool's value") };
    // SAFETY: required() made sure it is not NULL; the caller's contract, writable.
    unsafe { (*pool_out).fill(&info) };
    Ok(())
}

/// What `key` has as a pool, linearizably (answered by the leader): its capacity,
/// permits in use, holds and waiters, the oldest wait and the oldest holds. Wraps
/// Client::pool. pool_out must not be NULL. Blocks at most the request timeout (10 s).
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_pool(
    client: *const ticketing_client,
    key: *const c_char,
    pool_out: *mut ticketing_pool_info,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let pool_out = required(pool_out, "pool_out")?;
        unsafe { put_pool(run(pool(client, key)?)?, pool_out) }
    })
}

/// The future of ticketing_pool (read with ticketing_future_get_pool); see
/// ticketing_acquire_start. Never blocks.
///
/// # Safety
/// As ticketing_pool.
#[no_mangle]
pub unsafe extern "C" fn ticketing_pool_start(
    client: *const ticketing_client,
    key: *const c_char,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { start(future_out, error_out, || pool(client, key)) }
}

/// The outcome of a ready pool future, as ticketing_pool gives it (see
/// ticketing_future_get_lock).
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_get_pool(
    future: *mut ticketing_future,
    pool_out: *mut ticketing_pool_info,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let pool_out = required(pool_out, "pool_out")?;
        let future = unsafe { handle::hold(future.cast_const(), "future") }?;
        unsafe { put_pool(take(&future, Op::Pool)?, pool_out) }
    })
}
