//! The client's connections: one [`Slot`] per address it dials, its current
//! [`Session`], and the dialing (docs/client.md, "Seeds and discovery").
//!
//! The I/O around the core dials a slot when told ([`NetEvent::Dial`]) and reports the
//! session or the failure; a failed dial or an ended session is dialed again after the
//! slot's backoff. Where requests go is `routing.rs`; which slots exist — following the
//! leader's voter set, retiring the others, falling back to the seeds — `members.rs`.

use std::time::Instant;

use super::domain_record::Domains;
use super::ids::{OrphanId, SessionId, SlotId};
use super::session::{Ended, Session, Waiting, WriteFailure};
pub(crate) use super::slot::Slot;
use crate::client::backoff::Backoff;

/// A session that lasted this long served, even without an answer (its backoff starts
/// over when it ends).
const SESSION_SERVED: std::time::Duration = std::time::Duration::from_secs(2);

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

/// Why a dial failed, as the I/O around the core reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialFailure {
    /// One sentence naming the cause and what to check.
    pub cause: String,
    /// Trying again cannot help: the server refused the secret or its proof is wrong,
    /// its certificate is not trusted, TLS on one side only, a port of another kind.
    /// The slot is still redialed (the operator may fix the server), but a request
    /// that finds every connection failed so ends at once instead of waiting out its
    /// budget (docs/client.md, "When nothing can connect").
    pub lasting: bool,
}

impl DialFailure {
    /// A failure that may pass (refused, timed out, reset, unresolved).
    pub fn transient(cause: impl Into<String>) -> DialFailure {
        DialFailure { cause: cause.into(), lasting: false }
    }

    /// A mistake that trying again cannot fix.
    pub fn lasting(cause: impl Into<String>) -> DialFailure {
        DialFailure { cause: cause.into(), lasting: true }
    }
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
    pub(super) fn accepts(&self, slot: &Slot) -> bool {
        match self {
            Target::Any => true,
            Target::Addr(addr) => slot.addr == *addr,
        }
    }
}

/// The connections, the leader hint and the routing state.
pub(crate) struct Net {
    pub(crate) slots: Vec<Slot>,
    pub(super) seeds: Vec<String>,
    pub(super) tls: bool,
    /// The leader's address, from the last `M`, WELCOME, STATUS or `G`/`R`.
    pub(super) hint: Option<String>,
    pub(super) rr: usize,
    next_slot: u64,
    next_session: u64,
    next_id: u32,
    /// The membership should be read from STATUS soon (the leader changed, a
    /// connection ended).
    pub(crate) refresh_due: bool,
    /// When some session was last up (for the seed fallback).
    pub(super) last_live: Instant,
    /// The last connection failure, for `Unavailable` errors.
    pub(crate) last_error: Option<String>,
    pub(crate) events: Vec<NetEvent>,
    /// The client is shutting down: nothing is dialed any more.
    pub(crate) stopped: bool,
    /// The fencing domains seen (`domains.rs`).
    pub(crate) domains: Domains,
    /// The core's clock: the latest instant an input brought.
    pub(crate) now: Instant,
}

