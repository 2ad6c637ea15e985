//! The running operations: each one's state machine, who waits for it, and its timer
//! (one ordered set of deadlines for all of them). [`Ops::run`] runs one reaction of
//! an operation and keeps what it decided: its next timer, whether it waits for a
//! session, or its end.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::time::Instant;

use super::acquire::AcquireOp;
use super::cx::{Config, Cx, Next, Outcome, World};
use super::ids::{IdHasher, OpId, SessionId};
use super::read::ReadOp;
use super::release::{ReleaseOp, Reply};
use super::resolve::{OrphanCheck, ResolveOp};
use super::session::Pending;
use crate::client::error::ClientError;
use crate::proto::frame::Response;

/// An operation's state machine.
#[derive(Debug)]
pub(crate) enum Kind {
    Acquire(AcquireOp),
    Release(ReleaseOp),
    Read(ReadOp),
    Resolve(ResolveOp),
    Check(OrphanCheck),
}

impl Kind {
    /// Its first reaction.
    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Next {
        match self {
            Kind::Resolve(r) => r.start(cx),
            other => other.route(cx),
        }
    }

    /// Routing may have changed (a session came up, the leader moved): an operation
    /// waiting for a session looks again.
    pub(crate) fn route(&mut self, cx: &mut Cx<'_>) -> Next {
        match self {
            Kind::Acquire(a) => a.route(cx),
            Kind::Release(r) => r.route(cx),
            Kind::Read(r) => r.route(cx),
            Kind::Resolve(r) => r.route(cx),
            Kind::Check(c) => {
                let next = c.read.route(cx);
                c.after_read(next, cx)
            }
        }
    }

    pub(crate) fn on_timer(&mut self, cx: &mut Cx<'_>) -> Next {
        match self {
            Kind::Acquire(a) => a.on_timer(cx),
            Kind::Release(r) => r.on_timer(cx),
            Kind::Read(r) => r.on_timer(cx),
            Kind::Resolve(r) => r.on_timer(cx),
            Kind::Check(c) => {
                let next = c.read.on_timer(cx);
                c.after_read(next, cx)
            }
        }
    }

    /// The answer to its request `id` on `session`.
    pub(crate) fn on_answer(
        &mut self,
        session: SessionId,
        id: u32,
        pending: &Pending,
        response: Response,
        cx: &mut Cx<'_>,
    ) -> Next {
        match self {
            Kind::Acquire(a) => a.on_answer(response, pending, cx),
            Kind::Release(r) => r.on_reply(session, id, Reply::Answer(response), cx),
            Kind::Read(r) => r.on_answer(session, response, cx),
            Kind::Resolve(r) => r.on_answer(session, response, cx),
            Kind::Check(c) => {
                let next = c.read.on_answer(session, response, cx);
                c.after_read(next, cx)
            }
        }
    }

    /// The session carrying its request `id` ended before an answer (`maybe_written`:
    /// some byte of the request may have reached the server).
    pub(crate) fn on_ended(
        &mut self,
        session: SessionId,
        id: u32,
        pending: &Pending,
        maybe_written: bool,
        cx: &mut Cx<'_>,
    ) -> Next {
        match self {
            Kind::Acquire(a) => a.on_ended(maybe_written, pending, cx),
            Kind::Release(r) => {
                let reply = if maybe_written { Reply::Lost } else { Reply::Unsent };
                r.on_reply(session, id, reply, cx)
            }
            Kind::Read(r) => r.on_ended(cx),
            Kind::Resolve(r) => r.on_ended(cx),
            Kind::Check(c) => {
                let next = c.read.on_ended(cx);
                c.after_read(next, cx)
            }
        }
    }

    /// Its caller cancelled it: how it ends now. `None` for the kinds that go on
    /// without their caller (a release) or have none (an orphan check).
    pub(crate) fn cancel(&mut self, cx: &mut Cx<'_>) -> Option<Next> {
        match self {
            Kind::Acquire(a) => Some(a.cancel(cx)),
            Kind::Read(r) => {
                r.forget(cx);
                Some(Next::Done(Outcome::Read(Err(ClientError::Cancelled))))
            }
            Kind::Resolve(r) => Some(r.cancel(cx)),
            Kind::Release(_) | Kind::Check(_) => None,
        }
    }

    /// True while it waits for a session.
    fn unrouted(&self) -> bool {
        match self {
            Kind::Acquire(a) => a.unrouted(),
            Kind::Read(r) => r.unrouted(),
            Kind::Resolve(r) => r.unrouted(),
            Kind::Check(c) => c.read.unrouted(),
            Kind::Release(r) => r.unrouted(),
        }
    }
}

