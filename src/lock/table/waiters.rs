//! Waiters leaving their queue: forgotten when handed the key, dropped when their wait
//! elapses or their connection closes.

use super::{LockTable, Waiter};
use crate::lock::ConnId;

/// The invariant a waiter's bookkeeping keeps.
pub(super) const WAITER: &str = "a waiter never both queued and holding";

impl LockTable {
    /// Takes waiter `w` out of the waiter list, its timer and its connection's list
    /// (not out of its key's queue: the caller does that). Its owner reference goes to
    /// the caller.
    pub(super) fn forget_waiter(&mut self, w: u32) -> Waiter {
        let Some(waiter) = self.waiters[w as usize].take() else {
            crate::invariant::violated(WAITER, format_args!("waiter {w} forgotten twice"));
        };
        self.free_waiters.push(w);
        self.waits.remove(w);
        if let Some(list) = self.conn_waiters.get_mut(&waiter.conn) {
            list.retain(|&x| x != w);
            if list.is_empty() {
                self.conn_waiters.remove(&waiter.conn);
            }
        }
        self.waiters_total -= 1;
        waiter
    }

    /// Takes waiter `w` out of its key's queue and forgets it.
    pub(super) fn drop_waiter(&mut self, w: u32) -> Waiter {
        // A waiter handed the key left its queue, its timer and its connection's list
        // at once: nothing may drop it afterwards.
        let Some(slot) = self.waiters[w as usize].as_ref().map(|waiter| waiter.slot) else {
            crate::invariant::violated(WAITER, format_args!("waiter {w} dropped after it left its queue"));
        };
        if let Some(ov) = self.overrides.get_mut(&slot) {
            if let Some(pos) = ov.queue.iter().position(|&x| x == w) {
                ov.queue.remove(pos);
                if ov.queue.is_empty() {
                    self.queued_keys -= 1;
                }
            }
        }
        let waiter = self.forget_waiter(w);
        self.state.owners_mut().release(waiter.owner);
        self.settle(slot);
        waiter
    }

    /// A connection closed: its waiters leave their queues silently. Its holds stay:
    /// only a release or the lease ends a hold.
    pub fn conn_closed(&mut self, conn: ConnId) {
        let Some(list) = self.conn_waiters.get(&conn).cloned() else {
            return;
        };
        for w in list {
            self.drop_waiter(w);
        }
    }
}
