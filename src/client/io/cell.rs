//! Where a calling thread waits for the outcome of its operation: one cell per thread,
//! reused by every call it makes (no allocation, no channel per request), woken with
//! `unpark`. A thread waits for one operation at a time (every call blocks), and the
//! core ends every operation exactly once, so the cell holds at most one outcome.

use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::Instant;

use super::sync::lock;
use crate::client::core::{OpId, Outcome};

pub(crate) struct Cell {
    slot: Mutex<Option<(OpId, Outcome)>>,
    thread: Thread,
}

thread_local! {
    static CELL: Arc<Cell> = Arc::new(Cell { slot: Mutex::new(None), thread: std::thread::current() });
}

impl Cell {
    /// The calling thread's cell.
    pub(crate) fn mine() -> Arc<Cell> {
        CELL.with(Arc::clone)
    }

    /// Hands `outcome` of `op` to the waiting thread and wakes it.
    pub(crate) fn put(&self, op: OpId, outcome: Outcome) {
        *lock(&self.slot) = Some((op, outcome));
        self.thread.unpark();
    }

    /// The outcome of `op`, if it arrived.
    pub(crate) fn take(&self, op: OpId) -> Option<Outcome> {
        let mut slot = lock(&self.slot);
        match slot.take() {
            Some((got, outcome)) if got == op => Some(outcome),
            Some(other) => {
                // Not this operation's: never happens (one operation per thread at a
                // time); kept rather than lost.
                debug_assert!(false, "outcome of {:?} in the cell of {op:?}", other.0);
                *slot = Some(other);
                None
            }
            None => None,
        }
    }

    /// Parks the calling thread (the cell's own) until woken or `until` passes.
    pub(crate) fn park(until: Option<Instant>) {
        match until {
            None => std::thread::park(),
            Some(until) => {
                let now = Instant::now();
                if until > now {
                    std::thread::park_timeout(until - now);
                }
            }
        }
    }
}
