//! One ACQUIRE (docs/client.md, "Outcomes of acquire").
//!
//! Unrouted, it waits for a session for at most `max(wait, CONNECT_WAIT_MIN)` (holding
//! out up to `LEADER_WAIT` for the leader's first connection). Sent, it waits for the
//! answer until what was left of the wait plus the commit margin. The resend rule: it
//! goes to another session only while *no byte* of it was written; once a byte may
//! have left, it is never sent again, and anything but a definitive answer makes it
//! `Indeterminate` with an orphan record, so a grant that happened anyway is adopted by
//! `resolve` or released.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cx::{Cx, Granted, Next, Origin, Outcome, ReleaseJob, PING_ANSWER_TIMEOUT};
use super::ids::SessionId;
use super::net::Target;
use super::routing::LEADER_WAIT;
use super::session::{Pending, Waiting};
use crate::client::error::{AcquireError, Indeterminate, IndeterminateCause};
use crate::client::place::{OnPlace, Place, PlaceNews};
use crate::proto::frame::{encode_acquire, encode_request, ErrorCode, HoldPart, Request, Response};

/// Even with a zero wait, an ACQUIRE waits this long for a first connection before it
/// gives up as unavailable (a fresh client has not connected yet).
pub const CONNECT_WAIT_MIN: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Sent {
    session: SessionId,
    id: u32,
    queued_at: Instant,
    /// The wait the frame carried.
    wait: Duration,
    answer_by: Instant,
}

pub(crate) struct AcquireOp {
    /// The key its claims, orphan record and lock go by (of a HOLD: a key of capacity
    /// 1 if it names one, whose QUERY then names this hold alone).
    key: String,
    /// A HOLD: its keys, and where its places in line go (None: it asks for none).
    hold: Option<(Vec<HoldPart>, Option<OnPlace>)>,
    owner: Arc<str>,
    lease: Duration,
    lease_s: u8,
    wait_end: Instant,
    send_end: Instant,
    patient_until: Instant,
    sent: Option<Sent>,
}

impl std::fmt::Debug for AcquireOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireOp")
            .field("key", &self.key)
            .field("hold", &self.hold.as_ref().map(|(parts, place)| (parts, place.is_some())))
            .field("lease_s", &self.lease_s)
            .field("sent", &self.sent)
            .finish()
    }
}

impl AcquireOp {
    /// A HOLD of `parts` (checked), told its places through `on_place` if given.
    pub(crate) fn hold(
        parts: Vec<HoldPart>,
        on_place: Option<OnPlace>,
        owner: Arc<str>,
        lease_s: u8,
        wait: Duration,
        now: Instant,
    ) -> AcquireOp {
        let key = hold_key(&parts).to_owned();
        let mut op = AcquireOp::new(key, owner, lease_s, wait, None, now);
        op.hold = Some((parts, on_place));
        op
    }

    /// A place in line arrived for it: the news for its caller's function, if any.
    pub(crate) fn place_news(&self, place: Place) -> Option<PlaceNews> {
        let call = self.hold.as_ref()?.1.as_ref()?;
        Some(PlaceNews { call: Arc::clone(call), place })
    }

    /// `lease_s` and `wait` are already checked against the protocol's limits. With
    /// `send_by`, it gives up waiting for a session then at the latest (a caller's
    /// own budget, shorter than `CONNECT_WAIT_MIN`).
    pub(crate) fn new(
        key: String,
        owner: Arc<str>,
        lease_s: u8,
        wait: Duration,
        send_by: Option<Instant>,
        now: Instant,
    ) -> AcquireOp {
        let send_end = now + wait.max(CONNECT_WAIT_MIN);
        let send_end = send_by.map_or(send_end, |by| send_end.min(by.max(now)));
        AcquireOp {
            key,
            hold: None,
            owner,
            lease: Duration::from_secs(u64::from(lease_s)),
            lease_s,
            wait_end: now + wait,
            send_end,
            patient_until: send_end.min(now + LEADER_WAIT),
            sent: None,
        }
    }

    /// Every key it names (a HOLD's all, an ACQUIRE's one): a holder of any of them
    /// may be its grant while it runs (`claims.rs`).
    pub(crate) fn keys(&self) -> Vec<&str> {
        match &self.hold {
            Some((parts, _)) => parts.iter().map(|p| p.key.as_str()).collect(),
            None => vec![self.key.as_str()],
        }
    }

    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// True while it waits for a session.
    pub(crate) fn unrouted(&self) -> bool {
        self.sent.is_none()
    }

