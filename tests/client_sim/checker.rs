//! The invariants of the client simulator, checked after every step
//! (tests/client_sim.rs lists them). The world reports what happened — batches
//! taken and written, grants the servers committed, answers fed to the core,
//! outcomes handed to callers — and the checker says whether the core kept its
//! promises.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ticketing::client::core::{
    Granted, OpId, Outcome, Resolved, SessionId, ORPHAN_CHECK_TIMEOUT, ORPHAN_RETRY, RELEASE_DEADLINE,
};
use ticketing::client::{AcquireError, ReleaseError};
use ticketing::proto::frame::Request;

use super::world::{MS, SEC, T};

/// After the last fault, the client may need this long to have a leader again: the
/// longest reconnect pause (3.2 s), a dial and a discovery round.
pub const CALM_SLACK: T = 5 * SEC;
/// Outcomes may come this much after their documented bound (the timer thread is
/// late by up to a millisecond in the model).
const BOUND_SLACK: T = 2 * MS;

pub type Check = Result<(), String>;

#[derive(Clone, Debug)]
pub enum OpKind {
    Acquire { key: String, owner: String },
    Release,
    Read,
    Resolve { acquire: OpId },
}

#[derive(Debug)]
struct Op {
    kind: OpKind,
    started: T,
    /// The documented worst case: the outcome must come by then.
    bound: T,
    done: Option<T>,
    /// Acquire: a definitive "not granted" was returned.
    said_no: bool,
    /// Acquire: some byte of one of its frames reached a socket.
    ever_written: bool,
    /// Acquire: its frames, as (session, request id).
    frames: Vec<(SessionId, u32)>,
    /// Acquire ended Indeterminate: when its grant can no longer happen.
    settle: Option<T>,
    /// Acquire: a `resolve` of it ran until then (the record came back after it).
    resolve_end: T,
}

#[derive(Debug)]
struct Frame {
    op: OpId,
    /// Some byte of it may have reached the socket (taken into a batch and not cut
    /// before it).
    maybe_written: bool,
    arrived: u32,
}

#[derive(Debug)]
pub struct Grant {
    pub key: String,
    pub owner: String,
    op: Option<OpId>,
    at: T,
    pub lease_end: T,
    /// The `G` was fed to the core.
    learned: Option<T>,
    /// A caller holds it (a returned lock, `Resolved::Held`).
    held: bool,
    /// Since when the client must release it without a caller.
    duty: Option<Duty>,
    /// First time a RELEASE of exactly it was written.
    release_written: Option<T>,
    pub released: bool,
}

pub struct Checker {
    /// The instant simulated time 0 stands for.
    base: Instant,
    ops: HashMap<OpId, Op>,
    frames: HashMap<(SessionId, u32), Frame>,
    pub grants: BTreeMap<u64, Grant>,
    /// Grants neither released nor held: the ones the timed check looks at.
    open: BTreeSet<u64>,
    /// The last fault of the world (its start or end).
    pub calm_since: T,
    /// Every fault's time, in order.
    faults: Vec<T>,
    /// Leases may end in this world (the short-lease scenario).
    pub expiry_allowed: bool,
    pub stats: Stats,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub acquires: u64,
    pub granted: u64,
    pub definitive_no: u64,
    pub indeterminate: u64,
    pub resolved_held: u64,
    pub resolved_unknown: u64,
    /// `G`s fed to the core after their acquire ended.
    pub late_grants: u64,
    /// Grants whose `G` never reached the core, found by an orphan check or `resolve`.
    pub lost_grants: u64,
    /// Requests that ended at once because every connection failed with a lasting
    /// mistake.
    pub lasting: u64,
    /// Operations cancelled while they ran.
    pub cancelled: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.acquires += o.acquires;
        self.granted += o.granted;
        self.definitive_no += o.definitive_no;
        self.indeterminate += o.indeterminate;
        self.resolved_held += o.resolved_held;
        self.resolved_unknown += o.resolved_unknown;
        self.late_grants += o.late_grants;
        self.lost_grants += o.lost_grants;
        self.cancelled += o.cancelled;
        self.lasting += o.lasting;
    }
}

fn us(d: Duration) -> T {
    d.as_micros() as T
}

impl Checker {
    /// `expiry_allowed`: leases may end on the server in this world.
    pub fn new(base: Instant, expiry_allowed: bool) -> Checker {
        Checker {
            base,
            ops: HashMap::new(),
            frames: HashMap::new(),
            grants: BTreeMap::new(),
            open: BTreeSet::new(),
            calm_since: 0,
            faults: Vec::new(),
            expiry_allowed,
            stats: Stats::default(),
        }
    }

