//! The write side of one session's connection, and its writer thread.
//!
//! Only the session's writer of the moment writes (the core names one at a time:
//! `NetEvent::Flush`), so the write half's mutex is never contended. A thread that
//! must not wait for a socket — a reader (the server may be waiting for it to read
//! answers before it reads more requests), the timer thread, a destructor — writes what
//! the socket takes at once and hands the rest to the connection's writer thread
//! (`ticketing-flush`, started the first time it is needed and kept while the
//! connection lives), which finishes with ordinary writes bounded by
//! [`WRITE_DEADLINE`] and flushes on. With TLS such threads hand the whole flush over.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::{lock, Mode, Shared};
use crate::client::core::{SessionId, WriteFailure};
use crate::transport::{WriteHalf, WriteProgress};

/// Longest time one batch's write may take; a socket that takes longer is dropped.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// A batch for the writer thread: its bytes and how many of them already went out
/// (an empty batch: just flush what is queued).
struct Job {
    conn: Arc<Conn>,
    batch: Vec<u8>,
    written: usize,
}

pub(crate) struct Conn {
    pub(crate) session: SessionId,
    writer: Mutex<WriteHalf>,
    tcp: Arc<TcpStream>,
    plain: bool,
    /// The writer thread's queue, once it runs.
    handoff: Mutex<Option<Sender<Job>>>,
    /// A batch buffer kept between flushes (no allocation per write).
    spare: Mutex<Vec<u8>>,
}

impl Conn {
    pub(crate) fn new(session: SessionId, writer: WriteHalf) -> Conn {
        let tcp = writer.socket();
        let plain = writer.is_plain();
        Conn {
            session,
            writer: Mutex::new(writer),
            tcp,
            plain,
            handoff: Mutex::new(None),
            spare: Mutex::new(Vec::with_capacity(4096)),
        }
    }

    pub(crate) fn is_plain(&self) -> bool {
        self.plain
    }

    pub(crate) fn spare_buffer(&self) -> Vec<u8> {
        std::mem::take(&mut *lock(&self.spare))
    }

    pub(crate) fn return_buffer(&self, mut buf: Vec<u8>) {
        buf.clear();
        *lock(&self.spare) = buf;
    }

    /// Shuts the socket down: the reader wakes and reports the end.
    pub(crate) fn kill(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    /// With a fault injected (tests), a real zero-byte failure first: the socket
    /// refuses the write (EPIPE), exactly as a connection that broke between writes.
    fn inject_fault(&self, shared: &Shared) {
        if shared.faults.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok() {
            let _ = self.tcp.shutdown(Shutdown::Write);
        }
    }

    /// Writes `batch` whole (waiting up to [`WRITE_DEADLINE`]); on failure, how far it got.
    pub(crate) fn write(&self, batch: &[u8], shared: &Shared) -> Result<(), WriteFailure> {
        self.write_from(batch, 0, shared)
    }

    /// Writes `batch[written..]` of a batch whose first `written` bytes went out.
    fn write_from(&self, batch: &[u8], written: usize, shared: &Shared) -> Result<(), WriteFailure> {
        self.inject_fault(shared);
        let mut writer = lock(&self.writer);
        writer.write_counted(&batch[written..], Instant::now() + WRITE_DEADLINE).map_err(|progress| {
            match progress {
                WriteProgress::Plain(n) => WriteFailure::After(written + n),
                WriteProgress::Tls { any } if any || written > 0 => WriteFailure::SomeTls,
                WriteProgress::Tls { .. } => WriteFailure::After(0),
            }
        })
    }

    /// Plain only: writes what the socket takes at once.
    pub(crate) fn send_now(&self, batch: &[u8], shared: &Shared) -> Result<usize, WriteFailure> {
        self.inject_fault(shared);
        lock(&self.writer).send_now(batch).map_err(|_| WriteFailure::After(0))
    }

    /// Hands the writer's role to the writer thread: it finishes `batch` (of which
    /// `written` bytes went out; empty: none in flight) and flushes on.
    pub(crate) fn hand_over(self: &Arc<Self>, shared: &Arc<Shared>, batch: Vec<u8>, written: usize) {
        let job = Job { conn: Arc::clone(self), batch, written };
        let mut handoff = lock(&self.handoff);
        let job = match handoff.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            },
            None => job,
        };
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let thread_shared = Arc::clone(shared);
        let started = std::thread::Builder::new().name("ticketing-flush".into()).spawn(move || {
            // Ends when the connection is gone (its sender dropped with it).
            while let Ok(job) = rx.recv() {
                finish(&thread_shared, job);
            }
        });
        match started {
            Ok(_) => {
                let _ = tx.send(job);
                *handoff = Some(tx);
            }
            Err(e) => {
                drop(handoff);
                log::warn!("cannot start a thread to finish a write ({e}); finishing it here");
                finish(shared, job);
            }
        }
    }
}

/// The writer thread's work: the rest of a batch, then an ordinary flush.
fn finish(shared: &Arc<Shared>, job: Job) {
    let Job { conn, batch, written } = job;
    if !batch.is_empty() {
        let result = conn.write_from(&batch, written, shared);
        let failed = result.is_err();
        shared.written(conn.session, result, Mode::Blocking);
        conn.return_buffer(batch);
        if failed {
            return;
        }
    }
    shared.flush(&conn, Mode::Blocking);
}
