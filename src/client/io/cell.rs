//! Who waits for an operation's outcome ([`Waker`]): a completion, or a calling thread
//! on its [`Cell`] — one cell per thread,
//! reused by every call it makes (no allocation, no channel per request), woken through
//! its condition variable. A thread waits for one operation at a time (every call
//! blocks), and the core ends every operation exactly once, so the cell holds at most
//! one outcome.
//!
//! A thread whose thread-local storage is gone or going — a call from an `atexit`
//! handler, a C++ global destructor, a `pthread_key` destructor — gets a cell of its
//! own for that call instead (one allocation): every call works from there too.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::sync::lock;
use crate::client::core::{OpId, Outcome};

/// Who waits for an operation's outcome.
pub(crate) enum Waker {
    /// A calling thread, parked on its cell.
    Thread(Arc<Cell>),
    /// A completion: called once with the outcome, on whichever thread ended the
    /// operation (a connection's reader, the timer thread, or the starting thread when
    /// it ended at once), after the state mutex was let go. No thread waits.
    Done(Completion),
}

/// What an operation started without a waiting thread runs when it ends.
pub(crate) type Completion = Box<dyn FnOnce(Outcome) + Send>;

impl Waker {
    pub(super) fn wake(self, op: OpId, outcome: Outcome) {
        match self {
            Waker::Thread(cell) => cell.put(op, outcome),
            Waker::Done(done) => done(outcome),
        }
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waker::Thread(_) => "Waker::Thread",
            Waker::Done(_) => "Waker::Done",
        })
    }
}

pub(crate) struct Cell {
    slot: Mutex<Option<(OpId, Outcome)>>,
    ready: Condvar,
}

thread_local! {
    static CELL: Arc<Cell> = Arc::new(Cell::new());
}

impl Cell {
    fn new() -> Cell {
        Cell { slot: Mutex::new(None), ready: Condvar::new() }
    }

    /// The calling thread's cell; a fresh one where thread-local storage cannot be
    /// used (the thread or the process is shutting down).
    pub(crate) fn mine() -> Arc<Cell> {
        CELL.try_with(Arc::clone).unwrap_or_else(|_| Arc::new(Cell::new()))
    }

    /// Hands `outcome` of `op` to the waiting thread and wakes it.
    pub(crate) fn put(&self, op: OpId, outcome: Outcome) {
        *lock(&self.slot) = Some((op, outcome));
        self.ready.notify_one();
    }

    /// Waits until the outcome of `op` arrives (returned) or `until` passes (`None`).
    pub(crate) fn wait(&self, op: OpId, until: Option<Instant>) -> Option<Outcome> {
        let mut slot = lock(&self.slot);
        loop {
            match slot.take() {
                Some((got, outcome)) if got == op => return Some(outcome),
                Some(other) => {
                    // Not this operation's: never happens (one operation per thread at
                    // a time); kept rather than lost.
                    debug_assert!(false, "outcome of {:?} in the cell of {op:?}", other.0);
                    *slot = Some(other);
                    return None;
                }
                None => {}
            }
            slot = match until {
                None => self.ready.wait(slot).unwrap_or_else(|e| e.into_inner()),
                Some(until) => {
                    let now = Instant::now();
                    if now >= until {
                        return None;
                    }
                    self.ready.wait_timeout(slot, until - now).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
}

/// What a blocking caller runs every `slice` while it waits — a host's own signal
/// handling (Python's Ctrl-C, Java's interrupt). True stops the wait: the operation is
/// cancelled (`Core::cancel`) and its cancelled outcome is the call's.
pub(crate) struct WaitCheck {
    pub(crate) check: Box<dyn Fn() -> bool>,
    pub(crate) slice: Duration,
}

thread_local! {
    /// The calling thread's wait check, if its host set one: signals and interrupts
    /// belong to threads (Python runs its handlers on the main thread only).
    static WAIT_CHECK: RefCell<Option<Rc<WaitCheck>>> = const { RefCell::new(None) };
}

/// Sets (or, with `None`, removes) the wait check of the calling thread's blocking
/// calls from now on.
pub(crate) fn set_wait_check(check: Option<WaitCheck>) {
    let _ = WAIT_CHECK.try_with(|c| *c.borrow_mut() = check.map(Rc::new));
}

/// The calling thread's wait check.
pub(crate) fn wait_check() -> Option<Rc<WaitCheck>> {
    WAIT_CHECK.try_with(|c| c.borrow().clone()).ok().flatten()
}

thread_local! {
    /// Set while the calling thread starts an operation that it waits for at once
    /// through a completion ([`waiting_after`]).
    static WAITS_AFTER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `start`, which starts operations with a completion that the calling thread
/// then waits for at once (the C ABI's blocking calls, built on its futures): this
/// thread writes their requests itself, as a blocking call does, rather than handing
/// them to the writer thread as a start from an event loop does (one thread hand-over
/// less per request).
pub(crate) fn waiting_after<R>(start: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = WAITS_AFTER.try_with(|w| w.set(self.0));
        }
    }
    let _reset = Reset(WAITS_AFTER.try_with(|w| w.replace(true)).unwrap_or(false));
    start()
}

/// Does the calling thread wait at once for what it starts ([`waiting_after`])? False
/// where its thread-local storage is gone: the writer thread writes then.
pub(crate) fn waits_after() -> bool {
    WAITS_AFTER.try_with(std::cell::Cell::get).unwrap_or(false)
}
