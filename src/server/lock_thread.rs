//! The lock-table thread: the only writer of lock state.
//!
//! Connection threads send it requests over one crossbeam channel (so one connection's
//! requests are handled in arrival order); it answers on each connection's own reply
//! channel, so a queued ACQUIRE never holds back other answers. It drives a
//! [`Replica`]; the log behind it is Raft in a cluster, and in standalone mode a log
//! that commits on append — one code path for both.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::status::Counters;
use crate::lock::ConnId;
use crate::proto::{Request, Response};
use crate::replica::{LogRole, Replica, ReplicaOutput, ToLog};

/// Messages this thread takes at most between two timer checks, so timers and answers
/// are never starved by a flood of requests.
const BATCH_MESSAGES_MAX: usize = 1024;

/// To the lock-table thread.
pub enum TableMsg {
    /// A connection finished its handshake; answers for it go to `replies`.
    Open {
        conn: ConnId,
        replies: Sender<WriterMsg>,
    },
    /// ACQUIRE, RELEASE or QUERY from `conn`.
    Request {
        conn: ConnId,
        id: u32,
        request: Request,
    },
    /// The connection is gone: its waiters leave their queues.
    Closed { conn: ConnId },
    /// Stop the thread.
    Stop,
}

/// To a connection's writer.
pub enum WriterMsg {
    /// An answer; `counted` answers end a request the reader counted as pending.
    Reply {
        id: u32,
        response: Response,
        counted: bool,
    },
    /// Write what is queued, then close the connection.
    Close,
}

/// Milliseconds on the monotonic clock since the thread started, and Unix µs.
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    pub fn unix_us() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// The standalone log: one node, so an entry is committed as soon as it is appended.
struct LoopbackLog {
    last_index: u64,
}

impl LoopbackLog {
    /// Feeds everything the replica asked of the log straight back as done.
    fn settle(&mut self, replica: &mut Replica, clock: &Clock, out: &mut ReplicaOutput) -> u64 {
        let mut applied = 0;
        while !out.to_log.is_empty() {
            for ask in std::mem::take(&mut out.to_log) {
                let now = clock.now_ms();
                match ask {
                    ToLog::Append { seq, command, .. } => {
                        self.last_index += 1;
                        replica.on_appended(seq, self.last_index, 1);
                        replica.on_committed(
                            self.last_index,
                            1,
                            Some(&command),
                            now,
                            Clock::unix_us(),
                            out,
                        );
                        applied += 1;
                    }
                    ToLog::ReadIndex { ctx } => {
                        replica.on_read_ready(ctx, self.last_index, now, Clock::unix_us(), out)
                    }
                }
            }
        }
        applied
    }
}

/// Runs a standalone node's lock table until `Stop` arrives or every sender is gone.
pub fn run_standalone(
    mut replica: Replica,
    new_domain: u64,
    rx: Receiver<TableMsg>,
    counters: Arc<Counters>,
) {
    let clock = Clock::new();
    let mut log = LoopbackLog { last_index: 0 };
    let mut out = ReplicaOutput::default();
    let leader = LogRole::Leader {
        term: 1,
        noop_index: 0,
        new_domain,
    };
    replica.on_role(leader, clock.now_ms(), Clock::unix_us(), &mut out);
    log.settle(&mut replica, &clock, &mut out);
    publish(&replica, &counters);
    let mut conns: HashMap<ConnId, Sender<WriterMsg>> = HashMap::new();
    loop {
        let first = match replica.next_deadline() {
            Some(deadline) => {
                let wait = Duration::from_millis(deadline.saturating_sub(clock.now_ms()));
                match rx.recv_timeout(wait) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            None => match rx.recv() {
                Ok(msg) => Some(msg),
                Err(_) => return,
            },
        };
        let mut next = first;
        let mut handled = 0;
        while let Some(msg) = next.take() {
            if !handle(&mut replica, &mut conns, msg, &clock, &mut out) {
                return;
            }
            log.settle(&mut replica, &clock, &mut out);
            handled += 1;
            if handled >= BATCH_MESSAGES_MAX {
                break;
            }
            next = match rx.try_recv() {
                Ok(msg) => Some(msg),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            };
        }
        replica.tick(clock.now_ms(), Clock::unix_us(), &mut out);
        log.settle(&mut replica, &clock, &mut out);
        deliver(&conns, &mut out);
        publish(&replica, &counters);
    }
}

/// Sends every answer to its connection's writer.
fn deliver(conns: &HashMap<ConnId, Sender<WriterMsg>>, out: &mut ReplicaOutput) {
    for reply in out.replies.drain(..) {
        if let Some(tx) = conns.get(&reply.conn) {
            let _ = tx.send(WriterMsg::Reply {
                id: reply.id,
                response: reply.response,
                counted: true,
            });
        }
    }
}

/// Handles one message; false means stop.
fn handle(
    replica: &mut Replica,
    conns: &mut HashMap<ConnId, Sender<WriterMsg>>,
    msg: TableMsg,
    clock: &Clock,
    out: &mut ReplicaOutput,
) -> bool {
    match msg {
        TableMsg::Open { conn, replies } => {
            conns.insert(conn, replies);
        }
        TableMsg::Closed { conn } => {
            conns.remove(&conn);
            replica.conn_closed(conn);
        }
        TableMsg::Request { conn, id, request } => {
            replica.request(conn, id, request, clock.now_ms(), Clock::unix_us(), out);
        }
        TableMsg::Stop => return false,
    }
    true
}

fn publish(replica: &Replica, counters: &Counters) {
    counters
        .applied_index
        .store(replica.applied_index(), Ordering::Relaxed);
    counters
        .keys_held
        .store(replica.state().keys_held() as u64, Ordering::Relaxed);
    counters
        .waiters
        .store(replica.waiters() as u64, Ordering::Relaxed);
    counters
        .last_token
        .store(replica.state().last_token(), Ordering::Relaxed);
    counters
        .domain
        .store(replica.state().domain(), Ordering::Relaxed);
}