    /// Simulated time of an instant the core handed out.
    fn t(&self, at: Instant) -> T {
        us(at.saturating_duration_since(self.base))
    }

    pub fn started(&mut self, op: OpId, kind: OpKind, now: T, bound: T) -> Check {
        if let OpKind::Acquire { .. } = &kind {
            self.stats.acquires += 1;
        }
        let entry = Op {
            kind,
            started: now,
            bound: now + bound,
            done: None,
            said_no: false,
            ever_written: false,
            frames: Vec::new(),
            settle: None,
            resolve_end: 0,
        };
        self.ops.insert(op, entry);
        Ok(())
    }

    /// A writer took a batch: the ACQUIREs in it are attributed to their operations
    /// (invariant 1), the RELEASEs checked against the grants (invariant 4).
    /// `frames`: request id, the operation the core says it belongs to, the request.
    pub fn batch(&mut self, session: SessionId, frames: &[(u32, Option<OpId>, Request)]) -> Check {
        for (rid, op, request) in frames {
            match request {
                Request::Acquire { key, owner, .. } => {
                    let Some(op) = *op else {
                        return Err(format!("an ACQUIRE of {key} by {owner} that no running operation sent"));
                    };
                    let Some(o) = self.ops.get_mut(&op).filter(|o| o.done.is_none()) else {
                        return Err(format!(
                            "an ACQUIRE of {key} by {owner} for {op:?}, which is not running"
                        ));
                    };
                    if !matches!(&o.kind, OpKind::Acquire { key: k, owner: w } if k == key && w == owner) {
                        return Err(format!(
                            "an ACQUIRE of {key} by {owner} for {op:?}, which is {:?}",
                            o.kind
                        ));
                    }
                    for f in &o.frames {
                        if self.frames.get(f).is_some_and(|f| f.maybe_written) {
                            return Err(format!(
                                "invariant 1: ACQUIRE of {key} by {owner} ({op:?}) sent again as {session:?}#{rid} \
                                 after {:?}#{} carried a byte of it",
                                f.0, f.1
                            ));
                        }
                    }
                    o.frames.push((session, *rid));
                    self.frames.insert((session, *rid), Frame { op, maybe_written: true, arrived: 0 });
                }
                Request::Release { token, key, owner } => match self.grants.get(token) {
                    Some(g) if g.held => {
                        return Err(format!(
                            "invariant 4: RELEASE of ({key}, {owner}, {token}), which a caller holds"
                        ))
                    }
                    Some(g) if g.key == *key && g.owner == *owner => {}
                    _ => {
                        return Err(format!(
                            "invariant 4: RELEASE of ({key}, {owner}, {token}), which no server granted"
                        ))
                    }
                },
                _ => {}
            }
        }
        Ok(())
    }

    /// The request ids the ACQUIREs went out under.
    pub fn request_ids(&self) -> Vec<u32> {
        self.frames.keys().map(|(_, rid)| *rid).collect()
    }

    /// A batch's write ended: `reached` says, per frame, whether any byte of it left.
    pub fn written(&mut self, session: SessionId, frames: &[(u32, Request, bool)], now: T) {
        for (rid, request, reached) in frames {
            match request {
                Request::Acquire { .. } => {
                    if let Some(f) = self.frames.get_mut(&(session, *rid)) {
                        f.maybe_written = *reached;
                        if *reached {
                            if let Some(o) = self.ops.get_mut(&f.op) {
                                o.ever_written = true;
                            }
                        }
                    }
                }
                Request::Release { token, .. } if *reached => {
                    if let Some(g) = self.grants.get_mut(token) {
                        g.release_written.get_or_insert(now);
                    }
                }
                _ => {}
            }
        }
    }

    /// A server took the ACQUIRE `(session, rid)` off the wire (for counting executions).
    pub fn arrived(&mut self, session: SessionId, rid: u32) -> Check {
        if let Some(f) = self.frames.get_mut(&(session, rid)) {
            f.arrived += 1;
            if f.arrived > 1 {
                return Err(format!("the ACQUIRE {session:?}#{rid} reached a server {} times", f.arrived));
            }
        }
        Ok(())
    }

    /// How often the ACQUIREs of `op` reached a server.
    pub fn arrivals(&self, op: OpId) -> u32 {
        self.ops
            .get(&op)
            .map_or(0, |o| o.frames.iter().filter_map(|f| self.frames.get(f)).map(|f| f.arrived).sum())
    }

