//! The client's connections and where requests go (docs/client.md, "Seeds and
//! discovery", "Routing").
//!
//! The configured addresses are *seeds*. Each address the client dials has a [`Slot`];
//! the I/O around the core dials it when told ([`NetEvent::Dial`]) and reports the
//! session or the failure. A slot is added for the leader an `M` or a WELCOME names
//! when no slot reaches it, and the slots follow the voter set a leader's STATUS
//! reports ([`Net::reconcile`]): one per voter (two when there is one), keyed by the
//! node id of its last WELCOME, so a seed that reaches a voter under another name
//! keeps serving it. Slots of nodes that left are retired: no new requests, their
//! session closed once nothing is pending on it (or after [`RETIRE_GRACE`]). Learned
//! addresses are capped at [`LEARNED_ADDRS_MAX`]; with nothing reachable for
//! [`SEED_FALLBACK_AFTER`], the seeds are dialed again.
//!
//! Routing: the session the leader hint names, else one whose node is believed to
//! lead, else any, round-robin among equals. While a slot that could serve the request
//! is still making its first connection, a patient request holds out for it.

use std::time::{Duration, Instant};

use super::ids::{SessionId, SlotId};
use super::session::{Ended, Session, Waiting};
use crate::client::backoff::Backoff;
use crate::proto::addr::{host_of, is_tls_server_name};

/// How long a request waits for a better connection (the leader's) while a slot is
/// still connecting for the first time, before it settles for any connected node.
/// Why: right after `build`, or right after an `M` named a new address, the first node
/// to answer is often a follower, and sending there would only earn an `M`.
pub const LEADER_WAIT: Duration = Duration::from_secs(1);
/// Most addresses the client dials beyond its seeds (learned from `M`, WELCOME and
/// STATUS). Why a cap: a confused or hostile server must not make it dial without end.
pub const LEARNED_ADDRS_MAX: usize = 16;
/// With no connection up for this long, the seeds are dialed again (the membership the
/// client learned may be gone as a whole).
pub const SEED_FALLBACK_AFTER: Duration = Duration::from_secs(5);
/// A retired slot's session is closed once nothing is pending on it, or after this.
pub const RETIRE_GRACE: Duration = Duration::from_secs(5);

/// What the I/O around the core must do for the connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetEvent {
    /// Connect to `addr` for `slot` and report `on_connected` or `on_dial_failed`.
    Dial { slot: SlotId, addr: String },
    /// Shut the session's socket down; its reader then reports `on_closed`.
    Close { session: SessionId },
    /// The calling thread is now the session's writer: it takes batches with
    /// `next_batch` and reports each with `on_written` until `next_batch` says none.
    Flush { session: SessionId },
    /// The slot is gone for good: its thread may end.
    Forget { slot: SlotId },
}

/// Which sessions a request may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any node (the leader's first).
    Any,
    /// Only the slot dialing this address.
    Addr(String),
}

impl Target {
    fn accepts(&self, slot: &Slot) -> bool {
        match self {
            Target::Any => true,
            Target::Addr(addr) => slot.addr == *addr,
        }
    }
}

/// One address the client dials, and its current session, if any.
pub(crate) struct Slot {
    pub(crate) id: SlotId,
    pub(crate) addr: String,
    /// Configured by the user, not learned.
    pub(crate) seed: bool,
    pub(crate) session: Option<Session>,
    dialing: bool,
    /// When to dial next (no session, not dialing).
    next_dial: Option<Instant>,
    /// A connection attempt of this slot has ended (see [`LEADER_WAIT`]).
    tried: bool,
    /// The node id of the last WELCOME on this slot; 0 before any.
    pub(crate) node: u64,
    retired_at: Option<Instant>,
    /// Why the last attempt failed (cleared when one works).
    pub(crate) last_error: Option<String>,
    /// How far the attempt under way got, when that says something (a TCP connection
    /// taken but no greeting: the server may wait for TLS).
    note: Option<String>,
    backoff: Backoff,
}

