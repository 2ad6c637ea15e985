//! The client's decisions, as a deterministic state machine with no I/O
//! (docs/client.md, "Structure").
//!
//! [`Core`] owns every decision the client makes: which session a request goes to,
//! when a sent request becomes `Indeterminate`, what a late `G` becomes, release
//! retries and their deadline, `M` hints and leader following, discovery from WELCOME
//! and STATUS, dead-session detection, resolve's settle window and the orphan checks.
//! It never touches a socket, a thread or the clock:
//!
//! - **inputs**: caller requests ([`Core::acquire`], [`Core::release`],
//!   [`Core::read`], [`Core::resolve`]); connection events ([`Core::on_connected`],
//!   [`Core::on_dial_failed`], [`Core::on_frames`], [`Core::on_closed`],
//!   [`Core::on_written`]); time ([`Core::handle_timeout`]). Every input carries `now`.
//! - **outputs**: [`Action`]s from [`Core::poll_action`] — sessions to dial or close,
//!   a session the calling thread must now write ([`Core::next_batch`]), outcomes for
//!   callers —, and the next instant it needs the time ([`Core::poll_timeout`]).
//!
//! The I/O around it (`client::io`) reads, writes and hands events over; the client
//! simulator (`tests/client_sim.rs`) drives this very type against simulated servers.
//! `W` is whatever the I/O uses to wake a waiting caller.

mod acquire;
mod cx;
pub(crate) mod ids;
mod net;
mod orphans;
mod read;
mod release;
mod resolve;
mod session;
mod watch;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use acquire::CONNECT_WAIT_MIN;
pub use cx::{Config, Granted, Outcome, Resolved, PING_ANSWER_TIMEOUT};
pub use ids::{OpId, OrphanId, SessionId, SlotId};
pub use net::{NetEvent, Target, LEADER_WAIT, LEARNED_ADDRS_MAX, RETIRE_GRACE, SEED_FALLBACK_AFTER};
pub use orphans::ORPHAN_RETRY;
pub(crate) use read::check_answer;
pub use read::MOVED_PAUSE;
pub use release::{RELEASE_ATTEMPT_TIMEOUT, RELEASE_DEADLINE};
pub use resolve::ORPHAN_CHECK_TIMEOUT;
pub use session::WriteFailure;
pub use watch::{IDLE_PING_DEFAULT, LEADER_UNKNOWN_RETRY, MEMBERSHIP_REFRESH};

use acquire::AcquireOp;
use cx::{Cx, Next, Origin, ReleaseJob};
use ids::IdHasher;
use net::Net;
use orphans::{Held, LateGrant, Orphans};
use read::ReadOp;
use release::{ReleaseOp, Reply};
use resolve::{OrphanCheck, ResolveOp};
use session::{Ended, Pending, Waiting};
use watch::Discovery;

use crate::client::error::{Indeterminate, ReleaseError};
use crate::proto::frame::{Request, Response};
use crate::proto::handshake::Welcome;

/// Most releases (explicit, dropped locks, late grants) queued or under way at once;
/// beyond it a release is refused at once (`QueueFull`), never waited for.
pub const RELEASE_QUEUE_CAPACITY: usize = 1024;

/// What the I/O around the core must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<W> {
    /// See [`NetEvent`].
    Net(NetEvent),
    /// The operation `op` ended: hand `outcome` to the caller waiting as `waker`.
    Complete { waker: W, op: OpId, outcome: Outcome },
    /// The client closed and its background work is done: stop every thread.
    Shutdown,
}

#[derive(Debug)]
enum Kind {
    Acquire(AcquireOp),
    Release(ReleaseOp),
    Read(ReadOp),
    Resolve(ResolveOp),
    Check(OrphanCheck),
}

struct Entry<W> {
    waker: Option<W>,
    kind: Kind,
    timer: Option<Instant>,
}

