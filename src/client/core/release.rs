//! One RELEASE (docs/client.md, "Releases").
//!
//! It carries the exact (key, owner, token) and an absolute deadline
//! [`RELEASE_DEADLINE`] after it was asked for. It is sent, and sent again (a release
//! is idempotent) after a lost connection, an `M`, a `U`, an `E 4` or an attempt
//! unanswered for [`RELEASE_ATTEMPT_TIMEOUT`], until the server answers `R` or `N` or
//! the deadline passes. Only `R`/`N` count: a release that runs out of time is
//! `Unconfirmed` (`Unavailable` when no byte of any attempt was written, at once when every
//! connection failed with a lasting mistake), and the server's lease is the last
//! safety net.
//!
//! A release that finds no connection up waits on the routing list, as an acquire
//! does: it goes out the moment one comes up (a fresh client's first connection, the
//! CLI's one-shot `release`), holding out up to `LEADER_WAIT` for the leader's while
//! a slot is still making its first connection — not a retry pause later.
//!
//! An attempt sent again is still listened to: on a path slower than one attempt
//! timeout every answer arrives after its attempt was abandoned, so listening only to
//! the newest would report `Unconfirmed` although the server answered `R` to each.
//! An `N` is `NotHolder` only when no earlier attempt may have executed; otherwise the
//! release waits for the earlier attempts (an `R` of theirs is the outcome) and ends
//! `ReleasedOrExpired`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cx::{Cx, Next, Origin, Outcome, ReleaseJob, World};
use super::ids::SessionId;
use super::net::Target;
use super::routing::LEADER_WAIT;
use super::session::Waiting;
use crate::client::error::ReleaseError;
use crate::client::outcome::ReleaseOutcome;
use crate::proto::frame::{encode_release, ErrorCode, Response};
use crate::proto::limits::LEASE_S_MAX;

