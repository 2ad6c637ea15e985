//! The client's decisions, as a deterministic state machine with no I/O
//! (docs/client.md, "Structure").
//!
//! [`Core`] takes every decision of the client (routing, the resend rule, `Indeterminate`,
//! late grants, release retries, leader following, discovery, dead-session detection,
//! resolve, orphan checks) and never touches a socket, a thread or the clock. Inputs:
//! caller requests, connection events (`on_*`), time ([`Core::handle_timeout`]), each with
//! `now`. Outputs: [`Action`]s ([`Core::poll_action`]) and the next instant it needs the
//! time ([`Core::poll_timeout`]). `client::io` and `tests/client_sim.rs` drive this very
//! type; `W` wakes a waiting caller.

mod acquire;
mod acquires;
mod cancel;
mod claims;
mod cx;
mod domain_record;
mod domains;
pub(crate) mod ids;
mod members;
mod net;
mod ops;
mod orphans;
mod read;
mod release;
mod resolve;
mod routing;
#[cfg(test)]
mod scene_tests;
mod session;
mod slot;
mod watch;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use acquire::hold_key;
pub use acquire::CONNECT_WAIT_MIN;
pub use cx::{Action, Config, Granted, Outcome, Resolved, PING_ANSWER_TIMEOUT};
pub use domain_record::SEED_SETTLE_MAX;
pub use ids::{OpId, OrphanId, SessionId, SlotId};
pub use members::{RETIRE_GRACE, SEED_FALLBACK_AFTER};
pub use net::{DialFailure, NetEvent, Target};
pub use orphans::ORPHAN_RETRY;
pub(crate) use read::check_answer;
pub use read::MOVED_PAUSE;
pub use release::{RELEASE_ATTEMPT_TIMEOUT, RELEASE_DEADLINE, RELEASE_QUEUE_CAPACITY};
pub use resolve::ORPHAN_CHECK_TIMEOUT;
pub use routing::{LEADER_WAIT, LEARNED_ADDRS_MAX};
pub use session::WriteFailure;
pub use watch::{IDLE_PING_DEFAULT, LEADER_UNKNOWN_RETRY, MEMBERSHIP_REFRESH};

use claims::Claims;
use cx::{Cx, Next, Origin, ReleaseJob, World};
use domain_record::Domains;
use net::Net;
use ops::{Entry, Kind, Ops};
use orphans::{LateGrant, Orphans};
use read::ReadOp;
use release::ReleaseOp;
use resolve::{OrphanCheck, ResolveOp};
use session::{Ended, Pending, Waiting};
use watch::Discovery;

use crate::client::error::{Indeterminate, ReleaseError};
use crate::proto::frame::{Request, Response};
use crate::proto::handshake::Welcome;

/// The client's state machine. See the module docs.
pub struct Core<W> {
    config: Config,
    world: World,
    ops: Ops<W>,
    discovery: Discovery,
    actions: VecDeque<Action<W>>,
    /// Releases under way (the bound of [`RELEASE_QUEUE_CAPACITY`]).
    releases: usize,
    closing: bool,
    shut_down: bool,
    /// The latest instant any input brought (inputs from several threads may arrive
    /// slightly out of order; the core's clock never goes back).
    now: Instant,
}

impl<W> Core<W> {
    /// A core that dials its seeds at once (see the first [`Action`]s).
    pub fn new(config: Config, now: Instant) -> Core<W> {
        let domains = Domains::new(config.named, config.seeds_setting, config.name_setting);
        let world = World {
            net: Net::new(config.seeds.clone(), config.tls, domains, now),
            orphans: Orphans::new(config.commit_margin),
            claims: Claims::new(config.commit_margin),
            jobs: Vec::new(),
        };
        let mut core = Core {
            config,
            world,
            ops: Ops::new(),
            discovery: Discovery::default(),
            actions: VecDeque::new(),
            releases: 0,
            closing: false,
            shut_down: false,
            now,
        };
        core.flush_net_events();
        core
    }

    fn advance(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.world.net.now = self.now;
        self.now
    }

