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
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::inbox::{Empty, TableInbox, TableMsg};
use super::outbox::DirectWriter;
use super::status::Counters;
use crate::cluster::view::ClusterView;
use crate::lock::codec::{decode_command_ref, decode_snapshot};
use crate::lock::table::TableStats;
use crate::lock::ConnId;
use crate::messages::{Clock, FromLog, ToRaft, WriterMsg};
use crate::metrics::{LockMetrics, Metrics};
use crate::proto::frame::encode_response;

use crate::raft::EntryKind;
use crate::replica::{LogRole, Replica, ReplicaOutput, ToLog, SNAPSHOT_SLICE_SLOTS};

/// A snapshot is handed to Raft (so it can drop its log) after at least this many
/// applied entries, and then when either the entries since the last one are twice the
/// keys held (so the cost of snapshots stays proportional to the work done) or their
/// commands add up to `SNAPSHOT_LOG_BYTES` (so the log's memory stays bounded while
/// many keys are held: a million held keys would otherwise keep two million entries).
const SNAPSHOT_ENTRIES_MIN: u64 = 10_000;
/// Command bytes applied since the last snapshot that start a new one (about 100,000
/// ACQUIREs, some 25 MiB of log in memory).
const SNAPSHOT_LOG_BYTES: u64 = 8 << 20;

/// Messages this thread takes at most between two timer checks, so timers and answers
/// are never starved by a flood of requests; a batch of requests counts as its length.
const BATCH_MESSAGES_MAX: usize = 1024;

/// How long a follower's lock-table thread lets news from the log gather before it
/// applies them. Why: a follower answers no client (it redirects them), so applying
/// every commit the moment it arrives only costs a thread wake-up per entry — at a
/// steady 1,000 pairs/s two thousand a second, each a context switch on a shared
/// core. Batched, it wakes at most about a hundred times a second; a leader, and a
/// node that has just become one, never waits.
const FOLLOWER_BATCH: Duration = Duration::from_millis(10);

/// The standalone log: one node, so an entry is committed as soon as it is appended.
pub struct LoopbackLog {
    last_index: u64,
}

