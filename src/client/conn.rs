//! The managed connections of one client (SPEC §10).
//!
//! Each configured address has a [`Slot`] served by one background thread that
//! connects, handshakes, installs a [`Session`] and then *is* the session's reader:
//! it decodes responses and hands each to the waiter registered under its id. When the
//! session ends it reconnects forever with [`Backoff`]. Writers are the calling
//! threads themselves: a request is registered in the session's pending map, then
//! written under the session's write lock, and the write reports whether any byte
//! reached the socket — the fact that decides whether an ACQUIRE may be retried.

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ring::hmac;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::backoff::Backoff;
use super::release::{Job, Msg};
use crate::proto::frame::{decode_response, Response};
use crate::proto::handshake::{client_handshake, role, Welcome, CLIENT_LABELS};
use crate::proto::io::FrameReader;
use crate::proto::limits::{HANDSHAKE_TIMEOUT_MS, RESPONSE_FRAME_LEN_MAX};

/// Longest wait for a TCP connection to one resolved address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest blocking write of one frame; a socket that takes longer is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the server's side of the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
/// How long a request waits for a better connection (the leader's) while some
/// configured address is still connecting for the first time, before it settles for
/// any connected node. Why: right after `build`, the first node to answer is often a
/// follower, and sending there would only earn an `M`.
pub const LEADER_WAIT: Duration = Duration::from_secs(1);
/// Bytes read from the socket at once.
const READ_BUFFER_LEN: usize = 16 * 1024;

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent at each step, so a panic elsewhere is no reason to stop the client.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a waiter receives for its request.
#[derive(Debug)]
pub(crate) enum Reply {
    Answer(Response),
    /// The connection ended before an answer came.
    Lost,
}

/// Who is waiting for the answer to a request id.
pub(crate) enum Waiter {
    /// A calling thread blocked on its own channel.
    Caller(Sender<Reply>),
    /// The release worker, which multiplexes its requests on one channel.
    Worker(Sender<(u32, Reply)>),
    /// The caller of an ACQUIRE stopped waiting: a `G` that still arrives is released.
    Compensate { key: String, owner: String },
}

/// Why a request was not (completely) written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendError {
    /// Not a single byte reached the socket: the request may be sent elsewhere.
    NotSent,
    /// Some bytes were written before the socket failed: the server may have it.
    Partial,
}

struct Pending {
    map: HashMap<u32, Waiter>,
    closed: bool,
}

/// The write side of a connection.
enum Wire {
    Plain(TcpStream),
    Tls { sock: TcpStream, conn: Arc<Mutex<ClientConnection>> },
}

impl Wire {
    /// Writes one whole frame. On failure, tells whether any byte reached the socket.
    fn write_frame(&mut self, frame: &[u8]) -> Result<(), bool> {
        match self {
            Wire::Plain(sock) => write_counting(sock, frame),
            Wire::Tls { sock, conn } => {
                let mut conn = lock(conn);
                if conn.writer().write_all(frame).is_err() {
                    return Err(false);
                }
                let mut wrote = 0usize;
                while conn.wants_write() {
                    match conn.write_tls(sock) {
                        Ok(0) => return Err(wrote > 0),
                        Ok(n) => wrote += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(wrote > 0),
                    }
                }
                Ok(())
            }
        }
    }
}

