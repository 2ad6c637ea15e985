//! The lock-table thread: the only writer of lock state.
//!
//! Connection threads send it requests over one crossbeam channel (so one connection's
//! requests are handled in arrival order); it answers on each connection's own reply
//! channel, so a queued ACQUIRE never holds back other answers. In standalone mode
//! the "log" commits on append: every proposal is applied right after the batch that
//! produced it, through the same `LockTable::apply` a cluster uses.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::status::Counters;
use crate::lock::{ConnId, LockTable, Output};
use crate::proto::{Request, Response};

/// Messages this thread takes at most between two applies, so timers and answers are
/// never starved by a flood of requests.
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
struct Clock {
    start: Instant,
}

impl Clock {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    fn unix_us() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// Runs until `Stop` arrives or every sender is gone.
pub fn run(mut table: LockTable, rx: Receiver<TableMsg>, counters: Arc<Counters>) {
    let clock = Clock {
        start: Instant::now(),
    };
    table.become_leader(clock.now_ms());
    let mut conns: HashMap<ConnId, Sender<WriterMsg>> = HashMap::new();
    let mut out = Output::default();
    let mut applied: u64 = 0;
    loop {
        let first = match table.next_deadline() {
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
        for _ in 0..BATCH_MESSAGES_MAX {
            let Some(msg) = next.take() else { break };
            if !handle(&mut table, &mut conns, msg, &clock, &mut out) {
                return;
            }
            applied += commit(&mut table, clock.now_ms(), &mut out);
            next = match rx.try_recv() {
                Ok(msg) => Some(msg),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            };
        }
        if let Some(msg) = next {
            // The batch is full: handle this one too, the rest waits for the next round.
            if !handle(&mut table, &mut conns, msg, &clock, &mut out) {
                return;
            }
        }
        let now = clock.now_ms();
        table.tick(now, Clock::unix_us(), &mut out);
        applied += commit(&mut table, now, &mut out);
        for reply in out.replies.drain(..) {
            if let Some(tx) = conns.get(&reply.conn) {
                let _ = tx.send(WriterMsg::Reply {
                    id: reply.id,
                    response: reply.response,
                    counted: true,
                });
            }
        }
        publish(&table, &counters, applied);
    }
}

/// The standalone "log": every proposal commits on append and is applied at once, in
/// order. Returns how many commands were applied.
fn commit(table: &mut LockTable, now_ms: u64, out: &mut Output) -> u64 {
    let mut applied = 0;
    while let Some(command) = out.proposals.pop_front() {
        table.apply(&command, now_ms, out);
        applied += 1;
    }
    applied
}

/// Handles one message; false means stop.
fn handle(
    table: &mut LockTable,
    conns: &mut HashMap<ConnId, Sender<WriterMsg>>,
    msg: TableMsg,
    clock: &Clock,
    out: &mut Output,
) -> bool {
    match msg {
        TableMsg::Open { conn, replies } => {
            conns.insert(conn, replies);
        }
        TableMsg::Closed { conn } => {
            conns.remove(&conn);
            table.conn_closed(conn);
        }
        TableMsg::Request { conn, id, request } => {
            let now = clock.now_ms();
            match request {
                Request::Acquire {
                    lease_s,
                    wait_ms,
                    key,
                    owner,
                } => table.acquire(
                    conn,
                    id,
                    lease_s,
                    wait_ms,
                    &key,
                    &owner,
                    now,
                    Clock::unix_us(),
                    out,
                ),
                Request::Release { token, key, owner } => {
                    table.release(conn, id, token, &key, &owner, Clock::unix_us(), out)
                }
                Request::Query { key } => {
                    let response = table.query(&key, now);
                    out.replies.push(crate::lock::Reply { conn, id, response });
                }
                // Connection threads answer these themselves; answer anyway, never drop.
                Request::Status | Request::Ping => out.replies.push(crate::lock::Reply {
                    conn,
                    id,
                    response: Response::Error {
                        code: crate::proto::ErrorCode::Invalid,
                        message: "not a lock-table request".into(),
                    },
                }),
            }
        }
        TableMsg::Stop => return false,
    }
    true
}

fn publish(table: &LockTable, counters: &Counters, applied: u64) {
    counters.applied_index.store(applied, Ordering::Relaxed);
    counters
        .keys_held
        .store(table.state().keys_held() as u64, Ordering::Relaxed);
    counters
        .waiters
        .store(table.waiters() as u64, Ordering::Relaxed);
    counters
        .last_token
        .store(table.state().last_token(), Ordering::Relaxed);
}
