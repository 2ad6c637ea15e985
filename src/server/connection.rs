//! One client connection: handshake, then a reader (this thread) and a writer thread.
//!
//! The reader decodes and validates frames and answers `E`, `P` and `S` itself;
//! ACQUIRE, RELEASE and QUERY go to the lock-table thread. Every answer, from either
//! side, reaches the socket through the writer's channel, which batches whatever is
//! queued into one write.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use log::{debug, warn};

use super::lock_thread::TableMsg;
use super::Shared;
use crate::lock::ConnId;
use crate::messages::ToRaft;
use crate::messages::WriterMsg;
use crate::proto::frame::{
    decode_request, encode_response, encoded_response_len, DecodeError, ErrorCode, Request, Response,
};
use crate::proto::handshake::{self, HandshakeError, CLIENT_LABELS};
use crate::proto::io::{FrameReader, ReadError};
use crate::proto::limits::{HANDSHAKE_TIMEOUT_MS, REQUEST_FRAME_LEN_MAX};
use crate::transport::{self, Duplex, WriteHalf};

/// Requests one connection may have pending (sent, not yet answered); one more is
/// answered `E 4 overloaded`.
pub const PENDING_PER_CONN_MAX: usize = 4096;
/// Requests all connections of the node may have pending at once.
pub const PENDING_PER_NODE_MAX: usize = 1 << 20;
/// Bytes of answers one connection may have owed or unwritten before its reader stops
/// reading (a client that sends without reading is not read any more).
pub const CONN_QUEUE_BYTES_MAX: usize = 2 << 20;
/// Bytes of answers all connections together may have owed or unwritten: beyond it,
/// every connection with more than its fair share queued stops being read.
pub const NODE_QUEUE_BYTES_MAX: usize = 256 << 20;
/// A connection with at most this much queued is read even when the node is over its
/// budget: clients that read their answers are never held up by ones that do not.
pub const CONN_FAIR_SHARE_BYTES: usize = 64 << 10;
/// What an answer from the lock-table or Raft thread is reckoned at in the byte budget:
/// the largest lock answer (`H` with a 255-byte owner, 281 bytes) with room for the
/// message that carries it.
pub const LOCK_ANSWER_BYTES: usize = 384;
/// A batch of answers not written within this long closes the connection: the client
/// has stopped reading. The deadline covers the whole batch, not each system call.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);
/// A frame whose first byte arrived must be complete within this long (a client that
/// drips a frame a byte at a time is closed).
pub const FRAME_DEADLINE: Duration = Duration::from_secs(10);
/// What a queued answer costs besides its encoded bytes: the channel message that
/// carries it and its slot (a 9-byte PONG occupies far more memory than 9 bytes while
/// it waits, so the budget counts this too).
pub const QUEUED_ANSWER_OVERHEAD_BYTES: usize = std::mem::size_of::<WriterMsg>() + 16;

/// The budget charge of an answer the reader queues itself.
fn local_answer_bytes(response: &Response) -> usize {
    QUEUED_ANSWER_OVERHEAD_BYTES + encoded_response_len(response)
}

/// Bytes of socket reads buffered on the reader side.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// What a connection may do, by the secret it proved in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rights {
    /// The client secret: lock requests, QUERY, STATUS, PING.
    Client,
    /// The operator (peer) secret: all of those and the admin ops.
    Operator,
}

/// The index in [`crate::metrics::HANDSHAKE_FAILURES`] of why a handshake failed.
fn handshake_failure_reason(e: &HandshakeError) -> usize {
    match e {
        HandshakeError::AuthFailed => 0,
        HandshakeError::SpokeTls => 2,
        HandshakeError::Io(io) => match io.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => 1,
            _ if io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => 2,
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe => 4,
            _ => 3,
        },
        _ => 3,
    }
}

