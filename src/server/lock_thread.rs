//! The lock-table thread: the only writer of lock state.
//!
//! Connection threads send it requests over one crossbeam channel (so one connection's
//! requests are handled in arrival order); it answers on each connection's own reply
//! channel, so a queued ACQUIRE never holds back other answers. It drives a
//! [`Replica`]; the log behind it is a [`LogLink`] (log_link.rs): Raft in a cluster, and
//! in standalone mode a log that commits on append — one code path for both.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::health::AliveFlag;
use super::inbox::{Empty, TableInbox, TableMsg};
use super::log_link::LogLink;
use super::outbox::DirectWriter;
use super::status::Counters;
use crate::cluster::view::ClusterView;
use crate::lock::codec::{decode_command_ref, decode_snapshot};
use crate::lock::table::TableStats;
use crate::lock::ConnId;
use crate::messages::{Clock, FromLog, WriterMsg};
use crate::metrics::{LockMetrics, Metrics};
use crate::proto::frame::encode_response;
use crate::proto::Response;

use crate::raft::EntryKind;
use crate::replica::{LogRole, Replica, ReplicaOutput};

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

/// Everything the lock-table thread owns; [`LockThread::spawn`] starts it.
pub(crate) struct LockThread<L> {
    pub replica: Replica,
    /// Where the replica's commands go to be ordered.
    pub log: L,
    pub inbox: TableInbox,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<Clock>,
    /// In a cluster: where the replicated members are published.
    pub view: Option<Arc<ClusterView>>,
    /// Cleared when the thread ends, however it ends (for `/healthz`).
    pub alive: AliveFlag,
}

impl<L: LogLink + Send + 'static> LockThread<L> {
    /// Starts the thread (a vital one: its panic stops the node). It runs until `Stop`
    /// arrives or every sender is gone.
    pub(crate) fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        crate::invariant::spawn_vital("lock-table", move || self.run())
    }

    fn run(self) {
        let LockThread { mut replica, mut log, inbox, counters, metrics, clock, view, alive } = self;
        let _alive = alive;
        let clock = &*clock;
        let mut out = ReplicaOutput::default();
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
            let first = match inbox.recv_until(deadline) {
                Ok(msg) => Some(msg),
                Err(Empty::Timeout) => None,
                Err(Empty::Closed) => return,
            };
            batched = first.is_some();
            let mut next = first;
            let mut handled = 0;
            while let Some(msg) = next.take() {
                if let TableMsg::Log(FromLog::Committed(entries)) = &msg {
                    log.note_applied(entries.iter().map(|e| e.payload_bytes() as u64).sum());
                }
                handled += match &msg {
                    TableMsg::Requests { batch, .. } => batch.len(),
                    _ => 1,
                };
                if !handle(&mut replica, &mut conns, msg, clock, &mut out, view.as_deref()) {
                    return;
                }
                log.submit(&mut replica, clock, &mut out);
                if handled >= BATCH_MESSAGES_MAX {
                    break;
                }
                next = match inbox.try_recv() {
                    Ok(msg) => msg,
                    Err(_) => return,
                };
            }
            replica.tick(clock.now_ms(), Clock::unix_us(), &mut out);
            log.submit(&mut replica, clock, &mut out);
            // Publish before answering: a client that reads its answer and then asks for
            // STATUS must see the state that answer came from.
            publish(&replica, &counters);
            record(replica.table_stats(), &metrics.lock);
            if let Some(view) = &view {
                view.set_replicated(replica.state().members());
            }
            log.end_round();
            deliver(&mut conns, &mut batches, &mut out, &metrics);
            log.maybe_snapshot(&mut replica);
            log.end_round();
        }
    }
}

/// A standalone node leads its one-node log from the start, in a fresh fencing domain:
/// done before the thread starts, so that clients never see domain 0.
pub(crate) fn lead_alone(replica: &mut Replica, log: &mut impl LogLink, clock: &Clock, counters: &Counters) {
    let mut out = ReplicaOutput::default();
    let leader = LogRole::Leader { term: 1, noop_index: 0, new_domain: random_domain() };
    replica.on_role(leader, clock.apply_ms(), Clock::unix_us(), &mut out);
    log.submit(replica, clock, &mut out);
    publish(replica, counters);
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
        // A place in line is news before the answer, not the answer: the request stays
        // pending.
        let answer = !matches!(reply.response, Response::InLine { .. });
        if entry.direct.is_some() {
            if entry.batch.is_empty() {
                batches.touched.push(reply.conn);
            }
            encode_response(&mut entry.batch, reply.id, &reply.response);
            entry.count += usize::from(answer);
        } else {
            let _ = entry.replies.send(WriterMsg::Reply {
                id: reply.id,
                response: reply.response,
                counted: answer,
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
            replica.conn_closed(conn, clock.now_ms(), Clock::unix_us(), out);
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
    metrics.multi_key_grants.add(stats.multi_key_grants);
    metrics.holds.granted.add(stats.holds.granted);
    metrics.holds.queued.add(stats.holds.queued);
    metrics.holds.busy.add(stats.holds.busy);
    metrics.holds.refused.add(stats.holds.refused);
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
    counters.pooled_holds.store(replica.state().pooled_count() as u64, Ordering::Relaxed);
    counters.permits_in_use.store(replica.state().permits_in_use(), Ordering::Relaxed);
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