    /// Starts a RELEASE of exactly (key, owner, token). With a waker it ends with
    /// [`Outcome::Release`] (an explicit release); without, it runs in the background
    /// (a dropped lock). Refused when [`RELEASE_QUEUE_CAPACITY`] releases are under way.
    pub fn release(
        &mut self,
        waker: Option<W>,
        key: &str,
        owner: &Arc<str>,
        token: u64,
        now: Instant,
    ) -> Result<OpId, ReleaseError> {
        let now = self.advance(now);
        if self.releases >= RELEASE_QUEUE_CAPACITY {
            return Err(ReleaseError::QueueFull);
        }
        // The server's lease ends up to the commit margin after the local deadline.
        let until = self.world.claims.deadline(token).map(|d| d + self.config.commit_margin);
        let origin = if waker.is_some() { Origin::Explicit } else { Origin::Dropped };
        self.releases += 1;
        let job = ReleaseJob { key: key.to_owned(), owner: Arc::clone(owner), token, origin, until };
        let op = ReleaseOp::begin(job, &mut self.world, self.config.commit_margin, now);
        let id = self.spawn(waker, Kind::Release(op));
        self.settle();
        Ok(id)
    }

    /// Starts a read-only request (QUERY, STATUS, PING, TOP KEYS, MEMBERS) on a session
    /// `target` accepts, answered by `deadline`. Ends with [`Outcome::Read`].
    pub fn read(
        &mut self,
        waker: W,
        request: Request,
        target: Target,
        deadline: Instant,
        now: Instant,
    ) -> OpId {
        let now = self.advance(now);
        let op = ReadOp::new(request, target, deadline, now);
        let id = self.spawn(Some(waker), Kind::Read(op));
        self.settle();
        id
    }

    /// Starts finding out whether the indeterminate ACQUIRE `attempt` holds its key,
    /// by `end`. Ends with [`Outcome::Resolve`].
    pub fn resolve(&mut self, waker: W, attempt: &Indeterminate, end: Instant, now: Instant) -> OpId {
        self.advance(now);
        let id = self.spawn(Some(waker), Kind::Resolve(ResolveOp::new(attempt, end)));
        self.settle();
        id
    }

    /// Registers an operation and runs its first reaction.
    fn spawn(&mut self, waker: Option<W>, kind: Kind) -> OpId {
        let op = self.ops.insert(waker, kind);
        self.run(op, |kind, cx| kind.start(cx));
        op
    }

    /// The operation the request `id` on `session` belongs to, while it is pending: for
    /// observers that see frames, not operations (the client simulator's checker).
    pub fn pending_op(&self, session: SessionId, id: u32) -> Option<OpId> {
        match self.world.net.session(session)?.pending_entry(id)?.waiting {
            Waiting::Op(op) => Some(op),
            _ => None,
        }
    }

    /// When `op` next needs the time, if it is still running.
    pub fn op_deadline(&self, op: OpId) -> Option<Instant> {
        self.ops.deadline(op)
    }

    /// A dial of `slot` ended with a session: the node's WELCOME and the socket
    /// address it was reached at. None when the slot is gone meanwhile (close the
    /// connection).
    pub fn on_connected(
        &mut self,
        slot: SlotId,
        welcome: &Welcome,
        peer: String,
        now: Instant,
    ) -> Option<SessionId> {
        let now = self.advance(now);
        let net = &mut self.world.net;
        let session =
            net.connected(slot, welcome.node_id, welcome.role, welcome.domain, &welcome.leader, peer, now);
        if session.is_some() {
            log::debug!("connected (node {}, role {})", welcome.node_id, welcome.role as char);
        }
        self.settle();
        session
    }

    /// A dial of `slot` failed; `failure` names the cause and whether retrying helps.
    pub fn on_dial_failed(&mut self, slot: SlotId, failure: DialFailure, now: Instant) {
        let now = self.advance(now);
        self.world.net.dial_failed(slot, failure, now);
        self.settle();
    }

    /// How far the dial under way of `slot` got, for [`Core::connection_errors`].
    pub fn on_dial_note(&mut self, slot: SlotId, note: String) {
        self.world.net.dial_note(slot, note);
    }

    /// Frames read from `session`, in order.
    pub fn on_frames(
        &mut self,
        session: SessionId,
        frames: impl IntoIterator<Item = (u32, Response)>,
        now: Instant,
    ) {
        let now = self.advance(now);
        for (id, response) in frames {
            let net = &mut self.world.net;
            let Some(s) = net.session_mut(session) else { break };
            s.last_rx = now;
            if id == 0 {
                log::warn!("{}: connection-level error {response:?}", net.name(session));
                net.kill(session);
                continue;
            }
            if let Response::InLine { ahead, grants_per_ks } = response {
                // News before the answer: the request stays pending.
                self.in_line(session, id, ahead, grants_per_ks);
                continue;
            }
            let Some(pending) = net.session_mut(session).and_then(|s| s.answered(id)) else {
                // No lesson about the leader either: only answers we await move routing.
                log::debug!("answer to id {id} that nobody waits for");
                continue;
            };
            net.learn_from(session, &response, self.config.commit_margin, now);
            self.answered(session, id, pending, response);
        }
        self.settle();
    }

