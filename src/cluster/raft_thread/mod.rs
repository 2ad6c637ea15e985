//! The Raft thread: a mio event loop around the pure Raft core.
//!
//! It owns the core and every established peer connection. Each loop turn it reads
//! what arrived (peer frames, requests from the lock-table thread, new connections
//! from the dialer and acceptor threads), ticks the core, then handles one `Ready`:
//! sends messages, and passes commits, snapshots, read confirmations and role changes
//! to the lock-table thread. Everything proposed during a turn leaves in one
//! AppendEntries per follower (group commit). Between turns it sleeps until an event
//! or the next deadline (`next_wake_ms`): an idle node turns a few times per
//! heartbeat period, not on a fixed tick.
//!
//! This file holds the loop and its per-turn steps (`run`, `drain_requests`,
//! `handle_ready`). The rest of `impl RaftLoop` is split by concept, as `impl Raft` is
//! across src/raft/: `links` (peer connections, routing, dialing), `admission` (whose
//! messages are stepped), `transfer` (leadership hand-overs), `admin` (membership
//! changes) and `housekeeping` (dialers per member, member records). Why the leaves:
//! everything `RaftLoop`'s fields or this file name (`limits`, `dial_queue`,
//! `config_watch`, `transfer_wait`, `admin_job`) lives in files that import nothing
//! from here, so imports run one way: the concept files name `RaftLoop`, nothing they
//! hold is named back.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};
use log::{info, warn};
use mio::{Events, Poll, Token};

mod admin;
mod admin_job;
mod admission;
mod config_watch;
mod dial_queue;
mod housekeeping;
mod limits;
mod links;
mod transfer;
mod transfer_wait;

use super::dialer::{DialerKit, Redial};
use super::net::PeerConn;
use super::view::ClusterView;
use crate::lock::codec::encode_command;
use crate::messages::{Clock, FromLog, FromLogSink, ToRaft, WriterMsg};
use crate::raft::{Raft, Role};
pub use crate::raft_waker::{waker, RaftWaker, WAKER};
use crate::replica::ToLog;
use admin_job::AdminJob;
use config_watch::ConfigWatch;
use dial_queue::DialQueue;
pub use limits::{DIAL_QUEUE_BYTES_MAX, DIAL_QUEUE_MESSAGES_MAX};
use limits::{HOUSEKEEPING_MS, SLEEP_MIN, TIMED_PROPOSALS_MAX};
use transfer_wait::TransferWait;

pub struct RaftLoop {
    pub raft: Raft,
    pub poll: Poll,
    pub rx: Receiver<ToRaft>,
    pub to_table: FromLogSink,
    pub view: Arc<ClusterView>,
    pub redial: HashMap<u64, Redial>,
    pub clock: Arc<Clock>,
    conns: HashMap<Token, PeerConn>,
    outbound: HashMap<u64, Token>,
    next_token: usize,
    kit: DialerKit,
    admin: Option<AdminJob>,
    /// JOINs add learners while fewer than this many exist (`TICKETING_STANDBYS_MAX`).
    pub standbys_max: usize,
    /// `admin transfer-leader` requests waiting for the hand-over to end.
    transfers: Vec<TransferWait>,
    /// This node's stop (SIGTERM) began then (ms), with these voters in force: who
    /// took its place is told when it is removed.
    stop_began: Option<(u64, BTreeSet<u64>)>,
    /// Peers a dial attempt is under way to (no link yet).
    dialing: BTreeSet<u64>,
    /// Messages waiting for those attempts.
    waiting: HashMap<u64, DialQueue>,
    /// When a message was last sent to each peer: a link to a node that left is kept
    /// until unused for `LINGER_ELECTION_TIMEOUTS`.
    last_used: HashMap<u64, u64>,
    /// The nodes of the configuration the dialers were last set up for: a change
    /// (an appended configuration naming a new member) dials at once.
    dialed_for: BTreeSet<u64>,
    /// Node ids that were members and left: never accepted as new members again.
    retired: BTreeSet<u64>,
    /// Every node of every committed configuration seen: those no longer in any
    /// configuration are refused with a removal notice.
    ever_committed: BTreeSet<u64>,
    /// Nodes admitted before this node knew a configuration because a configured peer
    /// named them as the leader (a joining node's first contact with its leader).
    vouched_ids: BTreeSet<u64>,
    /// When a member record was last proposed for a node (ms), so it is not repeated
    /// each turn.
    record_proposed: HashMap<u64, u64>,
    /// Keeps appends in the lock side's order across a hand-over (see `AppendGate`).
    gate: crate::replica::AppendGate,
    last_housekeeping_ms: u64,
    /// False until a peer accepted our own connection. Why: a process restarted under
    /// a used NodeId has lost its vote; peers refuse its connections, and until one
    /// accepts, it must not step any message (it could vote twice in a term).
    admitted: bool,
    /// Entries this leader proposed and has not seen committed, with when (for the
    /// commit latency histogram; empty without metrics).
    proposed: std::collections::VecDeque<(u64, std::time::Instant)>,
    /// Reused to encode each proposed command (the log keeps its own shared copy).
    encoded: Vec<u8>,
    /// The configurations and the admin change the admission was last computed from
    /// (`publish`), and the configurations the dialers were (`dial_members_if_changed`).
    admission_watch: ConfigWatch,
    admission_adding: Option<u64>,
    dial_watch: ConfigWatch,
}