    /// Puts it on a session if one can take it now.
    pub(crate) fn route(&mut self, cx: &mut Cx<'_>) -> Next {
        if self.sent.is_some() {
            return Next::Wait(self.sent.as_ref().map(|s| s.answer_by));
        }
        let now = cx.now;
        if now >= self.send_end {
            return unavailable(cx);
        }
        let patient = now < self.patient_until;
        let Some(session) = cx.net.choose(&Target::Any, patient, None) else {
            if cx.net.hopeless(&Target::Any) {
                return unavailable(cx);
            }
            return Next::Wait(Some(if patient { self.patient_until } else { self.send_end }));
        };
        let wait = self.wait_end.saturating_duration_since(now);
        let wait_ms = wait.as_millis() as u32;
        let (key, owner, lease_s) = (&self.key, &self.owner, self.lease_s);
        let hold = &self.hold;
        let id = cx.net.send(session, Waiting::Op(cx.op), now, |out, id| match hold {
            None => encode_acquire(out, id, lease_s, wait_ms, key, owner),
            Some((parts, on_place)) => {
                let request = Request::Hold {
                    lease_s,
                    wait_ms,
                    place: on_place.is_some(),
                    owner: owner.to_string(),
                    parts: parts.clone(),
                };
                encode_request(out, id, &request);
            }
        });
        let answer_by = now + wait + cx.config.commit_margin;
        self.sent = Some(Sent { session, id, queued_at: now, wait, answer_by });
        Next::Wait(Some(answer_by))
    }

    pub(crate) fn on_timer(&mut self, cx: &mut Cx<'_>) -> Next {
        let Some(sent) = &self.sent else { return self.route(cx) };
        if cx.now < sent.answer_by {
            return Next::Wait(Some(sent.answer_by));
        }
        let (session, id, queued_at) = (sent.session, sent.id, sent.queued_at);
        let pending = cx.net.session(session).and_then(|s| s.pending_entry(id)).cloned();
        if cx.net.session(session).is_some_and(|s| s.silent_since(queued_at))
            && cx.now.saturating_duration_since(queued_at) >= PING_ANSWER_TIMEOUT
        {
            // Nothing at all came back since the request was queued: the node or the
            // path is dead, not just slow. Redial it.
            log::warn!("{} answered nothing within the request's budget; reconnecting", cx.net.name(session));
            cx.net.kill(session);
        }
        let outcome = self.indeterminate(IndeterminateCause::NoAnswer, pending.as_ref(), cx);
        self.redirect_late_grant(&outcome, session, id, cx);
        Next::Done(outcome)
    }

    /// Its caller cancelled it. Not yet on a connection, or its frame still queued
    /// (taken back: no writer has it): it ends `Cancelled`, nothing sent. In a writer's
    /// hands or written: it ends `Indeterminate` (cause `Cancelled`) with an orphan
    /// record, and a `G` that still comes is released — never sent again.
    pub(crate) fn cancel(&mut self, cx: &mut Cx<'_>) -> Next {
        let Some(sent) = &self.sent else {
            return Next::Done(Outcome::Acquire(Err(AcquireError::Cancelled)));
        };
        let (session, id) = (sent.session, sent.id);
        if cx.net.session_mut(session).is_some_and(|s| s.unqueue(id)) {
            self.sent = None;
            return Next::Done(Outcome::Acquire(Err(AcquireError::Cancelled)));
        }
        let pending = cx.net.session(session).and_then(|s| s.pending_entry(id)).cloned();
        let outcome = self.indeterminate(IndeterminateCause::Cancelled, pending.as_ref(), cx);
        self.redirect_late_grant(&outcome, session, id, cx);
        Next::Done(outcome)
    }

    /// A `G` that still comes on `session` for request `id` of an indeterminate
    /// `outcome` is released, or handed to `resolve`.
    fn redirect_late_grant(&self, outcome: &Outcome, session: SessionId, id: u32, cx: &mut Cx<'_>) {
        if let Outcome::Acquire(Err(AcquireError::Indeterminate(i))) = outcome {
            if let (Some(orphan), Some(s)) = (i.orphan, cx.net.session_mut(session)) {
                s.redirect(id, Waiting::LateGrant(orphan));
            }
        }
    }

    /// The answer to its request arrived (the core already updated routing for `M`,
    /// `G`).
    pub(crate) fn on_answer(&mut self, response: Response, pending: &Pending, cx: &mut Cx<'_>) -> Next {
        let result = match response {
            Response::Granted { token, lease_ms } => {
                return Next::Done(self.granted(token, lease_ms, pending, cx))
            }
            Response::Busy => Err(AcquireError::Busy),
            Response::Timeout => Err(AcquireError::Timeout),
            Response::Moved { leader } => {
                Err(AcquireError::NotLeader { leader: Some(leader).filter(|l| !l.is_empty()) })
            }
            Response::Unknown => {
                return Next::Done(self.indeterminate(IndeterminateCause::ServerUnknown, Some(pending), cx))
            }
            Response::Error { code: ErrorCode::Overloaded, .. } => Err(AcquireError::Overloaded),
            Response::Error { code: ErrorCode::Invalid, message } => Err(AcquireError::Invalid(message)),
            Response::Error { code, message } => {
                Err(AcquireError::Invalid(format!("server error {}: {message}", code.to_u8())))
            }
            other => {
                log::warn!("answer {other:?} to an ACQUIRE");
                return Next::Done(self.indeterminate(
                    IndeterminateCause::ProtocolViolation,
                    Some(pending),
                    cx,
                ));
            }
        };
        Next::Done(Outcome::Acquire(result))
    }