/// Most releases (explicit, dropped locks, late grants) queued or under way at once;
/// beyond it a release is refused at once (`QueueFull`), never waited for.
pub const RELEASE_QUEUE_CAPACITY: usize = 1024;
/// A release is given up (unconfirmed) this long after it was asked for.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(5);
/// An attempt without an answer for this long is sent again, on any connection.
pub const RELEASE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause before the next attempt when the server said `U`/`E 4` (and the longest a
/// release without a connection waits before it looks again, though a connection
/// that comes up sends it at once); also the first pause after an `M` that leaves no
/// other connection to try.
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often a release waiting for the leader's first connection looks again.
const RELEASE_LEADER_POLL: Duration = Duration::from_millis(20);
/// Longest pause between attempts of one release after repeated `M`s.
const RELEASE_MOVED_PAUSE_MAX: Duration = Duration::from_secs(1);

/// What became of one attempt.
#[derive(Debug)]
pub(crate) enum Reply {
    Answer(Response),
    /// Its session ended after a byte of it may have been written.
    Lost,
    /// Its session ended (or its write failed) before any byte of it was written.
    Unsent,
}

#[derive(Debug)]
pub(crate) struct ReleaseOp {
    pub(crate) key: String,
    pub(crate) owner: Arc<str>,
    pub(crate) token: u64,
    pub(crate) origin: Origin,
    deadline: Instant,
    /// When the server's lease surely ends, if known: how long the client keeps after
    /// the key should this release end unconfirmed (`Core::after_release`).
    pub(crate) until: Option<Instant>,
    in_flight: Option<(SessionId, u32, Instant)>,
    /// Attempts that ran past the attempt timeout and were sent again, still listened to.
    earlier: Vec<(SessionId, u32)>,
    next_try: Instant,
    /// Until then an attempt holds out for the leader's connection while a slot is
    /// still making its first one (`LEADER_WAIT` from the start).
    patient_until: Instant,
    /// The last attempt due found no connection to take it: it waits on the routing
    /// list, and a connection that comes up sends it at once.
    awaiting: bool,
    /// Some attempt was written and then lost, unanswered or answered `U`: it may have
    /// executed, so a later `N` cannot tell whether this release did it.
    maybe_executed: bool,
    /// The newest attempt got `N` while earlier attempts were still out: wait for them.
    not_holder: bool,
    /// Attempts put on a session and not reported unsent (`Reply::Unsent`: not a byte
    /// written): while none, the release was never sent and ends `Unavailable`, not
    /// `Unconfirmed`.
    maybe_sent: u32,
    /// The pause after the next `M` with nowhere else to go (doubles each time, and
    /// starts over when an `M` brings news: a leader hint other than the last one).
    moved_pause: Duration,
    moved_hint: Option<String>,
}

impl ReleaseOp {
    /// Starts the release `job`: from now on its token is claimed as being released
    /// until its lease has surely ended (unknown: the longest lease from now).
    pub(crate) fn begin(job: ReleaseJob, world: &mut World, margin: Duration, now: Instant) -> ReleaseOp {
        let lease_max = Duration::from_secs(u64::from(LEASE_S_MAX)) + margin;
        world.claims.releasing(job.token, job.until.unwrap_or(now + lease_max), now);
        ReleaseOp::new(job.key, job.owner, job.token, job.origin, job.until, now)
    }

    /// `until`: when the server's lease surely ends, if known (see the field).
    fn new(
        key: String,
        owner: Arc<str>,
        token: u64,
        origin: Origin,
        until: Option<Instant>,
        now: Instant,
    ) -> ReleaseOp {
        ReleaseOp {
            key,
            owner,
            token,
            origin,
            deadline: now + RELEASE_DEADLINE,
            until,
            in_flight: None,
            earlier: Vec::new(),
            next_try: now,
            patient_until: now + LEADER_WAIT,
            awaiting: false,
            maybe_executed: false,
            not_holder: false,
            maybe_sent: 0,
            moved_pause: RELEASE_RETRY_PAUSE,
            moved_hint: None,
        }
    }

    /// True while it waits for a connection to take its attempt.
    pub(crate) fn unrouted(&self) -> bool {
        self.awaiting
    }

    /// Routing may have changed (a connection came up, the leader moved): an attempt
    /// waiting for a connection goes now if one can take it.
    pub(crate) fn route(&mut self, cx: &mut Cx<'_>) -> Next {
        if self.awaiting {
            self.next_try = self.next_try.min(cx.now);
        }
        self.on_timer(cx)
    }

    /// Moves it on: gives up past the deadline, sends again an attempt that ran out of
    /// time (still listening to it), sends when due.
    pub(crate) fn on_timer(&mut self, cx: &mut Cx<'_>) -> Next {
        let now = cx.now;
        if now >= self.deadline {
            self.forget_attempts(cx);
            // After an `N`, the key is certainly no longer held under this token; only
            // who ended the hold is unknown.
            let outcome = if self.not_holder {
                Ok(ReleaseOutcome::ReleasedOrExpired)
            } else if self.maybe_sent == 0 {
                Err(self.unavailable(cx))
            } else {
                Err(ReleaseError::Unconfirmed)
            };
            return Next::Done(Outcome::Release(outcome));
        }
        if self.not_holder {
            return Next::Wait(Some(self.deadline));
        }
        if let Some((session, id, attempt_end)) = self.in_flight {
            if now >= attempt_end {
                log::debug!("release of {:?}: no answer within {RELEASE_ATTEMPT_TIMEOUT:?}", self.key);
                self.in_flight = None;
                self.earlier.push((session, id));
                self.maybe_executed = true;
                self.next_try = now;
            }
        }
        if self.in_flight.is_none() && now >= self.next_try {
            self.attempt(cx);
            if self.in_flight.is_none() && self.maybe_sent == 0 && cx.net.hopeless(&Target::Any) {
                // Never sent, and no connection can take it until the operator fixes a
                // mistake: say so now rather than at the deadline.
                return Next::Done(Outcome::Release(Err(self.unavailable(cx))));
            }
        }
        Next::Wait(Some(self.wake()))
    }

    fn unavailable(&self, cx: &Cx<'_>) -> ReleaseError {
        let (last_error, lasting) = cx.net.unavailable(&Target::Any);
        ReleaseError::Unavailable { last_error, lasting }
    }

    fn wake(&self) -> Instant {
        match self.in_flight {
            Some((_, _, attempt_end)) => attempt_end.min(self.deadline),
            None => self.next_try.min(self.deadline),
        }
    }

    fn attempt(&mut self, cx: &mut Cx<'_>) {
        let now = cx.now;
        self.awaiting = true;
        if cx.net.leader_connecting() {
            // The leader an `M` named is being dialed; sending elsewhere would earn an `M`.
            self.next_try = now + RELEASE_LEADER_POLL;
            return;
        }
        let patient = now < self.patient_until;
        let Some(session) = cx.net.choose(&Target::Any, patient, None) else {
            log::debug!("release of {:?}: no connection up", self.key);
            // Holding out for a first connection: until the patience ends (a connection
            // that comes up meanwhile sends it at once); otherwise look again soon.
            let holding = patient && cx.net.coming(&Target::Any);
            self.next_try = if holding { self.patient_until } else { now + RELEASE_RETRY_PAUSE };
            return;
        };
        self.awaiting = false;
        let (token, key, owner) = (self.token, &self.key, &self.owner);
        let id = cx
            .net
            .send(session, Waiting::Op(cx.op), now, |out, id| encode_release(out, id, token, key, owner));
        self.in_flight = Some((session, id, now + RELEASE_ATTEMPT_TIMEOUT));
        self.maybe_sent += 1;
    }

    /// Unregisters every attempt: a late answer to any of them is dropped.
    pub(crate) fn forget_attempts(&mut self, cx: &mut Cx<'_>) {
        for (session, id) in
            self.in_flight.take().map(|(s, i, _)| (s, i)).into_iter().chain(self.earlier.drain(..))
        {
            if let Some(s) = cx.net.session_mut(session) {
                s.forget(id);
            }
        }
    }

    /// It ended with `outcome`. One that got no `R`/`N` within its deadline leaves a
    /// grant that may still hold the key with no caller holding it: an orphan record
    /// with that token takes over (QUERY when a leader answers, release if still held)
    /// until the lease has surely ended — so an outage longer than the deadline does not
    /// leave the key blocked for the rest of its lease (docs/client.md, "Releases").
    pub(crate) fn ended(
        &self,
        outcome: &Outcome,
        world: &mut World,
        closing: bool,
        margin: Duration,
        now: Instant,
    ) {
        let unconfirmed = matches!(
            outcome,
            Outcome::Release(Err(ReleaseError::Unconfirmed | ReleaseError::Unavailable { .. }))
        );
        if unconfirmed && !closing {
            let lease_max = Duration::from_secs(u64::from(LEASE_S_MAX)) + margin;
            let until = self.until.unwrap_or(now + lease_max);
            log::info!(
                "release of {:?} token {} not confirmed; checking it while its lease may run",
                self.key,
                self.token
            );
            // The token stays claimed as being released until `until`.
            world.orphans.open_known(self.key.clone(), Arc::clone(&self.owner), self.token, until, now);
            return;
        }
        if matches!(outcome, Outcome::Release(Ok(_))) {
            world.claims.released(self.token);
        }
        match (outcome, self.origin) {
            (Outcome::Release(Err(e)), Origin::Dropped | Origin::Compensation) => {
                log::warn!(
                    "release of {:?} token {} failed: {e}; its lease will end it",
                    self.key,
                    self.token
                )
            }
            _ => {
                log::debug!("release of {:?} token {} ({:?}): {outcome:?}", self.key, self.token, self.origin)
            }
        }
    }

    fn not_holder_outcome(&self) -> ReleaseOutcome {
        if self.maybe_executed {
            ReleaseOutcome::ReleasedOrExpired
        } else {
            ReleaseOutcome::NotHolder
        }
    }

    fn done(&mut self, outcome: Result<ReleaseOutcome, ReleaseError>, cx: &mut Cx<'_>) -> Next {
        self.forget_attempts(cx);
        Next::Done(Outcome::Release(outcome))
    }

    /// What became of the attempt `(session, id)`.
    pub(crate) fn on_reply(&mut self, session: SessionId, id: u32, reply: Reply, cx: &mut Cx<'_>) -> Next {
        let now = cx.now;
        let definitive = matches!(
            reply,
            Reply::Answer(
                Response::Released | Response::NotHolder | Response::Error { code: ErrorCode::Invalid, .. }
            )
        );
        if let Some(at) = self.earlier.iter().position(|a| *a == (session, id)) {
            // An attempt already sent again: only a definitive answer matters; anything
            // else leaves the newer attempt in charge.
            self.earlier.swap_remove(at);
            if matches!(reply, Reply::Unsent) {
                self.maybe_sent -= 1;
            }
            if !definitive {
                if matches!(reply, Reply::Lost | Reply::Answer(Response::Unknown)) {
                    self.maybe_executed = true;
                }
                if self.not_holder && self.earlier.is_empty() {
                    let outcome = Ok(self.not_holder_outcome());
                    return self.done(outcome, cx);
                }
                return Next::Wait(Some(self.wake()));
            }
            if matches!(reply, Reply::Answer(Response::NotHolder)) {
                // This earlier attempt found no holder either; wait for the others.
                self.not_holder = true;
                if !self.earlier.is_empty() || self.in_flight.is_some() {
                    return Next::Wait(Some(self.wake()));
                }
                let outcome = Ok(self.not_holder_outcome());
                return self.done(outcome, cx);
            }
        } else if self.in_flight.is_some_and(|(s, i, _)| s == session && i == id) {
            self.in_flight = None;
            match &reply {
                Reply::Answer(Response::Moved { .. }) => {
                    // Routing already moved the hint. Go again at once only when it now
                    // points at another live connection; otherwise (the leader is not
                    // reachable, or unknown) back off, so queued releases do not bounce
                    // off the followers at round-trip speed.
                    let elsewhere = cx.net.leader_elsewhere(session);
                    log::debug!("release of {:?}: M (another leader up: {elsewhere})", self.key);
                    let hint = cx.net.hint().map(str::to_owned);
                    if hint.is_some() && hint != self.moved_hint {
                        self.moved_pause = RELEASE_RETRY_PAUSE;
                    }
                    self.moved_hint = hint;
                    if elsewhere {
                        self.next_try = now;
                    } else {
                        self.next_try = now + self.moved_pause;
                        self.moved_pause = (self.moved_pause * 2).min(RELEASE_MOVED_PAUSE_MAX);
                    }
                    return self.on_timer(cx);
                }
                Reply::Unsent => {
                    // Not a byte went out: simply send it again, elsewhere.
                    self.maybe_sent -= 1;
                    self.next_try = now;
                    return self.on_timer(cx);
                }
                Reply::Lost => {
                    log::debug!("release of {:?}: connection lost", self.key);
                    self.maybe_executed = true;
                    self.next_try = now;
                    return self.on_timer(cx);
                }
                Reply::Answer(Response::NotHolder) if !self.earlier.is_empty() => {
                    // An earlier attempt may still answer R: that, not this N, is the outcome.
                    self.not_holder = true;
                    return Next::Wait(Some(self.wake()));
                }
                Reply::Answer(Response::Unknown) => self.maybe_executed = true,
                _ => {}
            }
        } else {
            return Next::Wait(Some(self.wake()));
        }
        let outcome = match reply {
            Reply::Answer(Response::Released) => Ok(ReleaseOutcome::Released),
            Reply::Answer(Response::NotHolder) => Ok(self.not_holder_outcome()),
            Reply::Answer(Response::Error { code: ErrorCode::Invalid, message }) => {
                Err(ReleaseError::Invalid(message))
            }
            Reply::Answer(other) => {
                log::debug!("release of {:?} answered {other:?}; retrying", self.key);
                self.next_try = now + RELEASE_RETRY_PAUSE;
                return Next::Wait(Some(self.wake()));
            }
            Reply::Lost | Reply::Unsent => return Next::Wait(Some(self.wake())),
        };
        self.done(outcome, cx)
    }
}

#[cfg(test)]
#[path = "release_tests.rs"]
mod tests;