impl RaftLoop {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        raft: Raft,
        poll: Poll,
        rx: Receiver<ToRaft>,
        to_table: FromLogSink,
        view: Arc<ClusterView>,
        redial: HashMap<u64, Redial>,
        clock: Arc<Clock>,
        kit: DialerKit,
    ) -> RaftLoop {
        RaftLoop {
            raft,
            poll,
            rx,
            to_table,
            view,
            redial,
            clock,
            conns: HashMap::new(),
            outbound: HashMap::new(),
            next_token: 1,
            kit,
            admin: None,
            standbys_max: crate::config::STANDBYS_MAX_DEFAULT as usize,
            transfers: Vec::new(),
            stop_began: None,
            dialing: BTreeSet::new(),
            waiting: HashMap::new(),
            last_used: HashMap::new(),
            dialed_for: BTreeSet::new(),
            retired: Default::default(),
            ever_committed: Default::default(),
            vouched_ids: Default::default(),
            record_proposed: HashMap::new(),
            gate: Default::default(),
            proposed: Default::default(),
            encoded: Vec::with_capacity(512),
            admission_watch: ConfigWatch::default(),
            admission_adding: None,
            dial_watch: ConfigWatch::default(),
            last_housekeeping_ms: 0,
            admitted: false,
        }
    }

    /// Runs until `Stop` arrives or the lock-table side is gone.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        // The configured peers' dialers were started with their first attempt.
        self.dialing = self.redial.keys().copied().collect();
        self.publish();
        // The first turn runs at once; then the loop sleeps until the next deadline
        // (`next_wake_ms`) or an event.
        let mut sleep = Duration::ZERO;
        loop {
            self.kit.waker.set_sleeping(true);
            std::sync::atomic::fence(Ordering::SeqCst);
            // The last look (see `RaftWaker`): a message queued before the flag was
            // set woke nobody.
            if !self.rx.is_empty() {
                sleep = Duration::ZERO;
            }
            let polled = self.poll.poll(&mut events, Some(sleep));
            self.kit.waker.set_sleeping(false);
            if let Err(e) = polled {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    warn!("peer event loop: {e}");
                }
            }
            let now = self.clock.now_ms();
            // Why before the events: requests handled this turn (a transfer, an admin
            // change) stamp their times from the core's clock, which may not have been
            // ticked since the loop fell asleep.
            self.raft.advance_clock(now);
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(token, now, event.is_read_closed() || event.is_error());
                }
                if event.is_writable() {
                    self.flush(token);
                }
            }
            if !self.drain_requests(now) {
                return;
            }
            self.raft.tick(self.clock.now_ms());
            self.handle_ready();
            let now = self.clock.now_ms();
            if now >= self.last_housekeeping_ms + HOUSEKEEPING_MS {
                self.last_housekeeping_ms = now;
                self.housekeeping(now);
            }
            self.step_admin(now);
            self.step_transfers(now);
            let wake = self.clock.instant_of(self.next_wake_ms());
            sleep = wake.saturating_duration_since(std::time::Instant::now()).max(SLEEP_MIN);
        }
    }

    /// When the loop must turn again if no event comes first: the core's next timer
    /// (heartbeat, commit notice, election, CheckQuorum, lease end, transfer), the
    /// next housekeeping, the expiry of a queue waiting for a dial, and the deadlines
    /// of an `admin replace` and of `admin transfer-leader` requests. Everything else
    /// the loop does follows an event (a frame, a request, a connection, a dial
    /// attempt), each of which wakes it.
    fn next_wake_ms(&self) -> u64 {
        let housekeeping = self.last_housekeeping_ms + HOUSEKEEPING_MS;
        let age_max = self.raft.config().election_ms / 2;
        let dial_queues = self.waiting.values().map(|q| q.since_ms + age_max);
        // These two are judged with `now > deadline`.
        let admin = self.admin.as_ref().map(|job| job.deadline_ms() + 1);
        let transfers = self.transfers.iter().map(|t| t.deadline_ms + 1);
        dial_queues
            .chain(admin)
            .chain(transfers)
            .chain(self.raft.next_deadline_ms())
            .fold(housekeeping, u64::min)
    }

    /// Handles everything queued for this thread; false means stop.
    fn drain_requests(&mut self, now: u64) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(ToRaft::Log(ToLog::Append { seq, term, command })) => {
                    let msg = if !self.raft.is_leader() || self.raft.term() != term {
                        FromLog::Rejected { seq }
                    } else if !self.gate.admit(seq) {
                        // An earlier command is deferred: this one waits too, so the log
                        // takes them in the order the lock side planned them.
                        self.gate.deferred(seq);
                        FromLog::Deferred { seq, term, command }
                    } else {
                        self.encoded.clear();
                        encode_command(&mut self.encoded, &command);
                        match self.raft.propose(self.encoded.as_slice()) {
                            Ok(index) => {
                                self.gate.appended(seq);
                                if self.view.metrics().is_some() && self.proposed.len() < TIMED_PROPOSALS_MAX
                                {
                                    self.proposed.push_back((index, std::time::Instant::now()));
                                }
                                FromLog::Appended { seq, index, term }
                            }
                            Err(crate::raft::RaftError::HandingOver) => {
                                self.gate.deferred(seq);
                                FromLog::Deferred { seq, term, command }
                            }
                            Err(_) => FromLog::Rejected { seq },
                        }
                    };
                    (self.to_table)(msg);
                }
                Ok(ToRaft::Log(ToLog::ReadIndex { ctx })) => {
                    if self.raft.read_index(ctx).is_err() {
                        (self.to_table)(FromLog::ReadFailed { ctx });
                    }
                }
                Ok(ToRaft::Compact { index, data }) => {
                    self.raft.compact(index, data);
                }
                Ok(ToRaft::Conn { established, outbound }) => self.register(established, outbound, now),
                Ok(ToRaft::RemovedBy { peer }) => {
                    // Definitive: a committed configuration without us (NodeIds are never
                    // reused, so we cannot be added back).
                    let term = self.raft.term();
                    self.raft.step(peer, crate::raft::Message::Removed { term, config_index: u64::MAX }, now);
                    // A joining node removed before it ever received a configuration (added
                    // as a standby, then silent past the autopilot's threshold) has no
                    // membership for the core to judge: it stops all the same, and its
                    // process manager starts a fresh one under a new id.
                    if self.raft.membership().all_nodes().is_empty()
                        && !self.view.removed.swap(true, Ordering::SeqCst)
                    {
                        info!("node {peer} says this node was removed before it received the configuration");
                    }
                }
                Ok(ToRaft::Admin { id, old, new, addr, reply }) => {
                    self.start_admin(AdminJob::replace(id, old, new, addr, reply), now)
                }
                Ok(ToRaft::Join { id, node, addr, reply }) => {
                    self.start_admin(AdminJob::join(id, node, addr, reply), now)
                }
                Ok(ToRaft::Found { id, voters, reply }) => {
                    let response = self.found(&voters, now);
                    let _ = reply.send(WriterMsg::Reply { id, response, counted: true });
                }
                Ok(ToRaft::Transfer { target, reply }) => self.start_transfer(target, reply, now),
                Ok(ToRaft::Stopping { leave, reply }) => {
                    self.begin_stop(leave, now);
                    // Published first: the stopping thread reads what to wait for.
                    self.publish();
                    let _ = reply.send(());
                }
                Ok(ToRaft::StopHandover { reply }) => {
                    let answer = self.hand_over_for_stop();
                    // Published first: the stopping thread watches the hand-over.
                    self.publish();
                    let _ = reply.send(answer);
                }
                Ok(ToRaft::Dial { peer, started }) => self.on_dial(peer, started),
                Ok(ToRaft::Stop) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    /// Observes the commit latency of proposals that committed; forgets them all when
    /// this node no longer leads (their entries may never commit).
    fn time_commits(&mut self) {
        if !self.raft.is_leader() {
            self.proposed.clear();
            return;
        }
        let commit = self.raft.commit_index();
        while let Some(&(index, since)) = self.proposed.front() {
            if index > commit {
                break;
            }
            self.proposed.pop_front();
            if let Some(m) = self.view.metrics() {
                m.raft.commit_seconds.observe_us(since.elapsed().as_micros() as u64);
            }
        }
    }

    fn handle_ready(&mut self) {
        let ready = self.raft.ready();
        let now = self.clock.now_ms();
        // Dial on append: a configuration naming a new member was appended (or
        // received): dial it now, so the messages below wait for that link instead of
        // being lost until the next housekeeping.
        self.dial_members_if_changed();
        // A new leader's first messages wait for the links being dialed now, rather
        // than being dropped while a dialer backs off.
        if ready.role_changed.is_some_and(|c| c.role == Role::Leader) {
            self.dial_now_unlinked();
        }
        let mut touched = Vec::new();
        for (to, msg) in &ready.messages {
            if let Some(token) = self.route(*to, msg, now) {
                touched.push(token);
                if let (crate::raft::Message::InstallSnapshot { offset, data, .. }, Some(m)) =
                    (msg, self.view.metrics())
                {
                    if *offset == 0 {
                        m.raft.snapshots_sent.inc();
                    }
                    m.raft.snapshot_bytes_sent.add(data.len() as u64);
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for token in touched {
            self.flush(token);
        }
        self.expire_waiting(now);
        self.time_commits();
        if let Some(snapshot) = ready.snapshot {
            if let Some(m) = self.view.metrics() {
                m.raft.snapshots_installed.inc();
                m.raft.snapshot_bytes_installed.add(snapshot.data.len() as u64);
            }
            let msg = FromLog::Snapshot { index: snapshot.meta.index, data: snapshot.data };
            (self.to_table)(msg);
        }
        if !ready.committed.is_empty() {
            (self.to_table)(FromLog::Committed(ready.committed));
        }
        for (ctx, index) in ready.read_states {
            (self.to_table)(FromLog::ReadReady { ctx, index });
        }
        if let Some(change) = ready.role_changed {
            let leading = (change.role == Role::Leader).then(|| (change.term, self.noop_index(change.term)));
            // Until a leader is known, the node a hand-over went to is the best hint.
            let leader_addr =
                change.leader.or(self.raft.handed_to()).map(|id| self.view.addr_of(id)).unwrap_or_default();
            info!(
                "role {:?} in term {} (leader {})",
                change.role,
                change.term,
                change.leader.map_or("unknown".to_string(), |l| l.to_string())
            );
            (self.to_table)(FromLog::Role { leading, leader_addr });
            self.gate.reset();
        }
        if let Some(active) = ready.handover {
            info!("hand-over of leadership {}", if active { "started" } else { "ended" });
            (self.to_table)(FromLog::Handover(active));
        }
        for event in &ready.autopilot {
            self.log_autopilot(event);
        }
        if ready.removed && !self.view.removed.swap(true, Ordering::SeqCst) {
            self.log_removal(now);
        }
        self.publish();
    }

    /// The index of the first entry of `term` in the leader's log: its no-op.
    fn noop_index(&self, term: u64) -> u64 {
        let mut index = self.raft.last_index();
        while index > self.raft.first_index() && self.raft.term_at(index - 1) == Some(term) {
            index -= 1;
        }
        index
    }
}
