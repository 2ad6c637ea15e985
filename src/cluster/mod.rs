//! Cluster mode: the Raft thread (a mio loop), the peer port, and the threads that
//! dial and accept peer connections. The lock side is the same lock-table thread as
//! standalone, fed by the Raft thread instead of a loopback log.

pub mod explain;
pub mod join;
pub mod net;
pub mod peer;
pub mod raft_thread;
pub mod stranger;
pub mod view;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use log::{debug, info};

use crate::config::{ClusterConfig, ClusterState, Config};
use crate::messages::{Clock, DomainSource, FromLogSink, StopHandover, ToRaft};
use crate::proto::handshake::Welcome;
use crate::raft::{Raft, RaftConfig};
use peer::{refusal, PeerError, PeerHello};
use raft_thread::RaftLoop;
use view::{ClusterView, NotAdmitted};

/// A peer that stays unreachable is logged once, then once per this many milliseconds.
const DIAL_FAILURE_LOG_MS: u64 = 60_000;
/// Dial retries back off from this delay…
const DIAL_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// …doubling up to this one.
const DIAL_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What the rest of the server needs from a running cluster side.
pub struct ClusterHandles {
    pub view: Arc<ClusterView>,
    pub raft_tx: Sender<ToRaft>,
    pub waker: Arc<crate::cluster::raft_thread::RaftWaker>,
    pub peer_addr: SocketAddr,
    pub threads: Vec<JoinHandle<()>>,
    /// Set when this node must not run (e.g. its NodeId was already used).
    pub fatal: Arc<Mutex<Option<String>>>,
    stopping: Arc<AtomicBool>,
    /// Raft timing in force (ms): bounds the hand-over before a stop.
    election_ms: u64,
    heartbeat_ms: u64,
}

/// After leadership moved on a stop, the node lingers this long as a follower so that
/// the answers of what it committed leave and its clients are redirected (`M`) rather
/// than cut off.
const STOP_LINGER: Duration = Duration::from_millis(200);