    /// A server committed a grant of `token` to the request `(session, rid)`.
    #[allow(clippy::too_many_arguments)]
    pub fn granted(
        &mut self,
        token: u64,
        key: &str,
        owner: &str,
        session: Option<SessionId>,
        rid: u32,
        now: T,
        lease_end: T,
    ) -> Check {
        if let Some((&last, _)) = self.grants.last_key_value() {
            if token <= last {
                return Err(format!("model: token {token} granted after {last}"));
            }
        }
        if let Some((t, g)) = self.grants.iter().find(|(_, g)| g.key == key && !g.released) {
            return Err(format!(
                "model: {key} granted to {owner} ({token}) while {} holds it ({t})",
                g.owner
            ));
        }
        let op = session.and_then(|s| self.frames.get(&(s, rid))).map(|f| f.op);
        if let Some(o) = op.and_then(|op| self.ops.get(&op)) {
            if o.said_no {
                return Err(format!(
                    "invariant 2: {op:?} was told a definitive no, and its request was granted ({token})",
                    op = op.unwrap()
                ));
            }
        }
        self.grants.insert(
            token,
            Grant {
                key: key.to_owned(),
                owner: owner.to_owned(),
                op,
                at: now,
                lease_end,
                learned: None,
                held: false,
                duty: None,
                release_written: None,
                released: false,
            },
        );
        self.open.insert(token);
        // An acquire that already ended Indeterminate: its orphan record answers for it.
        if let Some(o) = op.and_then(|op| self.ops.get(&op)) {
            if let Some(settle) = o.settle {
                let since = settle.max(now).max(o.resolve_end);
                self.grants.get_mut(&token).unwrap().duty = Some(Duty::Find(since));
            }
        }
        Ok(())
    }

    /// The `G` of `(session, rid)` was fed to the core.
    pub fn learned(&mut self, session: SessionId, rid: u32, token: u64, now: T) {
        let Some(g) = self.grants.get_mut(&token) else { return };
        g.learned.get_or_insert(now);
        let op = self.frames.get(&(session, rid)).map(|f| f.op);
        // A late `G` (its acquire already ended) is the core's to release now.
        if op.and_then(|op| self.ops.get(&op)).is_some_and(|o| o.done.is_some()) && !g.held {
            self.stats.late_grants += 1;
            g.duty = Some(Duty::Background(now));
        }
    }

    pub fn released(&mut self, token: u64) {
        if let Some(g) = self.grants.get_mut(&token) {
            g.released = true;
            self.stats.lost_grants += u64::from(g.learned.is_none() && !g.held && g.op.is_some());
        }
        self.open.remove(&token);
    }

    pub fn expired(&mut self, token: u64, now: T) -> Check {
        self.released(token);
        if self.expiry_allowed {
            return Ok(());
        }
        let g = &self.grants[&token];
        Err(format!(
            "invariant 3: the lease of {token} ({} by {}, granted at {} ms) ended on the server at {} ms: a grant \
             left to its lease",
            g.key,
            g.owner,
            g.at / MS,
            now / MS
        ))
    }

    /// A caller took `token` over (`Client::adopt`).
    pub fn adopted(&mut self, token: u64) {
        if let Some(g) = self.grants.get_mut(&token) {
            g.held = true;
            g.duty = None;
        }
    }

    /// A caller gave its lock up (an explicit release, or a drop): the client must
    /// release it.
    pub fn gave_up(&mut self, token: u64, now: T, explicit: bool) {
        if let Some(g) = self.grants.get_mut(&token) {
            g.held = false;
            g.duty = Some(if explicit { Duty::Explicit(now) } else { Duty::Background(now) });
        }
    }

