//! The handles behind the C ABI's opaque pointers: reference-counted, and tagged so
//! that the common mistakes of a C caller — a handle used after its `*_free`, freed
//! twice, or passed where another kind belongs — fail loudly instead of hanging or
//! corrupting memory (include/ticketing.h, "Misuse").
//!
//! A handle is an `Arc<Tagged<T>>` given out with `Arc::into_raw`. Each call checks the
//! tag (one compare) and holds a reference of its own for its duration, so a
//! `*_free` on another thread during a call frees nothing the call still uses. A free
//! clears the tag before it lets go. The check is best effort: memory that was freed
//! and reused by another handle of the same kind cannot be told apart.
//!
//! A handle also keeps the process's fork generation at its making. In a child forked
//! after that, every call given the handle fails with [`AFTER_FORK`] and a free lets go
//! of nothing: both without allocating or taking a lock, the only things safe there (a
//! lock the parent's other threads held at the fork, the allocator's among them, stays
//! held in the child for good).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::abi::ticketing_error;
use super::error::{ErrorHandle, Failure};

/// What every kind of handle says of itself.
pub trait Kind: Sized {
    /// The tag of a live handle of this kind.
    const TAG: u64;
    /// The C type's name, for messages.
    const NAME: &'static str;

    /// Is `p` a handle that is no allocation of its own ([`AFTER_FORK`])?
    fn is_static(_p: *const Tagged<Self>) -> bool {
        false
    }
}

impl Kind for ErrorHandle {
    const TAG: u64 = 0x7469_636b_2d65_7272; // "tick-err"
    const NAME: &'static str = "ticketing_error";

    fn is_static(p: *const Tagged<Self>) -> bool {
        std::ptr::eq(p, &AFTER_FORK)
    }
}

/// The error of every call given, in a child forked after it was made, a handle of the
/// parent's: one object for the life of the process, handed out without allocating;
/// freeing it does nothing.
pub static AFTER_FORK: Tagged<ErrorHandle> =
    Tagged { tag: AtomicU64::new(ErrorHandle::TAG), forks: 0, value: ErrorHandle::AFTER_FORK };

/// The C type of a handle (an opaque struct of abi.rs), and the value behind it.
pub trait Opaque {
    type Value: Kind;
}

impl Opaque for ticketing_error {
    type Value = ErrorHandle;
}

/// The tag a freed handle carries until its memory is reused.
const FREED: u64 = 0x6672_6565_642d_2d2d; // "freed---"

/// A handle's value behind its tag (first, at a fixed place).
#[repr(C)]
#[doc(hidden)]
pub struct Tagged<T> {
    tag: AtomicU64,
    /// The fork generation of the process that made it ([`crate::sys::fork_generation`]).
    forks: u64,
    pub value: T,
}

/// Was the handle `p` (live) made in this process, not in a parent before a fork?
///
/// # Safety
/// As [`is_live`].
unsafe fn made_here<T>(p: *const Tagged<T>) -> bool {
    // SAFETY: by the caller's contract; one plain load and one relaxed atomic load.
    unsafe { (*p).forks == crate::sys::fork_generation() }
}

/// A new handle holding `value`, for the caller.
pub fn into_raw<P: Opaque>(value: P::Value) -> *mut P {
    give(new_arc(value))
}

/// A new handle not yet given to the caller: the library keeps references of its own
/// (a future's completion) before [`give`] hands one out.
pub fn new_arc<T: Kind>(value: T) -> Arc<Tagged<T>> {
    Arc::new(Tagged { tag: AtomicU64::new(T::TAG), forks: crate::sys::fork_generation(), value })
}

/// Gives the caller its reference on `handle`: the pointer it holds until `*_free`.
pub fn give<P: Opaque>(handle: Arc<Tagged<P::Value>>) -> *mut P {
    Arc::into_raw(handle).cast_mut().cast()
}

/// The pointer the caller holds for `handle` (the same for every reference).
pub fn as_ptr<P: Opaque>(handle: &Arc<Tagged<P::Value>>) -> *mut P {
    Arc::as_ptr(handle).cast_mut().cast()
}

/// Is `p` (not NULL) a live handle of kind `T`?
///
/// # Safety
/// `p` points to memory that was a `Tagged<T>` handle given out by [`into_raw`] (live,
/// or freed by the caller's mistake).
unsafe fn is_live<T: Kind>(p: *const Tagged<T>) -> bool {
    // SAFETY: by the caller's contract the first field is readable; after a mistaken
    // free this reads whatever the allocator left there, which is not the tag.
    unsafe { (*p).tag.load(Ordering::Acquire) == T::TAG }
}

/// A reference on the live handle `p` for the length of a call, or why not.
///
/// # Safety
/// `p` is NULL or was given out by [`into_raw`] for kind `T`.
pub unsafe fn hold<P: Opaque>(p: *const P, what: &str) -> Result<Arc<Tagged<P::Value>>, Failure> {
    let p = p.cast::<Tagged<P::Value>>();
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: by the caller's contract.
    if !unsafe { is_live(p) } {
        return Err(not_live::<P::Value>(what));
    }
    // Checked before the reference is taken: a reference dropped in a forked child could
    // be the last, and freeing is not safe there.
    if P::Value::is_static(p) || !unsafe { made_here(p) } {
        return Err(Failure::after_fork());
    }
    // SAFETY: `p` came from Arc::into_raw and its reference is still held (tag live).
    unsafe {
        Arc::increment_strong_count(p);
        Ok(Arc::from_raw(p))
    }
}