impl ClusterHandles {
    /// On a stop (SIGTERM): if this node leads, hands leadership to a voter that can
    /// take over and waits until another node leads, at most an election timeout and
    /// two heartbeats from the signal (the core abandons a hand-over after an election
    /// timeout); then lingers [`STOP_LINGER`]. Requests arriving meanwhile wait on the
    /// lock side and are then redirected; none is failed for the stop's sake. When no
    /// voter was heard within an election timeout over a live link, it does not wait
    /// for a hand-over that cannot happen. Logs what happened; true if leadership moved.
    pub fn hand_over_before_stop(&self) -> bool {
        let me_leads = |facts: &view::RaftFacts| facts.role == Some(crate::raft::Role::Leader);
        let facts = self.view.facts();
        if !me_leads(&facts) {
            return false;
        }
        // While this node leads, the leader named is itself.
        let me = facts.leader_id;
        let started = std::time::Instant::now();
        let within = Duration::from_millis(self.election_ms + 2 * self.heartbeat_ms);
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.raft_tx.send(ToRaft::StopHandover { reply: tx }).is_err() {
            return false;
        }
        let _ = self.waker.wake();
        let to = match rx.recv_timeout(within) {
            Ok(StopHandover::Started(to)) => Some(to),
            // Its own removal's hand-over is under way: wait for it the same way.
            Ok(StopHandover::Leaving) => None,
            Ok(StopHandover::NotLeader) => return false,
            Ok(StopHandover::NoneReachable) => {
                info!("no follower reachable to hand leadership to; stopping without a hand-over");
                return false;
            }
            Ok(StopHandover::Refused(why)) => {
                info!("leadership not passed on before stopping: {why}");
                return false;
            }
            Err(_) => {
                info!(
                    "the Raft thread did not answer within {} ms; stopping without a hand-over",
                    within.as_millis()
                );
                return false;
            }
        };
        // Moved when another node leads. Why not as soon as this node stops leading: it
        // also steps down when it loses its quorum (the target may have died since),
        // and that hands nothing over.
        let moved = loop {
            let facts = self.view.facts();
            if !me_leads(&facts) && facts.leader_id.is_some() && facts.leader_id != me {
                break true;
            }
            if started.elapsed() >= within {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if moved {
            std::thread::sleep(STOP_LINGER);
            info!("leadership handed over in {} ms before stopping", started.elapsed().as_millis());
            return true;
        }
        let took = started.elapsed().as_millis();
        if me_leads(&self.view.facts()) {
            let what =
                to.map_or("no other node took over".to_string(), |to| format!("node {to} did not take over"));
            info!("{what} within {took} ms; stopping without a hand-over");
        } else {
            info!("this node stopped leading but no other leader was known within {took} ms; stopping without a hand-over");
        }
        false
    }

    /// Stops the Raft thread, the peer listener and the dialers, and waits for them.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.raft_tx.send(ToRaft::Stop);
        let _ = self.waker.wake();
        let _ = TcpStream::connect_timeout(&loopback(self.peer_addr), Duration::from_secs(1));
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    a
}

/// Everything `start` needs from the server.
pub struct ClusterStart<'a> {
    /// Shared with the lock-table thread, which publishes replicated member addresses.
    pub view: Arc<ClusterView>,
    pub config: &'a Config,
    pub cluster: &'a ClusterConfig,
    pub incarnation: u64,
    /// The fencing domain as the lock side last published it.
    pub domain: DomainSource,
    pub to_table: FromLogSink,
    pub raft_tx: Sender<ToRaft>,
    pub raft_rx: Receiver<ToRaft>,
    pub poll: mio::Poll,
    pub waker: Arc<crate::cluster::raft_thread::RaftWaker>,
    pub clock: Arc<Clock>,
    pub tls_server: Option<Arc<rustls::ServerConfig>>,
    pub tls_client: Option<Arc<rustls::ClientConfig>>,
    pub seed: u64,
}

/// Binds the peer port and starts the Raft thread, the acceptor and one dialer per peer.
pub fn start(s: ClusterStart<'_>) -> std::io::Result<ClusterHandles> {
    let config = s.config;
    let cluster = s.cluster;
    let me = config.node_id;
    let peer_port = config
        .listen
        .port()
        .checked_add(peer::PEER_PORT_OFFSET)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "client port too high"))?;
    let peer_listener = TcpListener::bind(SocketAddr::new(config.listen.ip(), peer_port))?;
    let peer_addr = peer_listener.local_addr()?;
    let view = s.view.clone();
    view.learn_addr(me, &cluster.self_addr);
    let fatal = Arc::new(Mutex::new(None));
    let stopping = Arc::new(AtomicBool::new(false));
    let peer_token = config.peer_auth_token.as_deref().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "cluster mode needs the peer secret")
    })?;
    let peer_key = Arc::new(crate::proto::handshake::auth_key(peer_token));

    let mut raft_config = RaftConfig::new(me);
    raft_config.heartbeat_ms = config.heartbeat_ms;
    raft_config.election_ms = config.election_ms;
    raft_config.autopilot_dead_ms = cluster.autopilot_dead_ms;
    let now = s.clock.now_ms();
    let raft = match cluster.state {
        ClusterState::New => {
            let voters: Vec<u64> = cluster.peers.iter().map(|p| p.id).collect();
            Raft::new_bootstrap(raft_config, &voters, s.seed, now)
        }
        ClusterState::Join => Raft::new_joining(raft_config, s.seed, now),
    };
    let hello = {
        let domain = s.domain.clone();
        let addr = cluster.self_addr.clone();
        let incarnation = s.incarnation;
        move || PeerHello { node_id: me, incarnation, domain: domain(), addr: addr.clone() }
    };

    let mut threads = Vec::new();
    let first_contact = Arc::new(FirstContact {
        started_new: cluster.state == ClusterState::New,
        founding: AtomicBool::new(cluster.state == ClusterState::New),
        made: AtomicBool::new(false),
    });
    let kit = DialerKit {
        hello: Arc::new(hello.clone()),
        key: peer_key.clone(),
        tls: s.tls_client.clone(),
        raft_tx: s.raft_tx.clone(),
        waker: s.waker.clone(),
        view: view.clone(),
        fatal: fatal.clone(),
        stopping: stopping.clone(),
        first_contact: first_contact.clone(),
    };
    let mut redial = HashMap::new();
    for p in cluster.peers.iter().filter(|p| p.id != me) {
        redial.insert(p.id, kit.spawn(p.id, &p.addr)?);
    }

    if cluster.state == ClusterState::Join {
        let mut ask: Vec<String> = cluster.seeds.clone();
        for p in &cluster.peers {
            if !ask.contains(&p.addr) {
                ask.push(p.addr.clone());
            }
        }
        ask.retain(|a| *a != cluster.self_addr);
        let joiner = join::Joiner {
            me,
            self_addr: cluster.self_addr.clone(),
            ask,
            auto: cluster.auto_join,
            peer_secret: peer_token.to_vec(),
            tls_ca: config.tls.as_ref().and_then(|t| t.ca.clone()),
            view: view.clone(),
            stopping: stopping.clone(),
        };
        // Not joined at stop: an exchange under way may take seconds, and the thread
        // holds nothing that must be given back.
        std::thread::Builder::new().name("join".into()).spawn(move || joiner.run())?;
    }
    let mut raft_loop =
        RaftLoop::new(raft, s.poll, s.raft_rx, s.to_table, view.clone(), redial, s.clock.clone(), kit);
    raft_loop.standbys_max = cluster.standbys_max;
    threads.push(std::thread::Builder::new().name("raft".into()).spawn(move || raft_loop.run())?);

    let acceptor = Acceptor {
        me,
        key: peer_key,
        tls: s.tls_server,
        raft_tx: s.raft_tx.clone(),
        waker: s.waker.clone(),
        view: view.clone(),
        domain: s.domain.clone(),
        hello: Arc::new(hello),
        stopping: stopping.clone(),
        first_contact,
        fatal: fatal.clone(),
        handshakes: crate::slots::HandshakeTable::new(PEER_HANDSHAKES_MAX, PEER_HANDSHAKES_PER_IP_MAX),
    };
    threads.push(
        std::thread::Builder::new().name("peer-accept".into()).spawn(move || acceptor.run(peer_listener))?,
    );
    info!("node {me} peer port {peer_addr}; members {:?}", cluster.peers);
    Ok(ClusterHandles {
        view,
        raft_tx: s.raft_tx,
        waker: s.waker,
        peer_addr,
        threads,
        fatal,
        stopping,
        election_ms: config.election_ms,
        heartbeat_ms: config.heartbeat_ms,
    })
}

