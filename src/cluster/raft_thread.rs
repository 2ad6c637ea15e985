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

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use log::{debug, info, warn};
use mio::{Events, Interest, Poll, Token, Waker};

mod admin;

use super::net::PeerConn;
use super::peer::Established;
use super::view::ClusterView;
use super::DialerKit;
use crate::lock::codec::encode_command;
use crate::lock::Command;
use crate::messages::{Clock, FromLog, FromLogSink, StopHandover, ToRaft, WriterMsg};
use crate::proto::{ErrorCode, Response};
use crate::raft::{Raft, Role};
use crate::replica::ToLog;
use admin::AdminJob;

/// How often membership bookkeeping runs (dialers, replicated addresses).
const HOUSEKEEPING_MS: u64 = 200;
/// A member record not yet applied is proposed again after this long.
const RECORD_REPROPOSE_MS: u64 = 2_000;
/// `admin replace`: how long the new node may take to accept our connection…
const ADMIN_DIAL_MS: u64 = 5_000;
/// …to catch up as a learner…
const ADMIN_CATCH_UP_MS: u64 = 60_000;
/// …and how long the joint-consensus change may take to commit.
const ADMIN_COMMIT_MS: u64 = 15_000;
/// A learner is caught up when it is at most this many entries behind the commit index.
const CATCH_UP_LAG_MAX: u64 = 64;

/// Messages waiting for a link being dialed, per peer, at most…
pub const DIAL_QUEUE_MESSAGES_MAX: usize = 256;
/// …and bytes (one frame of the largest size fits).
pub const DIAL_QUEUE_BYTES_MAX: usize = crate::raft::wire::FRAME_LEN_MAX_BYTES;
/// A link to a node that is no longer wanted is kept until unused for this many
/// election timeouts (so a removed node can still be told).
const LINGER_ELECTION_TIMEOUTS: u64 = 2;
/// Messages dropped for want of a link: logged at most once per this many ms, with
/// the count of the others.
const DROP_LOG_MS: u64 = 10_000;

/// Messages dropped for want of a link (no link, no dial under way, or the dial
/// failed), and for a full send queue.
static DROPPED_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::every(DROP_LOG_MS);

/// `admin transfer-leader` requests waiting for their answer at most; more are refused.
const TRANSFER_WAITERS_MAX: usize = 64;

/// The waker's token; connections use the tokens above it.
pub const WAKER: Token = Token(0);
/// Shortest sleep of the loop when something is due (a guard against spinning on a
/// deadline that a turn did not consume).
const SLEEP_MIN: Duration = Duration::from_millis(1);

/// Asks the dialer of a peer to (re)connect.
pub type Redial = Sender<()>;

/// Messages for a peer whose link is being dialed, encoded, in order. Bounded in
/// count, bytes and time: they wait for the dial attempt under way only (dropped
/// when it fails, or once the oldest waited half an election timeout). Why not
/// longer: replaying a backoff's worth of stale heartbeats would renew the leases of
/// a leader long gone; Raft resends what matters.
#[derive(Default)]
struct DialQueue {
    frames: Vec<u8>,
    count: usize,
    since_ms: u64,
}

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

/// Notices a change of a node's active or committed configuration without copying
/// them every loop turn (they change a few times in a cluster's life).
#[derive(Default)]
struct ConfigWatch {
    seen: Option<(crate::raft::Membership, crate::raft::Membership)>,
}

impl ConfigWatch {
    /// True the first time and whenever either configuration differs from the last
    /// call's.
    fn changed(&mut self, raft: &Raft) -> bool {
        let (active, committed) = (raft.membership(), raft.committed_membership().1);
        if self.seen.as_ref().is_some_and(|(a, c)| a == active && c == committed) {
            return false;
        }
        self.seen = Some((active.clone(), committed.clone()));
        true
    }
}

