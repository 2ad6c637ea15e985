//! One authenticated connection of the client: a [`Session`] (docs/client.md).
//!
//! A session is made by [`connect`] (TCP, TLS if configured, the challenge-response
//! handshake with the server's proof checked) and then read by its slot's thread in
//! [`read_loop`], which hands every response to the waiter registered under its id.
//! Writers are the calling threads themselves: a request is registered in the
//! session's pending map, then written under the session's write lock, and the write
//! reports whether any byte reached the socket — the fact that decides whether an
//! ACQUIRE may be sent again elsewhere. Every frame received stamps the session, which
//! is how the supervisor (`supervisor.rs`) finds a session that stopped answering.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ring::hmac;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::pool::Pool;
use super::release::Job;
use crate::proto::frame::{decode_response, Response};
use crate::proto::handshake::{client_handshake, role, HandshakeError, Welcome, CLIENT_LABELS};
use crate::proto::io::FrameReader;
use crate::proto::limits::{HANDSHAKE_TIMEOUT_MS, RESPONSE_FRAME_LEN_MAX};

/// Longest wait for a TCP connection to one resolved address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest blocking write of one frame; a socket that takes longer is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the server's side of the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
/// Bytes read from the socket at once.
const READ_BUFFER_LEN: usize = 16 * 1024;
/// Where the request id sits in an encoded frame: after `len u32 · op u8`.
const FRAME_ID_AT: std::ops::Range<usize> = 5..9;

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent at each step, so a panic elsewhere is no reason to stop the client.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a waiter receives for its request.
#[derive(Debug)]
pub(crate) enum Reply {
    Answer(Response),
    /// The connection ended before an answer came, after some byte of the request
    /// may have been written.
    Lost,
    /// The connection ended before any byte of the request was written: it may be
    /// sent elsewhere.
    Unsent,
}

/// Which request a reply belongs to: the session (by address) and the request id.
pub(crate) type ReplyKey = (usize, u32);

/// Where a calling thread waits for its answers: one per thread, reused by every
/// request the thread makes (no allocation, no channel per request), woken by
/// `unpark`. Only replies to the keys the thread currently expects are kept, so a
/// late answer to a request it gave up on is dropped.
pub(crate) struct ReplyCell {
    state: Mutex<CellState>,
    thread: std::thread::Thread,
}

struct CellState {
    expect: Vec<ReplyKey>,
    replies: Vec<(ReplyKey, Reply)>,
}

thread_local! {
    static REPLY_CELL: Arc<ReplyCell> = Arc::new(ReplyCell {
        state: Mutex::new(CellState { expect: Vec::new(), replies: Vec::new() }),
        thread: std::thread::current(),
    });
}

impl ReplyCell {
    /// The calling thread's cell, emptied: nothing is expected any more.
    pub(crate) fn fresh() -> Arc<ReplyCell> {
        let cell = REPLY_CELL.with(Arc::clone);
        let mut state = lock(&cell.state);
        state.expect.clear();
        state.replies.clear();
        drop(state);
        cell
    }

    fn expect(&self, key: ReplyKey) {
        lock(&self.state).expect.push(key);
    }

    /// Stops expecting `key` (its request was not written).
    fn unexpect(&self, key: ReplyKey) {
        let mut state = lock(&self.state);
        state.expect.retain(|k| *k != key);
        state.replies.retain(|(k, _)| *k != key);
    }

    fn put(&self, key: ReplyKey, reply: Reply) {
        let mut state = lock(&self.state);
        if state.expect.contains(&key) {
            state.expect.retain(|k| *k != key);
            state.replies.push((key, reply));
            drop(state);
            self.thread.unpark();
        }
    }

    /// The next reply, waiting until `deadline` (None: forever). Only the owning
    /// thread calls this.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<(ReplyKey, Reply)> {
        loop {
            {
                let mut state = lock(&self.state);
                if !state.replies.is_empty() {
                    return Some(state.replies.remove(0));
                }
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }
}

/// Who is waiting for the answer to a request id.
pub(crate) enum Waiter {
    /// A calling thread, parked on its [`ReplyCell`].
    Caller(Arc<ReplyCell>),
    /// A background thread (release worker, supervisor) that multiplexes its requests
    /// on one channel.
    Worker(Sender<(u32, Reply)>),
    /// The caller of an ACQUIRE stopped waiting: a `G` that still arrives is released
    /// (unless `Client::resolve` disarmed `state` to adopt it).
    Compensate { key: String, owner: String, state: Arc<LateGrant> },
    /// A PING of the supervisor: only the arrival of a frame matters.
    Probe,
}

/// What became of a late grant of an ACQUIRE whose caller gave up.
#[derive(Debug)]
pub(crate) struct LateGrant(std::sync::atomic::AtomicU8);

impl LateGrant {
    const ARMED: u8 = 0;
    const FIRED: u8 = 1;
    const DISARMED: u8 = 2;

    pub(crate) fn armed() -> Arc<LateGrant> {
        Arc::new(LateGrant(std::sync::atomic::AtomicU8::new(Self::ARMED)))
    }

    /// A grant known to be released already (it arrived after its lease).
    pub(crate) fn fired() -> Arc<LateGrant> {
        Arc::new(LateGrant(std::sync::atomic::AtomicU8::new(Self::FIRED)))
    }