impl Slot {
    fn retired(&self) -> bool {
        self.retired_at.is_some()
    }

    fn live(&self) -> Option<&Session> {
        self.session.as_ref().filter(|s| s.usable())
    }

    /// Does the address `leader` (from WELCOME, `M` or STATUS) name this slot?
    fn is(&self, leader: &str) -> bool {
        leader == self.addr || self.live().is_some_and(|s| s.peer == leader)
    }
}

/// The connections, the leader hint and the routing state.
pub(crate) struct Net {
    pub(crate) slots: Vec<Slot>,
    seeds: Vec<String>,
    tls: bool,
    /// The leader's address, from the last `M`, WELCOME, STATUS or `G`/`R`.
    hint: Option<String>,
    rr: usize,
    next_slot: u64,
    next_session: u64,
    next_id: u32,
    /// The membership should be read from STATUS soon (the leader changed, a
    /// connection ended).
    pub(crate) refresh_due: bool,
    /// When some session was last up (for the seed fallback).
    last_live: Instant,
    /// The last connection failure, for `Unavailable` errors.
    pub(crate) last_error: Option<String>,
    pub(crate) events: Vec<NetEvent>,
    /// The client is shutting down: nothing is dialed any more.
    pub(crate) stopped: bool,
}

impl Net {
    /// One slot per seed, two when there is a single seed (so one broken socket does
    /// not stop service while it reconnects); all dialed at once.
    pub(crate) fn new(seeds: Vec<String>, tls: bool, now: Instant) -> Net {
        let mut net = Net {
            slots: Vec::new(),
            seeds: seeds.clone(),
            tls,
            hint: None,
            rr: 0,
            next_slot: 1,
            next_session: 1,
            next_id: 1,
            refresh_due: false,
            last_live: now,
            last_error: None,
            events: Vec::new(),
            stopped: false,
        };
        let per_addr = if seeds.len() == 1 { 2 } else { 1 };
        for addr in seeds {
            for _ in 0..per_addr {
                net.add_slot(addr.clone(), true, now);
            }
        }
        net.dial_due(now);
        net
    }

    fn add_slot(&mut self, addr: String, seed: bool, now: Instant) {
        let id = SlotId(self.next_slot);
        self.next_slot += 1;
        self.slots.push(Slot {
            id,
            addr,
            seed,
            session: None,
            dialing: false,
            next_dial: Some(now),
            tried: false,
            node: 0,
            retired_at: None,
            last_error: None,
            note: None,
            backoff: Backoff::new(),
        });
    }

    /// Starts the dials that are due.
    pub(crate) fn dial_due(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        for slot in &mut self.slots {
            if slot.retired() || slot.dialing || slot.session.is_some() {
                continue;
            }
            if slot.next_dial.is_some_and(|at| at <= now) {
                slot.next_dial = None;
                slot.dialing = true;
                self.events.push(NetEvent::Dial { slot: slot.id, addr: slot.addr.clone() });
            }
        }
    }

    /// The next instant a dial is due.
    pub(crate) fn next_dial(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        self.slots.iter().filter(|s| !s.retired()).filter_map(|s| s.next_dial).min()
    }