impl LoopbackLog {
    /// Feeds everything the replica asked of the log straight back as done.
    fn settle(&mut self, replica: &mut Replica, clock: &Clock, out: &mut ReplicaOutput) -> u64 {
        let mut applied = 0;
        while !out.to_log.is_empty() {
            for ask in std::mem::take(&mut out.to_log) {
                let now = clock.apply_ms();
                match ask {
                    ToLog::Append { seq, command, .. } => {
                        self.last_index += 1;
                        replica.on_appended(seq, self.last_index, 1);
                        replica.on_committed(self.last_index, 1, Some(&command), now, Clock::unix_us(), out);
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

/// Where the replica's requests to the log go.
pub enum LogLink {
    /// Standalone: a log that commits on append.
    Loopback(LoopbackLog),
    /// Cluster: the Raft thread. `log_bytes`: command bytes applied since the last
    /// snapshot began.
    Raft {
        tx: Sender<ToRaft>,
        waker: Arc<crate::raft_waker::RaftWaker>,
        snapshot_index: u64,
        log_bytes: u64,
        wake_due: bool,
    },
}

impl LogLink {
    pub fn loopback() -> LogLink {
        LogLink::Loopback(LoopbackLog { last_index: 0 })
    }

    /// Passes on what the replica asked of the log.
    fn submit(&mut self, replica: &mut Replica, clock: &Clock, out: &mut ReplicaOutput) {
        match self {
            LogLink::Loopback(log) => {
                log.settle(replica, clock, out);
            }
            LogLink::Raft { tx, wake_due, .. } => {
                if out.to_log.is_empty() {
                    return;
                }
                for ask in out.to_log.drain(..) {
                    let _ = tx.send(ToRaft::Log(ask));
                }
                *wake_due = true;
            }
        }
    }

    /// Wakes the Raft thread once for everything this round sent it (one wake-up
    /// per round, not per command).
    fn end_round(&mut self) {
        if let LogLink::Raft { waker, wake_due, .. } = self {
            if std::mem::take(wake_due) {
                let _ = waker.wake();
            }
        }
    }

    /// Command bytes of committed entries about to be applied.
    fn note_applied(&mut self, bytes: u64) {
        if let LogLink::Raft { log_bytes, .. } = self {
            *log_bytes += bytes;
        }
    }

    /// Starts a snapshot when enough has been applied since the last one, and goes on
    /// encoding the one under way: one slice of `SNAPSHOT_SLICE_SLOTS` key slots per
    /// round, so the thread never stops for long (docs/security.md §4). When done,
    /// Raft gets it and may drop its log up to the index it was begun at.
    fn maybe_snapshot(&mut self, replica: &mut Replica) {
        let LogLink::Raft { tx, waker, snapshot_index, log_bytes, .. } = self else {
            return;
        };
        if !replica.snapshot_in_progress() {
            let since = replica.applied_index().saturating_sub(*snapshot_index);
            let keys = replica.state().keys_held() as u64;
            if since < SNAPSHOT_ENTRIES_MIN || (since < 2 * keys && *log_bytes < SNAPSHOT_LOG_BYTES) {
                return;
            }
            *snapshot_index = replica.applied_index();
            *log_bytes = 0;
            replica.begin_snapshot();
        }
        if let Some((index, data)) = replica.snapshot_step(SNAPSHOT_SLICE_SLOTS) {
            let _ = tx.send(ToRaft::Compact { index, data });
            let _ = waker.wake();
        }
    }
}

/// Runs a standalone node's lock table until `Stop` arrives or every sender is gone.
pub fn run_standalone(
    mut replica: Replica,
    new_domain: u64,
    rx: TableInbox,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
) {
    let clock = Clock::new();
    let mut link = LogLink::loopback();
    let mut out = ReplicaOutput::default();
    let leader = LogRole::Leader { term: 1, noop_index: 0, new_domain };
    replica.on_role(leader, clock.apply_ms(), Clock::unix_us(), &mut out);
    link.submit(&mut replica, &clock, &mut out);
    publish(&replica, &counters);
    run(replica, link, rx, counters, metrics, &clock, out, None);
}

/// Runs a cluster node's lock table: roles, commits and reads come from the Raft
/// thread as `TableMsg::Log`.
pub fn run_cluster(
    replica: Replica,
    link: LogLink,
    rx: TableInbox,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
    clock: &Clock,
    view: Arc<ClusterView>,
) {
    run(replica, link, rx, counters, metrics, clock, ReplicaOutput::default(), Some(view));
}

#[allow(clippy::too_many_arguments)]
fn run(
    mut replica: Replica,
    mut link: LogLink,
    rx: TableInbox,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
    clock: &Clock,
    mut out: ReplicaOutput,
    view: Option<Arc<ClusterView>>,
) {
    let mut conns: HashMap<ConnId, ConnEntry> = HashMap::new();
    let mut batches = Batches::default();
    let mut batched = false;
    loop {
        // A follower lets news gather (FOLLOWER_BATCH) after a round that did work.
        if batched && !replica.is_leader() {
            std::thread::sleep(FOLLOWER_BATCH);
        }
        let deadline = match replica.next_deadline() {
            // A snapshot under way goes on between messages: no waiting.
            _ if replica.snapshot_in_progress() => Some(Instant::now()),
            Some(deadline) => Some(clock.instant_of(deadline)),
            None => None,
        };
        let first = match rx.recv_until(deadline) {
            Ok(msg) => Some(msg),
            Err(Empty::Timeout) => None,
            Err(Empty::Closed) => return,
        };
        batched = first.is_some();
        let mut next = first;
        let mut handled = 0;
        while let Some(msg) = next.take() {
            if let TableMsg::Log(FromLog::Committed(entries)) = &msg {
                link.note_applied(entries.iter().map(|e| e.payload_bytes() as u64).sum());
            }
            handled += match &msg {
                TableMsg::Requests { batch, .. } => batch.len(),
                _ => 1,
            };
            if !handle(&mut replica, &mut conns, msg, clock, &mut out, view.as_deref()) {
                return;
            }
            link.submit(&mut replica, clock, &mut out);
            if handled >= BATCH_MESSAGES_MAX {
                break;
            }
            next = match rx.try_recv() {
                Ok(msg) => msg,
                Err(_) => return,
            };
        }
        replica.tick(clock.now_ms(), Clock::unix_us(), &mut out);
        link.submit(&mut replica, clock, &mut out);
        // Publish before answering: a client that reads its answer and then asks for
        // STATUS must see the state that answer came from.
        publish(&replica, &counters);
        record(replica.table_stats(), &metrics.lock);
        if let Some(view) = &view {
            view.set_replicated(replica.state().members());
        }
        link.end_round();
        deliver(&mut conns, &mut batches, &mut out, &metrics);
        link.maybe_snapshot(&mut replica);
        link.end_round();
    }
}

/// What the thread keeps of an open connection.
pub struct ConnEntry {
    replies: Sender<WriterMsg>,
    direct: Option<Arc<DirectWriter>>,
    /// This round's encoded answers (plain connections), and how many.
    batch: Vec<u8>,
    count: usize,
}

/// Connections with encoded answers this round.
#[derive(Default)]
struct Batches {
    touched: Vec<ConnId>,
}

/// Sends every answer of the round: on a plain connection all of its answers encoded
/// in one buffer, written by this thread when the socket takes them at once (see
/// [`DirectWriter`]), else handed to the writer as one message; on a TLS connection
/// one message per answer to the writer.
fn deliver(
    conns: &mut HashMap<ConnId, ConnEntry>,
    batches: &mut Batches,
    out: &mut ReplicaOutput,
    metrics: &Metrics,
) {
    for reply in out.replies.drain(..) {
        metrics.count_answer(&reply.response);
        let Some(entry) = conns.get_mut(&reply.conn) else { continue };
        if entry.direct.is_some() {
            if entry.count == 0 {
                batches.touched.push(reply.conn);
            }
            encode_response(&mut entry.batch, reply.id, &reply.response);
            entry.count += 1;
        } else {
            let _ = entry.replies.send(WriterMsg::Reply {
                id: reply.id,
                response: reply.response,
                counted: true,
            });
        }
    }
    for conn in batches.touched.drain(..) {
        let Some(entry) = conns.get_mut(&conn) else { continue };
        let direct = entry.direct.as_ref().expect("only plain connections batch");
        if !direct.try_write(&entry.batch, entry.count, &entry.replies) {
            let bytes = entry.batch.clone();
            let _ = entry.replies.send(WriterMsg::Encoded { bytes, count: entry.count });
        }
        entry.batch.clear();
        if entry.batch.capacity() > 64 * 1024 {
            entry.batch = Vec::new();
        }
        entry.count = 0;
    }
}

/// Handles one message; false means stop.
fn handle(
    replica: &mut Replica,
    conns: &mut HashMap<ConnId, ConnEntry>,
    msg: TableMsg,
    clock: &Clock,
    out: &mut ReplicaOutput,
    view: Option<&ClusterView>,
) -> bool {
    match msg {
        TableMsg::Open { conn, replies, direct } => {
            conns.insert(conn, ConnEntry { replies, direct, batch: Vec::new(), count: 0 });
        }
        TableMsg::Closed { conn } => {
            conns.remove(&conn);
            replica.conn_closed(conn);
        }
        TableMsg::Request { conn, id, request } => {
            replica.request(conn, id, request, clock.now_ms(), Clock::unix_us(), out);
        }
        TableMsg::Requests { conn, batch } => {
            for (id, request) in batch {
                replica.request(conn, id, request, clock.now_ms(), Clock::unix_us(), out);
            }
        }
        TableMsg::Log(news) => {
            if let Err(why) = on_log(replica, news, clock, out) {
                // Going on would serve a lock state the log no longer backs.
                log::error!("{why}");
                if let Some(view) = view {
                    view.set_broken(why);
                }
                return false;
            }
        }
        TableMsg::TopKeys { n, reply } => {
            let _ = reply.send(replica.top_keys(n, clock.now_ms()));
        }
        TableMsg::Stop => return false,
    }
    true
}

/// Applies news from the Raft thread to the replica.
/// `Err` when this node cannot go on: a snapshot it cannot decode (Raft has already
/// dropped the log the snapshot replaces).
fn on_log(
    replica: &mut Replica,
    news: FromLog,
    clock: &Clock,
    out: &mut ReplicaOutput,
) -> Result<(), String> {
    let now = clock.apply_ms();
    match news {
        FromLog::Appended { seq, index, term } => replica.on_appended(seq, index, term),
        FromLog::Rejected { seq } => replica.on_rejected(seq, out),
        FromLog::Committed(entries) => {
            // One wall-clock reading for the batch: it is only a floor for new tokens.
            let unix_us = Clock::unix_us();
            for entry in entries {
                let command = match &entry.kind {
                    EntryKind::Normal(data) => match decode_command_ref(data) {
                        Ok(command) => Some(command),
                        Err(e) => {
                            // Every node decodes the same bytes the same way, so
                            // skipping keeps all replicas equal; it means a bug.
                            log::error!("entry {} is not a lock command ({e}); skipped", entry.index);
                            None
                        }
                    },
                    EntryKind::Noop | EntryKind::Config(_) => None,
                };
                replica.on_committed(entry.index, entry.term, command.as_ref(), now, unix_us, out);
            }
        }
        FromLog::Snapshot { index, data } => match decode_snapshot(&data) {
            Ok(state) => replica.on_snapshot(index, state, out),
            Err(e) => {
                return Err(format!(
                    "the snapshot at index {index} cannot be decoded ({e}): this node cannot hold the \
                     cluster's state (a newer version's snapshot?) and stops"
                ))
            }
        },
        FromLog::ReadReady { ctx, index } => replica.on_read_ready(ctx, index, now, Clock::unix_us(), out),
        FromLog::ReadFailed { ctx } => replica.on_read_failed(ctx, out),
        FromLog::Deferred { seq, term, command } => replica.on_deferred(seq, term, command, out),
        FromLog::Handover(active) => replica.on_handover(active, now, Clock::unix_us(), out),
        FromLog::Role { leading, leader_addr } => {
            let role = match leading {
                Some((term, noop_index)) => LogRole::Leader { term, noop_index, new_domain: random_domain() },
                None => LogRole::NotLeader { leader_addr },
            };
            replica.on_role(role, now, Clock::unix_us(), out);
        }
    }
    Ok(())
}

/// A fresh random non-zero fencing domain (docs/fencing.md).
pub fn random_domain() -> u64 {
    crate::random::nonzero(64)
}

/// Adds what the lock table counted this round to the node's metrics: a handful of
/// relaxed atomic adds per round, on this thread only.
fn record(stats: &mut TableStats, metrics: &LockMetrics) {
    metrics.grants.immediate.add(stats.grants_immediate);
    metrics.grants.handoff.add(stats.grants_handoff);
    metrics.lease_expiries.add(stats.lease_expiries);
    for ms in &stats.waits_ms {
        metrics.wait_seconds.observe_us(ms.saturating_mul(1000));
    }
    for us in &stats.holds_us {
        metrics.hold_seconds.observe_us(*us);
    }
    stats.clear();
}

fn publish(replica: &Replica, counters: &Counters) {
    counters.applied_index.store(replica.applied_index(), Ordering::Relaxed);
    counters.keys_held.store(replica.state().keys_held() as u64, Ordering::Relaxed);
    counters.waiters.store(replica.waiters() as u64, Ordering::Relaxed);
    counters.keys_with_waiters.store(replica.table().keys_with_waiters() as u64, Ordering::Relaxed);
    counters.last_token.store(replica.state().last_token(), Ordering::Relaxed);
    counters.domain.store(replica.state().domain(), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::TableConfig;

    #[test]
    fn a_snapshot_that_cannot_be_decoded_stops_the_node_instead_of_being_skipped() {
        let mut replica =
            Replica::new(TableConfig { node: 1, incarnation: 1, waiters_per_key_max: 4, keys_max: 16 });
        let mut out = ReplicaOutput::default();
        let clock = Clock::new();
        let bad = FromLog::Snapshot { index: 42, data: vec![99, 1, 2, 3] };
        let why = on_log(&mut replica, bad, &clock, &mut out).unwrap_err();
        assert!(why.contains("index 42") && why.contains("stops"), "{why}");
    }
}