    /// The late `G` arrived: true when it is to be released (not disarmed).
    fn fire(&self) -> bool {
        self.0.compare_exchange(Self::ARMED, Self::FIRED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Stops a `G` still to come from being released. False when one already was.
    pub(crate) fn disarm(&self) -> bool {
        self.0.compare_exchange(Self::ARMED, Self::DISARMED, Ordering::AcqRel, Ordering::Acquire).is_ok()
            || self.0.load(Ordering::Acquire) == Self::DISARMED
    }
}

/// Why a request was not (completely) written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendError {
    /// Not a single byte reached the socket: the request may be sent elsewhere. (A
    /// frame that fails later is reported to its waiter, see [`Session::send`].)
    NotSent,
}

struct Pending {
    /// Waiter and the frame's sequence number on this session (see `Outbox`).
    map: HashMap<u32, (Waiter, u64), BuildHasherDefault<IdHasher>>,
    closed: bool,
}

/// Request ids are handed out in sequence by the client itself, so they are their own
/// hash: no SipHash per request (nothing here is keyed by what a server sends).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id);
    }
}

/// Frames waiting to be written, and who writes them. Write combining: a sender
/// appends its frame; if no flush is running it becomes the flusher and writes every
/// queued frame in one write, again until nothing is queued; otherwise it returns at
/// once and the running flusher writes its frame too.
struct Outbox {
    buf: Vec<u8>,
    /// (sequence number, end offset in `buf`) of each queued frame.
    frames: Vec<(u64, usize)>,
    next_seq: u64,
    flushing: bool,
    closed: bool,
}

/// A batch being written: its bytes, and (sequence number, end offset) of each frame.
type Batch = (Vec<u8>, Vec<(u64, usize)>);

/// The write side of a connection.
enum Wire {
    Plain(TcpStream),
    Tls { sock: TcpStream, conn: Arc<Mutex<ClientConnection>> },
}

/// How far a failed write got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteFailure {
    /// This many plaintext bytes reached the socket (plain TCP: exact).
    After(usize),
    /// Some ciphertext reached the socket: which frames it carried is unknown.
    SomeTls,
}

impl Wire {
    /// Writes `bytes` whole; on failure says how far it got.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), WriteFailure> {
        match self {
            Wire::Plain(sock) => write_counting(sock, bytes).map_err(WriteFailure::After),
            Wire::Tls { sock, conn } => {
                let mut conn = lock(conn);
                // Plaintext handed to TLS, and ciphertext that reached the socket.
                let (mut taken, mut wrote) = (0usize, 0usize);
                loop {
                    // TLS holds at most 64 KiB of ciphertext (rustls's buffer limit):
                    // a larger batch goes in pieces, each written out before the next.
                    while taken < bytes.len() {
                        match conn.writer().write(&bytes[taken..]) {
                            Ok(0) => break,
                            Ok(n) => taken += n,
                            Err(_) => return Err(tls_write_failed(sock, wrote)),
                        }
                    }
                    if !conn.wants_write() {
                        if taken == bytes.len() {
                            return Ok(());
                        }
                        // TLS took nothing and has nothing to write: it will not move.
                        return Err(tls_write_failed(sock, wrote));
                    }
                    match conn.write_tls(sock) {
                        Ok(0) => return Err(tls_write_failed(sock, wrote)),
                        Ok(n) => wrote += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(tls_write_failed(sock, wrote)),
                    }
                }
            }
        }
    }

    /// Writes `batch[written..]` of a plain session's batch whose first `written`
    /// bytes already went out; on failure says how far the whole batch got.
    fn write_rest(&mut self, batch: &[u8], written: usize) -> Result<(), WriteFailure> {
        match self {
            Wire::Plain(sock) => {
                write_counting(sock, &batch[written..]).map_err(|n| WriteFailure::After(written + n))
            }
            // Never handed over (TLS flushes block as the callers' do).
            Wire::Tls { .. } => self.write_all(&batch[written..]),
        }
    }
}

/// A TLS write failed after `wrote` bytes of ciphertext reached the socket. The
/// socket is shut down here, while the caller still holds the TLS state: ciphertext
/// left in TLS's buffer must never go out later (the reader writes whatever TLS wants
/// written when it next gets the state), or frames reported unsent — and sent again
/// elsewhere — would arrive after all. TLS records do not map to frames: any byte out
/// counts for all.
fn tls_write_failed(sock: &TcpStream, wrote: usize) -> WriteFailure {
    let _ = sock.shutdown(Shutdown::Both);
    if wrote > 0 {
        WriteFailure::SomeTls
    } else {
        WriteFailure::After(0)
    }
}

/// Writes what the socket takes from `bytes` at once (never waiting); on failure
/// says how far it got.
#[cfg(target_os = "linux")]
fn send_what_fits(sock: &TcpStream, bytes: &[u8]) -> Result<usize, WriteFailure> {
    let mut wrote = 0usize;
    while wrote < bytes.len() {
        match crate::sys::send_nonblocking(sock, &bytes[wrote..]) {
            Ok(0) => break,
            Ok(n) => wrote += n,
            Err(_) => return Err(WriteFailure::After(wrote)),
        }
    }
    Ok(wrote)
}

/// Elsewhere there is no non-blocking send on a blocking socket here: the reader
/// writes as the callers do.
#[cfg(not(target_os = "linux"))]
fn send_what_fits(sock: &TcpStream, bytes: &[u8]) -> Result<usize, WriteFailure> {
    write_counting(sock, bytes).map(|()| bytes.len()).map_err(WriteFailure::After)
}