    pub(crate) fn slot_mut(&mut self, slot: SlotId) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == slot)
    }

    pub(crate) fn session(&self, id: SessionId) -> Option<&Session> {
        self.slots.iter().filter_map(|s| s.session.as_ref()).find(|s| s.id == id)
    }

    pub(crate) fn session_mut(&mut self, id: SessionId) -> Option<&mut Session> {
        self.slots.iter_mut().filter_map(|s| s.session.as_mut()).find(|s| s.id == id)
    }

    /// The address of the slot `id` belongs to.
    pub(crate) fn addr_of(&self, id: SessionId) -> Option<String> {
        self.slot_of(id).map(|s| s.addr.clone())
    }

    fn slot_of(&self, id: SessionId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.session.as_ref().is_some_and(|x| x.id == id))
    }

    /// Every session that may carry requests.
    pub(crate) fn live_sessions(&self) -> impl Iterator<Item = &Session> {
        self.slots.iter().filter(|s| !s.retired()).filter_map(|s| s.live())
    }

    pub(crate) fn any_live(&self) -> bool {
        self.slots.iter().any(|s| s.live().is_some())
    }

    pub(crate) fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// True when the hint names `session`'s slot.
    pub(crate) fn is_hinted(&self, session: SessionId) -> bool {
        match (&self.hint, self.slot_of(session)) {
            (Some(hint), Some(slot)) => slot.is(hint),
            _ => false,
        }
    }

    /// A connection attempt of `slot` succeeded: installs the session.
    pub(crate) fn connected(
        &mut self,
        slot: SlotId,
        node: u64,
        role: u8,
        leader: &str,
        peer: String,
        now: Instant,
    ) -> Option<SessionId> {
        use crate::proto::handshake::role as r;
        let id = SessionId(self.next_session);
        let stopped = self.stopped;
        let Some(index) = self.slots.iter().position(|s| s.id == slot) else {
            // A slot forgotten meanwhile: the connection has no use.
            return None;
        };
        self.next_session += 1;
        let leads = matches!(role, r::LEADER | r::STANDALONE);
        let standalone = role == r::STANDALONE;
        // A follower's WELCOME names the leader: believe it unless the current hint
        // points at a connection that is up. Its slot is added before this session
        // can carry requests, so a request woken now holds out for the leader instead
        // of meeting the follower (`M`).
        let hinted_live =
            self.hint.as_ref().is_some_and(|h| self.slots.iter().any(|s| s.live().is_some() && s.is(h)));
        let named = (!leads && !leader.is_empty() && !hinted_live).then(|| leader.to_owned());
        if let Some(named) = &named {
            self.learn(named, now);
        }
        let slot = &mut self.slots[index];
        slot.dialing = false;
        slot.tried = true;
        slot.node = node;
        slot.last_error = None;
        slot.note = None;
        slot.backoff.reset();
        slot.session = Some(Session::new(id, standalone, leads, peer, now));
        let addr = slot.addr.clone();
        let retired = slot.retired();
        self.last_live = now;
        if stopped || retired {
            self.kill(id);
            return Some(id);
        }
        if leads {
            self.set_hint(Some(&addr), now);
        } else if let Some(named) = named {
            self.set_hint(Some(&named), now);
        }
        if !standalone {
            self.refresh_due = true;
        }
        Some(id)
    }

    /// A connection attempt of `slot` failed with `error` (a sentence naming the cause).
    pub(crate) fn dial_failed(&mut self, slot: SlotId, error: String, now: Instant) {
        self.last_error = Some(error.clone());
        if let Some(slot) = self.slot_mut(slot) {
            slot.dialing = false;
            slot.tried = true;
            slot.last_error = Some(error);
            slot.note = None;
            slot.next_dial = Some(now + slot.backoff.next().expect("backoff is endless"));
        }
        self.forget_ended_slots();
    }

    /// How far the attempt under way of `slot` got (see [`Slot::note`]).
    pub(crate) fn dial_note(&mut self, slot: SlotId, note: String) {
        if let Some(slot) = self.slot_mut(slot).filter(|s| s.dialing) {
            slot.note = Some(note);
        }
    }

    /// The session's connection ended: returns what was pending on it.
    pub(crate) fn closed(&mut self, session: SessionId, now: Instant) -> Vec<Ended> {
        let Some(slot) = self.slots.iter_mut().find(|s| s.session.as_ref().is_some_and(|x| x.id == session))
        else {
            return Vec::new();
        };
        let mut gone = slot.session.take().expect("found by its session");
        let ended = gone.end();
        slot.next_dial = Some(now + slot.backoff.next().expect("backoff is endless"));
        if gone.leads || self.hint.as_ref().is_some_and(|h| *h == slot.addr || *h == gone.peer) {
            // The node may have left, or the leader may be gone: read both again.
            self.refresh_due = true;
        }
        self.refresh_due |= !gone.standalone;
        self.forget_ended_slots();
        ended
    }

    /// Removes retired slots whose session has ended.
    fn forget_ended_slots(&mut self) {
        let events = &mut self.events;
        self.slots.retain(|s| {
            let done = s.retired() && s.session.is_none();
            if done {
                events.push(NetEvent::Forget { slot: s.id });
            }
            !done
        });
    }

    /// Closes `session` from the client's side: nothing more is written; answers still
    /// count until the reader reports the end.
    pub(crate) fn kill(&mut self, session: SessionId) {
        if let Some(s) = self.session_mut(session) {
            if !s.dying {
                s.dying = true;
                self.events.push(NetEvent::Close { session });
            }
        }
    }

    /// A fresh request id for `session`: never 0 (reserved), never one still pending
    /// there. Why look: after 2^32 requests the counter wraps, and an id still pending
    /// (a long queued ACQUIRE) must never get a second waiter.
    fn fresh_id(&mut self, session: SessionId) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.session(session).is_some_and(|s| s.is_pending(id)) {
                return id;
            }
        }
    }

    /// Forces the id counter (tests: an id still pending must be skipped).
    pub(crate) fn set_next_id(&mut self, id: u32) {
        self.next_id = id;
    }

    /// Queues a request on `session` (which must be usable): `encode` appends the
    /// frame under the id given. Returns the id; if no thread is writing the session,
    /// the caller is told to ([`NetEvent::Flush`]).
    pub(crate) fn send(
        &mut self,
        session: SessionId,
        waiting: Waiting,
        now: Instant,
        encode: impl FnOnce(&mut Vec<u8>, u32),
    ) -> u32 {
        let id = self.fresh_id(session);
        let s = self.session_mut(session).expect("send to a session that exists");
        if s.queue(id, waiting, now, |out| encode(out, id)) {
            self.events.push(NetEvent::Flush { session });
        }
        id
    }

    /// The routing decision: the session a request for `target` goes to now. With
    /// `patient`, settles for a node not known to lead only when no slot that could
    /// serve it is still making its first connection. `avoid`: never that session
    /// while another is up.
    pub(crate) fn choose(
        &mut self,
        target: &Target,
        patient: bool,
        avoid: Option<SessionId>,
    ) -> Option<SessionId> {
        let hint = self.hint.clone();
        let candidates: Vec<(SessionId, bool, bool)> = self
            .slots
            .iter()
            .filter(|s| !s.retired() && target.accepts(s))
            .filter_map(|s| s.live().map(|x| (x.id, hint.as_deref().is_some_and(|h| s.is(h)), x.leads)))
            .filter(|(id, _, _)| Some(*id) != avoid)
            .collect();
        let hold_out = patient && self.coming(target);
        let mut pick = |class: &dyn Fn(&(SessionId, bool, bool)) -> bool| {
            let count = candidates.iter().filter(|c| class(c)).count();
            if count == 0 {
                return None;
            }
            self.rr = self.rr.wrapping_add(1);
            candidates.iter().filter(|c| class(c)).nth(self.rr % count).map(|c| c.0)
        };
        if let Some(id) = pick(&|c| c.1).or_else(|| pick(&|c| c.2)) {
            return Some(id);
        }
        if hold_out {
            return None;
        }
        pick(&|_| true)
    }

    /// True while a slot that could serve `target` is making its first connection.
    pub(crate) fn coming(&self, target: &Target) -> bool {
        self.slots.iter().any(|s| !s.retired() && target.accepts(s) && !s.tried)
    }

    /// True while the hinted leader's slot is making its first connection: a request is
    /// better held back briefly than sent to a node that will answer `M`.
    pub(crate) fn leader_connecting(&self) -> bool {
        let Some(hint) = &self.hint else { return false };
        self.slots.iter().any(|s| !s.retired() && s.addr == *hint && !s.tried)
    }

    /// True when a session other than `except` is up whose node leads or is hinted.
    pub(crate) fn leader_elsewhere(&self, except: SessionId) -> bool {
        let hint = self.hint.as_deref();
        self.slots
            .iter()
            .filter(|s| !s.retired())
            .filter_map(|s| s.live().map(|x| (s, x)))
            .any(|(s, x)| x.id != except && (x.leads || hint.is_some_and(|h| s.is(h))))
    }

    /// Points routing at the leader `addr` (None: unknown). A new leader address is
    /// dialed if no slot reaches it, and the membership is read again.
    pub(crate) fn set_hint(&mut self, addr: Option<&str>, now: Instant) {
        if self.hint.as_deref() == addr {
            return;
        }
        log::debug!("leader is now {}", addr.unwrap_or("unknown"));
        self.hint = addr.map(str::to_owned);
        self.refresh_due = true;
        if let Some(addr) = addr {
            self.learn(addr, now);
        }
    }

    /// An `M` arrived on `session`: its node does not lead; the leader is `leader`
    /// (unknown when empty).
    pub(crate) fn moved(&mut self, session: SessionId, leader: &str, now: Instant) {
        if let Some(s) = self.session_mut(session) {
            s.leads = false;
        }
        self.set_hint(Some(leader).filter(|l| !l.is_empty()), now);
    }

    /// A `G` or `R` arrived on `session`: its node leads.
    pub(crate) fn leads(&mut self, session: SessionId, now: Instant) {
        let Some(s) = self.session_mut(session) else { return };
        if s.leads {
            return;
        }
        s.leads = true;
        if let Some(addr) = self.slot_of(session).map(|s| s.addr.clone()) {
            self.set_hint(Some(&addr), now);
        }
    }

    /// Adds a learned slot for `addr` unless one reaches it or the cap is reached.
    fn learn(&mut self, addr: &str, now: Instant) {
        if self.stopped || self.slots.iter().any(|s| !s.retired() && s.is(addr)) {
            return;
        }
        if self.learned() >= LEARNED_ADDRS_MAX {
            log::warn!("not dialing {addr}: already {LEARNED_ADDRS_MAX} learned addresses");
            return;
        }
        let Some(host) = host_of(addr) else {
            log::warn!("a server named the leader {addr:?}, which is not host:port");
            return;
        };
        if self.tls && !is_tls_server_name(host) {
            log::warn!("a server named the leader {addr:?}, whose host cannot be a TLS name");
            return;
        }
        log::debug!("dialing {addr}, named by the cluster");
        self.add_slot(addr.to_owned(), false, now);
        self.dial_due(now);
    }

    fn learned(&self) -> usize {
        self.slots.iter().filter(|s| !s.seed && !s.retired()).count()
    }

    /// Makes the slots follow the voter set `voters` (node id, client address) that a
    /// leader's STATUS reported: one slot per voter (two when there is one), a slot kept
    /// when its address is the voter's or its last WELCOME came from that voter; every
    /// other slot retired; missing voters dialed.
    pub(crate) fn reconcile(&mut self, voters: &[(u64, String)], now: Instant) {
        if voters.is_empty() || self.stopped {
            return;
        }
        let per_voter = if voters.len() == 1 { 2 } else { 1 };
        let mut count = vec![0usize; voters.len()];
        let by_addr = |slot: &Slot| voters.iter().position(|(_, a)| *a == slot.addr);
        let by_node = |slot: &Slot| voters.iter().position(|(id, _)| slot.node != 0 && *id == slot.node);
        // Slots on a voter's own address first, so they win over aliases.
        let mut order: Vec<usize> = (0..self.slots.len()).filter(|&i| !self.slots[i].retired()).collect();
        order.sort_by_key(|&i| by_addr(&self.slots[i]).is_none());
        let mut retire = Vec::new();
        for i in order {
            match by_addr(&self.slots[i]).or_else(|| by_node(&self.slots[i])) {
                Some(v) if count[v] < per_voter => count[v] += 1,
                _ => retire.push(i),
            }
        }
        for i in retire {
            let slot = &mut self.slots[i];
            log::debug!("no longer a member: {}", slot.addr);
            slot.retired_at = Some(now);
            slot.next_dial = None;
            if let Some(s) = slot.session.as_ref().filter(|s| s.pending_len() == 0).map(|s| s.id) {
                self.kill(s);
            }
        }
        self.forget_ended_slots();
        for (v, (_, addr)) in voters.iter().enumerate() {
            for _ in count[v]..per_voter {
                if self.learned() >= LEARNED_ADDRS_MAX {
                    return;
                }
                if host_of(addr).is_none() {
                    break;
                }
                self.add_slot(addr.clone(), false, now);
            }
        }
        self.dial_due(now);
    }

    /// Closes the sessions of retired slots once nothing is pending on them or their
    /// grace ran out; dials the seeds again when nothing has been reachable for
    /// [`SEED_FALLBACK_AFTER`].
    pub(crate) fn housekeeping(&mut self, now: Instant) {
        let mut kill = Vec::new();
        for slot in &self.slots {
            if let (Some(at), Some(s)) = (slot.retired_at, slot.live()) {
                if s.pending_len() == 0 || now.saturating_duration_since(at) >= RETIRE_GRACE {
                    kill.push(s.id);
                }
            }
        }
        for id in kill {
            self.kill(id);
        }
        if self.any_live() {
            self.last_live = now;
        } else if !self.stopped && now.saturating_duration_since(self.last_live) >= SEED_FALLBACK_AFTER {
            for addr in self.seeds.clone() {
                if !self.slots.iter().any(|s| !s.retired() && s.addr == addr) {
                    log::info!("no connection for {SEED_FALLBACK_AFTER:?}: dialing the seed {addr} again");
                    self.add_slot(addr, true, now);
                }
            }
            self.last_live = now;
        }
        self.dial_due(now);
    }

    /// When [`Net::housekeeping`] next has something to do.
    pub(crate) fn next_housekeeping(&self) -> Option<Instant> {
        let retire = self
            .slots
            .iter()
            .filter(|s| s.live().is_some())
            .filter_map(|s| s.retired_at.map(|at| at + RETIRE_GRACE))
            .min();
        let fallback = (!self.stopped && !self.any_live()).then_some(self.last_live + SEED_FALLBACK_AFTER);
        [retire, fallback, self.next_dial()].into_iter().flatten().min()
    }

    /// Stops dialing and closes every session (the client shut down).
    pub(crate) fn stop(&mut self, now: Instant) {
        self.stopped = true;
        let ids: Vec<SessionId> =
            self.slots.iter().filter_map(|s| s.session.as_ref()).map(|s| s.id).collect();
        for id in ids {
            self.kill(id);
        }
        for slot in &mut self.slots {
            slot.next_dial = None;
            slot.retired_at.get_or_insert(now);
        }
        self.forget_ended_slots();
    }

    /// Each address tried and not connected now, with why its last attempt failed.
    pub(crate) fn connection_errors(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for slot in &self.slots {
            if slot.live().is_some() || out.iter().any(|(a, _)| *a == slot.addr) {
                continue;
            }
            if let Some(e) = slot.last_error.as_ref().or(slot.note.as_ref().filter(|_| slot.dialing)) {
                out.push((slot.addr.clone(), e.clone()));
            }
        }
        out
    }

    /// The addresses dialed now.
    pub(crate) fn dialed(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for slot in self.slots.iter().filter(|s| !s.retired()) {
            if !out.contains(&slot.addr) {
                out.push(slot.addr.clone());
            }
        }
        out
    }
}