/// [`hold`] for an error argument: `None` for [`AFTER_FORK`], which is definitive and
/// holds nothing.
///
/// # Safety
/// As [`hold`].
pub unsafe fn hold_error(
    p: *const ticketing_error,
    what: &str,
) -> Result<Option<Arc<Tagged<ErrorHandle>>>, Failure> {
    if ErrorHandle::is_static(p.cast()) {
        return Ok(None);
    }
    // SAFETY: by the caller's contract.
    unsafe { hold(p, what) }.map(Some)
}

/// The value of the live handle `p` without taking a reference (a getter's quick look),
/// or `None` for NULL or a handle that is not live.
///
/// # Safety
/// As [`hold`]; the caller does not free `p` during the getter (header rule).
pub unsafe fn peek<'a, P: Opaque>(p: *const P) -> Option<&'a P::Value> {
    let p = p.cast::<Tagged<P::Value>>();
    // SAFETY: by the caller's contract.
    (!p.is_null() && unsafe { is_live(p) }).then(|| unsafe { &(*p).value })
}

/// Frees the handle `p` (its value is dropped once no call holds it any more). NULL
/// and [`AFTER_FORK`] do nothing. In a child forked after `p` was made, the handle is
/// marked freed and its memory (the child's copy of the parent's) is left as it is:
/// dropping the value would free memory, and the allocator's lock may be held for good
/// there. A handle that is not live — freed already, or of another kind —
/// aborts the process with a message naming `function`: going on would corrupt memory.
///
/// # Safety
/// As [`hold`].
pub unsafe fn free<P: Opaque>(p: *mut P, function: &str) {
    let p = p.cast::<Tagged<P::Value>>();
    if p.is_null() || P::Value::is_static(p) {
        return;
    }
    // SAFETY: by the caller's contract; the exchange makes two racing frees fail loudly
    // rather than both letting go.
    let live =
        unsafe { &(*p).tag }.compare_exchange(P::Value::TAG, FREED, Ordering::AcqRel, Ordering::Acquire);
    if live.is_err() {
        misuse(&format!(
            "{function}: the argument is not a live {}: it was freed already, or it is another kind of handle",
            P::Value::NAME
        ));
    }
    // SAFETY: the tag was live, so the memory is a handle's.
    if !unsafe { made_here(p) } {
        return;
    }
    // SAFETY: the tag was live, so the caller's reference from into_raw is still held.
    drop(unsafe { Arc::from_raw(p) });
}

/// The failure of a call given a handle that is not live.
pub fn not_live<T: Kind>(what: &str) -> Failure {
    Failure::invalid(format!(
        "{what} is not a live {}: it was freed already, or it is another kind of handle",
        T::NAME
    ))
}

/// Stops the process for a misuse that would otherwise corrupt memory: one line on
/// standard error (the exception to "the host's standard error is the host's"), then
/// abort.
#[cold]
pub fn misuse(what: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "libticketing: {what}; aborting");
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Thing(u32);
    impl Kind for Thing {
        const TAG: u64 = 0x7468_696e_672d_2d2d;
        const NAME: &'static str = "thing";
    }
    struct Other;
    impl Kind for Other {
        const TAG: u64 = 0x6f74_6865_722d_2d2d;
        const NAME: &'static str = "other";
    }
    /// The opaque C types of the two.
    struct CThing;
    impl Opaque for CThing {
        type Value = Thing;
    }
    struct COther;
    impl Opaque for COther {
        type Value = Other;
    }

    #[test]
    fn a_call_holds_the_value_while_another_thread_frees_the_handle() {
        let p = into_raw::<CThing>(Thing(7));
        let held = unsafe { hold(p, "thing") }.unwrap();
        assert_eq!(unsafe { peek(p) }.map(|t| t.0), Some(7));
        unsafe { free(p, "thing_free") };
        // The call's own reference keeps the value.
        assert_eq!(held.value.0, 7);
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn a_handle_of_another_kind_is_refused_by_name() {
        let p = into_raw::<CThing>(Thing(1));
        let wrong = p.cast::<COther>();
        let err = unsafe { hold(wrong, "client") }.err().unwrap();
        assert_eq!(
            err.message,
            "client is not a live other: it was freed already, or it is another kind of handle"
        );
        assert!(unsafe { peek(wrong) }.is_none());
        assert!(unsafe { hold::<CThing>(std::ptr::null(), "lock") }.is_err());
        unsafe { free(p, "thing_free") };
    }

    #[test]
    fn the_after_fork_error_is_never_freed_and_resolves_as_definitive() {
        let p = std::ptr::addr_of!(AFTER_FORK).cast_mut().cast::<ticketing_error>();
        unsafe { free(p, "ticketing_error_free") };
        unsafe { free(p, "ticketing_error_free") };
        assert!(unsafe { peek(p) }.is_some_and(|e| e.kind == super::super::abi::TICKETING_UNAVAILABLE));
        assert!(unsafe { hold_error(p, "error") }.unwrap().is_none());
        assert!(unsafe { hold(p, "error") }.err().unwrap().after_fork);
    }

    #[test]
    fn a_freed_handle_reads_as_not_live_while_a_call_keeps_its_memory() {
        let p = into_raw::<CThing>(Thing(3));
        let held = unsafe { hold(p, "thing") }.unwrap();
        unsafe { free(p, "thing_free") };
        // The memory is still the call's: the tag says freed.
        assert!(unsafe { hold(p, "thing") }.is_err());
        assert!(unsafe { peek(p) }.is_none());
        drop(held);
    }
}