/// Writes `bytes` whole; on failure returns how many went out.
fn write_counting<W: Write>(mut sock: W, mut bytes: &[u8]) -> Result<(), usize> {
    let mut wrote = 0usize;
    while !bytes.is_empty() {
        match sock.write(bytes) {
            Ok(0) => return Err(wrote),
            Ok(n) => {
                wrote += n;
                bytes = &bytes[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(wrote),
        }
    }
    Ok(())
}

/// Microseconds since `epoch`, never 0 (0 means "none" in the session's stamps).
/// Why not milliseconds: an answer and the next write often fall in one millisecond,
/// and "nothing received since the write" must not be confused by that.
pub(crate) fn us_since(epoch: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(epoch).as_micros() as u64 + 1
}

/// One established, authenticated connection.
pub(crate) struct Session {
    pub(crate) welcome: Welcome,
    pub(crate) peer: SocketAddr,
    /// The address its slot dials (as configured or as the cluster names it).
    pub(crate) addr: String,
    /// Locked only by the flusher of the moment (see `Outbox`).
    wire: Mutex<Wire>,
    outbox: Mutex<Outbox>,
    /// The highest sequence number of a frame some byte of which may have reached the
    /// socket. Set *before* each write, so a session closed meanwhile counts the
    /// frames being written as sent; frames above it were never written.
    maybe_written: AtomicU64,
    pending: Mutex<Pending>,
    sock: TcpStream,
    dead: AtomicBool,
    /// True while this node is believed to lead: from WELCOME (`L`/`S`), set by a
    /// `G`/`R` answer, cleared by an `M`.
    leads: AtomicBool,
    /// The pool's clock origin, for the stamps below.
    epoch: Instant,
    /// When the last frame arrived ([`us_since`] the epoch); the install time at first.
    last_rx_us: AtomicU64,
    /// When the supervisor's outstanding PING was written; 0 when none is outstanding.
    ping_at_us: AtomicU64,
    /// Fault injection for tests: writes that still have to fail (see `Pool::faults`).
    faults: Arc<AtomicUsize>,
}

impl Session {
    /// A session on an authenticated connection (`sock`, written through `wire`) to
    /// `peer`, dialed as `addr`, which said `welcome`.
    fn new(
        welcome: Welcome,
        peer: SocketAddr,
        addr: &str,
        wire: Wire,
        sock: TcpStream,
        epoch: Instant,
        faults: Arc<AtomicUsize>,
    ) -> Session {
        let leads = matches!(welcome.role, role::LEADER | role::STANDALONE);
        Session {
            welcome,
            peer,
            addr: addr.to_owned(),
            wire: Mutex::new(wire),
            outbox: Mutex::new(Outbox {
                buf: Vec::with_capacity(4096),
                frames: Vec::new(),
                next_seq: 1,
                flushing: false,
                closed: false,
            }),
            maybe_written: AtomicU64::new(0),
            pending: Mutex::new(Pending { map: HashMap::default(), closed: false }),
            sock,
            dead: AtomicBool::new(false),
            leads: AtomicBool::new(leads),
            epoch,
            last_rx_us: AtomicU64::new(us_since(epoch, Instant::now())),
            ping_at_us: AtomicU64::new(0),
            faults,
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// True while this node is believed to lead (see the field).
    pub(crate) fn leads(&self) -> bool {
        self.leads.load(Ordering::Acquire)
    }

    /// Records what an answer said about leadership; true when it changed.
    pub(crate) fn set_leads(&self, leads: bool) -> bool {
        self.leads.swap(leads, Ordering::AcqRel) != leads
    }

    /// True when the node runs standalone (no membership to discover).
    pub(crate) fn is_standalone(&self) -> bool {
        self.welcome.role == role::STANDALONE
    }

    /// True when no frame arrived since `since`, and `since` is at least
    /// [`PING_ANSWER_TIMEOUT`](super::PING_ANSWER_TIMEOUT) ago: the rule that finds a
    /// dead session from an unanswered request. Why the floor: a request with a short
    /// budget proves nothing about a path that is merely slow; 1.5 s of silence is
    /// what a PING is allowed too.
    pub(crate) fn silent_since(&self, since: Instant) -> bool {
        since.elapsed() >= super::PING_ANSWER_TIMEOUT
            && self.last_rx_us.load(Ordering::Acquire) < us_since(self.epoch, since)
    }

    pub(crate) fn last_rx_us(&self) -> u64 {
        self.last_rx_us.load(Ordering::Acquire)
    }

    pub(crate) fn ping_at_us(&self) -> u64 {
        self.ping_at_us.load(Ordering::Acquire)
    }

    pub(crate) fn clear_ping(&self) {
        self.ping_at_us.store(0, Ordering::Release);
    }

    /// Requests still waiting for an answer.
    pub(crate) fn pending_len(&self) -> usize {
        lock(&self.pending).map.len()
    }

    /// Registers `waiter` under a fresh request id, puts the id into `frame` (encoded
    /// with any id) and queues it for writing (write combining, see `Outbox`): if no
    /// other thread is writing on this session, this one writes every queued frame
    /// before returning. Returns the id and an instant taken before any byte of the
    /// frame was written.
    ///
    /// `Err(NotSent)`: not a byte went out (the session was closed). A frame that
    /// fails later is reported to its waiter: [`Reply::Unsent`] when no byte of it
    /// was written, [`Reply::Lost`] otherwise.
    pub(crate) fn send(
        &self,
        ids: &AtomicU32,
        waiter: Waiter,
        frame: &mut [u8],
    ) -> Result<(u32, Instant), SendError> {
        let id = self.register(ids, waiter)?;
        frame[FRAME_ID_AT].copy_from_slice(&id.to_be_bytes());
        let before = Instant::now();
        let mut outbox = lock(&self.outbox);
        if outbox.closed || self.is_dead() {
            drop(outbox);
            self.unregister(id);
            return Err(SendError::NotSent);
        }
        let seq = outbox.next_seq;
        outbox.next_seq += 1;
        outbox.buf.extend_from_slice(frame);
        let end = outbox.buf.len();
        outbox.frames.push((seq, end));
        lock(&self.pending).map.entry(id).and_modify(|entry| entry.1 = seq);
        if outbox.flushing {
            return Ok((id, before));
        }
        outbox.flushing = true;
        drop(outbox);
        self.flush();
        Ok((id, before))
    }

    /// Like [`Session::send`]; kept for the supervisor, which must never wait behind
    /// a write (with write combining no sender does: a running flush takes the frame).
    pub(crate) fn try_send(
        &self,
        ids: &AtomicU32,
        waiter: Waiter,
        frame: &mut [u8],
    ) -> Result<(u32, Instant), SendError> {
        self.send(ids, waiter, frame)
    }

    /// Registers `waiter` under a fresh id (never one still pending).
    fn register(&self, ids: &AtomicU32, waiter: Waiter) -> Result<u32, SendError> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(SendError::NotSent);
        }
        // Why look: after 2^32 requests the counter wraps, and an id still pending
        // (a long queued ACQUIRE) must never get a second waiter.
        let id = loop {
            let id = next_id(ids);
            if !pending.map.contains_key(&id) {
                break id;
            }
        };
        if let Waiter::Caller(cell) = &waiter {
            // Before the write: the answer may arrive before `send` returns.
            cell.expect(self.reply_key(id));
        }
        // Sequence u64::MAX until queued: a close before that counts it as unsent.
        pending.map.insert(id, (waiter, u64::MAX));
        Ok(id)
    }

    /// Moves every queued frame into `batch` and `frames` for the flusher and counts
    /// them as possibly written; false — and the writer's role given up — when nothing
    /// is queued or the session is closed.
    fn next_batch(&self, batch: &mut Vec<u8>, frames: &mut Vec<(u64, usize)>) -> bool {
        {
            let mut outbox = lock(&self.outbox);
            if outbox.buf.is_empty() || outbox.closed {
                outbox.flushing = false;
                return false;
            }
            std::mem::swap(&mut outbox.buf, batch);
            std::mem::swap(&mut outbox.frames, frames);
        }
        let last = frames.last().map_or(0, |f| f.0);
        // SeqCst with the load in `close`: either close sees this batch as possibly
        // written, or the write that follows starts after close shut the socket down.
        self.maybe_written.fetch_max(last, Ordering::SeqCst);
        true
    }

    /// The wire, for one write; with a fault injected (tests), a real zero-byte
    /// failure first: the socket refuses the write (EPIPE).
    fn wire_for_write(&self) -> MutexGuard<'_, Wire> {
        let wire = lock(&self.wire);
        if self.take_fault() {
            let _ = self.sock.shutdown(Shutdown::Write);
        }
        wire
    }

    /// Writes queued frames until none is left (the caller set `flushing`).
    fn flush(&self) {
        let mut batch: Vec<u8> = Vec::new();
        let mut frames: Vec<(u64, usize)> = Vec::new();
        while self.next_batch(&mut batch, &mut frames) {
            let mut wire = self.wire_for_write();
            let result = wire.write_all(&batch);
            drop(wire);
            if let Err(failure) = result {
                self.write_failed(&frames, failure);
                return;
            }
            batch.clear();
            frames.clear();
        }
    }

    /// Makes the reader the session's flusher (sets `flushing`) if no flush is running:
    /// from then on senders queue their frames and return, and the reader writes them
    /// with [`Session::flush_from_reader`]. Why: the answers of one read wake that many
    /// callers, and each of them used to write its next request alone — about one
    /// write per request at 64 threads, and on the server one read and one wake-up of
    /// its connection thread for every few of them, and smaller batches all the way
    /// into Raft (docs/performance.md §8). False: a flush is running (that flusher
    /// writes what is queued) or the session is closed.
    ///
    /// Only on Linux, where the reader can write without waiting (`MSG_DONTWAIT` on a
    /// blocking socket, `sys::send_nonblocking`); elsewhere the callers write as before.
    fn take_pen(&self) -> bool {
        if !cfg!(target_os = "linux") {
            return false;
        }
        let mut outbox = lock(&self.outbox);
        if outbox.flushing || outbox.closed {
            return false;
        }
        outbox.flushing = true;
        true
    }

    /// The reader leaves with the pen: the connection is ending (the server closed it
    /// or broke the protocol), so what is queued is not written — its waiters learn
    /// from `close` that it was not sent, and may send it elsewhere.
    fn drop_pen_closing(&self) {
        let mut outbox = lock(&self.outbox);
        outbox.closed = true;
        outbox.flushing = false;
    }

    /// [`Session::flush`] for the reader, which must never wait for a plain socket:
    /// the server may be waiting for it to read answers before it reads more
    /// requests, so a reader blocked in a write could wait for ever. It writes what
    /// the socket takes at once; the rest, if any, goes to a thread of its own
    /// (`ticketing-flush`) that finishes it with ordinary blocking writes and goes on
    /// flushing until nothing is queued. A TLS session's reader writes as the callers
    /// do, with blocking writes (a caller blocked in a TLS write holds the TLS state
    /// the reader needs anyway, docs/client.md).
    fn flush_from_reader(self: &Arc<Self>) {
        let mut batch: Vec<u8> = Vec::new();
        let mut frames: Vec<(u64, usize)> = Vec::new();
        while self.next_batch(&mut batch, &mut frames) {
            let mut wire = self.wire_for_write();
            let sent = match &mut *wire {
                Wire::Plain(sock) => send_what_fits(sock, &batch),
                Wire::Tls { .. } => wire.write_all(&batch).map(|()| batch.len()),
            };
            let sent = match sent {
                Ok(n) if n < batch.len() => match self.hand_over(batch, frames, n) {
                    // The flush thread has the pen now.
                    None => return,
                    // No thread could be had: finish here, waiting as a caller would.
                    Some((back, back_frames)) => {
                        (batch, frames) = (back, back_frames);
                        wire.write_rest(&batch, n).map(|()| batch.len())
                    }
                },
                other => other,
            };
            drop(wire);
            if let Err(failure) = sent {
                self.write_failed(&frames, failure);
                return;
            }
            batch.clear();
            frames.clear();
        }
    }

    /// Hands a batch of which the first `written` bytes went out, and the pen with it,
    /// to a thread that writes the rest and then flushes on as `flush` does. Why a
    /// thread per hand-over: it happens only while the socket's send buffer is full
    /// (the server is not reading). Gives the batch back if no thread can be had.
    fn hand_over(
        self: &Arc<Self>,
        batch: Vec<u8>,
        frames: Vec<(u64, usize)>,
        written: usize,
    ) -> Option<Batch> {
        // Shared with the thread so that a failed spawn gives it back.
        let job = Arc::new(Mutex::new(Some((batch, frames))));
        let theirs = Arc::clone(&job);
        let session = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("ticketing-flush".into()).spawn(move || {
            let Some((batch, frames)) = lock(&theirs).take() else { return };
            let result = lock(&session.wire).write_rest(&batch, written);
            match result {
                Ok(()) => session.flush(),
                Err(failure) => session.write_failed(&frames, failure),
            }
        });
        match spawned {
            Ok(_) => None,
            Err(e) => {
                log::warn!("cannot start a thread to finish a write ({e}); the reader finishes it");
                let back = lock(&job).take();
                back
            }
        }
    }

    /// A write failed: frames of the batch not a byte of which went out are handed
    /// back to their waiters as [`Reply::Unsent`]; the rest are lost with the session.
    fn write_failed(&self, frames: &[(u64, usize)], failure: WriteFailure) {
        let mut start = 0;
        // Every frame before this batch was written whole by an earlier flush.
        let mut last_out = frames.first().map_or(0, |f| f.0.saturating_sub(1));
        let mut unsent = Vec::new();
        for &(seq, end) in frames {
            let any_byte = match failure {
                WriteFailure::SomeTls => true,
                WriteFailure::After(n) => start < n,
            };
            if any_byte {
                last_out = seq;
            } else {
                unsent.push(seq);
            }
            start = end;
        }
        // Why under the outbox lock: after a failed write the byte stream may end
        // inside a frame; nothing may be appended after it. The session dies first.
        let mut outbox = lock(&self.outbox);
        outbox.closed = true;
        outbox.flushing = false;
        self.maybe_written.store(last_out, Ordering::Release);
        self.kill();
        drop(outbox);
        let mut pending = lock(&self.pending);
        let ids: Vec<u32> =
            pending.map.iter().filter(|(_, (_, seq))| unsent.contains(seq)).map(|(id, _)| *id).collect();
        let waiters: Vec<(u32, Waiter)> =
            ids.into_iter().filter_map(|id| pending.map.remove(&id).map(|(w, _)| (id, w))).collect();
        drop(pending);
        for (id, waiter) in waiters {
            self.notify(id, waiter, Reply::Unsent);
        }
    }

    /// Which reply key an answer to `id` on this session has.
    pub(crate) fn reply_key(&self, id: u32) -> ReplyKey {
        (self as *const Session as usize, id)
    }

    /// Removes the waiter of a request that was not written.
    fn unregister(&self, id: u32) {
        if let Some((Waiter::Caller(cell), _)) = lock(&self.pending).map.remove(&id) {
            cell.unexpect(self.reply_key(id));
        }
    }

    /// Hands `reply` to `waiter`.
    fn notify(&self, id: u32, waiter: Waiter, reply: Reply) {
        match waiter {
            Waiter::Caller(cell) => cell.put(self.reply_key(id), reply),
            Waiter::Worker(tx) => {
                let _ = tx.send((id, reply));
            }
            Waiter::Compensate { key, .. } => {
                log::debug!("connection lost before a late answer for {key:?} (id {id})");
            }
            Waiter::Probe => {}
        }
    }

    /// Sends the supervisor's PING unless another write is in progress.
    pub(crate) fn ping(&self, ids: &AtomicU32) {
        let mut frame = Vec::with_capacity(9);
        crate::proto::frame::encode_request(&mut frame, 1, &crate::proto::frame::Request::Ping);
        if let Ok((_, at)) = self.try_send(ids, Waiter::Probe, &mut frame) {
            self.ping_at_us.store(us_since(self.epoch, at), Ordering::Release);
        }
    }

    fn take_fault(&self) -> bool {
        self.faults.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }

    /// Removes the waiter of `id` (the caller stopped waiting; a late answer is
    /// dropped). True when it was still registered.
    pub(crate) fn forget(&self, id: u32) -> bool {
        lock(&self.pending).map.remove(&id).is_some()
    }

    /// Turns the waiter of an ACQUIRE into a compensation: a `G` that still arrives is
    /// released through the release queue. Returns None when the answer was already
    /// taken by the reader (it is then in, or about to be in, the caller's channel).
    pub(crate) fn compensate(&self, id: u32, key: &str, owner: &str) -> Option<Arc<LateGrant>> {
        let mut pending = lock(&self.pending);
        match pending.map.get_mut(&id) {
            Some((waiter, _)) => {
                let state = LateGrant::armed();
                *waiter = Waiter::Compensate {
                    key: key.to_owned(),
                    owner: owner.to_owned(),
                    state: Arc::clone(&state),
                };
                Some(state)
            }
            None => None,
        }
    }

    /// Stops the session: the socket is shut down, so the reader wakes and cleans up.
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::Release);
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    /// Called by the reader when the session ends: every waiter learns it is lost,
    /// or, for a frame not a byte of which was written, that it was not sent.
    pub(crate) fn close(&self) {
        {
            let mut outbox = lock(&self.outbox);
            outbox.closed = true;
            self.kill();
        }
        let written = self.maybe_written.load(Ordering::SeqCst);
        let waiters: Vec<(u32, Waiter, u64)> = {
            let mut pending = lock(&self.pending);
            pending.closed = true;
            pending.map.drain().map(|(id, (w, seq))| (id, w, seq)).collect()
        };
        for (id, waiter, seq) in waiters {
            let reply = if seq > written { Reply::Unsent } else { Reply::Lost };
            self.notify(id, waiter, reply);
        }
    }

    /// Hands one response to its waiter.
    fn deliver(&self, pool: &Arc<Pool>, id: u32, response: Response) {
        match &response {
            Response::Moved { leader } => pool.on_moved(self, leader),
            Response::Granted { .. } | Response::Released => pool.on_leads(self),
            _ => {}
        }
        let waiter = lock(&self.pending).map.remove(&id).map(|(w, _)| w);
        match waiter {
            Some(Waiter::Caller(cell)) => cell.put(self.reply_key(id), Reply::Answer(response)),
            Some(Waiter::Worker(tx)) => {
                let _ = tx.send((id, Reply::Answer(response)));
            }
            Some(Waiter::Compensate { key, owner, state }) => {
                if let Response::Granted { token, .. } = response {
                    if !state.fire() {
                        log::info!(
                            "late grant of {key:?} (token {token}) left to the caller that resolved it"
                        );
                        return;
                    }
                    log::warn!(
                        "late grant of {key:?} (token {token}) after the caller gave up; releasing it"
                    );
                    if let Err(e) = pool.enqueue_release(Job::compensation(key, owner, token)) {
                        log::warn!("cannot release the late grant: {e}; its lease will end it");
                    }
                }
            }
            Some(Waiter::Probe) => {}
            None => log::debug!("answer to id {id} that nobody waits for"),
        }
    }
}

