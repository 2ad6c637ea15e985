//! Finding out what became of an indeterminate ACQUIRE, without sending it again:
//! a caller's `resolve`, and the background check of an orphan record
//! (docs/client.md, "Resolving", "No grant left orphaned").
//!
//! Both wait until the window in which the grant can still happen has passed — the
//! instant the frame was written plus its wait plus the commit margin (a deposed
//! leader answers `U` 5 s after losing leadership; a new leader commits or drops the
//! proposal before it serves) — and then QUERY the key at the leader (linearizable).
//! A holder with the acquire's owner whose token no caller of this client holds is
//! that acquire's grant: `resolve` adopts it, the background check releases it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cx::{Cx, Granted, Next, Origin, Outcome, ReleaseJob, Resolved};
use super::ids::{OrphanId, SessionId};
use super::net::Target;
use super::orphans::Claim;
use super::read::ReadOp;
use crate::client::error::{ClientError, Indeterminate};
use crate::proto::frame::{Request, Response};

/// What a QUERY said about the acquire's grant.
enum Found {
    /// Held by the acquire's owner under a token nothing of this client claims.
    Ours { token: u64, remaining: Duration },
    /// Free, someone else's, or a token a caller of this client holds or it releases.
    NotOurs,
    /// No answer — or a holder that may be the grant of an acquire of the same key by
    /// the same owner still under way, whose `G` has not arrived: only a later look can
    /// tell.
    Unknown,
}

/// Judges a QUERY's answer for the grant of an ACQUIRE of `key` by `owner`: its
/// `token` when known; else a token nothing of this client claims (`claims.rs`) while
/// no acquire of that key by that owner is under way. (A holder that is the grant of
/// another indeterminate acquire of the same key and owner is a lost grant all the
/// same: releasing or adopting it for either record is right, and `claims` keeps a
/// second record from taking it again.)
fn judge(
    result: Result<Response, ClientError>,
    key: &str,
    owner: &str,
    token: Option<u64>,
    cx: &Cx<'_>,
) -> Found {
    let ours = |found: u64| match token {
        Some(known) => found == known,
        None => !cx.claims.owns_token(found, cx.now),
    };
    match result {
        Ok(Response::Holder { token: found, remaining_ms, owner: holder, .. })
            if holder == owner && ours(found) =>
        {
            if token.is_none() && cx.claims.acquiring(key, owner) {
                return Found::Unknown;
            }
            Found::Ours { token: found, remaining: Duration::from_millis(u64::from(remaining_ms)) }
        }
        Ok(Response::Holder { .. } | Response::Free) => Found::NotOurs,
        Ok(other) => {
            log::warn!("answer {other:?} to a QUERY");
            Found::Unknown
        }
        Err(_) => Found::Unknown,
    }
}

#[derive(Debug)]
enum Phase {
    Settling(Instant),
    /// The QUERY, and the instant before it was sent.
    // Boxed: a resolve is rare, and `Settling` is most of its life.
    Querying(Box<ReadOp>, Instant),
}

/// A caller's `resolve`.
#[derive(Debug)]
pub(crate) struct ResolveOp {
    orphan: Option<OrphanId>,
    key: String,
    owner: Arc<str>,
    lease: Duration,
    /// The acquire's send instant (the record must have the same).
    sent_at: Instant,
    end: Instant,
    phase: Phase,
}