/// A `new` node may found a domain only with peers that have none yet. The first
/// peer it completes a handshake with (either direction) decides: a peer that reports
/// a fencing domain means the cluster already exists, and this process, started to
/// found it, has either started after the cluster formed or restarted after a crash
/// under a NodeId that already ran. Either way it must not take part: it stops with
/// exit status 2 and says how to replace it.
struct FirstContact {
    /// Started with `TICKETING_CLUSTER_STATE=new`.
    started_new: bool,
    /// Founding a domain: started with `new`, or told to by FOUND (`ticketing admin
    /// found`) while waiting to join.
    founding: AtomicBool,
    /// Set once a handshake with a peer without a domain (or any, once we have one)
    /// succeeded: from then on this node is part of the domain being founded.
    made: AtomicBool,
}

impl FirstContact {
    /// Judges a peer's domain at a successful handshake; `Err` is the fatal message.
    fn judge(&self, ours: u64, peer: &PeerHello, peer_addr: &str) -> Result<(), String> {
        self.domain_exists(ours, peer.node_id, peer.domain, peer_addr)?;
        if self.founding.load(Ordering::SeqCst) {
            self.made.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// A peer answered (a handshake, or a refusal after its WELCOME) that fencing domain
    /// `theirs` exists: fatal for a founding node that is not part of a domain yet.
    fn domain_exists(&self, ours: u64, peer_id: u64, theirs: u64, peer_addr: &str) -> Result<(), String> {
        if !self.founding.load(Ordering::SeqCst) || self.made.load(Ordering::SeqCst) {
            return Ok(());
        }
        let peer = PeerHello { node_id: peer_id, incarnation: 0, domain: theirs, addr: String::new() };
        if ours == 0 && peer.domain != 0 {
            return Err(format!(
                "TICKETING_CLUSTER_STATE: node {} at {peer_addr} reports fencing domain {}: the cluster \
                 already exists, so this node, started with TICKETING_CLUSTER_STATE=new, cannot found it \
                 (it started after the cluster formed, or it ran before and lost its state). Start it \
                 again with TICKETING_CLUSTER_STATE=join and TICKETING_NODE_ID=auto (or unset): it \
                 joins under a new NodeId as a standby, and the leader's autopilot swaps it for the \
                 dead voter (docs/deploy.md)",
                peer.node_id, peer.domain
            ));
        }
        Ok(())
    }
}

/// Concurrent peer handshakes at most; more connections are closed at once. Members
/// are few (3 or 5, plus a learner) and dial one connection each at a time.
pub const PEER_HANDSHAKES_MAX: usize = 128;
/// Concurrent peer handshakes from one IP address at most: a member needs one, so
/// silent connections from a few addresses cannot take every place.
pub const PEER_HANDSHAKES_PER_IP_MAX: usize = 8;

/// Refused PEER HELLOs, logged at most once a second per reason.
static PEER_REFUSED_LOG: [crate::lograte::RateLimit; 7] = [const { crate::lograte::RateLimit::new() }; 7];

/// What every dialer thread needs; `spawn` starts one for a peer.
#[derive(Clone)]
pub struct DialerKit {
    hello: Arc<dyn Fn() -> PeerHello + Send + Sync>,
    key: Arc<ring::hmac::Key>,
    tls: Option<Arc<rustls::ClientConfig>>,
    raft_tx: Sender<ToRaft>,
    waker: Arc<crate::cluster::raft_thread::RaftWaker>,
    view: Arc<ClusterView>,
    fatal: Arc<Mutex<Option<String>>>,
    stopping: Arc<AtomicBool>,
    first_contact: Arc<FirstContact>,
}

impl DialerKit {
    /// Starts a dialer thread for `peer` at client address `addr`, asked to connect at
    /// once. It ends when the returned sender is dropped (or the node stops).
    pub fn spawn(&self, peer: u64, addr: &str) -> std::io::Result<raft_thread::Redial> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let _ = tx.send(());
        let dialer = Dialer {
            peer,
            addr: addr.to_owned(),
            kit: self.clone(),
            failures_log: crate::lograte::RateLimit::every(DIAL_FAILURE_LOG_MS),
            last_failure: std::cell::Cell::new(""),
        };
        std::thread::Builder::new().name(format!("dial-{peer}")).spawn(move || dialer.run(rx))?;
        Ok(tx)
    }

    /// Started with `TICKETING_CLUSTER_STATE=join` (FOUND may make it a founder).
    pub fn joining(&self) -> bool {
        !self.first_contact.started_new
    }

    /// FOUND made this waiting node a founder: from now on the founders' rule holds (a
    /// peer that reports an existing domain stops it, see `FirstContact`).
    pub fn start_founding(&self) {
        self.first_contact.founding.store(true, Ordering::SeqCst);
    }

    /// A FOUND made this node, started with `join`, a founder.
    pub fn founded_by_found(&self) -> bool {
        self.joining() && self.first_contact.founding.load(Ordering::SeqCst)
    }

    /// This process's incarnation (a random number chosen at start).
    pub fn incarnation(&self) -> u64 {
        (self.hello)().incarnation
    }

    fn set_fatal(&self, msg: String) {
        *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg);
    }
}