    fn answered(&mut self, session: SessionId, id: u32, pending: Pending, response: Response) {
        let now = self.now;
        match pending.waiting {
            Waiting::Op(op) => self.run(op, |kind, cx| kind.on_answer(session, id, &pending, response, cx)),
            Waiting::Ping | Waiting::Probe => {}
            Waiting::Status => {
                let text = if let Response::Status { text } = &response { Some(text.as_str()) } else { None };
                self.discovery.answered(&mut self.world.net, session, text, now);
            }
            Waiting::LateGrant(orphan) => {
                let Response::Granted { token, lease_ms } = response else { return };
                match self.world.orphans.late_grant(orphan, now) {
                    Some(LateGrant::ToResolve(op)) => self.run(op, |kind, cx| match kind {
                        Kind::Resolve(r) => r.on_late_grant(token, lease_ms, cx),
                        _ => Next::Wait(None),
                    }),
                    Some(LateGrant::Release { .. }) if self.world.claims.owns_token(token, now) => {
                        // A `resolve` handed it out (found by QUERY), or it is being released.
                        log::debug!("late grant (token {token}) already claimed");
                    }
                    Some(LateGrant::Release { key, owner }) => {
                        log::warn!(
                            "late grant of {key:?} (token {token}) after the caller gave up; releasing it"
                        );
                        let until = Some(now + Duration::from_millis(u64::from(lease_ms)));
                        let job = ReleaseJob { key, owner, token, origin: Origin::Compensation, until };
                        self.world.jobs.push(job);
                    }
                    None => {
                        log::warn!("late grant (token {token}) of a forgotten acquire; its lease will end it")
                    }
                }
            }
        }
    }

    /// The requests of a session that ended, or whose write failed, each lost or unsent.
    fn ended(&mut self, session: SessionId, ended: Vec<Ended>) {
        let now = self.now;
        for Ended { id, pending, maybe_written } in ended {
            match pending.waiting {
                Waiting::Op(op) => {
                    self.run(op, |kind, cx| kind.on_ended(session, id, &pending, maybe_written, cx))
                }
                Waiting::Status => self.discovery.answered(&mut self.world.net, session, None, now),
                // A `G` lost with its connection: the orphan record's check finds it.
                Waiting::Ping | Waiting::Probe | Waiting::LateGrant(_) => {}
            }
        }
    }

    /// The connection of `session` ended (EOF or an error, or the session was closed).
    pub fn on_closed(&mut self, session: SessionId, now: Instant) {
        let now = self.advance(now);
        let ended = self.world.net.closed(session, now);
        self.ended(session, ended);
        self.settle();
    }

    /// For the writer of `session` (the thread told [`NetEvent::Flush`]): moves every
    /// queued frame into `buf` and returns true, or returns false — and the writer's
    /// role ends — when nothing is queued or the session is gone.
    pub fn next_batch(&mut self, session: SessionId, buf: &mut Vec<u8>) -> bool {
        match self.world.net.session_mut(session) {
            Some(s) => s.take_batch(buf),
            None => false,
        }
    }

    /// The writer of `session` wrote the batch from [`Core::next_batch`] whole, or
    /// failed after `WriteFailure`.
    pub fn on_written(&mut self, session: SessionId, result: Result<(), WriteFailure>, now: Instant) {
        let now = self.advance(now);
        let mut late = Vec::new();
        let unsent = self.world.net.written(session, result, now, &mut late);
        for orphan in late {
            self.world.orphans.written(orphan, now);
        }
        self.ended(session, unsent);
        self.settle();
    }

    /// Makes the reader of `session` its writer if nobody writes it: callers it wakes
    /// then queue their frames, and it writes them together (docs/performance.md §8).
    pub fn take_pen(&mut self, session: SessionId) -> bool {
        self.world.net.session_mut(session).is_some_and(|s| s.take_pen())
    }