    /// An operation ended; `lease_end` is the server's current lease end of the token
    /// a successful outcome names, if it is held.
    pub fn completed(&mut self, op: OpId, outcome: &Outcome, now: T, lease_end: Option<T>) -> Check {
        let base = self.ops.get(&op).map(|o| o.started).unwrap_or(0);
        let Some(o) = self.ops.get_mut(&op) else {
            return Err(format!("an outcome for {op:?}, which no caller started"));
        };
        if o.done.is_some() {
            return Err(format!("{op:?} completed twice"));
        }
        o.done = Some(now);
        if now > o.bound + BOUND_SLACK {
            return Err(format!(
                "invariant 5: {op:?} ({:?}) took {} ms, over its bound of {} ms: {outcome:?}",
                o.kind,
                (now - base) / MS,
                (o.bound - base) / MS
            ));
        }
        let kind = o.kind.clone();
        match (kind, outcome) {
            (OpKind::Acquire { .. }, Outcome::Acquire(Ok(g))) => {
                self.stats.granted += 1;
                let end = self.grants.get(&g.token).map_or(0, |x| x.lease_end);
                self.hand_to_caller(op, g, end, now, "acquire")
            }
            (OpKind::Acquire { .. }, Outcome::Acquire(Err(AcquireError::Indeterminate(i)))) => {
                self.stats.indeterminate += 1;
                let settle = self.t(i.settle_at());
                let o = self.ops.get_mut(&op).unwrap();
                o.settle = Some(settle);
                for g in self.grants.values_mut().filter(|g| g.op == Some(op) && !g.held) {
                    g.duty = Some(match g.learned {
                        Some(_) => Duty::Background(now),
                        None => Duty::Find(settle.max(g.at)),
                    });
                }
                Ok(())
            }
            (OpKind::Acquire { .. }, Outcome::Acquire(Err(e))) => {
                self.stats.definitive_no += 1;
                let o = self.ops.get_mut(&op).unwrap();
                o.said_no = true;
                if matches!(e, AcquireError::Unavailable { .. } | AcquireError::Cancelled) && o.ever_written {
                    return Err(format!("invariant 2: {op:?} {e:?} although a byte of it was written"));
                }
                if let Some((t, _)) = self.grants.iter().find(|(_, g)| g.op == Some(op)) {
                    return Err(format!("invariant 2: {op:?} told {e:?}, but its request was granted ({t})"));
                }
                Ok(())
            }
            (OpKind::Resolve { acquire }, Outcome::Resolve(r)) => {
                if let Some(a) = self.ops.get_mut(&acquire) {
                    a.resolve_end = a.resolve_end.max(now);
                }
                match r {
                    Resolved::Held(g) => {
                        self.stats.resolved_held += 1;
                        self.hand_to_caller(acquire, g, lease_end.unwrap_or(0), now, "resolve")
                    }
                    Resolved::NotHeld | Resolved::Unknown => {
                        self.stats.resolved_unknown += u64::from(*r == Resolved::Unknown);
                        // The record is the background check's again: its duty starts over.
                        for g in self.grants.values_mut().filter(|g| g.op == Some(acquire) && !g.held) {
                            if let Some(Duty::Find(since)) = g.duty.as_mut() {
                                *since = (*since).max(now);
                            }
                        }
                        Ok(())
                    }
                }
            }
            (OpKind::Release, Outcome::Release(r)) => match r {
                Err(ReleaseError::QueueFull) => Err("release queue full with a handful of callers".into()),
                _ => Ok(()),
            },
            (OpKind::Read, Outcome::Read(_)) => Ok(()),
            (kind, outcome) => Err(format!("{op:?} ({kind:?}) ended with {outcome:?}")),
        }
    }

    /// True once `op`'s caller heard its outcome.
    pub fn is_done(&self, op: OpId) -> bool {
        self.ops.get(&op).is_some_and(|o| o.done.is_some())
    }

    /// `server_end`: the server's lease end the lock's deadline must not pass.
    fn hand_to_caller(&mut self, op: OpId, g: &Granted, server_end: T, now: T, how: &str) -> Check {
        let deadline = self.t(g.deadline);
        let Some(grant) = self.grants.get_mut(&g.token) else {
            return Err(format!(
                "invariant 2: {how} of {op:?} returned token {}, which no server granted",
                g.token
            ));
        };
        if grant.op != Some(op) {
            return Err(format!(
                "invariant 2: {how} of {op:?} returned token {}, granted to another request ({:?})",
                g.token, grant.op
            ));
        }
        if deadline <= now {
            return Err(format!(
                "invariant 6: {how} of {op:?} handed out token {} whose deadline ({} µs) had passed ({} µs): a dead lock",
                g.token, deadline, now
            ));
        }
        if grant.released {
            return Err(format!("{how} of {op:?} returned token {}, no longer held on the server", g.token));
        }
        if deadline > server_end {
            return Err(format!(
                "invariant 6: {how} of {op:?} handed out token {} with a deadline at {} µs, after the server's \
                 lease end at {} µs",
                g.token, deadline, server_end
            ));
        }
        grant.held = true;
        grant.duty = None;
        Ok(())
    }

