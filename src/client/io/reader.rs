//! A slot's connection thread: dials when the core says, then reads the session until
//! it ends, handing each read's frames to the core at once.
//!
//! After handing a read's answers over, the reader takes the session's pen
//! (`Core::take_pen`) if nobody writes it: the callers those answers wake queue their
//! next frames instead of each writing its own. With several answers the pen goes to the
//! connection's writer thread, which runs after those callers and writes their frames
//! together; with one, the reader writes at once what is queued, without waiting for
//! the socket (docs/performance.md §8, §9).

use std::io::BufReader;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::conn::Conn;
use super::shared::{Mode, Shared};
use crate::client::core::{SessionId, SlotId};
use crate::proto::frame::{decode_response, Response};
use crate::proto::io::FrameReader;
use crate::proto::limits::RESPONSE_FRAME_LEN_MAX;
use crate::transport::ReadHalf;

/// Bytes read from the socket at once.
const READ_BUFFER_LEN: usize = 16 * 1024;

/// The body of a slot's thread. Returns when the slot is forgotten or the client stops.
pub(super) fn run_slot(shared: Arc<Shared>, slot: SlotId, dials: Receiver<String>) {
    while let Ok(addr) = dials.recv() {
        if shared.is_stopped() {
            break;
        }
        let dialed = shared.dialer.dial(&addr, |note| {
            shared.state().core.on_dial_note(slot, note);
        });
        match dialed {
            Err(error) => {
                shared.with_core(Mode::NonBlocking, |core, now| core.on_dial_failed(slot, error, now));
            }
            Ok(dialed) => {
                let session = {
                    let mut state = shared.state();
                    let session = state.core.on_connected(slot, &dialed.welcome, dialed.peer, Instant::now());
                    session.map(|session| {
                        let conn = Arc::new(Conn::new(session, dialed.writer));
                        state.conns.insert(session, Arc::clone(&conn));
                        (session, conn)
                    })
                };
                let Some((session, conn)) = session else { continue };
                // The session's first actions (requests that waited for it).
                shared.with_core(Mode::NonBlocking, |_, _| ());
                read_session(&shared, session, &addr, &conn, dialed.reader);
                conn.kill();
                shared.with_core(Mode::NonBlocking, |core, now| core.on_closed(session, now));
                shared.state().conns.remove(&session);
            }
        }
    }
}

/// Reads frames until the connection ends or breaks the protocol.
fn read_session(shared: &Arc<Shared>, session: SessionId, addr: &str, conn: &Arc<Conn>, reader: ReadHalf) {
    let mut frames =
        FrameReader::new(BufReader::with_capacity(READ_BUFFER_LEN, reader), RESPONSE_FRAME_LEN_MAX);
    let mut batch: Vec<(u32, Response)> = Vec::new();
    loop {
        let mut broken = false;
        loop {
            let payload = match frames.read_payload() {
                Ok(payload) => payload,
                Err(e) => {
                    log::debug!("read from {addr}: {e}");
                    broken = true;
                    break;
                }
            };
            match decode_response(payload) {
                Ok(frame) => batch.push(frame),
                Err(e) => {
                    log::warn!("{addr} sent a bad frame: {e}; reconnecting");
                    broken = true;
                    break;
                }
            }
            if !frames.has_buffered_frame() {
                break;
            }
        }
        if !batch.is_empty() {
            // The callers these answers wake will each send their next request in a
            // moment: with the pen held, they queue instead of writing one by one.
            let several = batch.len() > 1;
            let pen = shared.with_core(Mode::NonBlocking, |core, now| {
                core.on_frames(session, batch.drain(..), now);
                !broken && core.take_pen(session)
            });
            if pen {
                // Several answers: the writer thread writes what their callers queue,
                // after they ran. One answer: the reader writes at once what its caller
                // may already have queued (then lets go of the pen), as the reader of
                // the old client did — at one caller about a fifth less CPU and a lower
                // p50 than leaving the write to the caller (docs/performance.md §9).
                shared.flush(conn, if several { Mode::Deferred } else { Mode::NonBlocking });
            }
        }
        if broken {
            // With the pen held, what is queued is not written: the core counts it as
            // unsent when the end is reported, and sends it elsewhere.
            return;
        }
    }
}
