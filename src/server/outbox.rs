//! The answer side of a connection: what it owes and has queued, the byte budgets that
//! bound both, and the lock-table thread's direct writes to plain sockets.
//!
//! Three threads move a connection's figures. Its reader charges each request it hands
//! to the lock-table or Raft thread ([`ConnCounters::charge_request`]) and each answer
//! it makes itself ([`ConnCounters::charge_local`]); its writer settles what it wrote;
//! the lock-table thread settles what it wrote directly ([`DirectWriter::try_write`]).
//! When the connection ends, [`ConnCounters::settle_closed`] takes back whatever is
//! left. The one rule that keeps the figures exact with the direct path: the lock-table
//! thread settles only while it holds the connection's write token (the `spill` lock)
//! and the connection is not closed, and `closed` is set under that token — so the
//! final settlement sees each direct write either counted or already subtracted, never
//! half of one, and nothing is subtracted after it.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::invariant;
use crate::messages::WriterMsg;
use crate::proto::frame::encoded_response_len;
use crate::proto::Response;

/// Requests one connection may have pending (sent, not yet answered); one more is
/// answered `E 4 overloaded`. Far above a key's queue: one client — an event-loop
/// service whose thousands of users each wait for a seat — sends all its waiting
/// acquires over its one connection to the leader. The node's bound below still caps
/// the memory all of them can hold.
pub const PENDING_PER_CONN_MAX: usize = 16_384;
/// Requests all connections of the node may have pending at once.
pub const PENDING_PER_NODE_MAX: usize = 1 << 20;
/// Bytes of answers one connection may have owed or unwritten before its reader stops
/// reading (a client that sends without reading is not read any more). Room for every
/// pending request's answer (checked below): a connection at its pending bound is
/// answered `E 4`, not left unread.
pub const CONN_QUEUE_BYTES_MAX: usize = 8 << 20;
const _: () = assert!(PENDING_PER_CONN_MAX * LOCK_ANSWER_BYTES < CONN_QUEUE_BYTES_MAX);
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
/// What a queued answer costs besides its encoded bytes: the channel message that
/// carries it and its slot (a 9-byte PONG occupies far more memory than 9 bytes while
/// it waits, so the budget counts this too).
pub const QUEUED_ANSWER_OVERHEAD_BYTES: usize = std::mem::size_of::<WriterMsg>() + 16;
/// A reader waiting for its own connection's room wakes at least this often (its
/// writer unparks it sooner, as answers go out).
const CONN_ROOM_RECHECK: Duration = Duration::from_secs(30);
/// A reader waiting because the whole node is over its budget looks again this often:
/// other connections' writers relieve that condition and do not know who waits.
const NODE_ROOM_RECHECK: Duration = Duration::from_millis(20);

/// The budget charge of an answer the reader queues itself.
pub fn local_answer_bytes(response: &Response) -> usize {
    QUEUED_ANSWER_OVERHEAD_BYTES + encoded_response_len(response)
}

/// The node's figures: every connection's together.
#[derive(Default)]
pub struct NodeBudget {
    /// Requests pending in the lock-table or Raft thread.
    pending: AtomicUsize,
    /// Bytes of answers owed or unwritten.
    queued_bytes: AtomicUsize,
}

impl NodeBudget {
    /// Requests pending in the lock-table or Raft thread, all connections together.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    fn add(&self, pending: usize, bytes: usize) {
        if pending > 0 {
            self.pending.fetch_add(pending, Ordering::SeqCst);
        }
        self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    fn sub(&self, pending: usize, bytes: usize) {
        if pending > 0 {
            let before = self.pending.fetch_sub(pending, Ordering::SeqCst);
            invariant!(
                before >= pending,
                "the node's pending count never goes below zero",
                "{before} - {pending}"
            );
        }
        let before = self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        invariant!(before >= bytes, "the node's queued bytes never go below zero", "{before} - {bytes}");
    }
}

/// One connection's figures, shared by its reader, its writer and (plain connections)
/// the lock-table thread's [`DirectWriter`].
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
    reader: Thread,
}