/// The client's state machine. See the module docs.
pub struct Core<W> {
    config: Config,
    net: Net,
    orphans: Orphans,
    held: Held,
    discovery: Discovery,
    ops: HashMap<OpId, Entry<W>, BuildHasherDefault<IdHasher>>,
    next_op: u64,
    timers: BTreeSet<(Instant, OpId)>,
    /// Operations waiting for a session, tried again whenever routing may have changed.
    unrouted: Vec<OpId>,
    jobs: Vec<ReleaseJob>,
    actions: VecDeque<Action<W>>,
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
        let net = Net::new(config.seeds.clone(), config.tls, now);
        let held = Held::new(config.commit_margin);
        let mut core = Core {
            config,
            net,
            orphans: Orphans::default(),
            held,
            discovery: Discovery::default(),
            ops: HashMap::default(),
            next_op: 1,
            timers: BTreeSet::new(),
            unrouted: Vec::new(),
            jobs: Vec::new(),
            actions: VecDeque::new(),
            releases: 0,
            closing: false,
            shut_down: false,
            now,
        };
        core.flush_net_events();
        core
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    fn advance(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    // ----- caller requests -------------------------------------------------------

    /// Starts an ACQUIRE of `key` for `lease_s` seconds (1..=250), queueing at most
    /// `wait` (0..=300 s). The caller checked the limits. Ends with
    /// [`Outcome::Acquire`].
    pub fn acquire(
        &mut self,
        waker: W,
        key: &str,
        owner: &Arc<str>,
        lease_s: u8,
        wait: Duration,
        now: Instant,
    ) -> OpId {
        let now = self.advance(now);
        let op = AcquireOp::new(key.to_owned(), Arc::clone(owner), lease_s, wait, now);
        let id = self.spawn(Some(waker), Kind::Acquire(op));
        self.settle();
        id
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
        // A dropped lock's release goes on while its lease may run (the server's ends
        // up to the commit margin after the local deadline).
        let until = match waker {
            Some(_) => None,
            None => self.held.deadline(token).map(|d| d + self.config.commit_margin),
        };
        // The caller gives the lock up: from now on a holder with this token is no
        // caller's (an orphan check may release it as well; release is idempotent).
        self.held.remove(token);
        let origin = if waker.is_some() { Origin::Explicit } else { Origin::Dropped };
        self.releases += 1;
        let op = ReleaseOp::new(key.to_owned(), Arc::clone(owner), token, origin, until, now);
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
        let owner: Arc<str> = Arc::from(attempt.owner.as_str());
        let op =
            ResolveOp::new(attempt.orphan, attempt.key.clone(), owner, attempt.lease, attempt.settle_at, end);
        let id = self.spawn(Some(waker), Kind::Resolve(op));
        self.settle();
        id
    }

    /// Registers an operation and runs its first reaction.
    fn spawn(&mut self, waker: Option<W>, kind: Kind) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        self.ops.insert(op, Entry { waker, kind, timer: None });
        self.run(op, |kind, cx| match kind {
            Kind::Acquire(a) => a.route(cx),
            Kind::Release(r) => r.on_timer(cx),
            Kind::Read(r) => r.route(cx),
            Kind::Resolve(r) => r.start(cx),
            Kind::Check(c) => {
                let next = c.read.route(cx);
                c.after_read(next, cx)
            }
        });
        op
    }

    /// When `op` next needs the time, if it is still running.
    pub fn op_deadline(&self, op: OpId) -> Option<Instant> {
        self.ops.get(&op).and_then(|e| e.timer)
    }

