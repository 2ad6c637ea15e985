//! Operations that end by calling a function instead of blocking a thread
//! (docs/client.md, "Without a waiting thread"): the `*_then` calls of [`Client`] and
//! [`Lock`], and [`Pending`], which cancels one. They start the very operations of the
//! blocking calls; only who hears the outcome differs. No thread is created or kept
//! per operation: a waiting acquire is an entry in the client's table, nothing more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::api::Client;
use super::calls::{acquired, check_acquire, far, holder, pool_info, resolution, Resolution};
use super::core::{OpId, Outcome, Target};
use super::error::{AcquireError, ClientError, ReleaseError};
use super::io::{Completion, Handle};
use super::lock::{check_key, Lock};
use super::outcome::{HolderInfo, PoolInfo, ReleaseOutcome};
use crate::proto::frame::{Request, Response};

/// An operation started by a `*_then` call, to cancel it. Dropping it cancels nothing.
#[derive(Clone)]
#[must_use = "keep it to cancel the operation; dropping it cancels nothing"]
pub struct Pending {
    handle: Option<Handle>,
    op: Option<OpId>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("op", &self.op).finish()
    }
}

impl Pending {
    /// An operation that ended before it started (its arguments were refused): its
    /// callback ran already.
    pub(crate) fn ended() -> Pending {
        Pending { handle: None, op: None }
    }

    /// Stops waiting for the operation. Its callback still runs exactly once, at once
    /// (possibly on this thread, before `cancel` returns) unless it ran already:
    /// - an acquire not yet put on a connection ends [`AcquireError::Cancelled`]: not
    ///   acquired, nothing sent;
    /// - an acquire already sent ends [`AcquireError::Indeterminate`] with cause
    ///   [`IndeterminateCause::Cancelled`](super::IndeterminateCause::Cancelled): it is
    ///   never sent again, and a grant that happens anyway is released by the client
    ///   (or adopted by [`Client::resolve`]);
    /// - a query ends [`ClientError::Cancelled`]; a resolve ends
    ///   [`Resolution::Unknown`] and the client's background check goes on;
    /// - a release goes on in the background (its deadline, its orphan record) and its
    ///   callback gets [`ReleaseError::Cancelled`].
    ///
    /// Returns false when the operation had ended already. Never blocks.
    pub fn cancel(&self) -> bool {
        self.live().is_some_and(|(handle, op)| handle.shared.cancel(op))
    }

    /// When a thread that waits for the operation drives the client's time itself: a
    /// little past its deadline, which the timer thread may miss on a starved machine
    /// (as a blocking call does). None once it ended, or when it had none.
    pub(crate) fn late_at(&self) -> Option<Instant> {
        self.live().and_then(|(handle, op)| handle.shared.late_at(op))
    }

    /// Does now what the timer thread would, for a waiter past [`Pending::late_at`].
    pub(crate) fn drive_late(&self) {
        if let Some((handle, op)) = self.live() {
            handle.shared.drive_late(op);
        }
    }

    /// The client and the operation, unless it ended before it started or this is a
    /// forked child (which must not touch the parent's client).
    fn live(&self) -> Option<(&Handle, OpId)> {
        match (&self.handle, self.op) {
            (Some(handle), Some(op)) if !handle.shared.is_forked() => Some((handle, op)),
            _ => None,
        }
    }
}

/// Starts an operation on `handle` whose outcome goes to `done`.
pub(super) fn start(
    handle: &Handle,
    done: Completion,
    start: impl FnOnce(&mut super::core::Core<super::io::Waker>, super::io::Waker, Instant) -> OpId,
) -> Pending {
    let op = handle.shared.start(done, start);
    Pending { handle: Some(handle.clone()), op: Some(op) }
}

impl Client {
    /// [`Client::acquire`] without a waiting thread: returns at once and calls `done`
    /// once with the outcome — on a thread of the client (the connection's reader, the
    /// timer thread) or, when it ends at once (arguments refused, no server can be
    /// used), on this thread before returning. `done` must not block: it holds up the
    /// client's other work on that thread while it runs. The operation keeps the client
    /// open until it ends.
    pub fn acquire_then(
        &self,
        key: &str,
        lease: Duration,
        wait: Duration,
        done: impl FnOnce(Result<Lock, AcquireError>) + Send + 'static,
    ) -> Pending {
        let lease_s = match check_acquire(key, lease, wait) {
            Ok(_) if self.handle().shared.is_forked() => {
                let why = self.handle().shared.forked().unwrap_or_default();
                done(Err(AcquireError::Forked(why)));
                return Pending::ended();
            }
            Ok(lease_s) => lease_s,
            Err(e) => {
                done(Err(e));
                return Pending::ended();
            }
        };
        let (handle, owner, key_owned) =
            (self.handle().clone(), Arc::clone(self.owner_arc()), key.to_owned());
        let completion: Completion =
            Box::new(move |outcome| done(acquired(&handle, &key_owned, &owner, outcome)));
        let owner = self.owner_arc();
        start(self.handle(), completion, |core, waker, now| {
            core.acquire(waker, key, owner, lease_s, wait, None, now)
        })
    }

    /// [`Client::query`] without a waiting thread; `done` as for
    /// [`Client::acquire_then`]. Ends within the request timeout.
    pub fn query_then(
        &self,
        key: &str,
        done: impl FnOnce(Result<Option<HolderInfo>, ClientError>) + Send + 'static,
    ) -> Pending {
        self.read_then(key, Request::Query { key: key.to_owned() }, holder, done)
    }