impl Net {
    /// One slot per seed, two when there is a single seed (so one broken socket does
    /// not stop service while it reconnects); all dialed at once.
    pub(crate) fn new(seeds: Vec<String>, tls: bool, domains: Domains, now: Instant) -> Net {
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
            domains,
            now,
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

    pub(super) fn add_slot(&mut self, addr: String, seed: bool, now: Instant) {
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
            domain: 0,
            reprobe_at: None,
            named_leader: None,
            outside: false,
            added: now,
            retired_at: None,
            left: false,
            last_error: None,
            lasting: false,
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

    /// How logs name session `id`: its address (and the node's socket address).
    pub(crate) fn name(&self, id: SessionId) -> String {
        match self.slot_of(id) {
            Some(slot) => match slot.session.as_ref().filter(|s| s.peer != slot.addr) {
                Some(s) => format!("{} ({})", slot.addr, s.peer),
                None => slot.addr.clone(),
            },
            None => format!("{id:?}"),
        }
    }

    pub(super) fn slot_of(&self, id: SessionId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.session.as_ref().is_some_and(|x| x.id == id))
    }

    /// Every session that may carry requests.
    pub(crate) fn live_sessions(&self) -> impl Iterator<Item = &Session> {
        self.slots.iter().filter(|s| !s.retired()).filter_map(|s| s.live())
    }

    pub(crate) fn any_live(&self) -> bool {
        self.slots.iter().any(|s| s.live().is_some())
    }

    /// Why a request for `target` found no connection: the last connection error and
    /// whether the mistake is lasting ([`Net::hopeless`]).
    pub(crate) fn unavailable(&self, target: &Target) -> (Option<String>, bool) {
        if let Some(conflict) = (*target == Target::Any).then(|| self.domain_conflict()).flatten() {
            return (Some(conflict.why), conflict.lasting);
        }
        let lasting = self.hopeless(target);
        let last = match target {
            Target::Any => self.last_error.clone(),
            Target::Addr(addr) => self
                .slots
                .iter()
                .filter(|s| s.addr == *addr)
                .find_map(|s| s.last_error.clone())
                .or_else(|| self.last_error.clone()),
        };
        (last, lasting)
    }

    /// True when no connection can take a request for `target` and none will without
    /// the operator: every slot that could serve it failed its last attempt with a
    /// lasting mistake ([`DialFailure::lasting`]), none is up and none is dialing
    /// again (a redial may find the mistake fixed; a mistake's verdict comes within a
    /// round trip, so waiting for it costs little). A request then ends at once:
    /// waiting out its budget would only delay the same answer.
    pub(crate) fn hopeless(&self, target: &Target) -> bool {
        if *target == Target::Any && self.domain_conflict().is_some_and(|c| c.lasting) {
            return true;
        }
        let mut any = false;
        for slot in self.slots.iter().filter(|s| !s.retired() && target.accepts(s)) {
            if slot.live().is_some() || !slot.lasting || slot.dialing {
                return false;
            }
            any = true;
        }
        any
    }

    /// True when `target` names one address and every connection to it failed its
    /// last attempt (refused, reset, unresolved, silent past the connect timeout) and
    /// none is up or dialing — or no slot dials it any more (its node is no voter: the
    /// slot was retired): a request meant for that node alone is answered at once —
    /// nothing else could carry it, and only a dial under way is worth waiting for.
    pub(crate) fn addr_down(&self, target: &Target) -> bool {
        if *target == Target::Any {
            return false;
        }
        for slot in self.slots.iter().filter(|s| !s.retired() && target.accepts(s)) {
            if slot.live().is_some() || slot.dialing || !slot.tried || slot.last_error.is_none() {
                return false;
            }
        }
        true
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connected(
        &mut self,
        slot: SlotId,
        node: u64,
        role: u8,
        domain: u64,
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
        slot.reprobe_at = None;
        slot.outside = false;
        slot.named_leader = (domain == 0 && !leader.is_empty()).then(|| leader.to_owned());
        slot.last_error = None;
        slot.lasting = false;
        slot.note = None;
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
        if domain == 0 {
            // The leader it names may have reported already (`domains.rs`).
            let vouched = self.slots.iter().find(|s| !leader.is_empty() && s.addr == leader && s.domain != 0);
            if let Some(d) = vouched.map(|s| s.domain) {
                self.address_reports(&addr, d);
            }
            // Its domain is needed before requests may go anywhere (`domains.rs`).
            self.send(id, Waiting::Probe, now, |out, rid| {
                crate::proto::frame::encode_request(out, rid, &crate::proto::frame::Request::Status)
            });
        } else {
            self.address_reports(&addr, domain);
        }
        Some(id)
    }

    /// A connection attempt of `slot` failed (`failure` names the cause).
    pub(crate) fn dial_failed(&mut self, slot: SlotId, failure: DialFailure, now: Instant) {
        let DialFailure { cause: error, lasting } = failure;
        self.last_error = Some(error.clone());
        if let Some(slot) = self.slot_mut(slot) {
            slot.lasting = lasting;
            // Said once per cause, not at every redial.
            if slot.last_error.as_ref() != Some(&error) {
                log::info!("cannot connect: {error} (retrying)");
            } else {
                log::debug!("connection attempt failed: {error}");
            }
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
        // The reconnect schedule starts over only after a session that served: one that
        // carried an answer or lasted a while. A server that welcomes and then drops
        // the connection at once is redialed ever more slowly, not every 0.1 s.
        if gone.last_rx > gone.since || now.saturating_duration_since(gone.since) >= SESSION_SERVED {
            slot.backoff.reset();
        }
        slot.next_dial = Some(now + slot.backoff.next().expect("backoff is endless"));
        // The node may have left, or the leader may be gone: read both again. (A
        // standalone node's session leads, so this holds for every session.)
        self.refresh_due = true;
        self.forget_ended_slots();
        ended
    }

    /// Removes retired slots whose session has ended.
    pub(super) fn forget_ended_slots(&mut self) {
        let events = &mut self.events;
        self.slots.retain(|s| {
            let done = s.retired() && s.session.is_none();
            if done {
                events.push(NetEvent::Forget { slot: s.id });
            }
            !done
        });
    }

    /// The writer of `session` wrote its batch whole, or failed after `WriteFailure`:
    /// then the session dies with the write (nothing may follow a half-written frame)
    /// and what was not written is returned, to go elsewhere now; the rest waits for the
    /// reader to report the end (an answer may still come).
    /// `late` gets the orphan records whose ACQUIRE the batch carried.
    pub(crate) fn written(
        &mut self,
        session: SessionId,
        result: Result<(), WriteFailure>,
        now: Instant,
        late: &mut Vec<OrphanId>,
    ) -> Vec<Ended> {
        let Some(s) = self.session_mut(session) else { return Vec::new() };
        let Err(failure) = result else {
            late.extend(s.batch_written(now));
            return Vec::new();
        };
        let unsent = s.write_failed(failure);
        log::debug!("{}: write failed ({failure:?})", self.name(session));
        self.kill(session);
        unsent.into_iter().map(|(id, pending)| Ended { id, pending, maybe_written: false }).collect()
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
}

#[cfg(test)]
#[path = "net_tests.rs"]
mod tests;