/// Most proposals whose commit latency is being timed at once.
const TIMED_PROPOSALS_MAX: usize = 1 << 16;

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
            self.kit.waker.sleeping.store(true, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            // The last look (see `RaftWaker`): a message queued before the flag was
            // set woke nobody.
            if !self.rx.is_empty() {
                sleep = Duration::ZERO;
            }
            let polled = self.poll.poll(&mut events, Some(sleep));
            self.kit.waker.sleeping.store(false, Ordering::SeqCst);
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

    /// Reads and steps what `token`'s connection has brought; `drain`: read until the
    /// socket has nothing (see `PeerConn::read_available`).
    fn on_readable(&mut self, token: Token, now: u64, drain: bool) {
        let Some(peer) = self.conns.get(&token).map(|c| c.peer) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let mut open = match conn.read_available(drain) {
            Ok(open) => open,
            Err(e) => {
                debug!("peer {peer}: read: {e}");
                false
            }
        };
        let mut msgs = Vec::new();
        loop {
            match conn.next_message() {
                Ok(Some(msg)) => msgs.push(msg),
                Ok(None) => break,
                Err(e) => {
                    warn!("peer {peer}: bad frame ({e}); closing the connection");
                    open = false;
                    break;
                }
            }
        }
        // Judged message by message: a vote may make the next message of a stranger
        // acceptable, a leader heard may make it not.
        for msg in msgs {
            if self.may_step(peer, token, &msg) {
                self.raft.step(peer, msg, now);
            }
        }
        if !open {
            self.close(token);
        }
    }

    /// Only members speak Raft: a node that is not (or no longer) one may have a
    /// connection still open, but nothing it sends is stepped — except what a stranger
    /// may say (`super::stranger`), on the connection it opened. Nothing at all before
    /// a peer accepted one of our connections.
    fn may_step(&self, peer: u64, token: Token, msg: &crate::raft::Message) -> bool {
        if !self.admitted {
            return false;
        }
        if self.may_speak(peer) {
            return true;
        }
        let inbound = self.outbound.get(&peer) != Some(&token);
        inbound && self.is_stranger(peer) && super::stranger::stranger_may_step(&self.raft, peer, msg)
    }

    /// A node no configuration of ours names or ever named (see `super::stranger`).
    fn is_stranger(&self, peer: u64) -> bool {
        !self.ever_committed.contains(&peer)
            && super::stranger::is_stranger(&self.raft, peer, |id| self.may_speak(id))
    }

    /// The newest connection `peer` opened to us, if any: answers to a stranger go
    /// back on it.
    fn inbound_of(&self, peer: u64) -> Option<Token> {
        self.conns
            .iter()
            .filter(|(t, c)| c.peer == peer && self.outbound.get(&peer) != Some(*t))
            .map(|(t, _)| *t)
            .max()
    }

    fn close(&mut self, token: Token) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream_mut());
        if self.outbound.get(&conn.peer) == Some(&token) {
            self.outbound.remove(&conn.peer);
            self.view.set_link_up(conn.peer, false);
            debug!("peer {}: outbound connection closed", conn.peer);
            if let Some(tx) = self.redial.get(&conn.peer) {
                if tx.send(()).is_ok() {
                    self.dialing.insert(conn.peer);
                }
            }
        }
    }

    fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if let Err(e) = conn.flush() {
            debug!("peer {}: write: {e}", conn.peer);
            self.close(token);
        }
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
                        warn!("node {peer} says this node was removed before it received the configuration");
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
                Ok(ToRaft::StopHandover { reply }) => {
                    let _ = reply.send(self.hand_over_for_stop());
                }
                Ok(ToRaft::Dial { peer, started }) => self.on_dial(peer, started),
                Ok(ToRaft::Stop) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn register(&mut self, established: Established, outbound: bool, _now: u64) {
        let Established { tcp, tls, leftover, peer, .. } = established;
        if tcp.set_nonblocking(true).is_err() {
            return;
        }
        let token = Token(self.next_token);
        self.next_token += 1;
        let mut conn = PeerConn::new(peer.node_id, mio::net::TcpStream::from_std(tcp), tls, leftover);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self.poll.registry().register(conn.stream_mut(), token, interest) {
            warn!("peer {}: cannot watch the connection: {e}", peer.node_id);
            return;
        }
        // Addresses are never learned from a PEER HELLO, except the one a configured
        // peer named as the leader: that binds the vouched address to its node id, so a
        // joining node can answer the leader that adds it.
        let config_known = !self.raft.membership().all_nodes().is_empty();
        if !outbound && !config_known && self.view.is_vouched(peer.node_id, &peer.addr) {
            self.vouched_ids.insert(peer.node_id);
            self.view.learn_addr(peer.node_id, &peer.addr);
        }
        if outbound {
            self.admitted = true;
            if let Some(old) = self.outbound.insert(peer.node_id, token) {
                self.close_quietly(old);
            }
            self.dialing.remove(&peer.node_id);
            if let Some(queue) = self.waiting.remove(&peer.node_id) {
                if !conn.queue_encoded(&queue.frames) {
                    self.dropped(peer.node_id, queue.count, "its send queue is full");
                }
            }
            self.view.set_link_up(peer.node_id, true);
            info!("peer {}: connected to {}", peer.node_id, peer.addr);
        }
        self.conns.insert(token, conn);
        // Data may have arrived with the handshake already.
        self.on_readable(token, self.clock.now_ms(), true);
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

    fn close_quietly(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(conn.stream_mut());
        }
    }

    fn handle_ready(&mut self) {
        let ready = self.raft.ready();
        let now = self.clock.now_ms();
        // Dial on append: a configuration naming a new member was appended (or
        // received): dial it now, so the messages below wait for that link instead of
        // being lost until the next housekeeping.
        self.dial_members_if_changed();
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
            warn!("this node is no longer a member of the cluster");
        }
        self.publish();
    }

    /// Sends `msg` to `to`: on our link to it, or into the queue of the dial under way
    /// (starting one if we know its address and no dialer runs), or drops it and says
    /// so (rate-limited). Returns the link's token when something was queued on it.
    fn route(&mut self, to: u64, msg: &crate::raft::Message, now: u64) -> Option<Token> {
        self.last_used.insert(to, now);
        if let Some(&token) = self.outbound.get(&to) {
            let conn = self.conns.get_mut(&token)?;
            if conn.queue(msg) {
                return Some(token);
            }
            self.dropped(to, 1, "its send queue is full");
            return None;
        }
        if !self.redial.contains_key(&to) && !self.dial(to) {
            // A stranger asking for our vote: answer on the connection it opened
            // (never dial an address it claims).
            if let Some(token) = self.inbound_of(to) {
                let conn = self.conns.get_mut(&token)?;
                if conn.queue(msg) {
                    return Some(token);
                }
            }
            self.dropped(to, 1, "no link and no known address");
            return None;
        }
        if !self.dialing.contains(&to) {
            self.dropped(to, 1, "no link (the dialer is backing off)");
            return None;
        }
        let queue =
            self.waiting.entry(to).or_insert_with(|| DialQueue { since_ms: now, ..Default::default() });
        let before = queue.frames.len();
        let fits = queue.count < DIAL_QUEUE_MESSAGES_MAX
            && crate::raft::wire::encode(msg, &mut queue.frames).is_ok()
            && queue.frames.len() <= DIAL_QUEUE_BYTES_MAX;
        if fits {
            queue.count += 1;
        } else {
            queue.frames.truncate(before);
            self.dropped(to, 1, "the queue for its link being dialed is full");
        }
        None
    }

    /// Starts a dialer for `id` if its address is known (configuration, member
    /// records, `admin replace`; never a PEER HELLO). True if one runs now.
    fn dial(&mut self, id: u64) -> bool {
        if id == self.raft.id() {
            return false;
        }
        if self.redial.contains_key(&id) {
            return true;
        }
        let addr = self.view.addr_of(id);
        if addr.is_empty() {
            return false;
        }
        match self.kit.spawn(id, &addr) {
            Ok(tx) => {
                self.redial.insert(id, tx);
                self.dialing.insert(id);
                true
            }
            Err(e) => {
                warn!("cannot start a dialer for node {id}: {e}");
                false
            }
        }
    }

    /// A dialer's attempt started or failed. A failed attempt drops what waited for it.
    fn on_dial(&mut self, peer: u64, started: bool) {
        if started {
            if !self.outbound.contains_key(&peer) && self.redial.contains_key(&peer) {
                self.dialing.insert(peer);
            }
            return;
        }
        self.dialing.remove(&peer);
        if let Some(queue) = self.waiting.remove(&peer) {
            self.dropped(peer, queue.count, "the dial failed");
        }
    }

    /// Drops queues whose oldest message waited half an election timeout.
    fn expire_waiting(&mut self, now: u64) {
        if self.waiting.is_empty() {
            return;
        }
        let age_max = self.raft.config().election_ms / 2;
        let expired: Vec<u64> =
            self.waiting.iter().filter(|(_, q)| now >= q.since_ms + age_max).map(|(id, _)| *id).collect();
        for id in expired {
            if let Some(queue) = self.waiting.remove(&id) {
                self.dropped(id, queue.count, "its link took too long to dial");
            }
        }
    }

    fn dropped(&self, to: u64, count: usize, why: &str) {
        if count > 0 {
            crate::warn_limited!(DROPPED_LOG, "{count} message(s) to node {to} dropped: {why}");
        }
    }

    /// Dials the members of the active and committed configurations that have no
    /// dialer yet, if those changed since the last call.
    fn dial_members_if_changed(&mut self) {
        if !self.dial_watch.changed(&self.raft) {
            return;
        }
        let mut members = self.members();
        members.extend(self.raft.committed_membership().1.all_nodes());
        if members == self.dialed_for {
            return;
        }
        for &id in &members {
            self.dial(id);
        }
        self.dialed_for = members;
    }

    /// The index of the first entry of `term` in the leader's log: its no-op.
    fn noop_index(&self, term: u64) -> u64 {
        let mut index = self.raft.last_index();
        while index > self.raft.first_index() && self.raft.term_at(index - 1) == Some(term) {
            index -= 1;
        }
        index
    }

    fn publish(&mut self) {
        self.view.publish(&self.raft);
        // What follows depends only on the configurations (and an admin change under
        // way): recomputed when one of them changed, not every turn.
        let adding = self.admin.as_ref().map(|job| job.new_node());
        let configs_changed = self.admission_watch.changed(&self.raft);
        if !configs_changed && adding == self.admission_adding {
            return;
        }
        self.admission_adding = adding;
        // Every configuration committed in the log this node holds (a node that caught up
        // in one batch never saw the earlier ones as "the" committed configuration).
        for config in self.raft.committed_configs() {
            self.ever_committed.extend(config.all_nodes());
        }
        let (_, committed) = self.raft.committed_membership();
        let mut members = self.raft.membership().all_nodes();
        members.extend(committed.all_nodes());
        members.extend(self.admin.as_ref().map(|job| job.new_node()));
        let retired: BTreeSet<u64> = self.ever_committed.difference(&members).copied().collect();
        let config_known = !members.is_empty();
        self.view.set_admission(members, retired, config_known);
    }

    /// May `peer`'s messages be stepped? Members of the active or committed
    /// configuration and the learner being added may speak; before this node knows any
    /// configuration, its configured peers and the leader they named.
    fn may_speak(&self, peer: u64) -> bool {
        self.view.may_speak(peer, |id| self.vouched_ids.contains(&id))
    }
}