    /// [`Client::pool`] without a waiting thread; `done` as for
    /// [`Client::acquire_then`]. Ends within the request timeout.
    pub fn pool_then(
        &self,
        key: &str,
        done: impl FnOnce(Result<PoolInfo, ClientError>) + Send + 'static,
    ) -> Pending {
        self.read_then(key, Request::Pool { key: key.to_owned() }, pool_info, done)
    }

    /// A linearizable read about `key` (`request`), its answer read by `answer`.
    fn read_then<T: 'static>(
        &self,
        key: &str,
        request: Request,
        answer: fn(Response) -> Result<T, ClientError>,
        done: impl FnOnce(Result<T, ClientError>) + Send + 'static,
    ) -> Pending {
        if let Err(e) = check_key(key).map_err(ClientError::Invalid).and_then(|()| self.usable()) {
            done(Err(e));
            return Pending::ended();
        }
        let completion: Completion = Box::new(move |outcome| {
            done(match outcome {
                Outcome::Read(result) => result.and_then(answer),
                other => unreachable!("a read ended with {other:?}"),
            })
        });
        let deadline = Instant::now() + self.request_timeout();
        start(self.handle(), completion, |core, waker, now| {
            core.read(waker, request, Target::Any, deadline, now)
        })
    }

    /// [`Client::release`] without a waiting thread; `done` as for
    /// [`Client::acquire_then`]. Ends within the release deadline (5 s).
    pub fn release_then(
        &self,
        key: &str,
        token: u64,
        done: impl FnOnce(Result<ReleaseOutcome, ReleaseError>) + Send + 'static,
    ) -> Pending {
        release_then(self.handle(), self.owner_arc(), key, token, Box::new(done))
    }

    /// [`Client::resolve`] without a waiting thread; `done` as for
    /// [`Client::acquire_then`]. Ends within `timeout`.
    pub fn resolve_then(
        &self,
        err: &AcquireError,
        timeout: Duration,
        done: impl FnOnce(Resolution) + Send + 'static,
    ) -> Pending {
        let AcquireError::Indeterminate(attempt) = err else {
            done(Resolution::NotHeld);
            return Pending::ended();
        };
        if self.handle().shared.is_forked() {
            done(Resolution::Unknown);
            return Pending::ended();
        }
        let (handle, kept) = (self.handle().clone(), attempt.clone());
        let completion: Completion = Box::new(move |outcome| done(resolution(&handle, &kept, outcome)));
        start(self.handle(), completion, |core, waker, now| {
            core.resolve(waker, attempt, far(now, timeout), now)
        })
    }
}

/// A release of (key, owner, token) whose outcome goes to `done`.
fn release_then(
    handle: &Handle,
    owner: &Arc<str>,
    key: &str,
    token: u64,
    done: Box<dyn FnOnce(Result<ReleaseOutcome, ReleaseError>) + Send>,
) -> Pending {
    if let Err(why) = check_key(key) {
        done(Err(ReleaseError::Invalid(why)));
        return Pending::ended();
    }
    if let Some(why) = handle.shared.forked() {
        done(Err(ReleaseError::Forked(why)));
        return Pending::ended();
    }
    // The release queue's bound refuses it at once, before any waker is kept.
    let done = Arc::new(std::sync::Mutex::new(Some(done)));
    let in_completion = Arc::clone(&done);
    let completion: Completion = Box::new(move |outcome| {
        let taken = in_completion.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(done) = taken {
            done(match outcome {
                Outcome::Release(result) => result,
                other => unreachable!("a release ended with {other:?}"),
            })
        }
    });
    let started =
        handle.shared.start(completion, |core, waker, now| core.release(Some(waker), key, owner, token, now));
    let op = match started {
        Ok(op) => op,
        Err(e) => {
            // Refused at once (the release queue is full): the completion was dropped
            // unused.
            if let Some(done) = done.lock().unwrap_or_else(|e| e.into_inner()).take() {
                done(Err(e));
            }
            return Pending::ended();
        }
    };
    Pending { handle: Some(handle.clone()), op: Some(op) }
}

impl Lock {
    /// [`Lock::release`] without a waiting thread; `done` as for
    /// [`Client::acquire_then`]. Ends within the release deadline (5 s).
    pub fn release_then(
        self,
        done: impl FnOnce(Result<ReleaseOutcome, ReleaseError>) + Send + 'static,
    ) -> Pending {
        self.release_keeping(move |_, result| done(result))
    }

    /// Releases without a waiting thread and hands the lock back with the outcome:
    /// released for good after an outcome (or an invalid release), releasable again
    /// after any other error (the C ABI's future of `ticketing_lock_release`).
    pub(crate) fn release_keeping(
        mut self,
        done: impl FnOnce(Lock, Result<ReleaseOutcome, ReleaseError>) + Send + 'static,
    ) -> Pending {
        if self.is_released() {
            let result = Err(ReleaseError::Invalid("the lock was already released".into()));
            done(self, result);
            return Pending::ended();
        }
        let (handle, owner, key, token) = self.release_parts();
        release_then(
            &handle,
            &owner,
            &key,
            token,
            Box::new(move |result| {
                let result = self.settle_release(result);
                done(self, result)
            }),
        )
    }
}
