//! Where a calling thread waits for the outcome of its operation: one cell per thread,
//! reused by every call it makes (no allocation, no channel per request), woken through
//! its condition variable. A thread waits for one operation at a time (every call
//! blocks), and the core ends every operation exactly once, so the cell holds at most
//! one outcome.
//!
//! A thread whose thread-local storage is gone or going — a call from an `atexit`
//! handler, a C++ global destructor, a `pthread_key` destructor — gets a cell of its
//! own for that call instead (one allocation): every call works from there too.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::sync::lock;
use crate::client::core::{OpId, Outcome};

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
