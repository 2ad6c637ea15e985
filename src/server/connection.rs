//! One client connection: its handshake, then its reader (this thread), which starts
//! the connection's writer thread (src/server/writer.rs).
//!
//! The reader decodes and validates frames and answers `E`, `P`, `S`, MEMBERS and TOP
//! KEYS itself; ACQUIRE, RELEASE and QUERY go to the lock-table thread, the admin ops
//! to the Raft thread. Answers reach the socket through the writer's channel, which
//! batches whatever is queued into one write — or, on a plain connection, straight
//! from the lock-table thread (src/server/outbox.rs, `DirectWriter`).

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{debug, warn};

use super::inbox::TableMsg;
use super::outbox::{ConnCounters, DirectWriter};
use super::shared::Shared;
use super::writer::write_loop;
use crate::lock::ConnId;
use crate::messages::ToRaft;
use crate::messages::WriterMsg;
use crate::proto::frame::{decode_request, DecodeError, ErrorCode, Request, Response};
use crate::proto::handshake::{self, HandshakeError, CLIENT_LABELS};
use crate::proto::io::{FrameReader, ReadError};
use crate::proto::limits::{HANDSHAKE_TIMEOUT_MS, HOLD_FRAME_LEN_MAX, REQUEST_FRAME_LEN_MAX};
use crate::transport::{self, Duplex};

/// A frame whose first byte arrived must be complete within this long (a client that
/// drips a frame a byte at a time is closed).
pub const FRAME_DEADLINE: Duration = Duration::from_secs(10);

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

/// The index in [`crate::metrics::HANDSHAKE_FAILURES`] of a client that went away.
const CLOSED: usize = 4;

/// At a TLS port, a connection silent this long before it closed is taken for a plain
/// client: it waits [`crate::tls::GREETING_PROBE_AFTER`] (200 ms) for a greeting before
/// it gives up, and a TLS client sends its ClientHello as soon as it connects. Half of
/// it: this node starts timing a moment after the client's connect returned.
const SILENT_LIKE_A_PLAIN_CLIENT: Duration =
    Duration::from_millis(crate::tls::GREETING_PROBE_AFTER.as_millis() as u64 / 2);

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
            | std::io::ErrorKind::BrokenPipe => CLOSED,
            _ => 3,
        },
        _ => 3,
    }
}

/// True when a handshake that failed with `reason` is a client that went away before it
/// sent a byte of its AUTH (`authing`): a port probe, or a one-shot command that ended
/// while it still dialed other nodes, in the middle of TLS or before — no failure, and
/// no warning. One case stays a failure: at a TLS port (`tls`), nothing at all heard
/// (`heard`: not even a ClientHello) for [`SILENT_LIKE_A_PLAIN_CLIENT`] or more
/// (`silent_for`) — what a plain client does, waiting for a greeting that never comes.
fn went_away(reason: usize, authing: bool, heard: bool, tls: bool, silent_for: Duration) -> bool {
    let plain_client_at_tls_port = tls && !heard && silent_for >= SILENT_LIKE_A_PLAIN_CLIENT;
    reason == CLOSED && !authing && !plain_client_at_tls_port
}

/// The handshake's stream, noting whether the client sent any byte of the handshake
/// itself (the TLS records under it do not count).
struct Noting<'a> {
    stream: Duplex<'a>,
    spoke: bool,
}

impl Read for Noting<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stream.read(out)?;
        self.spoke |= n > 0;
        Ok(n)
    }
}

impl Write for Noting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
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
    let accepted = Instant::now();
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
    let mut noting = Noting { stream: Duplex { reader: &mut reader, writer: &mut writer }, spoke: false };
    let result = handshake::server_handshake_any(&mut noting, &keys, &CLIENT_LABELS, welcome);
    let authing = noting.spoke;
    drop(handshaking);
    let rights = match result {
        Ok((_, 0)) => Rights::Client,
        Ok(_) => Rights::Operator,
        Err(e) => {
            let reason = handshake_failure_reason(&e);
            if went_away(reason, authing, reader.heard(), shared.tls.is_some(), accepted.elapsed()) {
                shared.metrics.server.abandoned.inc();
                super::handshake_log::log_went_away(peer);
                return;
            }
            shared.metrics.server.handshake_failures[reason].inc();
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
    let counters = Arc::new(ConnCounters::new(std::thread::current()));
    // Plain TCP: the lock-table thread may write answers itself (see DirectWriter).
    let direct = writer
        .is_plain()
        .then(|| Arc::new(DirectWriter::new(writer.socket(), counters.clone(), shared.budget.clone())));
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
            .spawn(move || write_loop(writer, rx, &counters, &shared.budget, direct.as_deref()))
    };
    let Ok(writer_thread) = writer_thread else {
        let _ = shared.table.send(TableMsg::Closed { conn });
        return;
    };
    let frames = FrameReader::new(BufReader::with_capacity(READ_BUFFER_BYTES, reader), REQUEST_FRAME_LEN_MAX)
        .with_long_op(b'H', HOLD_FRAME_LEN_MAX);
    let why = read_loop(frames, conn, rights, &tx, &counters, &shared);
    debug!("{peer}: connection {conn} closed ({why})");
    let _ = shared.table.send(TableMsg::Closed { conn });
    let _ = tx.send(WriterMsg::Close);
    drop(tx);
    let _ = writer_thread.join();
    counters.settle_closed(&shared.budget, direct_token.as_deref());
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
        match counters.wait_for_room(&shared.budget, || batch.is_empty() || send_batch(shared, conn, batch)) {
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
        if counters.at_pending_cap(&shared.budget) {
            let response =
                Response::Error { code: ErrorCode::Overloaded, message: "too many pending requests".into() };
            local_reply(tx, counters, shared, id, response);
            continue;
        }
        counters.charge_request(&shared.budget);
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
    counters.charge_local(&shared.budget, &response);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_closes_before_its_auth_went_away_unless_it_waited_silent_at_a_tls_port() {
        let eof = HandshakeError::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        let closed = handshake_failure_reason(&eof);
        let soon = Duration::from_millis(3);
        let late = SILENT_LIKE_A_PLAIN_CLIENT;
        // A plain port: whenever it closes before its AUTH.
        assert!(went_away(closed, false, false, false, soon));
        assert!(went_away(closed, false, false, false, late * 10));
        // A TLS port: at once (a TLS command that ended before its ClientHello left),
        // or in the middle of TLS (its ClientHello heard), however late...
        assert!(went_away(closed, false, false, true, soon));
        assert!(went_away(closed, false, true, true, late * 10));
        // ... but not after waiting in silence, as a plain client waits for a greeting.
        assert!(!went_away(closed, false, false, true, late));
        // Part of an AUTH, then gone: a failure; and any other reason.
        assert!(!went_away(closed, true, true, false, soon));
        assert!(!went_away(closed, true, true, true, soon));
        let timeout = HandshakeError::Io(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!went_away(handshake_failure_reason(&timeout), false, false, false, soon));
        assert!(!went_away(handshake_failure_reason(&HandshakeError::AuthFailed), true, true, false, soon));
    }
}
