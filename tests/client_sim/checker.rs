//! The invariants of the client simulator, checked after every step
//! (tests/client_sim.rs lists them). The world reports what happened — batches
//! taken and written, grants the servers committed, answers fed to the core,
//! outcomes handed to callers — and the checker says whether the core kept its
//! promises.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use ticketing::client::core::{
    Granted, OpId, Outcome, Resolved, SessionId, ORPHAN_CHECK_TIMEOUT, ORPHAN_RETRY, RELEASE_DEADLINE,
};
use ticketing::client::{AcquireError, Place, ReleaseError};
use ticketing::proto::frame::{HoldPart, Request};

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
    /// An ACQUIRE, or a HOLD (`hold`: its keys, and whether it asked for its places;
    /// `key`: the one its lock and record go by).
    Acquire {
        key: String,
        owner: String,
        hold: Option<(Vec<HoldPart>, bool)>,
    },
    Release,
    Read,
    Resolve {
        acquire: OpId,
    },
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
    /// Hold: places in line the core read for it while it waited, not yet handed to
    /// its caller.
    places: VecDeque<Place>,
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
    /// The key its lock, release and record go by ([`hold_key`]), and all its keys.
    pub key: String,
    pub parts: Vec<HoldPart>,
    /// While no caller held it, an older hold of its key (all of whose keys are of
    /// capacity above 1) was current: a QUERY of the key shows that one, so the
    /// client's look cannot recognise this grant (docs/client.md, "Counted and
    /// multi-key holds", Limit) and it may end with its lease.
    masked: bool,
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
    /// HOLDs started, multi-key grants handed to callers, places handed to callers,
    /// and grants the oldest-hold limit excused.
    pub holds: u64,
    pub multi_granted: u64,
    pub places: u64,
    pub masked: u64,
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
        self.holds += o.holds;
        self.multi_granted += o.multi_granted;
        self.places += o.places;
        self.masked += o.masked;
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
        if let OpKind::Acquire { hold, .. } = &kind {
            self.stats.acquires += 1;
            self.stats.holds += u64::from(hold.is_some());
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
            places: VecDeque::new(),
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
                    self.attribute(session, *rid, *op, key, owner, None)?
                }
                Request::Hold { owner, parts, place, .. } => {
                    self.attribute(session, *rid, *op, hold_key(parts), owner, Some((parts, *place)))?
                }
                Request::Release { token, key, owner } => match self.grants.get(token) {
                    Some(g) if g.held => {
                        return Err(format!(
                            "invariant 4: RELEASE of ({key}, {owner}, {token}), which a caller holds"
                        ))
                    }
                    // Any key of a hold names it (a lost grant found by the record of
                    // another acquire of one of its keys by the same owner).
                    Some(g) if g.parts.iter().any(|p| p.key == *key) && g.owner == *owner => {}
                    Some(g) => {
                        return Err(format!(
                        "invariant 4: RELEASE of ({key}, {owner}, {token}), but that grant is of {} to {}",
                        g.parts.iter().map(|p| p.key.as_str()).collect::<Vec<_>>().join(" "),
                        g.owner
                    ))
                    }
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

    /// An ACQUIRE or HOLD frame (`hold`: its keys and place flag) is its operation's
    /// (by what it names), and a byte of none of that operation's earlier frames left
    /// (invariant 1).
    fn attribute(
        &mut self,
        session: SessionId,
        rid: u32,
        op: Option<OpId>,
        key: &str,
        owner: &str,
        hold: Option<(&Vec<HoldPart>, bool)>,
    ) -> Check {
        let what = if hold.is_some() { "HOLD" } else { "ACQUIRE" };
        let Some(op) = op else {
            return Err(format!("an {what} of {key} by {owner} that no running operation sent"));
        };
        let Some(o) = self.ops.get_mut(&op).filter(|o| o.done.is_none()) else {
            return Err(format!("an {what} of {key} by {owner} for {op:?}, which is not running"));
        };
        let same = match &o.kind {
            OpKind::Acquire { key: k, owner: w, hold: h } => {
                k == key && w == owner && h.as_ref().map(|(p, asked)| (p, *asked)) == hold
            }
            _ => false,
        };
        if !same {
            return Err(format!(
                "an {what} of {key} by {owner} ({hold:?}) for {op:?}, which is {:?}",
                o.kind
            ));
        }
        for f in &o.frames {
            if self.frames.get(f).is_some_and(|f| f.maybe_written) {
                return Err(format!(
                    "invariant 1: {what} of {key} by {owner} ({op:?}) sent again as {session:?}#{rid} after {:?}#{} \
                     carried a byte of it",
                    f.0, f.1
                ));
            }
        }
        o.frames.push((session, rid));
        self.frames.insert((session, rid), Frame { op, maybe_written: true, arrived: 0 });
        Ok(())
    }

    /// The core read a place in line (`I`) for the request `(session, rid)`: it must be
    /// a HOLD that asked, and while it runs the place goes to its caller (invariant 9).
    pub fn in_line(&mut self, session: SessionId, rid: u32, place: Place) -> Check {
        let Some(op) = self.frames.get(&(session, rid)).map(|f| f.op) else {
            return Err(format!("model: a place in line for {session:?}#{rid}, which is no HOLD"));
        };
        let o = self.ops.get_mut(&op).expect("a frame's operation");
        if !matches!(&o.kind, OpKind::Acquire { hold: Some((_, true)), .. }) {
            return Err(format!("model: a place in line for {op:?} ({:?}), which did not ask", o.kind));
        }
        if o.done.is_none() {
            o.places.push_back(place);
        }
        Ok(())
    }

    /// The caller's function of `op` was handed `place` (invariant 9): only a HOLD that
    /// asked, only while it waits for its answer, and exactly the places the core read
    /// for it, in order.
    pub fn place(&mut self, op: OpId, place: Place) -> Check {
        let Some(o) = self.ops.get_mut(&op) else {
            return Err(format!("invariant 9: a place for {op:?}, which no caller started"));
        };
        if !matches!(&o.kind, OpKind::Acquire { hold: Some((_, true)), .. }) {
            return Err(format!("invariant 9: a place for {op:?} ({:?}), which did not ask", o.kind));
        }
        if o.done.is_some() {
            return Err(format!("invariant 9: a place ({place:?}) for {op:?} after its outcome"));
        }
        match o.places.pop_front() {
            Some(read) if read == place => {
                self.stats.places += 1;
                Ok(())
            }
            read => Err(format!(
                "invariant 9: {op:?}'s caller was told {place:?}; the server's next place was {read:?}"
            )),
        }
    }

    /// The request ids the ACQUIREs went out under.
    pub fn request_ids(&self) -> Vec<u32> {
        self.frames.keys().map(|(_, rid)| *rid).collect()
    }

    /// A batch's write ended: `reached` says, per frame, whether any byte of it left.
    pub fn written(&mut self, session: SessionId, frames: &[(u32, Request, bool)], now: T) {
        for (rid, request, reached) in frames {
            match request {
                Request::Acquire { .. } | Request::Hold { .. } => {
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
        parts: &[HoldPart],
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
        for p in parts {
            let held: u32 = self
                .open
                .iter()
                .flat_map(|t| self.grants[t].parts.iter())
                .filter(|q| q.key == p.key)
                .map(|q| q.count)
                .sum();
            if held + p.count > p.capacity {
                return Err(format!(
                    "model: {} of {} granted to {owner} ({token}) while {held} of its {} permits are held",
                    p.count, p.key, p.capacity
                ));
            }
        }
        let op = session.and_then(|s| self.frames.get(&(s, rid))).map(|f| f.op);
        if let Some(OpKind::Acquire { key, hold, .. }) = op.and_then(|op| self.ops.get(&op)).map(|o| &o.kind)
        {
            let asked = match hold {
                Some((asked, _)) => asked.clone(),
                None => vec![HoldPart { key: key.clone(), count: 1, capacity: 1 }],
            };
            if asked != parts {
                return Err(format!(
                    "invariant 8: grant {token} to {owner} covers {parts:?}, but its request named {asked:?}: a split \
                     hold",
                ));
            }
        }
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
                key: hold_key(parts).to_owned(),
                parts: parts.to_vec(),
                masked: false,
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
        if self.expiry_allowed || self.grants[&token].masked {
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
        if let Some(place) = o.places.front() {
            return Err(format!(
                "invariant 9: {op:?} ended ({outcome:?}) before its caller was told {place:?}"
            ));
        }
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
            (OpKind::Acquire { hold, .. }, Outcome::Acquire(Ok(g))) => {
                self.stats.granted += 1;
                self.stats.multi_granted += u64::from(hold.is_some_and(|(p, _)| p.len() > 1));
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
        self.mask();
        for token in &self.open {
            let g = &self.grants[token];
            if g.held || g.release_written.is_some() || g.masked {
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

    /// Marks the grants the client's QUERY cannot recognise (see [`Grant::masked`]):
    /// ones of holds of keys of capacity above 1 alone that no caller holds — which the
    /// client may have to find by QUERY (a lost `G`, or a release, explicit or of a
    /// dropped lock, that ended unconfirmed and left a record of its token) — while an
    /// older grant of their key is current.
    fn mask(&mut self) {
        let mut masked = Vec::new();
        for token in &self.open {
            let g = &self.grants[token];
            if g.masked || g.held || g.duty.is_none() || g.parts.iter().any(|p| p.capacity == 1) {
                continue;
            }
            if self.open.range(..*token).any(|t| self.grants[t].parts.iter().any(|p| p.key == g.key)) {
                masked.push(*token);
            }
        }
        for token in masked {
            self.stats.masked += 1;
            self.grants.get_mut(&token).unwrap().masked = true;
        }
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
        if let Some((key, token)) = holders.iter().find(|(_, t)| self.grants.get(t).is_none_or(|g| !g.masked))
        {
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

/// The key a HOLD of `parts` goes by — its lock, its orphan record, its release — as the
/// client picks it: a key of capacity 1 if it names one, else its first.
pub fn hold_key(parts: &[HoldPart]) -> &str {
    &parts.iter().find(|p| p.capacity == 1).unwrap_or(&parts[0]).key
}