/// An `admin transfer-leader` waiting for another node to lead.
struct TransferWait {
    id: u32,
    reply: Sender<WriterMsg>,
    /// The voter leadership is being handed to.
    to: u64,
    /// Answered by then whatever happened (the core abandons a hand-over after an
    /// election timeout; this leaves the target one more to win its election).
    deadline_ms: u64,
}

impl TransferWait {
    fn answer(&self, response: Response) {
        // The reader counted the request as pending.
        let _ = self.reply.send(WriterMsg::Reply { id: self.id, response, counted: true });
    }
}

fn refused(message: String) -> Response {
    Response::Error { code: ErrorCode::Refused, message }
}

impl RaftLoop {
    /// `admin transfer-leader`: asks the core to hand leadership over. Requests
    /// meanwhile wait on the lock side (`FromLog::Handover`), and are answered or
    /// redirected when the hand-over ends; `reply` is answered then (`step_transfers`).
    fn start_transfer(&mut self, target: Option<u64>, reply: (u32, Sender<WriterMsg>), now: u64) {
        let (id, reply) = reply;
        let answer = |response: Response| {
            let _ = reply.send(WriterMsg::Reply { id, response, counted: true });
        };
        let me = self.raft.id();
        let to = match self.raft.transfer_leader(target) {
            Ok(to) => to,
            Err(crate::raft::RaftError::NotLeader { .. }) => {
                return answer(Response::Moved { leader: self.leader_addr() });
            }
            Err(crate::raft::RaftError::HandingOver) => {
                return answer(refused(format!(
                    "node {me} is leaving the configuration and hands leadership over by itself when \
                     that change commits"
                )));
            }
            Err(e) => {
                let why = match target {
                    Some(id) => format!("cannot hand leadership to node {id}: {e}"),
                    None => format!("cannot hand leadership over: {e}"),
                };
                return answer(refused(why));
            }
        };
        info!("handing leadership over to node {to}");
        if to == me {
            return answer(leader_text(&self.view.members_text(&[me])));
        }
        if self.transfers.len() >= TRANSFER_WAITERS_MAX {
            return answer(refused("too many leadership transfers waiting".into()));
        }
        let deadline_ms = now + 2 * self.raft.config().election_ms;
        self.transfers.push(TransferWait { id, reply, to, deadline_ms });
    }