/// Serves one accepted connection until it closes. `handshaking` is given back when
/// the handshake ends, whatever its outcome (the accept loop caps handshakes).
pub fn serve(
    tcp: Arc<TcpStream>,
    peer: SocketAddr,
    conn: ConnId,
    shared: Arc<Shared>,
    handshaking: crate::slots::HandshakeTicket,
) {
    let _ = tcp.set_nodelay(true);
    let tls = match &shared.tls {
        Some(config) => match rustls::ServerConnection::new(config.clone()) {
            Ok(c) => Some(rustls::Connection::Server(c)),
            Err(e) => {
                warn!("{peer}: cannot start TLS: {e}");
                return;
            }
        },
        None => None,
    };
    let (mut reader, mut writer) = match transport::split(tcp, tls) {
        Ok(halves) => halves,
        Err(e) => {
            debug!("{peer}: cannot split socket: {e}");
            return;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    if reader.set_deadline(Some(deadline)).is_err() || writer.set_write_deadline(Some(deadline)).is_err() {
        return;
    }
    let welcome = || shared.welcome();
    // The operator secret is accepted too; only a connection that proved it may use
    // the admin ops.
    let mut keys = vec![&shared.auth_key];
    keys.extend(shared.operator_key.as_ref());
    let result = handshake::server_handshake_any(
        &mut Duplex { reader: &mut reader, writer: &mut writer },
        &keys,
        &CLIENT_LABELS,
        welcome,
    );
    drop(handshaking);
    let rights = match result {
        Ok((_, 0)) => Rights::Client,
        Ok(_) => Rights::Operator,
        Err(e) => {
            shared.metrics.server.handshake_failures[handshake_failure_reason(&e)].inc();
            // A plain client whose greeting was slow asks whether this port speaks TLS:
            // that ClientHello is no TLS client's.
            let probe = matches!(e, HandshakeError::SpokeTls) && crate::tls::rest_is_probe(writer.tcp());
            super::handshake_log::log_failure(&e, peer, shared.tls.is_some(), reader.heard(), probe);
            return;
        }
    };
    if reader.set_deadline(None).is_err() || writer.set_write_deadline(None).is_err() {
        return;
    }
    debug!("{peer}: connection {conn} open");

    let (tx, rx) = crossbeam_channel::unbounded();
    let counters = Arc::new(ConnCounters { reader: Some(std::thread::current()), ..ConnCounters::default() });
    // Plain TCP: the lock-table thread may write answers itself (see DirectWriter).
    let direct = writer.is_plain().then(|| {
        Arc::new(DirectWriter {
            sock: writer.socket(),
            spill: Mutex::new(Vec::new()),
            counters: counters.clone(),
            shared: shared.clone(),
            closed: AtomicBool::new(false),
        })
    });
    if shared.table.send(TableMsg::Open { conn, replies: tx.clone(), direct: direct.clone() }).is_err() {
        return;
    }
    let direct_token = direct.clone();
    let writer_thread = {
        let counters = counters.clone();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("conn-{conn}-w"))
            .stack_size(crate::slots::CONNECTION_STACK_BYTES)
            .spawn(move || write_loop(writer, rx, &counters, &shared, direct.as_deref()))
    };
    let Ok(writer_thread) = writer_thread else {
        let _ = shared.table.send(TableMsg::Closed { conn });
        return;
    };
    let frames = FrameReader::new(BufReader::with_capacity(READ_BUFFER_BYTES, reader), REQUEST_FRAME_LEN_MAX);
    let why = read_loop(frames, conn, rights, &tx, &counters, &shared);
    debug!("{peer}: connection {conn} closed ({why})");
    let _ = shared.table.send(TableMsg::Closed { conn });
    let _ = tx.send(WriterMsg::Close);
    drop(tx);
    let _ = writer_thread.join();
    // Requests the table never answered (it drops a closed connection's sender) are
    // no longer pending anywhere. Under the write token, so the lock-table thread,
    // which may still hold this connection's DirectWriter, never subtracts after us.
    let _token = direct_token.as_ref().map(|d| {
        let guard = d.spill.lock().unwrap_or_else(|e| e.into_inner());
        d.closed.store(true, Ordering::SeqCst);
        guard
    });
    shared.pending.fetch_sub(counters.pending.swap(0, Ordering::SeqCst), Ordering::SeqCst);
    shared.queued_bytes.fetch_sub(counters.queued_bytes.swap(0, Ordering::SeqCst), Ordering::SeqCst);
}

/// Lock requests handed to the lock-table thread in one message at most.
const REQUEST_BATCH_MAX: usize = 64;

/// Reads frames until the connection ends; returns why it ended, for the log.
fn read_loop(
    frames: FrameReader<BufReader<transport::ReadHalf>>,
    conn: ConnId,
    rights: Rights,
    tx: &Sender<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
) -> String {
    // Lock requests decoded from what is already buffered, handed over together once
    // the buffer is used up (before the next read can block), the batch is full, or
    // the connection is over its byte budget (its batch must not wait for room).
    let mut batch: Vec<(u32, Request)> = Vec::new();
    let why = read_frames(frames, conn, rights, tx, counters, shared, &mut batch);
    // Requests read before a bad frame are still served, as they would have been
    // one by one.
    if !batch.is_empty() {
        send_batch(shared, conn, &mut batch);
    }
    why
}

fn read_frames(
    mut frames: FrameReader<BufReader<transport::ReadHalf>>,
    conn: ConnId,
    rights: Rights,
    tx: &Sender<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
    batch: &mut Vec<(u32, Request)>,
) -> String {
    loop {
        // Why "a whole frame buffered" and not "anything buffered": the start of the
        // next frame may be in the buffer while its rest is still on the way (a lost
        // segment, a TLS record boundary); the requests already decoded must not wait
        // for it.
        if !batch.is_empty()
            && (batch.len() >= REQUEST_BATCH_MAX || !frames.has_buffered_frame())
            && !send_batch(shared, conn, batch)
        {
            return "server stopping".into();
        }
        // Back-pressure: a client that sends without reading stops being read until it
        // reads its answers, so what it has queued stays bounded in bytes. A batch is
        // handed over before the reader waits (its answers are what frees the room).
        match wait_for_room(counters, shared, || batch.is_empty() || send_batch(shared, conn, batch)) {
            Ok(()) => {}
            Err(why) => return why,
        }
        let payload = match frames.read_payload_within(FRAME_DEADLINE) {
            Ok(payload) => payload,
            Err(ReadError::Closed) => return "closed by client".into(),
            Err(ReadError::Io(e)) => return format!("read: {e}"),
            Err(ReadError::BadLength(e)) => {
                connection_error(tx, counters, shared, ErrorCode::Malformed, &e);
                return e.to_string();
            }
        };
        let (id, request) = match decode_request(payload) {
            Ok(decoded) => decoded,
            Err(DecodeError::Invalid { id, reason }) => {
                let response = Response::Error { code: ErrorCode::Invalid, message: reason.into() };
                local_reply(tx, counters, shared, id, response);
                continue;
            }
            Err(e @ DecodeError::Malformed(_)) => {
                connection_error(tx, counters, shared, ErrorCode::Malformed, &e);
                return e.to_string();
            }
            Err(e @ DecodeError::UnknownOp(_)) => {
                connection_error(tx, counters, shared, ErrorCode::UnknownOp, &e);
                return e.to_string();
            }
        };
        if request.is_admin() && rights != Rights::Operator {
            let message = format!(
                "{} (TICKETING_PEER_AUTH_TOKEN); this connection authenticated with the client secret",
                crate::proto::frame::NEEDS_OPERATOR_SECRET
            );
            local_reply(tx, counters, shared, id, Response::Error { code: ErrorCode::Refused, message });
            continue;
        }
        // TOP KEYS and the admin operations are answered by the lock-table or Raft
        // thread out of band: the requests read before them go first, so that they
        // see what this connection asked before.
        if (request.is_admin() || matches!(request, Request::TopKeys { .. }))
            && !batch.is_empty()
            && !send_batch(shared, conn, batch)
        {
            return "server stopping".into();
        }
        let local = match request {
            Request::Ping => Some(Response::Pong),
            Request::Status => Some(Response::Status { text: shared.status_text() }),
            Request::Members => Some(shared.members_answer()),
            Request::TopKeys { n } => Some(shared.top_keys(n)),
            _ => None,
        };
        if let Some(response) = local {
            local_reply(tx, counters, shared, id, response);
            continue;
        }
        if counters.pending.load(Ordering::SeqCst) >= PENDING_PER_CONN_MAX
            || shared.pending.load(Ordering::SeqCst) >= PENDING_PER_NODE_MAX
        {
            let response =
                Response::Error { code: ErrorCode::Overloaded, message: "too many pending requests".into() };
            local_reply(tx, counters, shared, id, response);
            continue;
        }
        // A request for the lock-table or Raft thread: pending until answered, its
        // answer reckoned at LOCK_ANSWER_BYTES.
        counters.queued_bytes.fetch_add(LOCK_ANSWER_BYTES, Ordering::SeqCst);
        shared.queued_bytes.fetch_add(LOCK_ANSWER_BYTES, Ordering::SeqCst);
        counters.pending.fetch_add(1, Ordering::SeqCst);
        shared.pending.fetch_add(1, Ordering::SeqCst);
        if let Request::Replace { old, new, addr } = request {
            admin_to_raft(tx, shared, id, ToRaft::Admin { id, old, new, addr, reply: tx.clone() });
            continue;
        }
        if let Request::Join { node, addr } = request {
            admin_to_raft(tx, shared, id, ToRaft::Join { id, node, addr, reply: tx.clone() });
            continue;
        }
        if let Request::Found { voters } = request {
            admin_to_raft(tx, shared, id, ToRaft::Found { id, voters, reply: tx.clone() });
            continue;
        }
        if let Request::TransferLeader { target } = request {
            admin_to_raft(tx, shared, id, ToRaft::Transfer { target, reply: (id, tx.clone()) });
            continue;
        }
        batch.push((id, request));
    }
}

/// Sends the batched lock requests to the lock-table thread; false if it is gone.
fn send_batch(shared: &Shared, conn: ConnId, batch: &mut Vec<(u32, Request)>) -> bool {
    let msg = if batch.len() == 1 {
        let (id, request) = batch.pop().expect("one request");
        TableMsg::Request { conn, id, request }
    } else {
        // A fresh batch with room for a typical read's requests (the old one goes to
        // the lock-table thread).
        TableMsg::Requests { conn, batch: std::mem::replace(batch, Vec::with_capacity(16)) }
    };
    shared.table.send(msg).is_ok()
}

/// Blocks while this connection may not be read (its answers, or the node's, are over
/// their byte budget). It is woken by its writer as answers go out; the node-wide
/// condition, which other connections' writers relieve, is looked at again every
/// `NODE_BUDGET_RECHECK`. `before_waiting` runs before each wait (it hands over the
/// requests already read; false: the server is stopping). `Err(why)` when the
/// connection must close instead.
fn wait_for_room(
    counters: &ConnCounters,
    shared: &Shared,
    mut before_waiting: impl FnMut() -> bool,
) -> Result<(), String> {
    const NODE_BUDGET_RECHECK: Duration = Duration::from_millis(20);
    loop {
        let mine = counters.queued_bytes.load(Ordering::SeqCst);
        let over_node = over_node_budget(mine, shared);
        if mine < CONN_QUEUE_BYTES_MAX && !over_node {
            return Ok(());
        }
        if counters.writer_done.load(Ordering::SeqCst) {
            return Err("writer stopped".into());
        }
        if !before_waiting() {
            return Err("server stopping".into());
        }
        counters.reader_waiting.store(true, Ordering::SeqCst);
        // Looked at again after announcing the wait: a writer that drained in between
        // has seen the flag and unparked us, or we see its progress here.
        if counters.queued_bytes.load(Ordering::SeqCst) < mine {
            counters.reader_waiting.store(false, Ordering::SeqCst);
            continue;
        }
        if over_node {
            std::thread::park_timeout(NODE_BUDGET_RECHECK);
        } else {
            std::thread::park_timeout(WRITE_DEADLINE);
        }
        counters.reader_waiting.store(false, Ordering::SeqCst);
    }
}

/// The node is over its byte budget and this connection (with `mine` queued) has more
/// than its fair share.
fn over_node_budget(mine: usize, shared: &Shared) -> bool {
    shared.queued_bytes.load(Ordering::SeqCst) >= NODE_QUEUE_BYTES_MAX && mine > CONN_FAIR_SHARE_BYTES
}

/// The lock-table thread's short cut to a plain (non-TLS) socket.
///
/// Profiles showed the writer threads' wake-ups as the largest cost of the server:
/// every answer woke a writer just to make one `send`. Now the lock-table thread,
/// after a round, encodes each connection's answers and — when no one else is writing
/// to that socket (`spill` is free and empty) — hands them to the kernel itself with a
/// non-blocking send. What the kernel does not take at once goes to `spill`, which
/// the writer thread (woken by [`WriterMsg::Flush`]) writes before anything else, so
/// frames never interleave. The writer writes only while holding `spill`; the
/// lock-table thread only `try_lock`s it, so it never blocks on a slow client.
pub struct DirectWriter {
    sock: Arc<TcpStream>,
    spill: Mutex<Vec<u8>>,
    counters: Arc<ConnCounters>,
    shared: Arc<Shared>,
    /// Set (under `spill`) once the connection has settled its pending count.
    closed: AtomicBool,
}

impl DirectWriter {
    /// Writes `frames`, which hold `count` counted answers, or leaves them to the
    /// writer through `spill`. False: nothing was done; send them on the channel.
    pub fn try_write(&self, frames: &[u8], count: usize, tx: &Sender<WriterMsg>) -> bool {
        let Ok(mut spill) = self.spill.try_lock() else {
            return false;
        };
        if self.closed.load(Ordering::SeqCst) {
            // Its pending count is settled; answers for it are simply dropped.
            return true;
        }
        if self.counters.writer_done.load(Ordering::SeqCst) {
            return false;
        }
        let written = if spill.is_empty() {
            match crate::sys::send_nonblocking(&self.sock, frames) {
                Ok(n) => n,
                Err(_) => return false,
            }
        } else {
            0
        };
        if written < frames.len() {
            spill.extend_from_slice(&frames[written..]);
            let _ = tx.send(WriterMsg::Flush);
        }
        // Still under the token: the connection's final settlement (in `serve`) must
        // see these answers either all counted or all subtracted.
        self.counters.answered(&self.shared, count, count * LOCK_ANSWER_BYTES);
        drop(spill);
        true
    }
}

/// Per-connection figures shared by the reader and the writer.
#[derive(Default)]
pub struct ConnCounters {
    /// Bytes of answers owed or not yet written, of any kind (LOCK_ANSWER_BYTES for
    /// each answer the lock-table or Raft thread owes, the encoded size of the rest).
    queued_bytes: AtomicUsize,
    /// Requests handed to the lock-table or Raft thread and not yet answered.
    pending: AtomicUsize,
    /// Set when the writer has stopped.
    writer_done: AtomicBool,
    /// Set while the reader waits for room (`wait_for_room`).
    reader_waiting: AtomicBool,
    /// The reader thread, woken when answers go out.
    reader: Option<Thread>,
}

impl ConnCounters {
    /// `count` pending requests were answered and `bytes` of queued answers went out
    /// (or were dropped): settles the figures and wakes a waiting reader.
    fn answered(&self, shared: &Shared, count: usize, bytes: usize) {
        if count > 0 {
            self.pending.fetch_sub(count, Ordering::SeqCst);
            shared.pending.fetch_sub(count, Ordering::SeqCst);
        }
        self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        shared.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        if self.reader_waiting.load(Ordering::SeqCst) {
            if let Some(reader) = &self.reader {
                reader.unpark();
            }
        }
    }
}

/// `admin replace` and `admin transfer-leader`: handed to the Raft thread, which
/// answers on the writer's channel when the change is done or refused (it may take a
/// while: the reader goes on). The caller counted it as pending.
fn admin_to_raft(tx: &Sender<WriterMsg>, shared: &Shared, id: u32, admin: ToRaft) {
    let refuse = |code, message: &str| {
        let response = Response::Error { code, message: message.into() };
        let _ = tx.send(WriterMsg::Reply { id, response, counted: true });
    };
    let Some((raft, waker)) = &shared.raft else {
        return refuse(ErrorCode::Invalid, "cluster administration needs a cluster; this node is standalone");
    };
    if raft.send(admin).is_err() {
        return refuse(ErrorCode::Refused, "the node is stopping");
    }
    let _ = waker.wake();
}

/// Queues an answer the reader made itself.
fn local_reply(
    tx: &Sender<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
    id: u32,
    response: Response,
) {
    shared.metrics.count_answer(&response);
    let bytes = local_answer_bytes(&response);
    counters.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
    shared.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
    let _ = tx.send(WriterMsg::Reply { id, response, counted: false });
}

/// Sends a connection-level error (id 0); the caller then closes the connection.
fn connection_error(
    tx: &Sender<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
    code: ErrorCode,
    error: &DecodeError,
) {
    let response = Response::Error { code, message: error.to_string() };
    local_reply(tx, counters, shared, 0, response);
}

/// Writes answers as they come, batching everything already queued into one write.
fn write_loop(
    mut writer: WriteHalf,
    rx: Receiver<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
    direct: Option<&DirectWriter>,
) {
    write_replies(&mut writer, rx, counters, shared, direct);
    counters.writer_done.store(true, Ordering::SeqCst);
    if let Some(reader) = &counters.reader {
        reader.unpark();
    }
}

fn write_replies(
    writer: &mut WriteHalf,
    rx: Receiver<WriterMsg>,
    counters: &ConnCounters,
    shared: &Shared,
    direct: Option<&DirectWriter>,
) {
    let mut buf = Vec::with_capacity(4096);
    let mut closing = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        // Answers in `buf`, settled once they are written.
        let (mut count, mut bytes) = (0, 0);
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Reply { id, response, counted } => {
                    if counted {
                        count += 1;
                        bytes += LOCK_ANSWER_BYTES;
                    } else {
                        bytes += local_answer_bytes(&response);
                    }
                    encode_response(&mut buf, id, &response);
                }
                WriterMsg::Encoded { bytes: encoded, count: n } => {
                    buf.extend_from_slice(&encoded);
                    count += n;
                    bytes += n * LOCK_ANSWER_BYTES;
                }
                WriterMsg::Flush => {}
                WriterMsg::Close => closing = true,
            }
            if buf.len() >= 64 * 1024 {
                break;
            }
            next = rx.try_recv().ok();
        }
        // One deadline for the whole batch (and the spill before it).
        if writer.set_write_deadline(Some(Instant::now() + WRITE_DEADLINE)).is_err() {
            break;
        }
        // The write token: the lock-table thread writes only while it is free.
        let mut spill = direct.map(|d| d.spill.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(spill) = spill.as_mut() {
            if !spill.is_empty() {
                let ok = writer.write_all(spill).is_ok();
                spill.clear();
                if !ok {
                    counters.answered(shared, count, bytes);
                    break;
                }
            }
        }
        let ok = buf.is_empty() || writer.write_all(&buf).and_then(|_| writer.flush()).is_ok();
        buf.clear();
        if buf.capacity() > 256 * 1024 {
            buf = Vec::with_capacity(4096);
        }
        counters.answered(shared, count, bytes);
        drop(spill);
        if !ok {
            break;
        }
        if closing {
            writer.close_gracefully();
            return;
        }
    }
    writer.shutdown();
}