    /// When the core next needs [`Core::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.shut_down {
            return None;
        }
        let net = &self.world.net;
        [
            self.ops.next_timer(),
            self.world.orphans.next_check(),
            watch::next_ping(net, self.config.idle_ping),
            self.discovery.due_at(net, self.now),
            net.next_housekeeping(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does what is due at `now`: operation timers, orphan checks, PINGs and dead
    /// sessions, discovery, redials.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.advance(now);
        if self.shut_down {
            return;
        }
        while let Some(op) = self.ops.pop_due(now) {
            self.run(op, |kind, cx| kind.on_timer(cx));
        }
        for (orphan, key) in self.world.orphans.due(now) {
            let op = self.ops.insert(None, Kind::Check(OrphanCheck::new(orphan, key, now)));
            // Marked before it runs: a check that ends at once records its result.
            self.world.orphans.checking(orphan, op);
            self.run(op, |kind, cx| kind.start(cx));
        }
        let net = &mut self.world.net;
        watch::pings(net, self.config.idle_ping, now);
        self.discovery.step(net, now);
        net.housekeeping(now);
        self.settle();
    }

    /// The next thing the I/O must do.
    pub fn poll_action(&mut self) -> Option<Action<W>> {
        self.actions.pop_front()
    }

    /// The last handle on the client is gone: finish the background work (releases,
    /// orphan checks), then [`Action::Shutdown`].
    pub fn close(&mut self, now: Instant) {
        self.advance(now);
        self.closing = true;
        self.settle();
    }

    /// Background work still to do: releases under way and orphan records open.
    pub fn outstanding(&self) -> usize {
        self.releases + self.world.orphans.outstanding()
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// True while at least one session is up.
    pub fn is_connected(&self) -> bool {
        self.world.net.any_live()
    }

    /// Each address tried and not connected now, with why.
    pub fn connection_errors(&self) -> Vec<(String, String)> {
        self.world.net.connection_errors()
    }

    /// Every address the client knows: the leader's first, then the dialed ones.
    pub fn known_addrs(&self) -> Vec<String> {
        self.world.net.known_addrs()
    }

    /// True when a slot dials exactly `addr`.
    pub fn dials(&self, addr: &str) -> bool {
        self.world.net.dialed().iter().any(|a| a == addr)
    }

    /// A caller took `token` over (`Client::adopt`): it is a caller's until `deadline`.
    pub fn adopted(&mut self, token: u64, deadline: Instant, now: Instant) {
        let now = self.advance(now);
        self.world.claims.hand_out(token, deadline, now);
        self.world.net.holding_until(deadline + self.config.commit_margin);
    }

    /// Tests: the next request id to try (ids still pending on a session are skipped).
    pub fn set_next_request_id(&mut self, id: u32) {
        self.world.net.set_next_id(id);
    }

    /// Runs one reaction of operation `op` and applies what it decided.
    fn run(&mut self, op: OpId, react: impl FnOnce(&mut Kind, &mut Cx<'_>) -> Next) {
        let ended = self.ops.run(op, &mut self.world, &self.config, self.now, self.closing, react);
        if let Some((entry, outcome)) = ended {
            self.finish(op, entry, outcome);
        }
    }

    fn finish(&mut self, op: OpId, entry: Entry<W>, outcome: Outcome) {
        match &entry.kind {
            Kind::Release(r) => {
                self.releases -= 1;
                r.ended(&outcome, &mut self.world, self.closing, self.config.commit_margin, self.now);
            }
            Kind::Acquire(a) => {
                for key in a.keys() {
                    self.world.claims.acquire_ended(key, a.owner());
                }
            }
            _ => {}
        }
        if let Some(waker) = entry.waker {
            self.actions.push_back(Action::Complete { waker, op, outcome });
        }
    }

    /// After every input: routes what waits for a session, starts the releases
    /// operations asked for, turns connection events into actions, and shuts down a
    /// closed client whose work is done.
    fn settle(&mut self) {
        loop {
            for job in std::mem::take(&mut self.world.jobs) {
                self.start_job(job);
            }
            for op in self.ops.take_unrouted() {
                self.run(op, |kind, cx| kind.route(cx));
            }
            if self.world.jobs.is_empty() {
                break;
            }
        }
        self.flush_net_events();
        if self.closing && !self.shut_down && self.outstanding() == 0 {
            self.shut_down = true;
            self.world.net.stop(self.now);
            self.flush_net_events();
            self.actions.push_back(Action::Shutdown);
        }
    }

    fn start_job(&mut self, job: ReleaseJob) {
        if self.releases >= RELEASE_QUEUE_CAPACITY {
            log::warn!(
                "release queue full: the grant of {:?} (token {}) is left to its lease",
                job.key,
                job.token
            );
            return;
        }
        self.releases += 1;
        let op = ReleaseOp::begin(job, &mut self.world, self.config.commit_margin, self.now);
        self.spawn(None, Kind::Release(op));
    }

    fn flush_net_events(&mut self) {
        for event in self.world.net.events.drain(..) {
            self.actions.push_back(Action::Net(event));
        }
    }
}
