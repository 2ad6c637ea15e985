//! Cancelling an operation: its caller stops waiting (a cancelled future, task or
//! interrupted call), and the operation ends now by the rule each kind keeps.

use std::time::Instant;

use super::cx::{Action, Next, Outcome};
use super::ids::OpId;
use super::ops::Kind;
use super::Core;
use crate::client::error::ReleaseError;

impl<W> Core<W> {
    /// The caller of `op` stops waiting for it (a cancelled future or task). An ACQUIRE
    /// not yet on a connection ends `Cancelled`; one queued or written ends
    /// `Indeterminate` (cause `Cancelled`) with an orphan record, so a grant that
    /// happens anyway is released — nothing is sent again. A read ends `Cancelled`; a
    /// resolve ends `Unknown` and the background check takes its record back. A release
    /// goes on in the background (deadline, orphan record) and its caller gets
    /// `Cancelled` now. Each ends with its [`Action::Complete`] as usual. False when
    /// `op`'s caller has had its outcome already (or it is being delivered), a
    /// cancelled release's `Cancelled` included.
    pub fn cancel(&mut self, op: OpId, now: Instant) -> bool {
        self.advance(now);
        match self.ops.kind(op) {
            None | Some(Kind::Check(_)) => return false,
            Some(Kind::Release(_)) => {
                // Its caller was told already (an earlier cancel): nothing to end.
                let Some(waker) = self.ops.detach(op) else { return false };
                let outcome = Outcome::Release(Err(ReleaseError::Cancelled));
                self.actions.push_back(Action::Complete { waker, op, outcome });
            }
            Some(_) => self.run(op, |kind, cx| kind.cancel(cx).unwrap_or(Next::Wait(None))),
        }
        self.settle();
        true
    }
}