    /// A fault started or ended now.
    pub fn fault(&mut self, now: T) {
        self.calm_since = now;
        if self.faults.last() != Some(&now) {
            self.faults.push(now);
        }
    }

    /// True when a fault started or ended within [a, b].
    fn fault_in(&self, a: T, b: T) -> bool {
        let i = self.faults.partition_point(|&t| t < a);
        self.faults.get(i).is_some_and(|&t| t <= b)
    }

    /// A release the core started at `since` could not succeed: a fault came within its
    /// deadline (or just before it, while the client was still reconnecting).
    fn excused(&self, since: T) -> bool {
        self.fault_in(since.saturating_sub(CALM_SLACK), since + us(RELEASE_DEADLINE))
    }

    /// The timed part of invariant 3: a grant no caller holds gets a RELEASE of exactly
    /// it written — within the release deadline when the core knows its token and the
    /// world stayed calm, or once the orphan record's check could find it in a calm
    /// world when its `G` was lost.
    pub fn step(&mut self, now: T) -> Check {
        for token in &self.open {
            let g = &self.grants[token];
            if g.held || g.release_written.is_some() {
                continue;
            }
            let (since, due) = match g.duty {
                None => continue,
                Some(Duty::Explicit(since)) => {
                    if self.excused(since) {
                        continue;
                    }
                    (since, since + us(RELEASE_DEADLINE) + BOUND_SLACK)
                }
                // A background release tries until the lease ends: once the world is
                // calm, within a release deadline.
                Some(Duty::Background(since)) => {
                    (since, since.max(self.calm_since + CALM_SLACK) + us(RELEASE_DEADLINE + RELEASE_ROUND))
                }
                Some(Duty::Find(since)) => (since, since.max(self.calm_since + CALM_SLACK) + lost_budget()),
            };
            if now >= due {
                return Err(format!(
                    "invariant 3: grant {token} ({} by {}, granted at {} ms, learned {:?}) has no holder and no \
                     RELEASE written {} ms after the client became responsible for it ({:?}), the world calm \
                     since {} ms",
                    g.key,
                    g.owner,
                    g.at / MS,
                    g.learned.map(|t| t / MS),
                    (now - since) / MS,
                    g.duty,
                    self.calm_since / MS
                ));
            }
        }
        Ok(())
    }

    /// End of run: every operation ended, and every grant is released — even one whose
    /// release ran out of time during a fault (an orphan record of its token follows).
    pub fn end(&mut self, now: T, holders: &[(String, u64)]) -> Check {
        let mut running: Vec<_> = self.ops.iter().filter(|(_, o)| o.done.is_none()).collect();
        running.sort_by_key(|(op, _)| **op);
        if let Some((op, o)) = running.first() {
            return Err(format!(
                "liveness: {op:?} ({:?}, started at {} ms) never ended",
                o.kind,
                o.started / MS
            ));
        }
        if let Some((key, token)) = holders.first() {
            let Some(g) = self.grants.get(token) else {
                return Err(format!("model: {key} held under {token}, never granted"));
            };
            if g.held {
                return Err(format!("simulator: a caller still holds {token} at the end"));
            }
            // Not even after a caller's own release that ended `Unconfirmed`: the client
            // keeps an orphan record of that token and releases it once a leader answers.
            return Err(format!(
                "invariant 3: at the end ({} ms) {key} is still held by {} under {token} (granted at {} ms, \
                 learned {:?}, {:?}, release written {:?}): left to its lease",
                now / MS,
                g.owner,
                g.at / MS,
                g.learned.map(|t| t / MS),
                g.duty,
                g.release_written.map(|t| t / MS)
            ));
        }
        Ok(())
    }
}

/// Why the client must release a grant no caller holds.
#[derive(Clone, Copy, Debug)]
enum Duty {
    /// A caller's explicit release since then: it has the release deadline, and ends
    /// `Unconfirmed` when a fault outlasts it.
    Explicit(T),
    /// A release nobody waits for (a dropped lock, a late `G`) since then: it goes on
    /// while the lease may run.
    Background(T),
    /// Its `G` was lost: the orphan record's check finds it after then.
    Find(T),
}

/// A background release's attempts are at most this far apart.
const RELEASE_ROUND: Duration = Duration::from_secs(1);

/// The budget for a grant whose `G` was lost: the settle window's check, its retry,
/// a check's own time and the release.
fn lost_budget() -> T {
    us(ORPHAN_RETRY + ORPHAN_CHECK_TIMEOUT + RELEASE_DEADLINE + RELEASE_ROUND)
}