impl ConnCounters {
    /// The figures of a connection read by the thread `reader`.
    pub fn new(reader: Thread) -> ConnCounters {
        ConnCounters {
            queued_bytes: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            writer_done: AtomicBool::new(false),
            reader_waiting: AtomicBool::new(false),
            reader,
        }
    }

    /// True when one more request would pass a pending cap (the connection's or the
    /// node's): it is answered `E 4` instead.
    pub fn at_pending_cap(&self, node: &NodeBudget) -> bool {
        self.pending.load(Ordering::SeqCst) >= PENDING_PER_CONN_MAX
            || node.pending.load(Ordering::SeqCst) >= PENDING_PER_NODE_MAX
    }

    /// A request handed to the lock-table or Raft thread: pending until answered, its
    /// answer reckoned at LOCK_ANSWER_BYTES.
    pub fn charge_request(&self, node: &NodeBudget) {
        self.queued_bytes.fetch_add(LOCK_ANSWER_BYTES, Ordering::SeqCst);
        self.pending.fetch_add(1, Ordering::SeqCst);
        node.add(1, LOCK_ANSWER_BYTES);
    }

    /// An answer the reader queues itself, at its encoded size.
    pub fn charge_local(&self, node: &NodeBudget, response: &Response) {
        let bytes = local_answer_bytes(response);
        self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
        node.add(0, bytes);
    }

    /// `count` pending requests were answered and `bytes` of queued answers went out
    /// (or were dropped): settles the figures and wakes a waiting reader.
    pub fn answered(&self, node: &NodeBudget, count: usize, bytes: usize) {
        if count > 0 {
            let before = self.pending.fetch_sub(count, Ordering::SeqCst);
            invariant!(
                before >= count,
                "a connection's pending count never goes below zero",
                "{before} - {count}"
            );
        }
        let before = self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        invariant!(before >= bytes, "a connection's queued bytes never go below zero", "{before} - {bytes}");
        node.sub(count, bytes);
        if self.reader_waiting.load(Ordering::SeqCst) {
            self.reader.unpark();
        }
    }

    /// The writer has stopped: the reader must not wait for room it will never free.
    pub fn writer_stopped(&self) {
        self.writer_done.store(true, Ordering::SeqCst);
        self.reader.unpark();
    }

    /// Waits (the reader) while the connection is over its byte budget, or the node is
    /// over its budget and this connection has more than its fair share queued. It is
    /// woken by its writer as answers go out; the node-wide condition, which other
    /// connections' writers relieve, is looked at again every `NODE_ROOM_RECHECK`.
    /// `before_waiting` runs before each wait (it hands over the requests already
    /// read; false: the server is stopping). `Err(why)` when the connection must close.
    pub fn wait_for_room(
        &self,
        node: &NodeBudget,
        mut before_waiting: impl FnMut() -> bool,
    ) -> Result<(), String> {
        loop {
            let mine = self.queued_bytes.load(Ordering::SeqCst);
            let over_node = node.queued_bytes.load(Ordering::SeqCst) >= NODE_QUEUE_BYTES_MAX
                && mine > CONN_FAIR_SHARE_BYTES;
            if mine < CONN_QUEUE_BYTES_MAX && !over_node {
                return Ok(());
            }
            if self.writer_done.load(Ordering::SeqCst) {
                return Err("writer stopped".into());
            }
            if !before_waiting() {
                return Err("server stopping".into());
            }
            self.reader_waiting.store(true, Ordering::SeqCst);
            // Looked at again after announcing the wait: a writer that drained in
            // between has seen the flag and unparked us, or we see its progress here.
            if self.queued_bytes.load(Ordering::SeqCst) < mine {
                self.reader_waiting.store(false, Ordering::SeqCst);
                continue;
            }
            std::thread::park_timeout(if over_node { NODE_ROOM_RECHECK } else { CONN_ROOM_RECHECK });
            self.reader_waiting.store(false, Ordering::SeqCst);
        }
    }

