//! The client's connections and where requests go (docs/client.md).
//!
//! The configured addresses are *seeds*. Each address the client dials has a [`Slot`]
//! served by one background thread that connects, installs a [`Session`], reads it
//! and reconnects with [`Backoff`]. Slots are added for the leader named by an `M` or
//! a WELCOME when no slot reaches it, and reconciled with the voter set that STATUS
//! reports (`Pool::reconcile`): one slot per voter (two when there is one voter),
//! keyed by the node id a WELCOME reported, so a seed that reaches a voter under
//! another name keeps serving it. Slots of nodes that left are retired. Learned
//! addresses are capped at [`LEARNED_ADDRS_MAX`]; when nothing has been reachable for
//! [`SEED_FALLBACK_AFTER`], the seeds are dialed again.
//!
//! Routing reads one snapshot (`Route`: the slots and the leader hint), swapped
//! whole when anything changes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ring::hmac;
use rustls::ClientConfig;

use super::backoff::Backoff;
use super::builder::host_of;
use super::conn::{connect, lock, read_loop, Dialer, Session};
use super::release::{Job, Msg};

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

/// One address the client dials, and its current session, if any.
pub(crate) struct Slot {
    pub(crate) addr: String,
    host: String,
    /// Configured by the user (a seed), not learned.
    pub(crate) seed: bool,
    session: Mutex<Option<Arc<Session>>>,
    /// False until the first connection attempt ended (see [`LEADER_WAIT`]).
    tried: AtomicBool,
    /// The node id of the last WELCOME on this slot; 0 before any.
    node: AtomicU64,
    /// Set when the node left the membership: no new requests, no reconnect.
    retired: AtomicBool,
    retired_at: Mutex<Option<Instant>>,
    /// Why the last connection attempt of this slot failed (cleared when one works).
    last_error: Mutex<Option<String>>,
    /// An attempt is running (set before it starts, cleared when it ends).
    attempting: AtomicBool,
}

impl Slot {
    fn new(addr: String, host: String, seed: bool) -> Slot {
        Slot {
            addr,
            host,
            seed,
            session: Mutex::new(None),
            tried: AtomicBool::new(false),
            node: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            retired_at: Mutex::new(None),
            last_error: Mutex::new(None),
            attempting: AtomicBool::new(false),
        }
    }

    /// The session, if it is up.
    pub(crate) fn live(&self) -> Option<Arc<Session>> {
        lock(&self.session).as_ref().filter(|s| !s.is_dead()).cloned()
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    pub(crate) fn retired_for(&self) -> Option<Duration> {
        lock(&self.retired_at).map(|at| at.elapsed())
    }

    fn retire(&self) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            *lock(&self.retired_at) = Some(Instant::now());
            log::debug!("no longer a member: {}", self.addr);
        }
    }

    /// Does the address `leader` (from WELCOME, `M` or STATUS) name this slot?
    fn is(&self, leader: &str, session: &Session) -> bool {
        leader == self.addr
            || leader.parse::<std::net::SocketAddr>().map(|a| a == session.peer).unwrap_or(false)
    }
}

/// What routing reads: swapped whole on every change (a slot added or retired, a
/// session up or down, a new leader hint), never locked per request.
pub(crate) struct Route {
    pub(crate) slots: Vec<Arc<Slot>>,
    /// The leader's address, from the last `M`, WELCOME, STATUS or `G`/`R`.
    pub(crate) hint: Option<String>,
    /// The sessions up when the route was made, and whether the hint names each.
    entries: Vec<Entry>,
}

struct Entry {
    slot: Arc<Slot>,
    session: Arc<Session>,
    hinted: bool,
}

impl Route {
    fn new(slots: Vec<Arc<Slot>>, hint: Option<String>) -> Route {
        let entries = slots
            .iter()
            .filter_map(|slot| {
                let session = slot.live()?;
                let hinted = hint.as_ref().is_some_and(|h| slot.is(h, &session));
                Some(Entry { slot: Arc::clone(slot), session, hinted })
            })
            .collect();
        Route { slots, hint, entries }
    }
}

/// Distinguishes pools in the per-thread route caches.
static POOL_IDS: AtomicU64 = AtomicU64::new(1);
/// Routes a thread keeps at most (one per client it uses, the oldest dropped first).
const ROUTE_CACHE_LEN: usize = 4;