    // ----- the connections ---------------------------------------------------------

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
        let session = self.net.connected(slot, welcome.node_id, welcome.role, &welcome.leader, peer, now);
        if session.is_some() {
            log::debug!("connected (node {}, role {})", welcome.node_id, welcome.role as char);
        }
        self.settle();
        session
    }

    /// A dial of `slot` failed; `error` names the cause.
    pub fn on_dial_failed(&mut self, slot: SlotId, error: String, now: Instant) {
        let now = self.advance(now);
        log::debug!("connection attempt failed: {error}");
        self.net.dial_failed(slot, error, now);
        self.settle();
    }

    /// How far the dial under way of `slot` got, for [`Core::connection_errors`].
    pub fn on_dial_note(&mut self, slot: SlotId, note: String) {
        self.net.dial_note(slot, note);
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
            let Some(s) = self.net.session_mut(session) else { break };
            s.last_rx = now;
            if id == 0 {
                log::warn!("session {session:?}: connection-level error {response:?}");
                self.net.kill(session);
                continue;
            }
            match &response {
                Response::Moved { leader } => self.net.moved(session, leader, now),
                Response::Granted { .. } | Response::Released => self.net.leads(session, now),
                _ => {}
            }
            let Some(pending) = self.net.session_mut(session).and_then(|s| s.answered(id)) else {
                log::debug!("answer to id {id} that nobody waits for");
                continue;
            };
            self.answered(session, id, pending, response);
        }
        self.settle();
    }

    fn answered(&mut self, session: SessionId, id: u32, pending: Pending, response: Response) {
        let now = self.now;
        match pending.waiting {
            Waiting::Op(op) => self.run(op, |kind, cx| match kind {
                Kind::Acquire(a) => a.on_answer(response, &pending, cx),
                Kind::Release(r) => r.on_reply(session, id, Reply::Answer(response), cx),
                Kind::Read(r) => r.on_answer(response, cx),
                Kind::Resolve(r) => r.on_answer(response, cx),
                Kind::Check(c) => {
                    let next = c.read.on_answer(response, cx);
                    c.after_read(next, cx)
                }
            }),
            Waiting::Ping => {}
            Waiting::Status => {
                let text = match &response {
                    Response::Status { text } => Some(text.as_str()),
                    _ => None,
                };
                self.discovery.answered(&mut self.net, session, text, now);
            }
            Waiting::LateGrant(orphan) => {
                let Response::Granted { token, lease_ms } = response else { return };
                match self.orphans.late_grant(orphan, now) {
                    Some(LateGrant::ToResolve(op)) => self.run(op, |kind, cx| match kind {
                        Kind::Resolve(r) => r.on_late_grant(token, lease_ms, cx),
                        _ => Next::Wait(None),
                    }),
                    Some(LateGrant::Release { key, owner }) => {
                        log::warn!(
                            "late grant of {key:?} (token {token}) after the caller gave up; releasing it"
                        );
                        let until = Some(now + Duration::from_millis(u64::from(lease_ms)));
                        self.jobs.push(ReleaseJob { key, owner, token, origin: Origin::Compensation, until });
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
                Waiting::Op(op) => self.run(op, |kind, cx| match kind {
                    Kind::Acquire(a) => a.on_ended(maybe_written, &pending, cx),
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
                }),
                Waiting::Status => self.discovery.answered(&mut self.net, session, None, now),
                // A `G` lost with its connection: the orphan record's check finds it.
                Waiting::Ping | Waiting::LateGrant(_) => {}
            }
        }
    }

    /// The connection of `session` ended (the reader saw EOF or an error, or the
    /// session was closed).
    pub fn on_closed(&mut self, session: SessionId, now: Instant) {
        let now = self.advance(now);
        let ended = self.net.closed(session, now);
        self.ended(session, ended);
        self.settle();
    }

    /// For the writer of `session` (the thread told [`NetEvent::Flush`]): moves every
    /// queued frame into `buf` and returns true, or returns false — and the writer's
    /// role ends — when nothing is queued or the session is gone.
    pub fn next_batch(&mut self, session: SessionId, buf: &mut Vec<u8>) -> bool {
        match self.net.session_mut(session) {
            Some(s) => s.take_batch(buf),
            None => false,
        }
    }

    /// The writer of `session` wrote the batch from [`Core::next_batch`] whole, or
    /// failed after `WriteFailure`.
    pub fn on_written(&mut self, session: SessionId, result: Result<(), WriteFailure>, now: Instant) {
        let now = self.advance(now);
        let Some(s) = self.net.session_mut(session) else { return };
        match result {
            Ok(()) => s.batch_written(now),
            Err(failure) => {
                log::debug!("session {session:?}: write failed ({failure:?})");
                let unsent = s.write_failed(failure);
                // The session died with the write (nothing may follow a half-written
                // frame); what was not written goes elsewhere now, the rest waits for
                // the reader to report the end (an answer may still come).
                self.net.kill(session);
                let ended = unsent
                    .into_iter()
                    .map(|(id, pending)| Ended { id, pending, maybe_written: false })
                    .collect();
                self.ended(session, ended);
            }
        }
        self.settle();
    }

    /// Makes the reader of `session` its writer if nobody writes it: callers it wakes
    /// then queue their frames, and it writes them together (docs/performance.md §8).
    pub fn take_pen(&mut self, session: SessionId) -> bool {
        self.net.session_mut(session).is_some_and(|s| s.take_pen())
    }

    // ----- time --------------------------------------------------------------------

    /// When the core next needs [`Core::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.shut_down {
            return None;
        }
        [
            self.timers.first().map(|(at, _)| *at),
            self.orphans.next_check(),
            watch::next_ping(&self.net, self.config.idle_ping),
            self.discovery.due_at(&self.net, self.now),
            self.net.next_housekeeping(),
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
        while let Some(&(at, op)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(entry) = self.ops.get_mut(&op) {
                entry.timer = None;
            }
            self.run(op, |kind, cx| match kind {
                Kind::Acquire(a) => a.on_timer(cx),
                Kind::Release(r) => r.on_timer(cx),
                Kind::Read(r) => r.on_timer(cx),
                Kind::Resolve(r) => r.on_timer(cx),
                Kind::Check(c) => {
                    let next = c.read.on_timer(cx);
                    c.after_read(next, cx)
                }
            });
        }
        for (orphan, key) in self.orphans.due(now) {
            // Marked before it runs: a check that ends at once records its result.
            let op = OpId(self.next_op);
            self.orphans.checking(orphan, op);
            self.spawn(None, Kind::Check(OrphanCheck::new(orphan, key, now)));
        }
        watch::pings(&mut self.net, self.config.idle_ping, now);
        self.discovery.step(&mut self.net, now);
        self.net.housekeeping(now);
        self.settle();
    }

    // ----- outputs -------------------------------------------------------------------

    /// The next thing the I/O must do.
    pub fn poll_action(&mut self) -> Option<Action<W>> {
        self.actions.pop_front()
    }

    // ----- lifecycle and questions ----------------------------------------------------

    /// The last handle on the client is gone: finish the background work (releases,
    /// orphan checks), then [`Action::Shutdown`].
    pub fn close(&mut self, now: Instant) {
        self.advance(now);
        self.closing = true;
        self.settle();
    }

    /// Background work still to do: releases under way and orphan records open.
    pub fn outstanding(&self) -> usize {
        self.releases + self.orphans.outstanding()
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// True while at least one session is up.
    pub fn is_connected(&self) -> bool {
        self.net.any_live()
    }

    /// The last connection failure, for `Unavailable` errors.
    pub fn last_error(&self) -> Option<String> {
        self.net.last_error.clone()
    }

    /// Each address tried and not connected now, with why.
    pub fn connection_errors(&self) -> Vec<(String, String)> {
        self.net.connection_errors()
    }

    /// Every address the client knows: the leader's first, then the dialed ones.
    pub fn known_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = self.net.hint().map(str::to_owned).into_iter().collect();
        for addr in self.net.dialed() {
            if !out.contains(&addr) {
                out.push(addr);
            }
        }
        out
    }

    /// True when a slot dials exactly `addr`.
    pub fn dials(&self, addr: &str) -> bool {
        self.net.dialed().iter().any(|a| a == addr)
    }

    /// Tests: the next request id to try (ids still pending on a session are skipped).
    pub fn set_next_request_id(&mut self, id: u32) {
        self.net.set_next_id(id);
    }

    // ----- the machinery ----------------------------------------------------------------

    /// Runs one reaction of operation `op` and applies what it decided.
    fn run(&mut self, op: OpId, react: impl FnOnce(&mut Kind, &mut Cx<'_>) -> Next) {
        let Some(mut entry) = self.ops.remove(&op) else { return };
        let mut cx = Cx {
            net: &mut self.net,
            orphans: &mut self.orphans,
            held: &mut self.held,
            jobs: &mut self.jobs,
            config: &self.config,
            now: self.now,
            op,
            closing: self.closing,
        };
        let next = react(&mut entry.kind, &mut cx);
        if let Some(at) = entry.timer.take() {
            self.timers.remove(&(at, op));
        }
        match next {
            Next::Wait(at) => {
                if let Some(at) = at {
                    self.timers.insert((at, op));
                }
                entry.timer = at;
                let unrouted = match &entry.kind {
                    Kind::Acquire(a) => a.unrouted(),
                    Kind::Read(r) => r.unrouted(),
                    Kind::Resolve(r) => r.unrouted(),
                    Kind::Check(c) => c.read.unrouted(),
                    Kind::Release(_) => false,
                };
                if unrouted && !self.unrouted.contains(&op) {
                    self.unrouted.push(op);
                }
                self.ops.insert(op, entry);
            }
            Next::Done(outcome) => self.finish(op, entry, outcome),
        }
    }

    fn finish(&mut self, op: OpId, entry: Entry<W>, outcome: Outcome) {
        self.unrouted.retain(|o| *o != op);
        if let Kind::Release(r) = &entry.kind {
            self.releases -= 1;
            match (&outcome, r.origin) {
                (Outcome::Release(Err(e)), Origin::Dropped | Origin::Compensation) => {
                    log::warn!("release of {:?} token {} failed: {e}; its lease will end it", r.key, r.token)
                }
                _ => log::debug!("release of {:?} token {} ({:?}): {outcome:?}", r.key, r.token, r.origin),
            }
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
            for job in std::mem::take(&mut self.jobs) {
                self.start_job(job);
            }
            if !self.unrouted.is_empty() {
                for op in std::mem::take(&mut self.unrouted) {
                    self.run(op, |kind, cx| match kind {
                        Kind::Acquire(a) => a.route(cx),
                        Kind::Read(r) => r.route(cx),
                        Kind::Resolve(r) => r.route(cx),
                        Kind::Check(c) => {
                            let next = c.read.route(cx);
                            c.after_read(next, cx)
                        }
                        Kind::Release(r) => r.on_timer(cx),
                    });
                }
            }
            if self.jobs.is_empty() {
                break;
            }
        }
        self.flush_net_events();
        if self.closing && !self.shut_down && self.outstanding() == 0 {
            self.shut_down = true;
            self.net.stop(self.now);
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
        self.held.remove(job.token);
        self.releases += 1;
        let op = ReleaseOp::new(job.key, job.owner, job.token, job.origin, job.until, self.now);
        self.spawn(None, Kind::Release(op));
    }

    fn flush_net_events(&mut self) {
        for event in self.net.events.drain(..) {
            self.actions.push_back(Action::Net(event));
        }
    }
}