/// A running operation.
pub(crate) struct Entry<W> {
    /// Who waits for its outcome (None: it runs in the background).
    pub(crate) waker: Option<W>,
    pub(crate) kind: Kind,
    timer: Option<Instant>,
}

/// The table of running operations.
pub(crate) struct Ops<W> {
    table: HashMap<OpId, Entry<W>, BuildHasherDefault<IdHasher>>,
    next: u64,
    timers: BTreeSet<(Instant, OpId)>,
    /// Operations waiting for a session, tried again whenever routing may have changed.
    unrouted: Vec<OpId>,
}

impl<W> Ops<W> {
    pub(crate) fn new() -> Ops<W> {
        Ops { table: HashMap::default(), next: 1, timers: BTreeSet::new(), unrouted: Vec::new() }
    }

    /// Registers an operation (its first reaction is the caller's to run).
    pub(crate) fn insert(&mut self, waker: Option<W>, kind: Kind) -> OpId {
        let op = OpId(self.next);
        self.next += 1;
        self.table.insert(op, Entry { waker, kind, timer: None });
        op
    }

    /// Whether `op` is running, and of which kind.
    pub(crate) fn kind(&self, op: OpId) -> Option<&Kind> {
        self.table.get(&op).map(|e| &e.kind)
    }

    /// Takes the caller's waker off `op`, which goes on in the background.
    pub(crate) fn detach(&mut self, op: OpId) -> Option<W> {
        self.table.get_mut(&op).and_then(|e| e.waker.take())
    }

    /// When `op` next needs the time, if it is still running.
    pub(crate) fn deadline(&self, op: OpId) -> Option<Instant> {
        self.table.get(&op).and_then(|e| e.timer)
    }

    /// The earliest timer of any operation.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// An operation whose timer is due at `now`, its timer cleared.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<OpId> {
        let &(at, op) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.timers.pop_first();
        if let Some(entry) = self.table.get_mut(&op) {
            entry.timer = None;
        }
        Some(op)
    }

    /// The operations waiting for a session (each run puts those still waiting back).
    pub(crate) fn take_unrouted(&mut self) -> Vec<OpId> {
        std::mem::take(&mut self.unrouted)
    }

    /// Runs one reaction of `op`. Returns the operation and its outcome when it ended.
    pub(crate) fn run(
        &mut self,
        op: OpId,
        world: &mut World,
        config: &Config,
        now: Instant,
        closing: bool,
        react: impl FnOnce(&mut Kind, &mut Cx<'_>) -> Next,
    ) -> Option<(Entry<W>, Outcome)> {
        let mut entry = self.table.remove(&op)?;
        let next = react(&mut entry.kind, &mut world.cx(config, now, op, closing));
        if let Some(at) = entry.timer.take() {
            self.timers.remove(&(at, op));
        }
        match next {
            Next::Wait(at) => {
                if let Some(at) = at {
                    self.timers.insert((at, op));
                }
                entry.timer = at;
                if entry.kind.unrouted() && !self.unrouted.contains(&op) {
                    self.unrouted.push(op);
                }
                self.table.insert(op, entry);
                None
            }
            Next::Done(outcome) => {
                self.unrouted.retain(|o| *o != op);
                Some((entry, outcome))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::core::net::Target;
    use crate::client::core::scene_tests::Scene;
    use crate::proto::frame::Request;

    /// Operations waiting for a connection stay on the routing list when another ends:
    /// a connection that comes up sends each at once, not at its next timer.
    #[test]
    fn an_operation_that_ends_leaves_the_others_waiting_for_a_connection_listed() {
        let mut scene = Scene::new(&["a:1"]);
        let mut ops: Ops<()> = Ops::new();
        let deadline = scene.now + Duration::from_secs(5);
        let read =
            || Kind::Read(ReadOp::new(Request::Query { key: "k".into() }, Target::Any, deadline, scene.now));
        let (first, second) = (ops.insert(None, read()), ops.insert(None, read()));
        let (now, config) = (scene.now, &scene.config);
        for op in [first, second] {
            assert!(ops.run(op, &mut scene.world, config, now, false, |k, cx| k.start(cx)).is_none());
        }
        assert_eq!(ops.take_unrouted(), vec![first, second], "no connection up: both wait to be routed");
        for op in [first, second] {
            ops.run(op, &mut scene.world, config, now, false, |k, cx| k.start(cx));
        }
        let ended = ops.run(first, &mut scene.world, config, now, false, |_, _| {
            Next::Done(Outcome::Read(Err(ClientError::Cancelled)))
        });
        assert!(ended.is_some());
        assert_eq!(ops.take_unrouted(), vec![second]);
    }
}
