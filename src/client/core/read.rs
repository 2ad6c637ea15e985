//! One read-only request: QUERY, STATUS, PING, TOP KEYS, MEMBERS (docs/client.md).
//!
//! Read-only requests are safe to send again, so a lost connection or an `M` means
//! another try within the budget — after an `M`, at the leader it named (routing
//! already points there), or after [`MOVED_PAUSE`] when it named none (an election
//! runs). When the budget ends unanswered, a session that received nothing since the
//! request was sent (for at least the PING allowance) is closed and redialed.

use std::time::{Duration, Instant};

use super::cx::{Cx, Next, Outcome, PING_ANSWER_TIMEOUT};
use super::ids::SessionId;
use super::net::Target;
use super::routing::LEADER_WAIT;
use super::session::Waiting;
use crate::client::error::ClientError;
use crate::proto::frame::{encode_request, ErrorCode, Request, Response};

/// Pause before asking again after an `M` that named no leader (an election runs).
pub const MOVED_PAUSE: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub(crate) struct ReadOp {
    pub(crate) request: Request,
    target: Target,
    deadline: Instant,
    patient_until: Instant,
    sent_once: bool,
    /// The last `M`, returned if the budget ends without a better answer.
    moved: Option<ClientError>,
    sent: Option<(SessionId, u32, Instant)>,
    not_before: Option<Instant>,
}

impl ReadOp {
    pub(crate) fn new(request: Request, target: Target, deadline: Instant, now: Instant) -> ReadOp {
        ReadOp {
            request,
            target,
            deadline,
            patient_until: deadline.min(now + LEADER_WAIT),
            sent_once: false,
            moved: None,
            sent: None,
            not_before: None,
        }
    }

    pub(crate) fn unrouted(&self) -> bool {
        self.sent.is_none()
    }

    fn out_of_time(&mut self, cx: &Cx<'_>) -> Next {
        let error = match self.moved.take() {
            Some(e) => e,
            None if self.sent_once => ClientError::NoAnswer,
            None => {
                let (last_error, lasting) = cx.net.unavailable(&self.target);
                ClientError::Unavailable { last_error, lasting }
            }
        };
        Next::Done(Outcome::Read(Err(error)))
    }

    pub(crate) fn route(&mut self, cx: &mut Cx<'_>) -> Next {
        if let Some((_, _, _)) = self.sent {
            return Next::Wait(Some(self.deadline));
        }
        let now = cx.now;
        if now >= self.deadline {
            return self.out_of_time(cx);
        }
        if let Some(at) = self.not_before.filter(|at| *at > now) {
            return Next::Wait(Some(at.min(self.deadline)));
        }
        let patient = now < self.patient_until;
        let Some(session) = cx.net.choose(&self.target, patient, None) else {
            if self.moved.is_none() && (cx.net.hopeless(&self.target) || cx.net.addr_down(&self.target)) {
                // No connection can take it until the operator fixes a mistake, or the
                // one node it is for is down (its last dial failed): said at once.
                return self.out_of_time(cx);
            }
            return Next::Wait(Some(if patient { self.patient_until } else { self.deadline }));
        };
        let request = &self.request;
        let id = cx.net.send(session, Waiting::Op(cx.op), now, |out, id| encode_request(out, id, request));
        self.sent = Some((session, id, now));
        self.sent_once = true;
        Next::Wait(Some(self.deadline))
    }

    pub(crate) fn on_timer(&mut self, cx: &mut Cx<'_>) -> Next {
        let now = cx.now;
        let Some((session, id, sent_at)) = self.sent else { return self.route(cx) };
        if now < self.deadline {
            return Next::Wait(Some(self.deadline));
        }
        self.sent = None;
        if let Some(s) = cx.net.session_mut(session) {
            s.forget(id);
            if s.silent_since(sent_at) && now.saturating_duration_since(sent_at) >= PING_ANSWER_TIMEOUT {
                log::warn!(
                    "{} answered nothing within the request's budget; reconnecting",
                    cx.net.name(session)
                );
                cx.net.kill(session);
            }
        }
        Next::Done(Outcome::Read(Err(ClientError::NoAnswer)))
    }

    /// The answer to its request on `session`.
    pub(crate) fn on_answer(&mut self, session: SessionId, response: Response, cx: &mut Cx<'_>) -> Next {
        self.sent = None;
        match check_answer(response) {
            Err(ClientError::NotLeader { leader }) => {
                // Not executed: ask again where the `M` pointed (routing moved the hint).
                // With no leader named — an election runs — or one that is the node
                // that answered (a confused node), pause instead of asking again at
                // round-trip speed.
                if leader.is_none() || cx.net.is_hinted(session) {
                    self.not_before = Some(cx.now + MOVED_PAUSE);
                }
                self.moved = Some(ClientError::NotLeader { leader });
                self.patient_until = self.deadline.min(cx.now + LEADER_WAIT);
                self.route(cx)
            }
            other => Next::Done(Outcome::Read(other)),
        }
    }

    /// The session carrying it ended: it goes again (it is read-only).
    pub(crate) fn on_ended(&mut self, cx: &mut Cx<'_>) -> Next {
        self.sent = None;
        self.patient_until = self.deadline.min(cx.now + LEADER_WAIT);
        self.route(cx)
    }

    /// Stops listening (the operation is dropped).
    pub(crate) fn forget(&mut self, cx: &mut Cx<'_>) {
        if let Some((session, id, _)) = self.sent.take() {
            if let Some(s) = cx.net.session_mut(session) {
                s.forget(id);
            }
        }
    }
}

/// The error an answer means, or the answer.
pub(crate) fn check_answer(response: Response) -> Result<Response, ClientError> {
    match response {
        Response::Moved { leader } => {
            Err(ClientError::NotLeader { leader: Some(leader).filter(|l| !l.is_empty()) })
        }
        Response::Error { code: ErrorCode::Overloaded, .. } => Err(ClientError::Overloaded),
        Response::Error { code: ErrorCode::Invalid, message } => Err(ClientError::Invalid(message)),
        Response::Error { code: ErrorCode::Refused, message } => Err(ClientError::Refused(message)),
        Response::Error { code, message } => {
            Err(ClientError::Protocol(format!("server error {}: {message}", code.to_u8())))
        }
        other => Ok(other),
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