/// A fresh request id; 0 is reserved by the protocol and skipped.
pub(crate) fn next_id(ids: &AtomicU32) -> u32 {
    loop {
        let id = ids.fetch_add(1, Ordering::Relaxed);
        if id != 0 {
            return id;
        }
    }
}

/// What [`connect`] needs from the pool.
pub(crate) struct Dialer<'a> {
    pub(crate) key: &'a hmac::Key,
    pub(crate) tls: Option<&'a Arc<ClientConfig>>,
    pub(crate) epoch: Instant,
    pub(crate) faults: &'a Arc<AtomicUsize>,
}

/// Connects and authenticates to `addr` (TLS server name `host`); returns the
/// session and its read side.
pub(crate) fn connect(
    dialer: &Dialer<'_>,
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
            Err(e) => last = explain_connect_error(&target.to_string(), &e),
        }
    }
    let mut sock = sock.ok_or(last)?;
    let peer = sock.peer_addr().map_err(|e| e.to_string())?;
    let io = |e: io::Error| format!("{addr}: {e}");
    sock.set_nodelay(true).map_err(io)?;
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    sock.set_write_timeout(Some(WRITE_TIMEOUT)).map_err(io)?;
    let tls = dialer.tls.is_some();
    let hs = |e: HandshakeError| explain_handshake_error(addr, host, tls, &e);
    let (welcome, wire, reader): (Welcome, Wire, Box<dyn Read + Send>) = match dialer.tls {
        None => {
            let welcome = client_handshake(&mut sock, dialer.key, &CLIENT_LABELS).map_err(hs)?;
            // Unbuffered here: `read_loop` buffers every kind of reader itself.
            let reader = sock.try_clone().map_err(io)?;
            (welcome, Wire::Plain(sock.try_clone().map_err(io)?), Box::new(reader))
        }
        Some(config) => {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| format!("{addr}: bad TLS server name {host:?}: {e}"))?;
            let mut conn =
                ClientConnection::new(Arc::clone(config), name).map_err(|e| format!("{addr}: TLS: {e}"))?;
            let welcome = {
                let mut stream = rustls::Stream::new(&mut conn, &mut sock);
                client_handshake(&mut stream, dialer.key, &CLIENT_LABELS).map_err(hs)?
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
    // the longest wait; callers time out on their own, the supervisor PINGs a silent
    // session, and `kill` wakes the reader.
    sock.set_read_timeout(None).map_err(io)?;
    let session =
        Arc::new(Session::new(welcome, peer, addr, wire, sock, dialer.epoch, Arc::clone(dialer.faults)));
    Ok((session, reader))
}

/// A failed TCP connect, said so that the operator knows what to check.
fn explain_connect_error(target: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{target}: connection refused: no server listens there"),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!(
                "{target}: no answer to the connection within {CONNECT_TIMEOUT:?} (host down, or a firewall)"
            )
        }
        _ => format!("{target}: cannot connect: {e}"),
    }
}