    /// This node's stop (SIGTERM): hands leadership to the best voter that could take
    /// over — heard within an election timeout over an outbound link that is up — or
    /// starts nothing when none could (why: a hand-over to a node that cannot answer
    /// only delays the stop by an election timeout, then fails).
    fn hand_over_for_stop(&mut self) -> StopHandover {
        if !self.raft.is_leader() {
            return StopHandover::NotLeader;
        }
        let Some(to) = self.raft.reachable_successor(|id| self.outbound.contains_key(&id)) else {
            return StopHandover::NoneReachable;
        };
        match self.raft.transfer_leader(Some(to)) {
            Ok(to) => {
                info!("handing leadership over to node {to} before stopping");
                StopHandover::Started(to)
            }
            Err(crate::raft::RaftError::NotLeader { .. }) => StopHandover::NotLeader,
            Err(crate::raft::RaftError::HandingOver) => StopHandover::Leaving,
            Err(e) => StopHandover::Refused(format!("cannot hand leadership to node {to}: {e}")),
        }
    }

    /// Answers the `admin transfer-leader` requests whose hand-over ended.
    fn step_transfers(&mut self, now: u64) {
        if self.transfers.is_empty() {
            return;
        }
        let me = self.raft.id();
        let response = match self.raft.leader_id() {
            Some(leader) if leader != me => leader_text(&self.view.members_text(&[leader])),
            Some(_) if !self.raft.handing_over() => {
                let to = self.transfers[0].to;
                refused(format!(
                    "node {to} did not take over within an election timeout; node {me} still leads"
                ))
            }
            _ if self.transfers.iter().any(|t| now > t.deadline_ms) => {
                refused(format!("node {me} stopped leading and no new leader is known yet"))
            }
            _ => return,
        };
        for wait in self.transfers.drain(..) {
            wait.answer(response.clone());
        }
    }
}