thread_local! {
    /// (pool id, route generation, route): what this thread last read of each pool.
    static ROUTES: std::cell::RefCell<Vec<(u64, u64, Arc<Route>)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// This thread's round-robin position.
    static TURN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Everything the client's threads share.
pub(crate) struct Pool {
    id: u64,
    route: RwLock<Arc<Route>>,
    /// Bumped after every change of `route`: a thread re-reads it only then.
    route_gen: AtomicU64,
    /// Serialises changes of `route` (reads never wait for it).
    route_change: Mutex<()>,
    seeds: Vec<(String, String)>,
    key: hmac::Key,
    tls: Option<Arc<ClientConfig>>,
    pub(crate) ids: AtomicU32,
    /// Bumped whenever a session is installed or routing changes; waiters sleep on it.
    generation: Mutex<u64>,
    installed: Condvar,
    shutdown: AtomicBool,
    stop_lock: Mutex<()>,
    stop: Condvar,
    release_tx: Sender<Msg>,
    /// Release jobs enqueued and not yet finished (the queue's bound applies to this).
    pub(crate) release_outstanding: AtomicUsize,
    /// Fault injection for tests: the next this-many frame writes fail before their
    /// first byte, as if the socket had broken.
    pub(crate) faults: Arc<AtomicUsize>,
    /// The clock origin of the sessions' stamps.
    pub(crate) epoch: Instant,
    /// The membership should be read from STATUS soon (the leader changed).
    pub(crate) refresh_due: AtomicBool,
    /// The last connection failure, for `Unavailable` errors.
    last_error: Mutex<Option<String>>,
    /// When some session was last up (for the seed fallback).
    last_live: Mutex<Instant>,
    /// A session that received nothing for this long is PINGed.
    pub(crate) idle_ping: Duration,
    /// Retired slots whose thread has not ended yet (their sessions drain).
    retiring: Mutex<Vec<Arc<Slot>>>,
}

impl Pool {
    pub(crate) fn new(
        seeds: Vec<(String, String)>,
        key: hmac::Key,
        tls: Option<Arc<ClientConfig>>,
        release_tx: Sender<Msg>,
        idle_ping: Duration,
    ) -> Pool {
        Pool {
            id: POOL_IDS.fetch_add(1, Ordering::Relaxed),
            route: RwLock::new(Arc::new(Route::new(Vec::new(), None))),
            route_gen: AtomicU64::new(0),
            route_change: Mutex::new(()),
            seeds,
            key,
            tls,
            ids: AtomicU32::new(1),
            generation: Mutex::new(0),
            installed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            stop_lock: Mutex::new(()),
            stop: Condvar::new(),
            release_tx,
            release_outstanding: AtomicUsize::new(0),
            faults: Arc::new(AtomicUsize::new(0)),
            epoch: Instant::now(),
            refresh_due: AtomicBool::new(false),
            last_error: Mutex::new(None),
            last_live: Mutex::new(Instant::now()),
            idle_ping,
            retiring: Mutex::new(Vec::new()),
        }
    }

    /// Starts the seed slots: one per seed, two when there is a single seed (so one
    /// broken socket does not stop service while it reconnects).
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let per_addr = if self.seeds.len() == 1 { 2 } else { 1 };
        let seeds = self.seeds.clone();
        for (addr, host) in seeds {
            for _ in 0..per_addr {
                self.add_slot(addr.clone(), host.clone(), true)?;
            }
        }
        Ok(())
    }

    /// The current routing snapshot.
    pub(crate) fn route(&self) -> Arc<Route> {
        Arc::clone(&self.route.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn change_route(&self, change: impl FnOnce(&Route) -> (Vec<Arc<Slot>>, Option<String>)) {
        let _serial = lock(&self.route_change);
        let (slots, hint) = change(&self.route());
        let new = Arc::new(Route::new(slots, hint));
        *self.route.write().unwrap_or_else(|e| e.into_inner()) = new;
        self.route_gen.fetch_add(1, Ordering::AcqRel);
        self.wake();
    }

    /// Rebuilds the route after a session came up or went down.
    fn refresh_route(&self) {
        self.change_route(|route| (route.slots.clone(), route.hint.clone()));
    }

    /// Runs `f` on the current route, read from this thread's cache unless the route
    /// changed since: no lock and no shared write on the request path.
    fn with_route<R>(&self, f: impl FnOnce(&Route) -> R) -> R {
        let generation = self.route_gen.load(Ordering::Acquire);
        let cached = ROUTES.with(|cache| {
            let mut cache = cache.try_borrow_mut().ok()?;
            let at = match cache.iter().position(|entry| entry.0 == self.id) {
                Some(at) => at,
                None => {
                    // Drop the routes of clients that are gone (every session dead), so a
                    // thread does not keep their sockets open.
                    cache.retain(|entry| entry.2.entries.iter().any(|e| !e.session.is_dead()));
                    if cache.len() >= ROUTE_CACHE_LEN {
                        cache.remove(0);
                    }
                    cache.push((self.id, u64::MAX, Arc::clone(&self.route())));
                    cache.len() - 1
                }
            };
            let entry = &mut cache[at];
            if entry.1 != generation {
                entry.2 = self.route();
                entry.1 = generation;
            }
            Some(Arc::clone(&entry.2))
        });
        match cached {
            Some(route) => f(&route),
            None => f(&self.route()),
        }
    }

    fn wake(&self) {
        let mut generation = lock(&self.generation);
        *generation += 1;
        self.installed.notify_all();
    }

    /// Adds a slot for `addr` and starts its thread.
    fn add_slot(self: &Arc<Self>, addr: String, host: String, seed: bool) -> std::io::Result<()> {
        let slot = Arc::new(Slot::new(addr, host, seed));
        let (pool, thread_slot) = (Arc::clone(self), Arc::clone(&slot));
        std::thread::Builder::new()
            .name(format!("ticketing-conn-{}", slot.addr))
            .spawn(move || run_slot(pool, thread_slot))?;
        self.change_route(|route| {
            let mut slots = route.slots.clone();
            slots.push(slot);
            (slots, route.hint.clone())
        });
        Ok(())
    }

    /// Adds a learned slot for `addr` unless one exists or the cap is reached.
    fn learn(self: &Arc<Self>, addr: &str) {
        let route = self.route();
        if route
            .slots
            .iter()
            .any(|s| !s.is_retired() && (s.addr == addr || s.live().is_some_and(|l| s.is(addr, &l))))
        {
            return;
        }
        let learned = route.slots.iter().filter(|s| !s.seed && !s.is_retired()).count();
        if learned >= LEARNED_ADDRS_MAX {
            log::warn!("not dialing {addr}: already {LEARNED_ADDRS_MAX} learned addresses");
            return;
        }
        let Some(host) = host_of(addr) else {
            log::warn!("a server named the leader {addr:?}, which is not host:port");
            return;
        };
        if self.tls.is_some() && super::tls::check_server_name(&host).is_err() {
            log::warn!("a server named the leader {addr:?}, whose host cannot be a TLS name");
            return;
        }
        log::debug!("dialing {addr}, named by the cluster");
        if let Err(e) = self.add_slot(addr.to_owned(), host, false) {
            log::warn!("cannot start a connection thread for {addr}: {e}");
        }
    }

    pub(crate) fn hint(&self) -> Option<String> {
        self.route().hint.clone()
    }

    /// Points routing at the leader `addr` (None: leader unknown). A new leader
    /// address is dialed if no slot reaches it, and the membership is read again.
    pub(crate) fn set_hint(self: &Arc<Self>, addr: Option<&str>) {
        if self.route().hint.as_deref() == addr {
            return;
        }
        log::debug!("leader is now {}", addr.unwrap_or("unknown"));
        self.change_route(|route| (route.slots.clone(), addr.map(str::to_owned)));
        self.refresh_due.store(true, Ordering::Release);
        if let Some(addr) = addr {
            self.learn(addr);
        }
    }

    /// True while the hinted leader's slot is making its first connection: a request
    /// is better held back briefly than sent to a node that will answer `M`.
    pub(crate) fn leader_connecting(&self) -> bool {
        let route = self.route();
        let Some(hint) = &route.hint else { return false };
        route.slots.iter().any(|s| s.addr == *hint && !s.is_retired() && !s.tried.load(Ordering::Acquire))
    }

    /// True when the leader hint names `session`'s node.
    pub(crate) fn is_hinted(&self, session: &Session) -> bool {
        self.route().hint.as_ref().is_some_and(|h| *h == session.addr || *h == session.peer.to_string())
    }

    /// An `M` arrived on `session`: it does not lead; the leader is `leader` (or
    /// unknown when empty).
    pub(crate) fn on_moved(self: &Arc<Self>, session: &Session, leader: &str) {
        session.set_leads(false);
        if leader.is_empty() {
            self.set_hint(None);
        } else {
            self.set_hint(Some(leader));
        }
    }

    /// A `G` or `R` arrived on `session`: its node leads.
    pub(crate) fn on_leads(self: &Arc<Self>, session: &Session) {
        if session.set_leads(true) {
            let addr = session.addr.clone();
            self.set_hint(Some(&addr));
        }
    }

    /// The session a request should go to now: the hinted leader's, else one whose
    /// node is believed to lead, else any, round-robin among equals.
    pub(crate) fn pick(&self) -> Option<Arc<Session>> {
        self.choose(&|_| true, false)
    }

    /// Like [`Pool::pick`], but never `avoid` while another session is up.
    pub(crate) fn pick_other(&self, avoid: &Session) -> Option<Arc<Session>> {
        self.choose(&|slot| slot.live().is_none_or(|s| !std::ptr::eq(&*s, avoid)), false)
    }

    /// The routing decision. With `patient`, settles for a node not known to lead
    /// only when no slot is still connecting for the first time.
    fn choose(&self, accept: &dyn Fn(&Slot) -> bool, patient: bool) -> Option<Arc<Session>> {
        self.with_route(|route| {
            let usable = |e: &&Entry| !e.session.is_dead() && !e.slot.is_retired() && accept(&e.slot);
            let pick = |class: &dyn Fn(&Entry) -> bool| -> Option<Arc<Session>> {
                let count = route.entries.iter().filter(usable).filter(|e| class(e)).count();
                if count == 0 {
                    return None;
                }
                let turn = TURN.with(|t| {
                    t.set(t.get().wrapping_add(1));
                    t.get()
                });
                route
                    .entries
                    .iter()
                    .filter(usable)
                    .filter(|e| class(e))
                    .nth(turn % count)
                    .map(|e| Arc::clone(&e.session))
            };
            if let Some(session) = pick(&|e| e.hinted).or_else(|| pick(&|e| e.session.leads())) {
                return Some(session);
            }
            // Worth holding out for: a slot still making its first connection, or one
            // whose session this route does not show yet (the route is rebuilt right
            // after a session is installed; judged by the slot's live state alone, a
            // leader that came up a moment ago would count as tried and not coming,
            // and the request would settle for a follower).
            let coming = route.slots.iter().any(|slot| {
                !slot.is_retired()
                    && accept(slot)
                    && match slot.live() {
                        None => !slot.tried.load(Ordering::Acquire),
                        Some(live) => !route.entries.iter().any(|e| Arc::ptr_eq(&e.session, &live)),
                    }
            });
            if patient && coming {
                return None;
            }
            pick(&|_| true)
        })
    }

    /// Waits until a session is found for `accept`, or `deadline` passes. For up to
    /// [`LEADER_WAIT`] it holds out for a leader's connection (see there).
    pub(crate) fn wait_among(
        &self,
        deadline: Instant,
        accept: impl Fn(&Slot) -> bool,
    ) -> Option<Arc<Session>> {
        let patient_until = deadline.min(Instant::now() + LEADER_WAIT);
        loop {
            let seen = *lock(&self.generation);
            let patient = Instant::now() < patient_until;
            if let Some(session) = self.choose(&accept, patient) {
                return Some(session);
            }
            let until = if patient { patient_until } else { deadline };
            let mut generation = lock(&self.generation);
            while *generation == seen {
                let now = Instant::now();
                if self.is_shut_down() || (now >= deadline && !patient) {
                    return None;
                }
                if now >= until {
                    break;
                }
                generation =
                    self.installed.wait_timeout(generation, until - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
    }

    pub(crate) fn wait_for_session(&self, deadline: Instant) -> Option<Arc<Session>> {
        self.wait_among(deadline, |_| true)
    }

    /// The last connection failure seen, for error messages.
    pub(crate) fn last_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    /// Each address this client tried and could not connect to, with why (the last
    /// failure of a slot that has no live session now), for error messages.
    pub(crate) fn connection_errors(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for slot in self.route().slots.iter() {
            if slot.live().is_some() || out.iter().any(|(a, _)| *a == slot.addr) {
                continue;
            }
            if let Some(e) = lock(&slot.last_error).clone() {
                out.push((slot.addr.clone(), e));
            } else if slot.attempting.load(Ordering::Acquire) {
                // The TCP connect (at most CONNECT_TIMEOUT) is long over by the time a
                // caller asks: the server took the connection and has not greeted us.
                out.push((
                    slot.addr.clone(),
                    format!(
                        "{}: connected, but the server has not sent its greeting yet (a TLS server \
                         waits for TLS: set TICKETING_TLS_CA)",
                        slot.addr
                    ),
                ));
            }
        }
        out
    }

    /// True while some slot has a live session.
    pub(crate) fn any_live(&self) -> bool {
        self.route().slots.iter().any(|slot| slot.live().is_some())
    }

    /// Every live session, with its slot (for the supervisor).
    pub(crate) fn sessions(&self) -> Vec<(Arc<Slot>, Arc<Session>)> {
        self.route().slots.iter().filter_map(|slot| slot.live().map(|s| (Arc::clone(slot), s))).collect()
    }

    /// Notes that some session is up now (for the seed fallback).
    pub(crate) fn note_live(&self) {
        *lock(&self.last_live) = Instant::now();
    }

    /// Dials the seeds again when nothing has been reachable for
    /// [`SEED_FALLBACK_AFTER`] and some seed has no slot.
    pub(crate) fn fall_back_to_seeds(self: &Arc<Self>) {
        if lock(&self.last_live).elapsed() < SEED_FALLBACK_AFTER {
            return;
        }
        let route = self.route();
        for (addr, host) in self.seeds.clone() {
            if !route.slots.iter().any(|s| !s.is_retired() && s.addr == addr) {
                log::info!("no connection for {SEED_FALLBACK_AFTER:?}: dialing the seed {addr} again");
                if let Err(e) = self.add_slot(addr, host, true) {
                    log::warn!("cannot start a connection thread: {e}");
                }
            }
        }
        self.note_live();
    }

    /// Makes the slots follow the voter set `voters` (node id, client address) that a
    /// STATUS reported: one slot per voter (two when there is one), a slot kept when
    /// its address is the voter's or its last WELCOME came from that voter; every
    /// other slot retired; missing voters dialed.
    pub(crate) fn reconcile(self: &Arc<Self>, voters: &[(u64, String)]) {
        if voters.is_empty() || self.is_shut_down() {
            return;
        }
        let per_voter = if voters.len() == 1 { 2 } else { 1 };
        let route = self.route();
        let mut count = vec![0usize; voters.len()];
        let mut retire = Vec::new();
        let by_addr = |slot: &Slot| voters.iter().position(|(_, a)| *a == slot.addr);
        let by_node = |slot: &Slot| {
            let node = slot.node.load(Ordering::Acquire);
            voters.iter().position(|(id, _)| node != 0 && *id == node)
        };
        // Slots on a voter's own address first, so they win over aliases.
        let mut ordered: Vec<&Arc<Slot>> = route.slots.iter().filter(|s| !s.is_retired()).collect();
        ordered.sort_by_key(|s| by_addr(s).is_none());
        for slot in ordered {
            match by_addr(slot).or_else(|| by_node(slot)) {
                Some(v) if count[v] < per_voter => count[v] += 1,
                _ => retire.push(Arc::clone(slot)),
            }
        }
        lock(&self.retiring).extend(retire.iter().cloned());
        for slot in &retire {
            slot.retire();
            if let Some(session) = slot.live() {
                if session.pending_len() == 0 {
                    session.kill();
                }
            }
        }
        if !retire.is_empty() {
            self.change_route(|route| {
                (route.slots.iter().filter(|s| !s.is_retired()).cloned().collect(), route.hint.clone())
            });
        }
        for (v, (_, addr)) in voters.iter().enumerate() {
            for _ in count[v]..per_voter {
                let learned = self.route().slots.iter().filter(|s| !s.seed && !s.is_retired()).count();
                if learned >= LEARNED_ADDRS_MAX {
                    return;
                }
                let Some(host) = host_of(addr) else { break };
                if let Err(e) = self.add_slot(addr.clone(), host, false) {
                    log::warn!("cannot start a connection thread for {addr}: {e}");
                }
            }
        }
    }

    /// Slots retired but still holding a session (the supervisor closes them).
    pub(crate) fn retired_slots(&self) -> Vec<Arc<Slot>> {
        lock(&self.retiring).clone()
    }

    /// A retired slot's thread ended.
    fn retired_done(&self, slot: &Arc<Slot>) {
        lock(&self.retiring).retain(|s| !Arc::ptr_eq(s, slot));
    }

    pub(crate) fn enqueue_release(&self, job: Job) -> Result<(), super::ReleaseError> {
        super::release::admit(self)?;
        if self.release_tx.send(Msg::Job(job)).is_err() {
            // The worker is gone (client shut down); nothing will send it.
            self.release_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(super::ReleaseError::Unconfirmed);
        }
        Ok(())
    }

    pub(crate) fn close_release_queue(&self) {
        let _ = self.release_tx.send(Msg::Close);
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Stops every connection thread (after the release worker drained its queue).
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        {
            let _guard = lock(&self.stop_lock);
            self.stop.notify_all();
        }
        self.wake();
        for slot in &self.route().slots {
            if let Some(session) = lock(&slot.session).as_ref() {
                session.kill();
            }
        }
        for slot in self.retired_slots() {
            if let Some(session) = lock(&slot.session).as_ref() {
                session.kill();
            }
        }
    }

    /// Sleeps for `pause` unless the pool shuts down first.
    pub(crate) fn sleep(&self, pause: Duration) {
        let deadline = Instant::now() + pause;
        let mut guard = lock(&self.stop_lock);
        while !self.is_shut_down() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            guard = self.stop.wait_timeout(guard, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn install(self: &Arc<Self>, slot: &Slot, session: &Arc<Session>) {
        slot.node.store(session.welcome.node_id, Ordering::Release);
        // A follower's WELCOME names the leader: believe it unless the current hint
        // points at a connection that is up.
        let named_leader = (!session.leads() && !session.welcome.leader.is_empty() && {
            let route = self.route();
            !route
                .hint
                .as_ref()
                .is_some_and(|h| route.slots.iter().any(|s| s.live().is_some_and(|live| s.is(h, &live))))
        })
        .then(|| session.welcome.leader.clone());
        // The leader's slot before this session is routable: a request woken by it
        // (right after `build`, given one follower's address) then waits for that
        // slot's first connection instead of going to the follower (`M`).
        if let Some(leader) = &named_leader {
            self.learn(leader);
        }
        *lock(&slot.session) = Some(Arc::clone(session));
        // Only now: a request holding out for this slot's first connection must never
        // see it tried but not yet live (it would settle for another node).
        slot.tried.store(true, Ordering::Release);
        self.refresh_route();
        self.note_live();
        if session.leads() {
            self.set_hint(Some(&slot.addr));
        } else if let Some(leader) = &named_leader {
            self.set_hint(Some(leader));
        }
        if !session.is_standalone() {
            self.refresh_due.store(true, Ordering::Release);
        }
        self.wake();
    }

    fn dialer(&self) -> Dialer<'_> {
        Dialer { key: &self.key, tls: self.tls.as_ref(), epoch: self.epoch, faults: &self.faults }
    }

    /// Connects and authenticates to `addr` outside any slot (one-off requests).
    pub(crate) fn connect(
        &self,
        addr: &str,
        host: &str,
    ) -> Result<(Arc<Session>, Box<dyn std::io::Read + Send>), String> {
        connect(&self.dialer(), addr, host)
    }
}

/// The body of a slot's thread: connect, serve, reconnect with backoff, until the
/// client shuts down or the slot is retired.
pub(crate) fn run_slot(pool: Arc<Pool>, slot: Arc<Slot>) {
    let mut backoff = Backoff::new();
    while !pool.is_shut_down() && !slot.is_retired() {
        slot.attempting.store(true, Ordering::Release);
        let attempt = pool.connect(&slot.addr, &slot.host);
        slot.attempting.store(false, Ordering::Release);
        match attempt {
            Ok((session, reader)) => {
                backoff.reset();
                *lock(&slot.last_error) = None;
                log::debug!(
                    "connected to {} (node {}, role {})",
                    slot.addr,
                    session.welcome.node_id,
                    session.welcome.role as char
                );
                pool.install(&slot, &session);
                if pool.is_shut_down() || slot.is_retired() {
                    session.kill();
                }
                read_loop(&pool, &session, reader);
                session.close();
                let mut current = lock(&slot.session);
                if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, &session)) {
                    *current = None;
                }
                drop(current);
                pool.refresh_route();
                log::debug!("connection to {} ended", slot.addr);
                // The node may have left the cluster, or the leader may be gone: read
                // the membership and the leader again.
                pool.refresh_due.store(true, Ordering::Release);
            }
            Err(e) => {
                log::debug!("connection to {} failed: {e}", slot.addr);
                *lock(&slot.last_error) = Some(e.clone());
                *lock(&pool.last_error) = Some(e);
                if !slot.tried.swap(true, Ordering::AcqRel) {
                    // Wake requests holding out for this slot: it is not coming soon.
                    pool.wake();
                }
            }
        }
        if pool.is_shut_down() || slot.is_retired() {
            break;
        }
        pool.sleep(backoff.next().expect("backoff is endless"));
    }
    if slot.is_retired() {
        pool.retired_done(&slot);
    }
}
