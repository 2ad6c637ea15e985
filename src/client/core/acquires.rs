//! Starting ACQUIREs and HOLDs, and the places in line a waiting HOLD is told (news
//! before its answer, handed to the caller's function outside the client's locks).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::AcquireOp;
use super::cx::Action;
use super::ids::{OpId, SessionId};
use super::ops::Kind;
use super::session::Waiting;
use super::Core;
use crate::client::place::{OnPlace, Place};
use crate::proto::frame::HoldPart;

impl<W> Core<W> {
    /// Starts an ACQUIRE of `key` for `lease_s` seconds (1..=250), queueing at most
    /// `wait` (0..=300 s), sent no later than `send_by` if given (else `Unavailable`).
    /// The caller checked the limits. Ends with [`Outcome::Acquire`].
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        waker: W,
        key: &str,
        owner: &Arc<str>,
        lease_s: u8,
        wait: Duration,
        send_by: Option<Instant>,
        now: Instant,
    ) -> OpId {
        let now = self.advance(now);
        self.world.claims.acquire_started(key, owner);
        let op = AcquireOp::new(key.to_owned(), Arc::clone(owner), lease_s, wait, send_by, now);
        let id = self.spawn(Some(waker), Kind::Acquire(op));
        self.settle();
        id
    }

    /// Starts a HOLD of `parts` (checked against the protocol's limits by the caller),
    /// its places in line to `on_place` if given ([`Action::Place`]). Ends with
    /// [`Outcome::Acquire`](super::Outcome::Acquire).
    #[allow(clippy::too_many_arguments)]
    pub fn hold(
        &mut self,
        waker: W,
        parts: Vec<HoldPart>,
        on_place: Option<OnPlace>,
        owner: &Arc<str>,
        lease_s: u8,
        wait: Duration,
        now: Instant,
    ) -> OpId {
        let now = self.advance(now);
        let op = AcquireOp::hold(parts, on_place, Arc::clone(owner), lease_s, wait, now);
        // Under way on every key it names: a holder of any of them may be its grant.
        for key in op.keys() {
            self.world.claims.acquire_started(key, owner);
        }
        let id = self.spawn(Some(waker), Kind::Acquire(op));
        self.settle();
        id
    }

    /// A place in line arrived for request `id` on `session`: the request stays
    /// pending, and its caller's function (if it gave one) is handed the news.
    pub(super) fn in_line(&mut self, session: SessionId, id: u32, ahead: u32, grants_per_ks: u32) {
        let op =
            self.world.net.session(session).and_then(|s| s.pending_entry(id)).and_then(|p| match p.waiting {
                Waiting::Op(op) => Some(op),
                _ => None,
            });
        let news = op.and_then(|op| match self.ops.kind(op) {
            Some(Kind::Acquire(a)) => a.place_news(Place::new(ahead, grants_per_ks)),
            _ => None,
        });
        self.actions.extend(news.map(Action::Place));
    }
}