    /// The session carrying it ended (or its write failed) before an answer.
    pub(crate) fn on_ended(&mut self, maybe_written: bool, pending: &Pending, cx: &mut Cx<'_>) -> Next {
        if maybe_written {
            return Next::Done(self.indeterminate(IndeterminateCause::ConnectionLost, Some(pending), cx));
        }
        // Not one byte left this process: another session may carry it.
        self.sent = None;
        self.patient_until = self.send_end.min(cx.now + LEADER_WAIT);
        if cx.now >= self.send_end {
            return unavailable(cx);
        }
        self.route(cx)
    }

    fn granted(&mut self, token: u64, lease_ms: u32, pending: &Pending, cx: &mut Cx<'_>) -> Outcome {
        let lease = self.lease.min(Duration::from_millis(u64::from(lease_ms)));
        let deadline = pending.queued_at + lease;
        if cx.now >= deadline {
            // The lease may already have ended on the server: such a lock is of no use,
            // and returning it would invite a write after the expiry.
            log::warn!("grant of {:?} (token {token}) arrived after its lease; releasing it", self.key);
            cx.jobs.push(ReleaseJob {
                key: self.key.clone(),
                owner: Arc::clone(&self.owner),
                token,
                origin: Origin::Compensation,
                // The server's lease began at the commit, before now.
                until: Some(cx.now + lease),
            });
            return Outcome::Acquire(Err(AcquireError::Indeterminate(Indeterminate {
                cause: IndeterminateCause::ExpiredOnArrival,
                key: self.key.as_str().into(),
                owner: Arc::clone(&self.owner),
                lease_s: self.lease_s,
                wait: self.sent.as_ref().map_or(Duration::ZERO, |s| s.wait),
                sent_at: pending.queued_at,
                settle_at: cx.now,
                orphan: None,
                parts: self.parts(),
            })));
        }
        cx.claims.hand_out(token, deadline, cx.now);
        Outcome::Acquire(Ok(Granted { token, lease, deadline }))
    }

    /// The outcome is unknown: an orphan record takes care of a grant that happened.
    fn indeterminate(
        &mut self,
        cause: IndeterminateCause,
        pending: Option<&Pending>,
        cx: &mut Cx<'_>,
    ) -> Outcome {
        let now = cx.now;
        let wait = self.sent.as_ref().map_or(Duration::ZERO, |s| s.wait);
        let queued_at = pending.map_or(now, |p| p.queued_at);
        // Counted from when the frame was handed to the socket (not when it was
        // queued): a frame held up behind a slow write reaches the server later.
        let written = pending.and_then(|p| p.written_at).unwrap_or(now);
        let settle_at = (written + wait + cx.config.commit_margin).max(now);
        let orphan = cx.orphans.open(
            self.key.clone(),
            Arc::clone(&self.owner),
            self.lease,
            wait,
            queued_at,
            settle_at,
            now,
        );
        Outcome::Acquire(Err(AcquireError::Indeterminate(Indeterminate {
            cause,
            key: self.key.as_str().into(),
            owner: Arc::clone(&self.owner),
            lease_s: self.lease_s,
            wait,
            sent_at: queued_at,
            settle_at,
            orphan: Some(orphan),
            parts: self.parts(),
        })))
    }
}

impl AcquireOp {
    /// A hold's parts, for its indeterminate error (None for an acquire).
    fn parts(&self) -> Option<Arc<Vec<HoldPart>>> {
        self.hold.as_ref().map(|(parts, _)| Arc::new(parts.clone()))
    }
}

/// The key a HOLD of `parts` goes by (its claims, orphan record and lock): a key of
/// capacity 1 if it names one — a QUERY of it then names this hold alone — else its
/// first.
pub(crate) fn hold_key(parts: &[HoldPart]) -> &str {
    &parts.iter().find(|p| p.capacity == 1).unwrap_or(&parts[0]).key
}

/// Nothing was sent: no connection took it in time, or none can (a lasting mistake).
fn unavailable(cx: &Cx<'_>) -> Next {
    let (last_error, lasting) = cx.net.unavailable(&Target::Any);
    Next::Done(Outcome::Acquire(Err(AcquireError::Unavailable { last_error, lasting })))
}

#[cfg(test)]
#[path = "acquire_tests.rs"]
mod tests;