/// A failed handshake, said by its cause: the auth token, TLS, or the wrong kind of
/// server. Each names what to check.
pub(crate) fn explain_handshake_error(addr: &str, host: &str, tls: bool, e: &HandshakeError) -> String {
    match e {
        HandshakeError::Rejected(why) if why.contains("authentication") => format!(
            "{addr}: the server refused our auth token (TICKETING_AUTH_TOKEN is not the server's client secret)"
        ),
        HandshakeError::BadProof => format!(
            "{addr}: the server's proof does not match our auth token: it holds another secret, or it is not \
             a Ticketing server"
        ),
        HandshakeError::WrongPortKind(b'P') => {
            format!("{addr}: this is a node's peer port, not its client port (the client port is 1000 lower)")
        }
        HandshakeError::BadMagic | HandshakeError::WrongPortKind(_) => {
            format!("{addr}: not a Ticketing client port (another service listens there)")
        }
        HandshakeError::Io(io) => explain_handshake_io(addr, host, tls, io),
        other => format!("{addr}: {other}"),
    }
}

fn explain_handshake_io(addr: &str, host: &str, tls: bool, io: &io::Error) -> String {
    let timed_out = matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
    if timed_out && !tls {
        return format!(
            "{addr}: no greeting from the server within {HANDSHAKE_TIMEOUT:?}: does it use TLS? (then set \
             TICKETING_TLS_CA)"
        );
    }
    if !tls || io.kind() != io::ErrorKind::InvalidData {
        return format!("{addr}: {io}");
    }
    use rustls::CertificateError as C;
    let Some(tls_error) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return format!("{addr}: TLS: {io}");
    };
    match tls_error {
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "{addr}: TLS: the server's certificate is not valid for {host:?}: it must list that host as a \
             subjectAltName (docs/tls.md)"
        ),
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            format!("{addr}: TLS: the server's certificate is not signed by the CA in TICKETING_TLS_CA")
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            format!("{addr}: TLS: the server's certificate has expired")
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("{addr}: TLS: the server does not speak TLS (a plain server: unset TICKETING_TLS_CA)")
        }
        other => format!("{addr}: TLS: {other}"),
    }
}