/// Keeps one outbound connection to one peer, redialing when asked.
struct Dialer {
    peer: u64,
    addr: String,
    kit: DialerKit,
    /// Failed dials: the first is logged at once, then one line a minute while the
    /// peer stays unreachable.
    failures_log: crate::lograte::RateLimit,
    /// The kind of the last failure (`explain::DialFailure::kind`): a failure of
    /// another kind is logged at once (a peer that comes up with another secret is not
    /// hidden behind a minute of "unreachable").
    last_failure: std::cell::Cell<&'static str>,
}

/// What a dial attempt came to.
enum DialOutcome {
    /// Handed to the Raft thread.
    Connected,
    /// Try again after the backoff.
    Retry,
    /// Stop dialing (this node must stop, or was removed).
    Stop,
}

impl Dialer {
    fn run(self, redial: Receiver<()>) {
        while redial.recv().is_ok() {
            while redial.try_recv().is_ok() {}
            let mut backoff = DIAL_BACKOFF_MIN;
            loop {
                let dropped = matches!(redial.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected));
                if self.kit.stopping.load(Ordering::SeqCst) || dropped {
                    return;
                }
                self.report(true);
                match self.attempt() {
                    DialOutcome::Connected => break,
                    DialOutcome::Stop => {
                        self.report(false);
                        return;
                    }
                    DialOutcome::Retry => self.report(false),
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(DIAL_BACKOFF_MAX);
            }
        }
    }