fn write_counting(sock: &mut TcpStream, mut frame: &[u8]) -> Result<(), bool> {
    let mut wrote = 0usize;
    while !frame.is_empty() {
        match sock.write(frame) {
            Ok(0) => return Err(wrote > 0),
            Ok(n) => {
                wrote += n;
                frame = &frame[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(wrote > 0),
        }
    }
    Ok(())
}

/// One established, authenticated connection.
pub(crate) struct Session {
    pub(crate) welcome: Welcome,
    pub(crate) peer: SocketAddr,
    wire: Mutex<Wire>,
    pending: Mutex<Pending>,
    sock: TcpStream,
    dead: AtomicBool,
    /// Fault injection for tests: writes that still have to fail (see [`Pool::faults`]).
    faults: Arc<AtomicUsize>,
}

impl Session {
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// True when the node said in WELCOME that it leads (or runs standalone).
    pub(crate) fn is_leader(&self) -> bool {
        matches!(self.welcome.role, role::LEADER | role::STANDALONE)
    }

    /// Registers `waiter` under `id` and writes `frame`. Returns the instant taken
    /// just before the first byte was written.
    pub(crate) fn send(&self, id: u32, waiter: Waiter, frame: &[u8]) -> Result<Instant, SendError> {
        {
            let mut pending = lock(&self.pending);
            if pending.closed {
                return Err(SendError::NotSent);
            }
            pending.map.insert(id, waiter);
        }
        let mut wire = lock(&self.wire);
        if self.take_fault() {
            // A real zero-byte failure: the socket refuses the write (EPIPE).
            let _ = self.sock.shutdown(Shutdown::Write);
        }
        let before = Instant::now();
        match wire.write_frame(frame) {
            Ok(()) => Ok(before),
            Err(wrote_any) => {
                drop(wire);
                // Why kill the session: after a failed write the byte stream is in an
                // unknown state, so no later frame on it could be trusted.
                self.kill();
                lock(&self.pending).map.remove(&id);
                if wrote_any {
                    Err(SendError::Partial)
                } else {
                    Err(SendError::NotSent)
                }
            }
        }
    }

    fn take_fault(&self) -> bool {
        self.faults.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }

    /// Removes the waiter of `id` (the caller stopped waiting; a late answer is dropped).
    pub(crate) fn forget(&self, id: u32) {
        lock(&self.pending).map.remove(&id);
    }

    /// Turns the waiter of an ACQUIRE into a compensation: a `G` that still arrives is
    /// released through the release queue. Returns false when the answer was already
    /// taken by the reader (it is then in, or about to be in, the caller's channel).
    pub(crate) fn compensate(&self, id: u32, key: &str, owner: &str) -> bool {
        let mut pending = lock(&self.pending);
        match pending.map.get_mut(&id) {
            Some(waiter) => {
                *waiter = Waiter::Compensate { key: key.to_owned(), owner: owner.to_owned() };
                true
            }
            None => false,
        }
    }

    /// Stops the session: the socket is shut down, so the reader wakes and cleans up.
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::Release);
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    /// Called by the reader when the session ends: every waiter learns it is lost.
    fn close(&self, pool: &Pool) {
        self.kill();
        let waiters: Vec<(u32, Waiter)> = {
            let mut pending = lock(&self.pending);
            pending.closed = true;
            pending.map.drain().collect()
        };
        for (id, waiter) in waiters {
            match waiter {
                Waiter::Caller(tx) => {
                    let _ = tx.send(Reply::Lost);
                }
                Waiter::Worker(tx) => {
                    let _ = tx.send((id, Reply::Lost));
                }
                Waiter::Compensate { key, .. } => {
                    log::debug!("connection lost before a late answer for {key:?} (id {id})");
                }
            }
        }
        let _ = pool;
    }

    /// Hands one response to its waiter.
    fn deliver(&self, pool: &Pool, id: u32, response: Response) {
        if let Response::Moved { leader } = &response {
            pool.note_moved(leader);
        }
        let waiter = lock(&self.pending).map.remove(&id);
        match waiter {
            Some(Waiter::Caller(tx)) => {
                let _ = tx.send(Reply::Answer(response));
            }
            Some(Waiter::Worker(tx)) => {
                let _ = tx.send((id, Reply::Answer(response)));
            }
            Some(Waiter::Compensate { key, owner }) => {
                if let Response::Granted { token, .. } = response {
                    log::warn!(
                        "late grant of {key:?} (token {token}) after the caller gave up; releasing it"
                    );
                    if let Err(e) = pool.enqueue_release(Job::compensation(key, owner, token)) {
                        log::warn!("cannot release the late grant: {e}; its lease will end it");
                    }
                }
            }
            None => log::debug!("answer to id {id} that nobody waits for"),
        }
    }
}

/// One configured address and its current session, if any.
pub(crate) struct Slot {
    pub(crate) addr: String,
    host: String,
    session: Mutex<Option<Arc<Session>>>,
    /// False until the first connection attempt ended: a slot still connecting for
    /// the first time may be the leader's, worth a short wait (see [`LEADER_WAIT`]).
    tried: AtomicBool,
}

impl Slot {
    pub(crate) fn new(addr: String, host: String) -> Slot {
        Slot { addr, host, session: Mutex::new(None), tried: AtomicBool::new(false) }
    }

    fn live(&self) -> Option<Arc<Session>> {
        lock(&self.session).as_ref().filter(|s| !s.is_dead()).cloned()
    }

    /// Does a leader address from WELCOME or `M` name this slot?
    fn is(&self, leader: &str, session: &Session) -> bool {
        leader == self.addr || leader.parse::<SocketAddr>().map(|a| a == session.peer).unwrap_or(false)
    }
}

/// Everything the client's threads share.
pub(crate) struct Pool {
    pub(crate) slots: Vec<Arc<Slot>>,
    key: hmac::Key,
    tls: Option<Arc<ClientConfig>>,
    next_id: AtomicU32,
    round_robin: AtomicUsize,
    /// The leader named by the last `M` (or WELCOME): requests go there first.
    leader_hint: Mutex<Option<String>>,
    /// Bumped whenever a session is installed; waiters for a connection sleep on it.
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
}

impl Pool {
    pub(crate) fn new(
        slots: Vec<Arc<Slot>>,
        key: hmac::Key,
        tls: Option<Arc<ClientConfig>>,
        release_tx: Sender<Msg>,
    ) -> Pool {
        Pool {
            slots,
            key,
            tls,
            next_id: AtomicU32::new(1),
            round_robin: AtomicUsize::new(0),
            leader_hint: Mutex::new(None),
            generation: Mutex::new(0),
            installed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            stop_lock: Mutex::new(()),
            stop: Condvar::new(),
            release_tx,
            release_outstanding: AtomicUsize::new(0),
            faults: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A fresh request id; 0 is reserved by the protocol and skipped.
    pub(crate) fn next_id(&self) -> u32 {
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    pub(crate) fn leader_hint(&self) -> Option<String> {
        lock(&self.leader_hint).clone()
    }

    fn note_moved(&self, leader: &str) {
        if !leader.is_empty() {
            log::debug!("MOVED: leader is {leader}");
            *lock(&self.leader_hint) = Some(leader.to_owned());
        }
    }

    /// The session a request should go to now: the hinted leader's, else one whose
    /// node said it leads, else any, round-robin among equals.
    pub(crate) fn pick(&self) -> Option<Arc<Session>> {
        self.pick_among(|_| true)
    }

    /// Like [`Pool::pick`], restricted to the slots `accept` allows.
    pub(crate) fn pick_among(&self, accept: impl Fn(&Slot) -> bool) -> Option<Arc<Session>> {
        self.choose(&accept, false)
    }

    /// The routing decision. With `patient`, settles for a node not known to lead
    /// only when no other configured node is still connecting for the first time.
    fn choose(&self, accept: &dyn Fn(&Slot) -> bool, patient: bool) -> Option<Arc<Session>> {
        let accepted: Vec<&Slot> = self.slots.iter().map(|s| &**s).filter(|s| accept(s)).collect();
        let live: Vec<(&Slot, Arc<Session>)> =
            accepted.iter().filter_map(|slot| slot.live().map(|s| (*slot, s))).collect();
        if live.is_empty() {
            return None;
        }
        let hint = self.leader_hint();
        let hinted: Vec<&Arc<Session>> = match &hint {
            Some(h) => live.iter().filter(|(slot, s)| slot.is(h, s)).map(|(_, s)| s).collect(),
            None => Vec::new(),
        };
        let candidates = if !hinted.is_empty() {
            hinted
        } else {
            let leaders: Vec<&Arc<Session>> =
                live.iter().filter(|(_, s)| s.is_leader()).map(|(_, s)| s).collect();
            if !leaders.is_empty() {
                leaders
            } else {
                let first_connect_pending = accepted.iter().any(|slot| {
                    !slot.tried.load(Ordering::Acquire) && !live.iter().any(|(l, _)| l.addr == slot.addr)
                });
                if patient && first_connect_pending {
                    return None;
                }
                live.iter().map(|(_, s)| s).collect()
            }
        };
        let turn = self.round_robin.fetch_add(1, Ordering::Relaxed);
        Some(Arc::clone(candidates[turn % candidates.len()]))
    }

    /// Waits until [`Pool::pick_among`] finds a session, or `deadline` passes. For
    /// up to [`LEADER_WAIT`] it holds out for a leader's connection (see there).
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

    pub(crate) fn enqueue_release(&self, job: Job) -> Result<(), super::ReleaseError> {
        let before = self.release_outstanding.fetch_add(1, Ordering::AcqRel);
        if before >= super::release::RELEASE_QUEUE_CAPACITY {
            self.release_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(super::ReleaseError::QueueFull);
        }
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
        {
            let _generation = lock(&self.generation);
            self.installed.notify_all();
        }
        for slot in &self.slots {
            if let Some(session) = lock(&slot.session).as_ref() {
                session.kill();
            }
        }
    }

    /// Sleeps for `pause` unless the pool shuts down first.
    fn sleep(&self, pause: Duration) {
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

    fn install(&self, slot: &Slot, session: &Arc<Session>) {
        if session.is_leader() {
            *lock(&self.leader_hint) = Some(slot.addr.clone());
        } else if !session.welcome.leader.is_empty() {
            // A follower's WELCOME names the leader: believe it unless the current
            // hint points at a connection that is up.
            let current = self.leader_hint();
            let current_live = current
                .as_ref()
                .is_some_and(|h| self.slots.iter().any(|s| s.live().is_some_and(|live| s.is(h, &live))));
            if !current_live {
                *lock(&self.leader_hint) = Some(session.welcome.leader.clone());
            }
        }
        *lock(&slot.session) = Some(Arc::clone(session));
        let mut generation = lock(&self.generation);
        *generation += 1;
        self.installed.notify_all();
    }

    /// Connects and authenticates to `addr`; returns the session and its read side.
    pub(crate) fn connect(
        &self,
        addr: &str,
        host: &str,
    ) -> Result<(Arc<Session>, Box<dyn Read + Send>), String> {
        let resolved: Vec<SocketAddr> =
            crate::resolve::resolve(addr).map_err(|e| format!("cannot resolve {addr}: {e}"))?;
        let mut last = format!("{addr} resolved to no address");
        let mut sock = None;
        for target in resolved {
            match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = format!("connect {target}: {e}"),
            }
        }
        let mut sock = sock.ok_or(last)?;
        let peer = sock.peer_addr().map_err(|e| e.to_string())?;
        let io = |e: io::Error| format!("{addr}: {e}");
        sock.set_nodelay(true).map_err(io)?;
        sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
        sock.set_write_timeout(Some(WRITE_TIMEOUT)).map_err(io)?;
        let hs = |e| format!("{addr}: {e}");
        let (welcome, wire, reader): (Welcome, Wire, Box<dyn Read + Send>) = match &self.tls {
            None => {
                let welcome = client_handshake(&mut sock, &self.key, &CLIENT_LABELS).map_err(hs)?;
                let reader = BufReader::with_capacity(READ_BUFFER_LEN, sock.try_clone().map_err(io)?);
                (welcome, Wire::Plain(sock.try_clone().map_err(io)?), Box::new(reader))
            }
            Some(config) => {
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("{addr}: bad TLS server name {host:?}: {e}"))?;
                let mut conn = ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| format!("{addr}: TLS: {e}"))?;
                let welcome = {
                    let mut stream = rustls::Stream::new(&mut conn, &mut sock);
                    client_handshake(&mut stream, &self.key, &CLIENT_LABELS).map_err(hs)?
                };
                let conn = Arc::new(Mutex::new(conn));
                let reader = TlsReader {
                    sock: sock.try_clone().map_err(io)?,
                    conn: Arc::clone(&conn),
                    raw: vec![0; READ_BUFFER_LEN],
                    start: 0,
                    end: 0,
                    eof: false,
                };
                let wire = Wire::Tls { sock: sock.try_clone().map_err(io)?, conn };
                (welcome, wire, Box::new(reader))
            }
        };
        // Why no read timeout from here on: answers to queued ACQUIREs may take up to
        // the longest wait; callers time out on their own, and `kill` wakes the reader.
        sock.set_read_timeout(None).map_err(io)?;
        let session = Arc::new(Session {
            welcome,
            peer,
            wire: Mutex::new(wire),
            pending: Mutex::new(Pending { map: HashMap::new(), closed: false }),
            sock,
            dead: AtomicBool::new(false),
            faults: Arc::clone(&self.faults),
        });
        Ok((session, reader))
    }
}

/// The body of a slot's thread: connect, serve, reconnect with backoff, forever
/// (until the client shuts down).
pub(crate) fn run_slot(pool: Arc<Pool>, slot: Arc<Slot>) {
    let mut backoff = Backoff::new();
    while !pool.is_shut_down() {
        match pool.connect(&slot.addr, &slot.host) {
            Ok((session, reader)) => {
                backoff.reset();
                log::debug!(
                    "connected to {} (node {}, role {})",
                    slot.addr,
                    session.welcome.node_id,
                    session.welcome.role as char
                );
                slot.tried.store(true, Ordering::Release);
                pool.install(&slot, &session);
                if pool.is_shut_down() {
                    session.kill();
                }
                read_loop(&pool, &session, reader);
                session.close(&pool);
                let mut current = lock(&slot.session);
                if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, &session)) {
                    *current = None;
                }
                drop(current);
                log::debug!("connection to {} ended", slot.addr);
            }
            Err(e) => {
                log::debug!("connection to {} failed: {e}", slot.addr);
                if !slot.tried.swap(true, Ordering::AcqRel) {
                    // Wake requests holding out for this slot: it is not coming soon.
                    let mut generation = lock(&pool.generation);
                    *generation += 1;
                    pool.installed.notify_all();
                }
            }
        }
        if pool.is_shut_down() {
            break;
        }
        pool.sleep(backoff.next().expect("backoff is endless"));
    }
}