    /// The connection has ended and its writer has stopped: whatever it still owes
    /// (requests the lock table never answered — it drops a closed connection's
    /// channel — and answers never written) is taken back from the node. Under the
    /// write token, so the lock-table thread, which may still hold `direct`, never
    /// subtracts after this (the rule in the module comment).
    pub fn settle_closed(&self, node: &NodeBudget, direct: Option<&DirectWriter>) {
        let _token = direct.map(|d| {
            let token = d.write_token();
            d.closed.store(true, Ordering::SeqCst);
            token
        });
        let pending = self.pending.swap(0, Ordering::SeqCst);
        let bytes = self.queued_bytes.swap(0, Ordering::SeqCst);
        node.sub(pending, bytes);
    }
}

/// The lock-table thread's short cut to a plain (non-TLS) socket.
///
/// Profiles showed the writer threads' wake-ups as the largest cost of the server:
/// every answer woke a writer just to make one `send`. Now the lock-table thread,
/// after a round, encodes each connection's answers and — when no one else is writing
/// to that socket (`spill` is free and empty) — hands them to the kernel itself with a
/// non-blocking send. What the kernel does not take at once goes to `spill`, which
/// the writer thread (woken by [`WriterMsg::Flush`]) writes before anything else, so
/// frames never interleave. The writer writes only while holding `spill` (the write
/// token); the lock-table thread only `try_lock`s it, so it never blocks on a slow
/// client.
pub struct DirectWriter {
    sock: Arc<TcpStream>,
    spill: Mutex<Vec<u8>>,
    counters: Arc<ConnCounters>,
    node: Arc<NodeBudget>,
    /// Set (under `spill`) once the connection has settled its figures.
    closed: AtomicBool,
}

impl DirectWriter {
    pub fn new(sock: Arc<TcpStream>, counters: Arc<ConnCounters>, node: Arc<NodeBudget>) -> DirectWriter {
        DirectWriter { sock, spill: Mutex::new(Vec::new()), counters, node, closed: AtomicBool::new(false) }
    }

    /// The write token: whoever holds it may write to the socket. It holds the bytes
    /// the lock-table thread left for the writer, which go out before anything else.
    pub fn write_token(&self) -> MutexGuard<'_, Vec<u8>> {
        self.spill.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `frames`, which hold `count` counted answers, or leaves them to the
    /// writer through `spill`. False: nothing was done; send them on the channel.
    pub fn try_write(&self, frames: &[u8], count: usize, tx: &Sender<WriterMsg>) -> bool {
        let Ok(mut spill) = self.spill.try_lock() else {
            return false;
        };
        if self.closed.load(Ordering::SeqCst) {
            // Its figures are settled; answers for it are simply dropped.
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
        // Still under the token: the final settlement must see these answers either
        // all counted or all subtracted.
        self.counters.answered(&self.node, count, count * LOCK_ANSWER_BYTES);
        drop(spill);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> (ConnCounters, NodeBudget) {
        (ConnCounters::new(std::thread::current()), NodeBudget::default())
    }

    #[test]
    fn charges_and_settlements_balance_to_zero() {
        let (c, node) = counters();
        c.charge_request(&node);
        c.charge_request(&node);
        let pong = Response::Pong;
        c.charge_local(&node, &pong);
        assert_eq!(node.pending(), 2);
        c.answered(&node, 1, LOCK_ANSWER_BYTES + local_answer_bytes(&pong));
        assert_eq!((c.pending.load(Ordering::SeqCst), node.pending()), (1, 1));
        // The connection ends owing one answer: the node takes it back.
        c.settle_closed(&node, None);
        assert_eq!((node.pending(), node.queued_bytes.load(Ordering::SeqCst)), (0, 0));
    }

    #[test]
    #[should_panic(expected = "invariant violated: a connection's pending count never goes below zero")]
    fn settling_an_answer_never_charged_stops_the_node() {
        let (c, node) = counters();
        c.charge_request(&node);
        c.answered(&node, 2, 2 * LOCK_ANSWER_BYTES);
    }

    #[test]
    fn the_pending_caps_count_the_connection_and_the_node() {
        let (c, node) = counters();
        assert!(!c.at_pending_cap(&node));
        node.pending.store(PENDING_PER_NODE_MAX, Ordering::SeqCst);
        assert!(c.at_pending_cap(&node));
        node.pending.store(0, Ordering::SeqCst);
        c.pending.store(PENDING_PER_CONN_MAX, Ordering::SeqCst);
        assert!(c.at_pending_cap(&node));
    }
}
