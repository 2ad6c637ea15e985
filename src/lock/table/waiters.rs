//! Waiters leaving their lines: forgotten when granted, dropped when their wait
//! elapses or their connection closes (which may let later requests through).

use super::{LockTable, Output, Waiter};
use crate::lock::command::Command;
use crate::lock::ConnId;

/// The invariant a waiter's bookkeeping keeps.
pub(super) const WAITER: &str = "a waiter never both queued and holding";

impl LockTable {
    /// Takes waiter `w` out of the waiter list, its timer and its connection's list
    /// (not out of the lines: the caller does that). Its owner reference goes to the
    /// caller.
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
        waiter
    }

    /// Takes waiter `w` out of the lines and forgets it. Requests it held up that now
    /// meet the rule are granted (proposed into `out`).
    pub(super) fn drop_waiter(&mut self, w: u32, now_ms: u64, unix_us: u64, out: &mut Output) -> Waiter {
        // A waiter granted left the lines, its timer and its connection's list at
        // once: nothing may drop it afterwards.
        let Some(seq) = self.waiters[w as usize].as_ref().map(|waiter| waiter.seq) else {
            crate::invariant::violated(WAITER, format_args!("waiter {w} dropped after it left its queue"));
        };
        let keys: Vec<_> =
            self.lines.wants(seq).map(|ws| ws.iter().map(|x| x.key).collect()).unwrap_or_default();
        let granted = match self.lines.leave(seq, now_ms) {
            Some((_, granted)) => granted,
            None => {
                crate::invariant::violated(WAITER, format_args!("waiter {w} (arrival {seq}) is in no line"))
            }
        };
        let waiter = self.forget_waiter(w);
        self.state.owners_mut().release(waiter.owner);
        for hold in self.project_grants(granted, now_ms, unix_us) {
            out.proposals.push_back(Command::Hold { hold });
        }
        for slot in keys {
            self.settle(slot);
        }
        waiter
    }

    /// A connection closed: its waiters leave their lines silently. Its holds stay:
    /// only a release or the lease ends a hold.
    pub fn conn_closed(&mut self, conn: ConnId, now_ms: u64, unix_us: u64, out: &mut Output) {
        let Some(mut list) = self.conn_waiters.get(&conn).cloned() else {
            return;
        };
        // Latest first: a waiter holds up only requests that came after it, so each one
        // that leaves can let through only others' requests, never this connection's
        // own (which would be granted to a connection that is gone).
        list.sort_unstable_by_key(|&w| {
            std::cmp::Reverse(self.waiters[w as usize].as_ref().map_or(0, |x| x.seq))
        });
        for w in list {
            self.drop_waiter(w, now_ms, unix_us, out);
        }
    }
}
