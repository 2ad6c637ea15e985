//! The lock handle (`ticketing_lock`): its getters, its release and its free.

use std::ffi::{c_char, c_int, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::boundary::{getter, guard, millis, put};
use super::error::{c_string, Failure};
use super::handle::ErrorPtr;
use super::handle::{self, Kind, Tagged};
use crate::client::{Lock, ReleaseOutcome};

pub const TICKETING_RELEASED: c_int = 1;
pub const TICKETING_NOT_HOLDER: c_int = 2;
pub const TICKETING_RELEASED_OR_EXPIRED: c_int = 3;

/// `ticketing_lock`.
#[doc(hidden)]
pub struct LockHandle {
    /// The lock; taken out while a release of it runs, and put back when that release
    /// did not end with an outcome (the lock stays releasable).
    lock: Mutex<Option<Lock>>,
    /// Set once a release came back with an outcome.
    released: AtomicBool,
    key: CString,
    owner: CString,
    token: u64,
    lease: Duration,
    deadline: Instant,
}

impl Kind for LockHandle {
    const TAG: u64 = 0x7469_636b_2d6c_6f63; // "tick-loc"
    const NAME: &'static str = "ticketing_lock";
}

/// The pointer C holds.
#[doc(hidden)]
pub type LockPtr = Tagged<LockHandle>;

impl LockHandle {
    pub(super) fn new(lock: Lock) -> LockHandle {
        LockHandle {
            key: c_string(lock.key()),
            owner: c_string(lock.owner()),
            token: lock.token(),
            lease: lock.lease(),
            deadline: lock.deadline(),
            released: AtomicBool::new(false),
            lock: Mutex::new(Some(lock)),
        }
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

    /// Releases the lock once: an outcome, or an error after which the lock is
    /// releasable again (put back) unless the server refused it as invalid.
    pub(super) fn release(&self) -> Result<ReleaseOutcome, Failure> {
        let mut lock = self.take_for_release()?;
        let result = lock.try_release();
        self.after_release(lock);
        Ok(result?)
    }
}

pub(super) fn outcome_code(outcome: ReleaseOutcome) -> c_int {
    match outcome {
        ReleaseOutcome::Released => TICKETING_RELEASED,
        ReleaseOutcome::NotHolder => TICKETING_NOT_HOLDER,
        ReleaseOutcome::ReleasedOrExpired => TICKETING_RELEASED_OR_EXPIRED,
    }
}

/// `ticketing_lock_release`: wraps [`Lock::release`]; the handle stays releasable after
/// an error other than an invalid release.
///
/// # Safety
/// `lock` is NULL or a lock handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_release(
    lock: *mut LockPtr,
    outcome_out: *mut c_int,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let lock = unsafe { handle::hold(lock.cast_const(), "lock") }?;
        let outcome = lock.value.release()?;
        unsafe { put(outcome_out, outcome_code(outcome)) };
        Ok(())
    })
}

/// `ticketing_lock_token`: wraps [`Lock::token`] (kept from the grant).
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_token(lock: *const LockPtr) -> u64 {
    getter(0, || unsafe { handle::peek(lock) }.map_or(0, |l| l.token))
}

/// `ticketing_lock_key`: wraps [`Lock::key`].
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_key(lock: *const LockPtr) -> *const c_char {
    getter(ptr::null(), || unsafe { handle::peek(lock) }.map_or(ptr::null(), |l| l.key.as_ptr()))
}

/// `ticketing_lock_owner`: wraps [`Lock::owner`].
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_owner(lock: *const LockPtr) -> *const c_char {
    getter(ptr::null(), || unsafe { handle::peek(lock) }.map_or(ptr::null(), |l| l.owner.as_ptr()))
}

/// `ticketing_lock_lease_ms`: wraps [`Lock::lease`].
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_lease_ms(lock: *const LockPtr) -> u64 {
    getter(0, || unsafe { handle::peek(lock) }.map_or(0, |l| millis(l.lease)))
}

/// `ticketing_lock_remaining_ms`: wraps [`Lock::remaining`]; 0 once released.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_remaining_ms(lock: *const LockPtr) -> u64 {
    getter(0, || {
        unsafe { handle::peek(lock) }
            .filter(|l| !l.released.load(Ordering::Acquire))
            .map_or(0, |l| millis(l.deadline.saturating_duration_since(Instant::now())))
    })
}

/// `ticketing_lock_free`: lets go of the handle; an unreleased [`Lock`] is released in
/// the background (its `Drop`) once no call uses it.
///
/// # Safety
/// `lock` is NULL or a lock handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_free(lock: *mut LockPtr) {
    getter((), || unsafe { handle::free(lock, "ticketing_lock_free") })
}