    /// Tells the Raft thread an attempt started or failed: messages for this peer wait
    /// for the attempt under way, and only for it.
    fn report(&self, started: bool) {
        let _ = self.kit.raft_tx.send(ToRaft::Dial { peer: self.peer, started });
        let _ = self.kit.waker.wake();
    }

    fn attempt(&self) -> DialOutcome {
        let kit = &self.kit;
        let hello = (kit.hello)();
        let established = match peer::dial(&self.addr, &hello, &kit.key, kit.tls.as_ref()) {
            Ok(established) => established,
            Err(PeerError::Refused { code, reason, leader, leader_id, domain }) => {
                if let Err(msg) = kit.first_contact.domain_exists(hello.domain, self.peer, domain, &self.addr)
                {
                    kit.set_fatal(msg);
                    return DialOutcome::Stop;
                }
                return self.refused(code, &reason, leader_id, &leader);
            }
            Err(e) => {
                self.failed(&e);
                return DialOutcome::Retry;
            }
        };
        self.last_failure.set("");
        let p = &established.peer;
        let refused = |why: String| {
            crate::warn_limited!(PEER_REFUSED_LOG[0], "{}: {why}; not talking to it", self.addr);
            DialOutcome::Retry
        };
        if p.node_id != self.peer {
            return refused(format!("expected node {}, found node {}", self.peer, p.node_id));
        }
        if hello.domain != 0 && p.domain != 0 && hello.domain != p.domain {
            return refused(format!(
                "node {} belongs to fencing domain {}, this node to {}",
                p.node_id, p.domain, hello.domain
            ));
        }
        if !kit.view.check_incarnation(p.node_id, p.incarnation) {
            return refused(format!("node {} is a restarted process under a used NodeId", p.node_id));
        }
        if let Err(msg) = kit.first_contact.judge(hello.domain, p, &self.addr) {
            kit.set_fatal(msg);
            return DialOutcome::Stop;
        }
        let _ = kit.raft_tx.send(ToRaft::Conn { established, outbound: true });
        let _ = kit.waker.wake();
        DialOutcome::Connected
    }

    /// Logs a failed dial in an operator's words (`explain`), rate-limited.
    fn failed(&self, e: &PeerError) {
        let (host, port) = peer::peer_addr_of(&self.addr).unwrap_or_default();
        let failure = explain::dial_failure(self.peer, &self.addr, port, &host, self.kit.tls.is_some(), e);
        if self.last_failure.replace(failure.kind) != failure.kind {
            // Lines suppressed before were of the other kind: not counted in this one.
            self.failures_log.restart();
            log::warn!("{}", failure.text);
        } else {
            crate::warn_limited!(self.failures_log, "{}", failure.text);
        }
    }