/// Reads responses until the connection ends or breaks the protocol.
///
/// While it hands out the answers of one read, the reader holds the session's pen
/// (see [`Session::take_pen`]): the callers those answers wake queue their next
/// frames instead of each writing its own, and the reader writes them together once
/// no whole frame is left in its buffer — before a read that may wait, never after.
pub(crate) fn read_loop(pool: &Arc<Pool>, session: &Arc<Session>, reader: Box<dyn Read + Send>) {
    let mut frames =
        FrameReader::new(BufReader::with_capacity(READ_BUFFER_LEN, reader), RESPONSE_FRAME_LEN_MAX);
    let mut pen = false;
    loop {
        if pen && !frames.has_buffered_frame() {
            pen = false;
            session.flush_from_reader();
        }
        let payload = match frames.read_payload() {
            Ok(payload) => payload,
            Err(e) => {
                if !session.is_dead() {
                    log::debug!("read from {}: {e}", session.peer);
                }
                break;
            }
        };
        session.last_rx_us.store(us_since(session.epoch, Instant::now()), Ordering::Release);
        if !pen {
            pen = session.take_pen();
        }
        match decode_response(payload) {
            Ok((0, response)) => {
                log::warn!("{} closed the connection: {response:?}", session.peer);
                break;
            }
            Ok((id, response)) => session.deliver(pool, id, response),
            Err(e) => {
                log::warn!("{} sent a bad frame: {e}", session.peer);
                break;
            }
        }
    }
    if pen {
        session.drop_pen_closing();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// One end of a loopback connection as a session (on `wire`, or plain), and the
    /// other end unread.
    fn session_on(sock: TcpStream, wire: Option<Wire>) -> Arc<Session> {
        sock.set_write_timeout(Some(WRITE_TIMEOUT)).unwrap();
        let peer = sock.peer_addr().unwrap();
        let wire = wire.unwrap_or_else(|| Wire::Plain(sock.try_clone().unwrap()));
        let welcome = Welcome { node_id: 1, role: role::STANDALONE, domain: 1, leader: String::new() };
        let faults = Arc::new(AtomicUsize::new(0));
        Arc::new(Session::new(welcome, peer, &peer.to_string(), wire, sock, Instant::now(), faults))
    }

    fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        (sock, peer)
    }

    /// A frame-shaped buffer of `len` bytes: length prefix, then `fill` (the id bytes
    /// are overwritten by `send`).
    fn big_frame(len: usize, fill: u8) -> Vec<u8> {
        let mut frame = vec![fill; len];
        frame[..4].copy_from_slice(&((len - 4) as u32).to_be_bytes());
        frame
    }

    /// `frame` as `send` writes it under request id `id`.
    fn as_sent(frame: &[u8], id: u32) -> Vec<u8> {
        let mut frame = frame.to_vec();
        frame[FRAME_ID_AT].copy_from_slice(&id.to_be_bytes());
        frame
    }

    fn read_to_end(mut peer: TcpStream) -> Vec<u8> {
        peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_reader_hands_a_write_the_socket_cannot_take_to_another_thread() {
        let (sock, peer) = loopback_pair();
        let session = session_on(sock, None);
        // Fill both sockets' buffers first, so whatever their sizes the reader's write
        // below cannot go out whole.
        let mut filler = 0usize;
        let chunk = vec![0x5Au8; 1 << 16];
        while let Ok(n @ 1..) = crate::sys::send_nonblocking(&session.sock, &chunk) {
            filler += n;
        }
        assert!(filler > 0);
        let ids = AtomicU32::new(1);
        assert!(session.take_pen());
        // While the reader holds the pen a sender queues and returns: no write yet.
        let frames = [big_frame(3 << 20, 0xA1), big_frame(1 << 20, 0xB2)];
        for frame in &frames {
            session.send(&ids, Waiter::Probe, &mut frame.clone()).unwrap();
        }
        assert!(!session.take_pen(), "the pen is held");
        // The peer reads nothing until the reader has moved on: a reader that waited
        // for the socket here would wait for ever (or until the write timeout).
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let reader_session = Arc::clone(&session);
        std::thread::spawn(move || {
            reader_session.flush_from_reader();
            let _ = done_tx.send(());
        });
        done_rx.recv_timeout(Duration::from_secs(3)).expect("flush_from_reader returned without waiting");
        assert!(!session.take_pen(), "the flush thread holds the pen until it is done");
        assert_eq!(session.maybe_written.load(Ordering::SeqCst), 2, "both frames may have gone out");
        // The peer reads: the filler, then exactly the two frames, once each, in order.
        let reading = std::thread::spawn(move || read_to_end(peer));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !session.take_pen() {
            assert!(Instant::now() < deadline, "the flush thread never let go of the pen");
            std::thread::sleep(Duration::from_millis(5));
        }
        session.kill();
        let got = reading.join().unwrap();
        let mut expected = vec![0x5Au8; filler];
        expected.extend(as_sent(&frames[0], 1));
        expected.extend(as_sent(&frames[1], 2));
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the bytes on the wire differ from the frames queued");
    }

    #[test]
    fn with_the_pen_released_a_sender_writes_its_own_frame_again() {
        let (sock, peer) = loopback_pair();
        let session = session_on(sock, None);
        let ids = AtomicU32::new(1);
        if session.take_pen() {
            session.flush_from_reader();
        }
        // Nothing was queued: the pen is free and the next sender writes at once.
        let frame = big_frame(64, 0xC3);
        session.send(&ids, Waiter::Probe, &mut frame.clone()).unwrap();
        session.kill();
        assert_eq!(read_to_end(peer), as_sent(&frame, 1));
    }

    #[test]
    fn the_reader_leaving_with_the_pen_writes_nothing_and_the_frames_count_as_unsent() {
        let (sock, peer) = loopback_pair();
        let session = session_on(sock, None);
        let ids = AtomicU32::new(1);
        if !session.take_pen() {
            return; // Not Linux: the reader never holds the pen.
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        session.send(&ids, Waiter::Worker(tx), &mut big_frame(64, 0xD4)).unwrap();
        // The server closed the connection (an id-0 frame) while this was queued.
        session.drop_pen_closing();
        session.close();
        assert!(matches!(rx.try_recv(), Ok((1, Reply::Unsent))));
        assert!(read_to_end(peer).is_empty(), "nothing was written");
    }

    /// A TLS client connection to a throw-away server on the other end of a loopback
    /// pair; the server's thread returns every plaintext byte it reads until EOF.
    fn tls_pair() -> (TcpStream, ClientConnection, std::thread::JoinHandle<Vec<u8>>) {
        tls_pair_reading_after(Duration::ZERO)
    }

    /// Like [`tls_pair`]; the server reads nothing for `pause` after the handshake.
    fn tls_pair_reading_after(
        pause: Duration,
    ) -> (TcpStream, ClientConnection, std::thread::JoinHandle<Vec<u8>>) {
        let (server_config, client_config) = crate::tls::throwaway_configs();
        let (mut sock, mut peer) = loopback_pair();
        let server = std::thread::spawn(move || {
            let mut conn = rustls::ServerConnection::new(server_config).unwrap();
            while conn.is_handshaking() {
                if conn.complete_io(&mut peer).is_err() {
                    return Vec::new();
                }
            }
            std::thread::sleep(pause);
            let mut stream = rustls::Stream::new(&mut conn, &mut peer);
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got);
            got
        });
        let mut conn =
            ClientConnection::new(client_config, ServerName::try_from("localhost").unwrap()).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        (sock, conn, server)
    }

    #[test]
    fn a_tls_batch_larger_than_the_tls_buffer_is_written_whole() {
        let (sock, conn, server) = tls_pair();
        let conn = Arc::new(Mutex::new(conn));
        let mut wire = Wire::Tls { sock: sock.try_clone().unwrap(), conn: Arc::clone(&conn) };
        // rustls holds at most 64 KiB of ciphertext; a batch of 1 MiB must still go.
        let batch: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        assert_eq!(wire.write_all(&batch), Ok(()));
        lock(&conn).send_close_notify();
        lock(&conn).complete_io(&mut &sock).unwrap();
        let _ = sock.shutdown(Shutdown::Write);
        let got = server.join().unwrap();
        assert_eq!(got.len(), batch.len());
        assert!(got == batch);
    }

    #[test]
    fn a_failed_tls_write_shuts_the_socket_so_no_buffered_ciphertext_leaves_later() {
        let (sock, conn, server) = tls_pair_reading_after(Duration::from_secs(2));
        let start = Instant::now();
        let conn = Arc::new(Mutex::new(conn));
        let mut wire = Wire::Tls { sock: sock.try_clone().unwrap(), conn: Arc::clone(&conn) };
        // The server reads nothing for a while: writes fill both sockets' buffers and
        // one of them times out (as a write to a stalled server does) with a record
        // still buffered in TLS.
        sock.set_write_timeout(Some(Duration::from_millis(50))).unwrap();
        let chunk = vec![7u8; 16 << 10];
        let failed = loop {
            if let Err(failure) = wire.write_all(&chunk) {
                break failure;
            }
            assert!(
                start.elapsed() < Duration::from_millis(1500),
                "no write timed out while the server slept"
            );
        };
        assert!(matches!(failed, WriteFailure::SomeTls | WriteFailure::After(0)), "{failed:?}");
        // The server reads again. What the reader does when it next holds the TLS
        // state — write whatever TLS wants written — must not put the failed batch on
        // the wire after it was reported as failed.
        std::thread::sleep(Duration::from_millis(2500).saturating_sub(start.elapsed()));
        let mut conn = lock(&conn);
        assert!(conn.wants_write(), "the record is still buffered in TLS");
        assert!(conn.write_tls(&mut &sock).is_err(), "the socket is shut: it cannot leave");
        drop(conn);
        let _ = server.join();
    }
}
