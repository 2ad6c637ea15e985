//! The lock-table thread's inbox: the one channel every other thread sends it work on
//! (connections, the Raft thread, the server), and the wake-up that parks it at once
//! when the inbox is empty.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::outbox::DirectWriter;
use crate::lock::ConnId;
use crate::messages::{FromLog, WriterMsg};
use crate::proto::{Request, Response};

/// Longest park without a deadline: a closed channel (every sender gone) is noticed
/// within this long even if nobody wakes the thread.
const PARK_MAX: Duration = Duration::from_secs(1);

/// The sending side of the lock-table thread's inbox: a crossbeam channel, plus a
/// wake-up of the thread only when it sleeps (see [`TableInbox`]).
#[derive(Clone)]
pub struct TableSender {
    tx: Sender<TableMsg>,
    wake: Arc<Wake>,
}

/// The lock-table thread's inbox. Unlike crossbeam's blocking receive, which spins and
/// yields the processor several times before it parks (measurable on a shared 2-core
/// host: `sched_yield` was among the server's top kernel symbols at 1,000 pairs/s),
/// an empty inbox parks the thread at once; a sender unparks it only if it is parked.
pub struct TableInbox {
    rx: Receiver<TableMsg>,
    wake: Arc<Wake>,
}

#[derive(Default)]
struct Wake {
    /// The receiving thread is parked (or about to park).
    parked: AtomicBool,
    thread: OnceLock<Thread>,
}

/// A new inbox for the lock-table thread and its sender.
pub fn inbox() -> (TableSender, TableInbox) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let wake = Arc::new(Wake::default());
    (TableSender { tx, wake: wake.clone() }, TableInbox { rx, wake })
}

impl TableSender {
    /// Queues `msg` and wakes the thread if it sleeps; `Err` when the thread is gone.
    pub fn send(&self, msg: TableMsg) -> Result<(), TableGone> {
        // Why `Appended` does not wake the thread: it only records where a command
        // went in the log; nothing is answered until its `Committed` (or a role
        // change) comes, which wakes it and finds the `Appended` ahead of it in the
        // queue. At one command per round trip that is one wake-up fewer per command.
        let wake = !matches!(msg, TableMsg::Log(FromLog::Appended { .. }));
        self.tx.send(msg).map_err(|_| TableGone)?;
        if !wake {
            return Ok(());
        }
        // The fences pair with the receiver's: its store of `parked` comes before its
        // last look at the channel, this send before our load of `parked`, so either
        // it sees this message or we see it parked (whatever orderings the channel
        // uses inside). Every sender that sees it parked unparks it — not only the
        // first: a first sender preempted between the two would otherwise hold back
        // everyone's wake-up. An unpark of a thread that is not parked costs no
        // system call; the receiver clears `parked` itself.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.wake.parked.load(Ordering::SeqCst) {
            if let Some(thread) = self.wake.thread.get() {
                thread.unpark();
            }
        }
        Ok(())
    }
}

/// The lock-table thread has stopped (its inbox is gone).
#[derive(Debug)]
pub struct TableGone;

/// Why the inbox gave no message.
pub enum Empty {
    /// The deadline passed (or the caller did not want to wait).
    Timeout,
    /// Every sender is gone.
    Closed,
}

impl TableInbox {
    /// The next message, waiting until `deadline` (forever if `None`) without spinning.
    /// Call only from the thread that owns the inbox.
    pub fn recv_until(&self, deadline: Option<Instant>) -> Result<TableMsg, Empty> {
        let me = self.wake.thread.get_or_init(std::thread::current);
        debug_assert_eq!(me.id(), std::thread::current().id(), "one receiving thread");
        loop {
            if let Some(msg) = self.try_recv()? {
                return Ok(msg);
            }
            let wait = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(PARK_MAX),
                    _ => return Err(Empty::Timeout),
                },
                None => PARK_MAX,
            };
            self.wake.parked.store(true, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            // A message sent before `parked` was set did not unpark us: look again.
            match self.try_recv() {
                Ok(Some(msg)) => {
                    self.wake.parked.store(false, Ordering::SeqCst);
                    return Ok(msg);
                }
                Ok(None) => std::thread::park_timeout(wait),
                Err(e) => {
                    self.wake.parked.store(false, Ordering::SeqCst);
                    return Err(e);
                }
            }
            self.wake.parked.store(false, Ordering::SeqCst);
        }
    }

    pub fn try_recv(&self) -> Result<Option<TableMsg>, Empty> {
        match self.rx.try_recv() {
            Ok(msg) => Ok(Some(msg)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Empty::Closed),
        }
    }
}

/// To the lock-table thread.
pub enum TableMsg {
    /// A connection finished its handshake; answers for it go to `replies`.
    Open { conn: ConnId, replies: Sender<WriterMsg>, direct: Option<Arc<DirectWriter>> },
    /// ACQUIRE, RELEASE or QUERY from `conn`.
    Request { conn: ConnId, id: u32, request: Request },
    /// Several of them, in arrival order: what one socket read brought (one message
    /// and at most one wake-up for all).
    Requests { conn: ConnId, batch: Vec<(u32, Request)> },
    /// TOP KEYS: answered at once on `reply` (the connection's reader waits for it and
    /// charges its real size to the connection, so a big answer cannot hide behind
    /// the fixed reckoning of lock answers).
    TopKeys { n: u8, reply: Sender<Response> },
    /// The connection is gone: its waiters leave their queues.
    Closed { conn: ConnId },
    /// News from the log (cluster mode).
    Log(FromLog),
    /// Stop the thread.
    Stop,
}