    fn refused(&self, code: u8, reason: &str, leader_id: u64, leader: &str) -> DialOutcome {
        let kit = &self.kit;
        match code {
            refusal::NODE_ID_REUSED => {
                kit.set_fatal(format!(
                    "TICKETING_NODE_ID: node {} refused this node: {reason}. A node that lost its state must \
                     come back under a new NodeId: start it with TICKETING_CLUSTER_STATE=join and \
                     TICKETING_NODE_ID=auto (docs/deploy.md)",
                    self.peer
                ));
                DialOutcome::Stop
            }
            refusal::REMOVED => {
                info!("node {} says this node was removed from the cluster: {reason}", self.peer);
                let _ = kit.raft_tx.send(ToRaft::RemovedBy { peer: self.peer });
                let _ = kit.waker.wake();
                DialOutcome::Retry
            }
            refusal::NOT_MEMBER => {
                // Expected while a joining node waits for `admin replace`; the peer still
                // said which node leads and where: that leader will dial us to add us, and
                // is admitted because this configured peer vouched for it.
                kit.view.vouch_for_leader(leader_id, leader);
                debug!("node {} at {}: {reason}", self.peer, self.addr);
                DialOutcome::Retry
            }
            _ => {
                crate::warn_limited!(
                    PEER_REFUSED_LOG[usize::from(code).min(6)],
                    "node {} at {} refused this node: {reason}",
                    self.peer,
                    self.addr
                );
                DialOutcome::Retry
            }
        }
    }
}

/// Accepts peer connections and runs their handshakes on short-lived threads.
struct Acceptor {
    me: u64,
    key: Arc<ring::hmac::Key>,
    tls: Option<Arc<rustls::ServerConfig>>,
    raft_tx: Sender<ToRaft>,
    waker: Arc<crate::cluster::raft_thread::RaftWaker>,
    view: Arc<ClusterView>,
    domain: DomainSource,
    hello: Arc<dyn Fn() -> PeerHello + Send + Sync>,
    stopping: Arc<AtomicBool>,
    first_contact: Arc<FirstContact>,
    fatal: Arc<Mutex<Option<String>>>,
    /// Handshakes running now.
    handshakes: Arc<crate::slots::HandshakeTable>,
}

impl Acceptor {
    fn run(self, listener: TcpListener) {
        let this = Arc::new(self);
        for stream in listener.incoming() {
            if this.stopping.load(Ordering::SeqCst) {
                return;
            }
            let Ok(tcp) = stream else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let Ok(from) = tcp.peer_addr() else { continue };
            let Ok(socket) = tcp.try_clone() else { continue };
            let Ok(ticket) = this.handshakes.take(from.ip(), Arc::new(socket)) else {
                crate::warn_limited!(
                    PEER_BUSY_LOG,
                    "{from}: peer connection closed: {PEER_HANDSHAKES_PER_IP_MAX} peer handshakes running from \
                     its address"
                );
                continue;
            };
            let worker = this.clone();
            let _ = std::thread::Builder::new()
                .name("peer-handshake".into())
                .stack_size(crate::slots::CONNECTION_STACK_BYTES)
                .spawn(move || {
                    // The ticket gives the place back however the handshake ends.
                    let _ticket = ticket;
                    worker.handshake(tcp);
                });
        }
    }