/// The answer to a completed `admin transfer-leader`: the leader as `ID@ADDR`.
fn leader_text(leader: &str) -> Response {
    Response::Status { text: format!("leader={leader}\n") }
}

impl RaftLoop {
    fn members(&self) -> std::collections::BTreeSet<u64> {
        let m = self.raft.membership();
        m.voters.iter().chain(m.outgoing.iter()).chain(m.learners.iter()).copied().collect()
    }

    fn leader_addr(&self) -> String {
        self.raft.leader_id().map(|id| self.view.addr_of(id)).unwrap_or_default()
    }

    /// Keeps one dialer per member (and none for nodes that left), and has the
    /// leader record every member's address in the replicated state.
    fn housekeeping(&mut self, now: u64) {
        self.view.publish_autopilot(&self.raft);
        let me = self.raft.id();
        let members = self.members();
        // Dial every member, and the leader even when this node's log does not list it
        // yet (a learner catching up must be able to answer it).
        let mut wanted = members.clone();
        wanted.extend(self.raft.leader_id());
        // A joining node that knows no configuration dials the leader a member named
        // (`join.rs`): the leader accepts that link once it adds this node, and a link
        // of our own is what lets this node step anything (`admitted`).
        if members.is_empty() {
            for (id, addr) in self.view.vouched_leaders() {
                self.view.learn_addr(id, &addr);
                wanted.insert(id);
            }
        }
        for &id in wanted.iter().filter(|id| **id != me) {
            self.dial(id);
        }
        // A joining node that has not received a configuration yet keeps the dialers
        // of its configured peers: they are how it finds the cluster.
        let joining = self.raft.membership().voters.is_empty();
        // Connections from nodes that may no longer speak (removed, or never members)
        // are closed; they are refused at their next handshake. Our own links to them
        // linger (below).
        // A stranger's connection stays while it may still be heard: this node has no
        // live leader, or follows it.
        let stranger_heard = |peer: u64| {
            self.is_stranger(peer) && (!self.raft.has_live_leader() || self.raft.leader_id() == Some(peer))
        };
        let silenced: Vec<Token> = self
            .conns
            .iter()
            .filter(|(t, c)| {
                self.outbound.get(&c.peer) != Some(*t) && !self.may_speak(c.peer) && !stranger_heard(c.peer)
            })
            .map(|(t, _)| *t)
            .collect();
        for token in silenced {
            self.close_quietly(token);
        }
        let pending_new = self.admin.as_ref().map(|job| job.new_node());
        let linger_ms = LINGER_ELECTION_TIMEOUTS * self.raft.config().election_ms;
        let in_use = |id: &u64| self.last_used.get(id).is_some_and(|t| now < t + linger_ms);
        let gone: Vec<u64> = self
            .redial
            .keys()
            .copied()
            .filter(|id| !joining && !wanted.contains(id) && Some(*id) != pending_new && !in_use(id))
            .collect();
        // Bounded: only peers with a dialer, or talked to lately (strangers answered on
        // their own connections have no dialer).
        let redial = &self.redial;
        self.last_used.retain(|id, t| redial.contains_key(id) || now < *t + linger_ms);
        for id in gone {
            // Dropping the sender ends the dialer; the connection goes too.
            self.redial.remove(&id);
            self.dialing.remove(&id);
            self.last_used.remove(&id);
            if let Some(queue) = self.waiting.remove(&id) {
                self.dropped(id, queue.count, "the node left the cluster");
            }
            if let Some(token) = self.outbound.remove(&id) {
                self.close_quietly(token);
            }
            self.view.set_link_up(id, false);
            if self.retired.insert(id) {
                info!("node {id} left the cluster");
            }
        }
        if self.raft.is_leader() && self.raft.commit_index() >= self.noop_index(self.raft.term()) {
            for id in members.iter().copied().chain(std::iter::once(me)) {
                self.record_member(id, now);
            }
        }
    }