impl ResolveOp {
    /// For the indeterminate acquire `attempt`, answered by `end`.
    pub(crate) fn new(attempt: &Indeterminate, end: Instant) -> ResolveOp {
        ResolveOp {
            orphan: attempt.orphan,
            key: attempt.key.to_string(),
            owner: Arc::clone(&attempt.owner),
            lease: attempt.lease(),
            sent_at: attempt.sent_at,
            end,
            phase: Phase::Settling(attempt.settle_at),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Next {
        let claim = match self.orphan {
            Some(id) => cx.orphans.claim(id, cx.op, &self.key, &self.owner, self.sent_at),
            None => Claim::Missing,
        };
        if claim == Claim::Missing {
            // Not a record of this client (another client's error, or one long done):
            // decide by QUERY alone, and never touch a record by that id.
            self.orphan = None;
        }
        match claim {
            // The late `G` came and is being released, or the check found none.
            Claim::Done { .. } => return Next::Done(Outcome::Resolve(Resolved::NotHeld)),
            Claim::Claimed { settle_at } => self.phase = Phase::Settling(settle_at),
            Claim::Missing => {}
        }
        let Phase::Settling(settle_at) = self.phase else { unreachable!("a new resolve settles first") };
        if settle_at >= self.end {
            // The window does not end before the caller's time does (a QUERY would have
            // none left): the background check keeps the record.
            return self.finish(Resolved::Unknown, cx);
        }
        self.on_timer(cx)
    }

    pub(crate) fn unrouted(&self) -> bool {
        matches!(&self.phase, Phase::Querying(read, _) if read.unrouted())
    }

    pub(crate) fn route(&mut self, cx: &mut Cx<'_>) -> Next {
        match &mut self.phase {
            Phase::Querying(read, _) => {
                let next = read.route(cx);
                self.after_read(next, cx)
            }
            Phase::Settling(at) => Next::Wait(Some(*at)),
        }
    }

    pub(crate) fn on_timer(&mut self, cx: &mut Cx<'_>) -> Next {
        match &mut self.phase {
            Phase::Settling(at) if cx.now < *at => Next::Wait(Some(*at)),
            Phase::Settling(_) => {
                let read =
                    ReadOp::new(Request::Query { key: self.key.clone() }, Target::Any, self.end, cx.now);
                self.phase = Phase::Querying(Box::new(read), cx.now);
                self.route(cx)
            }
            Phase::Querying(read, _) => {
                let next = read.on_timer(cx);
                self.after_read(next, cx)
            }
        }
    }

    pub(crate) fn on_answer(&mut self, session: SessionId, response: Response, cx: &mut Cx<'_>) -> Next {
        match &mut self.phase {
            Phase::Querying(read, _) => {
                let next = read.on_answer(session, response, cx);
                self.after_read(next, cx)
            }
            Phase::Settling(at) => Next::Wait(Some(*at)),
        }
    }

    pub(crate) fn on_ended(&mut self, cx: &mut Cx<'_>) -> Next {
        match &mut self.phase {
            Phase::Querying(read, _) => {
                let next = read.on_ended(cx);
                self.after_read(next, cx)
            }
            Phase::Settling(at) => Next::Wait(Some(*at)),
        }
    }

    /// Its caller cancelled it: it ends `Unknown`, and the background check takes the
    /// record back (a grant it finds is released).
    pub(crate) fn cancel(&mut self, cx: &mut Cx<'_>) -> Next {
        if let Phase::Querying(read, _) = &mut self.phase {
            read.forget(cx);
        }
        self.finish(Resolved::Unknown, cx)
    }

    /// The record's `G` arrived while this resolve held it.
    pub(crate) fn on_late_grant(&mut self, token: u64, lease_ms: u32, cx: &mut Cx<'_>) -> Next {
        if let Phase::Querying(read, _) = &mut self.phase {
            read.forget(cx);
        }
        if cx.claims.owns_token(token, cx.now) {
            // Another `resolve` adopted this grant by QUERY, or the client releases it:
            // it is not this caller's to take.
            return self.finish(Resolved::NotHeld, cx);
        }
        let queued_at = self.orphan.and_then(|id| cx.orphans.get(id)).map_or(cx.now, |r| r.queued_at);
        let lease = self.lease.min(Duration::from_millis(u64::from(lease_ms)));
        let deadline = queued_at + lease;
        if cx.now >= deadline {
            log::warn!("late grant of {:?} (token {token}) arrived after its lease; releasing it", self.key);
            self.release(token, Some(cx.now + lease), cx);
            return self.finish(Resolved::NotHeld, cx);
        }
        self.adopt(Granted { token, lease, deadline }, cx)
    }

    fn after_read(&mut self, next: Next, cx: &mut Cx<'_>) -> Next {
        let Next::Done(Outcome::Read(result)) = next else { return next };
        let Phase::Querying(_, asked) = self.phase else { unreachable!("only a QUERY reads") };
        match judge(result, &self.key, &self.owner, None, cx) {
            // The local deadline: the instant before the QUERY was sent plus the lease
            // the leader reported left, so never later than the server's expiry.
            Found::Ours { token, remaining } => {
                let deadline = asked + remaining;
                if cx.now >= deadline {
                    // Its lease is over by now: such a lock is of no use (as a `G` after
                    // its lease, in acquire).
                    log::warn!(
                        "the grant of {:?} (token {token}) found by resolve has no lease left; releasing it",
                        self.key
                    );
                    self.release(token, Some(cx.now + remaining), cx);
                    return self.finish(Resolved::NotHeld, cx);
                }
                self.adopt(Granted { token, lease: self.lease, deadline }, cx)
            }
            Found::NotOurs => {
                // Not held now; the record takes its second look later (a grant that
                // commits late is released then: `Orphans::not_found`).
                if let Some(id) = self.orphan {
                    cx.orphans.not_found(id, cx.now);
                }
                Next::Done(Outcome::Resolve(Resolved::NotHeld))
            }
            Found::Unknown => self.finish(Resolved::Unknown, cx),
        }
    }

    fn adopt(&mut self, granted: Granted, cx: &mut Cx<'_>) -> Next {
        cx.claims.hand_out(granted.token, granted.deadline, cx.now);
        // A lock of the domain the nodes agree on (`domains.rs`).
        cx.net.holding_until(granted.deadline + cx.config.commit_margin);
        self.finish(Resolved::Held(granted), cx)
    }

    fn release(&self, token: u64, until: Option<Instant>, cx: &mut Cx<'_>) {
        let owner = Arc::clone(&self.owner);
        cx.jobs.push(ReleaseJob { key: self.key.clone(), owner, token, origin: Origin::Compensation, until });
    }

    /// Ends the resolve; an unknown end hands the record back to the background check,
    /// so a grant this call did not take is never dropped. (`NotHeld` here: the grant
    /// was found and is being released.)
    fn finish(&mut self, resolved: Resolved, cx: &mut Cx<'_>) -> Next {
        if let Some(id) = self.orphan {
            match &resolved {
                Resolved::Unknown => cx.orphans.unclaim(id, cx.op, cx.now),
                Resolved::Held(_) => cx.orphans.finish(id, false, cx.now),
                Resolved::NotHeld => cx.orphans.finish(id, true, cx.now),
            }
        }
        Next::Done(Outcome::Resolve(resolved))
    }
}

/// The background check of an orphan record that no `resolve` claimed.
#[derive(Debug)]
pub(crate) struct OrphanCheck {
    pub(crate) orphan: OrphanId,
    pub(crate) read: ReadOp,
}

/// How long one orphan check may take before it counts as unanswered.
pub const ORPHAN_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

impl OrphanCheck {
    pub(crate) fn new(orphan: OrphanId, key: String, now: Instant) -> OrphanCheck {
        let read = ReadOp::new(Request::Query { key }, Target::Any, now + ORPHAN_CHECK_TIMEOUT, now);
        OrphanCheck { orphan, read }
    }

    /// Applies the QUERY's result once `next` is done; returns whether it is.
    pub(crate) fn after_read(&mut self, next: Next, cx: &mut Cx<'_>) -> Next {
        let Next::Done(Outcome::Read(result)) = next else { return next };
        let done = Next::Done(Outcome::Resolve(Resolved::Unknown));
        if !cx.orphans.is_checking(self.orphan, cx.op) {
            // A `resolve` took the record over meanwhile: it decides.
            return done;
        }
        let Some(record) = cx.orphans.get(self.orphan) else { return done };
        let (key, owner, expected) = (record.key.clone(), Arc::clone(&record.owner), record.token);
        if cx.closing && expected.is_none() {
            // This client is being dropped. A holder with its owner and a token it does
            // not know may well be the grant of the client that replaces it under the
            // same owner (a restart of the component, a rebuilt client): only a token
            // this client saw is surely its own. Give the record up.
            log::info!("client closing: no longer looking for a lost grant of {key:?}");
            cx.orphans.finish(self.orphan, false, cx.now);
            return Next::Done(Outcome::Resolve(Resolved::Unknown));
        }
        match judge(result, &key, &owner, expected, cx) {
            Found::Ours { token, remaining } => {
                match expected {
                    None => log::warn!(
                        "the indeterminate acquire of {key:?} was granted after all (token {token}) and no \
                         caller took it over; releasing it"
                    ),
                    Some(_) => log::info!("{key:?} (token {token}) is still held; releasing it again"),
                }
                let until = Some(cx.now + remaining);
                cx.jobs.push(ReleaseJob { key, owner, token, origin: Origin::Compensation, until });
                cx.orphans.finish(self.orphan, true, cx.now);
                Next::Done(Outcome::Resolve(Resolved::NotHeld))
            }
            Found::NotOurs => {
                cx.orphans.not_found(self.orphan, cx.now);
                Next::Done(Outcome::Resolve(Resolved::NotHeld))
            }
            Found::Unknown => {
                cx.orphans.check_failed(self.orphan, cx.closing, cx.now);
                Next::Done(Outcome::Resolve(Resolved::Unknown))
            }
        }
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
