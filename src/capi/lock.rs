//! The lock handle (`ticketing_lock`): its getters, what its release takes out and puts
//! back, and its free (its release itself: `operation.rs`, `blocking.rs`).

use std::ffi::{c_char, c_int, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::abi::*;
use super::boundary::{getter, millis};
use super::error::{c_string, Failure};
use super::handle::{self, Kind, Opaque};
use crate::client::{Lock, ReleaseOutcome};

/// `ticketing_lock`.
#[doc(hidden)]
pub struct LockHandle {
    /// The lock; taken out while a release of it runs, and put back when that release
    /// did not end with an outcome (the lock stays releasable).
    lock: Mutex<Option<Lock>>,
    /// Set once a release came back with an outcome.
    released: AtomicBool,
    key: CString,
    /// Every key of the lock with its count and capacity, in the hold's order.
    parts: Vec<(CString, u32, u32)>,
    owner: CString,
    token: u64,
    lease: Duration,
    deadline: Instant,
}

impl Kind for LockHandle {
    const TAG: u64 = 0x7469_636b_2d6c_6f63; // "tick-loc"
    const NAME: &'static str = "ticketing_lock";
}

impl Opaque for ticketing_lock {
    type Value = LockHandle;
}

impl LockHandle {
    pub(super) fn new(lock: Lock) -> LockHandle {
        LockHandle {
            key: c_string(lock.key()),
            parts: lock
                .keys()
                .into_iter()
                .map(|(k, count, capacity)| (c_string(k), count, capacity))
                .collect(),
            owner: c_string(lock.owner()),
            token: lock.token(),
            lease: lock.lease(),
            deadline: lock.deadline(),
            released: AtomicBool::new(false),
            lock: Mutex::new(Some(lock)),
        }
    }

    /// Every key of the lock with its count and capacity.
    pub(super) fn parts(&self) -> &[(CString, u32, u32)] {
        &self.parts
    }

    /// The local deadline: the instant before the request was written plus the lease.
    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn slot(&self) -> MutexGuard<'_, Option<Lock>> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock out for a release, or why it cannot be released now.
    pub(super) fn take_for_release(&self) -> Result<Lock, Failure> {
        let taken = self.slot().take();
        taken.ok_or_else(|| {
            Failure::invalid(if self.released.load(Ordering::Acquire) {
                "the lock was already released"
            } else {
                "a release of this lock is under way on another thread"
            })
        })
    }

    /// A release of `lock` ended: it is released for good, or put back, releasable.
    pub(super) fn after_release(&self, lock: Lock) {
        if lock.is_released() {
            self.released.store(true, Ordering::Release);
        } else {
            *self.slot() = Some(lock);
        }
    }
}

/// `TICKETING_RELEASED`, `TICKETING_NOT_HOLDER` or `TICKETING_RELEASED_OR_EXPIRED`.
pub(super) fn outcome_code(outcome: ReleaseOutcome) -> c_int {
    super::abi::ticketing_release_outcome::of(outcome) as c_int
}

/// The fencing token: larger than every earlier grant's. Pass it to every write the
/// critical section makes (docs/fencing.md). Wraps Lock::token. 0 if lock is NULL.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_token(lock: *const ticketing_lock) -> u64 {
    getter(0, || unsafe { handle::peek(lock) }.map_or(0, |l| l.token))
}

/// The key and the owner the lock was granted to. Wrap Lock::key and Lock::owner. Valid
/// until the lock is freed. NULL if lock is NULL.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_key(lock: *const ticketing_lock) -> *const c_char {
    getter(ptr::null(), || unsafe { handle::peek(lock) }.map_or(ptr::null(), |l| l.key.as_ptr()))
}

/// The owner the lock was granted to. Wraps Lock::owner. Valid until the lock is freed. NULL if lock is NULL.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_owner(lock: *const ticketing_lock) -> *const c_char {
    getter(ptr::null(), || unsafe { handle::peek(lock) }.map_or(ptr::null(), |l| l.owner.as_ptr()))
}

/// The lease the server granted, in ms. Wraps Lock::lease.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_lease_ms(lock: *const ticketing_lock) -> u64 {
    getter(0, || unsafe { handle::peek(lock) }.map_or(0, |l| millis(l.lease)))
}

/// Time left until the lock's local deadline (the instant before the ACQUIRE was written
/// plus the lease; the server's lease never ends before it), in ms; 0 once passed or
/// once released. Wraps Lock::remaining.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_remaining_ms(lock: *const ticketing_lock) -> u64 {
    getter(0, || {
        unsafe { handle::peek(lock) }
            .filter(|l| !l.released.load(Ordering::Acquire))
            .map_or(0, |l| millis(l.deadline.saturating_duration_since(Instant::now())))
    })
}

/// Frees the handle. If it was not released, the release goes to the client's background
/// queue (dropping a Rust Lock): it never blocks.
///
/// # Safety
/// `lock` is NULL or a lock handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_free(lock: *mut ticketing_lock) {
    getter((), || unsafe { handle::free(lock, "ticketing_lock_free") })
}
