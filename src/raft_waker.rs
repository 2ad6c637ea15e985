//! How other threads wake the Raft loop: the waker's token and `RaftWaker` — a leaf
//! below `server/` (the lock-table thread wakes the loop) and `cluster/` (which runs it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mio::{Poll, Token, Waker};

/// The waker's token; connections use the tokens above it.
pub const WAKER: Token = Token(0);

/// Makes the waker for a loop's `Poll`.
pub fn waker(poll: &Poll) -> std::io::Result<Arc<RaftWaker>> {
    Ok(Arc::new(RaftWaker { waker: Waker::new(poll.registry(), WAKER)?, sleeping: AtomicBool::new(false) }))
}

/// How other threads wake the Raft loop after queueing a `ToRaft` for it.
///
/// Why not always through the event fd: under load the lock-table thread ends a round
/// (and would write the event fd) mostly while the loop is awake anyway, and each
/// write is a system call that also makes the loop's next `epoll_wait` return at once.
/// The loop says when it may sleep (`sleeping`, set before it looks at its queue a
/// last time); a waker writes the event fd only then. Either the loop sees the new
/// message in that last look, or the waker sees the flag (SeqCst fences on both
/// sides).
pub struct RaftWaker {
    waker: Waker,
    sleeping: AtomicBool,
}

impl RaftWaker {
    /// The loop's own: whether it may sleep (true just before its last look at its
    /// queue, false once awake).
    pub fn set_sleeping(&self, sleeping: bool) {
        self.sleeping.store(sleeping, Ordering::SeqCst);
    }

    /// Wakes the loop if it sleeps or is about to; call after queueing its message.
    pub fn wake(&self) -> std::io::Result<()> {
        // The fence pairs with the loop's (see `run`), whatever orderings the channel
        // uses inside. Every waker that sees the flag writes — not only the first: a
        // first waker preempted between its look and its write would otherwise hold
        // the loop asleep for everyone; the loop clears the flag itself.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            return self.waker.wake();
        }
        Ok(())
    }
}
