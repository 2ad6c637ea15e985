//! The messages that pass between a node's threads — connection threads, the
//! lock-table thread, the Raft thread — and the clock they share. One home that
//! `server/` and `cluster/` both import, so neither imports the other's internals:
//! `server/` starts `cluster/` and hands it channels; `cluster/` knows nothing of how
//! the server is built.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;

use crate::established::Established;
use crate::lock::Command;
use crate::proto::Response;
use crate::raft::Entry;
use crate::replica::ToLog;

/// To the Raft thread.
#[allow(clippy::large_enum_variant)] // one message at a time; boxing buys nothing
pub enum ToRaft {
    /// From the lock-table thread.
    Log(ToLog),
    /// The lock-table thread's snapshot at `index`: Raft may drop the log up to it.
    Compact {
        index: u64,
        data: Vec<u8>,
    },
    /// A peer connection whose handshake is done. Outbound ones carry our messages to
    /// `peer`; inbound ones carry its messages to us.
    Conn {
        established: Established,
        outbound: bool,
    },
    /// A dialer began an attempt to connect to `peer` (`started`), or one failed: the
    /// messages waiting for that link are dropped then (see `raft_thread::dial_queue::DialQueue`).
    Dial {
        peer: u64,
        started: bool,
    },
    /// A peer refused our connection because a committed configuration removed us.
    RemovedBy {
        peer: u64,
    },
    /// `admin replace`: swap voter `old` for node `new` at client address `addr`; the
    /// answer goes to `reply` with request id `id`.
    Admin {
        id: u32,
        old: u64,
        new: u64,
        addr: String,
        reply: Sender<WriterMsg>,
    },
    /// JOIN: add node `node` at client address `addr` as a standby learner.
    Join {
        id: u32,
        node: u64,
        addr: String,
        reply: Sender<WriterMsg>,
    },
    /// FOUND: become one of `voters`, the founders of a new cluster.
    Found {
        id: u32,
        voters: Vec<(u64, String)>,
        reply: Sender<WriterMsg>,
    },
    /// `admin transfer-leader`: hand leadership over to `target` (or the voter the core
    /// chooses). `reply`: the request id and connection, answered when another node leads
    /// or the hand-over failed.
    Transfer {
        target: Option<u64>,
        reply: (u32, Sender<WriterMsg>),
    },
    /// This node's own stop (SIGTERM), first step: tell the other members it stops
    /// (`Raft::stop`), and with `leave` ask the leader to swap a standby in for it;
    /// `reply` is told once that is done and published.
    Stopping {
        leave: bool,
        reply: Sender<()>,
    },
    /// This node's own stop (SIGTERM): hand leadership to a voter that can take over, if
    /// one can; `reply` is told at once what was done.
    StopHandover {
        reply: Sender<StopHandover>,
    },
    Stop,
}

/// What the Raft thread did when this node's stop asked it to hand leadership over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopHandover {
    /// Handing leadership over to this voter.
    Started(u64),
    /// No voter was heard within an election timeout over a link that is up: no
    /// hand-over could succeed, so none was started.
    NoneReachable,
    /// Every other voter said it is stopping too: none was started (it would only
    /// move leadership to a node that stops as well).
    OthersStopping,
    /// This leader is leaving the configuration: it hands over by itself when that
    /// change commits.
    Leaving,
    /// This node does not lead.
    NotLeader,
    /// The core refused, in its words.
    Refused(String),
}

/// From the Raft thread to the lock-table thread.
pub enum FromLog {
    Appended {
        seq: u64,
        index: u64,
        term: u64,
    },
    Rejected {
        seq: u64,
    },
    Committed(Vec<Entry>),
    Snapshot {
        index: u64,
        data: Vec<u8>,
    },
    ReadReady {
        ctx: u64,
        index: u64,
    },
    ReadFailed {
        ctx: u64,
    },
    /// Leading (term, index of the term's no-op), or following `leader_addr`.
    Role {
        leading: Option<(u64, u64)>,
        leader_addr: String,
    },
    /// The log did not take `command` (planned under `term`) because the leader is
    /// handing leadership over: the replica proposes it again when the hand-over ends
    /// (or answers `M` if leadership moved). Never failed for the hand-over's sake.
    Deferred {
        seq: u64,
        term: u64,
        command: Command,
    },
    /// A planned hand-over of leadership started (`true`) or ended (`false`).
    Handover(bool),
}

/// To a connection's writer.
pub enum WriterMsg {
    /// An answer; `counted` answers end a request the reader counted as pending.
    Reply { id: u32, response: Response, counted: bool },
    /// Answers the lock-table thread encoded already (`count` counted ones).
    Encoded { bytes: Vec<u8>, count: usize },
    /// The lock-table thread left bytes in the connection's spill buffer: write them.
    Flush,
    /// Write what is queued, then close the connection.
    Close,
}

/// Milliseconds on the monotonic clock since the thread started, and Unix µs.
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { start: Instant::now() }
    }
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    /// The instant at which `now_ms()` reaches `ms`.
    pub fn instant_of(&self, ms: u64) -> Instant {
        self.start + std::time::Duration::from_millis(ms)
    }
    /// The time to use when applying commands: rounded UP. Why: a lease timer starts
    /// when its grant is applied and fires when `now_ms()` (rounded down) reaches its
    /// end, so starting it from the rounded-up time keeps the server's expiry never
    /// earlier than the client's local deadline (send time + lease).
    pub fn apply_ms(&self) -> u64 {
        (self.start.elapsed().as_micros() as u64).div_ceil(1000)
    }
    pub fn unix_us() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// How the Raft thread hands news to the lock-table thread (the server wraps it in its
/// own message type).
pub type FromLogSink = Box<dyn Fn(FromLog) + Send>;

/// The fencing domain as the lock-table thread last published it (0 until recorded).
pub type DomainSource = std::sync::Arc<dyn Fn() -> u64 + Send + Sync>;
