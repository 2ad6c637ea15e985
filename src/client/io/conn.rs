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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::sync::lock;
use crate::client::core::{SessionId, WriteFailure};
use crate::transport::{WriteHalf, WriteProgress};

/// Longest time one batch's write may take; a socket that takes longer is dropped.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// A batch for the writer thread: its bytes and how many of them already went out
/// (an empty batch: just flush what is queued).
pub(crate) struct Job {
    pub(crate) conn: Arc<Conn>,
    pub(crate) batch: Vec<u8>,
    pub(crate) written: usize,
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

    /// The socket (tests fill its buffers).
    #[cfg(test)]
    pub(crate) fn socket(&self) -> &TcpStream {
        &self.tcp
    }

    /// Shuts the socket down: the reader wakes and reports the end.
    pub(crate) fn kill(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    /// With a fault injected (`faults`, tests), a real zero-byte failure first: the socket
    /// refuses the write (EPIPE), exactly as a connection that broke between writes.
    fn inject_fault(&self, faults: &AtomicUsize) {
        if faults.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok() {
            let _ = self.tcp.shutdown(Shutdown::Write);
        }
    }

    /// Writes `batch` whole (waiting up to [`WRITE_DEADLINE`]); on failure, how far it got.
    pub(crate) fn write(&self, batch: &[u8], faults: &AtomicUsize) -> Result<(), WriteFailure> {
        self.write_from(batch, 0, faults)
    }

    /// Writes `batch[written..]` of a batch whose first `written` bytes went out.
    pub(crate) fn write_from(
        &self,
        batch: &[u8],
        written: usize,
        faults: &AtomicUsize,
    ) -> Result<(), WriteFailure> {
        self.inject_fault(faults);
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
    pub(crate) fn send_now(&self, batch: &[u8], faults: &AtomicUsize) -> Result<usize, WriteFailure> {
        self.inject_fault(faults);
        lock(&self.writer).send_now(batch).map_err(|_| WriteFailure::After(0))
    }

    /// Gives `job` to the connection's writer thread if it runs; returns it otherwise
    /// (the caller starts the thread with [`Conn::set_writer`]).
    pub(crate) fn queue_job(&self, job: Job) -> Option<Job> {
        match lock(&self.handoff).as_ref() {
            Some(tx) => tx.send(job).err().map(|e| e.into_inner()),
            None => Some(job),
        }
    }

    /// The writer thread started: `tx` is its queue, `first` its first job.
    pub(crate) fn set_writer(&self, tx: Sender<Job>, first: Job) {
        let _ = tx.send(first);
        *lock(&self.handoff) = Some(tx);
    }
}