/// Reads responses until the connection ends or breaks the protocol.
pub(crate) fn read_loop(pool: &Pool, session: &Session, reader: Box<dyn Read + Send>) {
    let mut frames = FrameReader::new(reader, RESPONSE_FRAME_LEN_MAX);
    loop {
        let payload = match frames.read_payload() {
            Ok(payload) => payload,
            Err(e) => {
                if !session.is_dead() {
                    log::debug!("read from {}: {e}", session.peer);
                }
                return;
            }
        };
        match decode_response(payload) {
            Ok((0, response)) => {
                log::warn!("{} closed the connection: {response:?}", session.peer);
                return;
            }
            Ok((id, response)) => session.deliver(pool, id, response),
            Err(e) => {
                log::warn!("{} sent a bad frame: {e}", session.peer);
                return;
            }
        }
    }
}

/// The read side of a TLS connection. The rustls state is shared with the writer
/// behind a mutex that is never held across a blocking socket read.
struct TlsReader {
    sock: TcpStream,
    conn: Arc<Mutex<ClientConnection>>,
    raw: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = lock(&self.conn);
                while self.start < self.end {
                    let n = conn.read_tls(&mut &self.raw[self.start..self.end])?;
                    self.start += n;
                    let state = conn
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    if n == 0 || state.plaintext_bytes_to_read() > 0 {
                        break;
                    }
                }
                if conn.wants_write() {
                    let _ = conn.write_tls(&mut &self.sock);
                }
                match conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if self.eof && self.start >= self.end {
                            return Ok(0);
                        }
                    }
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    continue;
                }
            }
            let n = loop {
                match (&self.sock).read(&mut self.raw) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            if n == 0 {
                self.eof = true;
                let mut conn = lock(&self.conn);
                let _ = conn.read_tls(&mut &[][..]);
                let _ = conn.process_new_packets();
            }
            self.start = 0;
            self.end = n;
        }
    }
}