    /// Leader: records member `id` (its process incarnation and address) in the log
    /// when the log has no full record of it yet. Every member then refuses that NodeId
    /// from any other process, including members that join later.
    fn record_member(&mut self, id: u64, now: u64) {
        let incarnation =
            if id == self.raft.id() { Some(self.kit.incarnation()) } else { self.view.seen_incarnation(id) };
        let recorded = self.view.record_of(id);
        let complete = recorded.as_ref().is_some_and(|r| r.incarnation != 0 || incarnation.is_none());
        let recent = self.record_proposed.get(&id).is_some_and(|t| now < t + RECORD_REPROPOSE_MS);
        if complete || recent {
            return;
        }
        let addr = self.view.addr_of(id);
        if crate::proto::addr::check_client_addr(&addr).is_err() {
            return;
        }
        self.record_proposed.insert(id, now);
        self.propose_command(&Command::SetMember { node: id, incarnation: incarnation.unwrap_or(0), addr });
    }

    fn propose_command(&mut self, command: &Command) {
        let mut data = Vec::with_capacity(64);
        encode_command(&mut data, command);
        let _ = self.raft.propose(data);
    }
}

/// Makes the waker for a loop's `Poll`.
pub fn waker(poll: &Poll) -> std::io::Result<Arc<RaftWaker>> {
    Ok(Arc::new(RaftWaker { waker: Waker::new(poll.registry(), WAKER)?, sleeping: AtomicBool::new(false) }))
}

/// How other threads wake the Raft loop after queueing a `ToRaft` for it.
///
/// Why not always through the event fd: under load the lock-table thread ends a round
/// (and would write the event fd) mostly while the loop is awake anyway, and each
/// write is a system call that also makes the loop's next `epoll_wait` return at once.
/// The loop says when it may sleep (`sleeping`, set before it looks at its queue a
/// last time); a waker writes the event fd only then. Either the loop sees the new
/// message in that last look, or the waker sees the flag (SeqCst fences on both
/// sides).
pub struct RaftWaker {
    waker: Waker,
    sleeping: AtomicBool,
}

impl RaftWaker {
    /// Wakes the loop if it sleeps or is about to; call after queueing its message.
    pub fn wake(&self) -> std::io::Result<()> {
        // The fence pairs with the loop's (see `run`), whatever orderings the channel
        // uses inside. Every waker that sees the flag writes — not only the first: a
        // first waker preempted between its look and its write would otherwise hold
        // the loop asleep for everyone; the loop clears the flag itself.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            return self.waker.wake();
        }
        Ok(())
    }
}