    /// Decides whether the dialer of `hello` (which presented `cert`, with TLS) may
    /// speak Raft to this node. A refusal names the leader this node knows, which
    /// vouches for it to a joining node that is not a member yet.
    fn judge(
        &self,
        hello: &PeerHello,
        cert: Option<&rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<(), peer::Refusal> {
        self.judge_hello(hello, cert).map_err(|(code, reason)| peer::Refusal {
            code,
            reason,
            leader_id: self.view.facts().leader_id.unwrap_or(0),
        })
    }

    fn judge_hello(
        &self,
        hello: &PeerHello,
        cert: Option<&rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<(), (u8, String)> {
        if hello.node_id == self.me {
            return Err((refusal::SAME_NODE, format!("{} is my own node id", self.me)));
        }
        if let Some(cert) = cert {
            // Mutual TLS proved the certificate is the CA's; it must also be the
            // certificate of the host this node id is known at.
            let known = self.view.addr_of(hello.node_id);
            let addr = if known.is_empty() { hello.addr.as_str() } else { known.as_str() };
            if !crate::tls::cert_fits_addr(cert, addr) {
                return Err((
                    refusal::CERT_MISMATCH,
                    format!(
                        "the certificate presented is not valid for {addr}, the address of node {}",
                        hello.node_id
                    ),
                ));
            }
        }
        match self.view.admits(hello.node_id, &hello.addr) {
            Ok(view::Admitted::Member) => {}
            Ok(view::Admitted::Stranger) => {
                crate::warn_limited!(
                    PEER_STRANGER_LOG,
                    "node {} (not in this node's configuration) connected while no leader is heard here; \
                     only its vote requests are heard",
                    hello.node_id
                );
            }
            Err(NotAdmitted::NotMember) => {
                return Err((
                    refusal::NOT_MEMBER,
                    format!("node {} is not a member of this cluster's configuration", hello.node_id),
                ))
            }
            Err(NotAdmitted::Removed) => {
                return Err((
                    refusal::REMOVED,
                    format!(
                        "node {} was removed from the cluster by a committed configuration",
                        hello.node_id
                    ),
                ))
            }
        }
        let ours = (self.domain)();
        if ours != 0 && hello.domain != 0 && ours != hello.domain {
            return Err((refusal::OTHER_DOMAIN, format!("I belong to domain {ours}, not {}", hello.domain)));
        }
        if !self.view.check_incarnation(hello.node_id, hello.incarnation) {
            return Err((
                refusal::NODE_ID_REUSED,
                format!("node id {} already ran in domain {ours} as another process", hello.node_id),
            ));
        }
        if let Err(msg) = self.first_contact.judge(ours, hello, &hello.addr) {
            *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg);
            return Err((refusal::OTHER_DOMAIN, "this node cannot join an existing domain as new".into()));
        }
        Ok(())
    }

    fn handshake(&self, tcp: TcpStream) {
        let from = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let welcome = || {
            let (role, leader) = self.view.welcome_role();
            Welcome { node_id: self.me, role, domain: (self.domain)(), leader }
        };
        match peer::accept(
            tcp,
            &self.key,
            self.tls.as_ref(),
            welcome,
            || (self.hello)(),
            |h, c| self.judge(h, c),
        ) {
            Ok(established) => {
                debug!("peer {} connected from {from}", established.peer.node_id);
                let _ = self.raft_tx.send(ToRaft::Conn { established, outbound: false });
                let _ = self.waker.wake();
            }
            Err(PeerError::Refused { code, reason, .. }) => {
                crate::warn_limited!(
                    PEER_REFUSED_LOG[usize::from(code).min(6)],
                    "{from}: peer refused: {reason}"
                );
            }
            Err(PeerError::Malformed(why)) => {
                crate::warn_limited!(
                    PEER_REFUSED_LOG[refusal::BAD_HELLO as usize],
                    "{from}: peer refused: {why}"
                );
            }
            Err(e) => {
                let guess = || {
                    let source = from.parse().ok()?;
                    explain::guess_node(source, |ip| {
                        self.view.nodes_at_ip(ip).into_iter().filter(|id| *id != self.me).collect()
                    })
                };
                explain::log_accept_failure(&e, &from, self.tls.is_some(), guess);
            }
        }
    }
}

/// Strangers admitted to ask for votes, logged at most once a second.
static PEER_STRANGER_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::new();

/// Peer connections closed for too many handshakes, logged at most once a second.
static PEER_BUSY_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::new();
