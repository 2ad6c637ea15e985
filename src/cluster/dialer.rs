//! The dialer threads: one per peer keeps one outbound connection, redialing with a
//! backoff when the Raft thread asks; `DialerKit` is what each needs and starts them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use log::{debug, info, warn};

use super::accept::PEER_REFUSED_LOG;
use super::explain;
use super::first_contact::{FirstContact, Verdict};
use super::peer::{self, refusal, PeerError, PeerHello};
use super::view::ClusterView;
use crate::messages::ToRaft;
use crate::raft_waker::RaftWaker;

/// A peer that stays unreachable is logged once, then once per this many milliseconds.
const DIAL_FAILURE_LOG_MS: u64 = 60_000;
/// A member unreachable this long (or twice the autopilot's threshold, if longer) is a
/// warning: by then a voter with a standby to take its place would have been replaced.
const UNREACHABLE_WARN_MS: u64 = 60_000;
/// `explain::DialFailure::kind` of a peer that does not answer.
const UNREACHABLE: &str = "unreachable";
/// Dial retries back off from this delay…
const DIAL_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// …doubling up to this one.
const DIAL_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Asks the dialer of a peer to (re)connect.
pub type Redial = Sender<()>;

/// What every dialer thread needs; `spawn` starts one for a peer.
#[derive(Clone)]
pub struct DialerKit {
    pub(super) hello: Arc<dyn Fn() -> PeerHello + Send + Sync>,
    pub(super) key: Arc<ring::hmac::Key>,
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
    pub(super) raft_tx: Sender<ToRaft>,
    pub(super) waker: Arc<RaftWaker>,
    pub(super) view: Arc<ClusterView>,
    pub(super) fatal: Arc<Mutex<Option<String>>>,
    pub(super) stopping: Arc<AtomicBool>,
    pub(super) first_contact: Arc<FirstContact>,
}

impl DialerKit {
    /// Starts a dialer thread for `peer` at client address `addr`, asked to connect at
    /// once. It ends when the returned sender is dropped (or the node stops).
    pub fn spawn(&self, peer: u64, addr: &str) -> std::io::Result<Redial> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let _ = tx.send(());
        let dialer = Dialer {
            peer,
            addr: addr.to_owned(),
            kit: self.clone(),
            failures_log: crate::lograte::RateLimit::every(DIAL_FAILURE_LOG_MS),
            last_failure: std::cell::Cell::new(""),
            unreachable_since: std::cell::Cell::new(0),
            told: std::cell::Cell::new(None),
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

    /// Records how configured peer `peer` at `addr` answered (see [`FirstContact::verdict`]);
    /// false when that stops this node.
    fn verdict(&self, peer: u64, addr: &str, verdict: Verdict) -> bool {
        let config_known = self.view.admission().config_known;
        match self.first_contact.verdict(peer, addr, verdict, config_known) {
            Ok(()) => true,
            Err(msg) => {
                self.set_fatal(msg);
                false
            }
        }
    }
}

/// True when the peer closed the connection during the handshake, with no TLS verdict:
/// what a node that is stopping (or whose process just ended) does, as routine as a
/// refused connection. A mistake — a secret, a certificate — has its own answer.
fn closed_in_handshake(e: &PeerError) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e, PeerError::Handshake(crate::proto::handshake::HandshakeError::Io(io))
        if crate::tls_verdict::rustls_error(io).is_none()
            && matches!(io.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe))
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
    /// When the peer became unreachable (ms of `lograte::process_ms`), for the warning
    /// of a member that stays so.
    unreachable_since: std::cell::Cell<u64>,
    /// The routine finding at this address already logged (a restarted process found
    /// where this peer ran: its id; this node's own address: 0), so it is said once.
    told: std::cell::Cell<Option<u64>>,
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
                // Asked again meanwhile (a new leader needs its links now): at once.
                match redial.recv_timeout(backoff) {
                    Ok(()) => backoff = DIAL_BACKOFF_MIN,
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        backoff = (backoff * 2).min(DIAL_BACKOFF_MAX)
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
                }
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
        if self.addr == hello.addr {
            // The peer ran at this node's own address: it is this node's predecessor, a
            // process that ended (this one holds the port now). Nothing answers as it;
            // the leader's autopilot replaces it. Dialing would reach this node itself.
            // Said at info once, unless it is known to have left: a node catching up may
            // hold a configuration older than the swap that removed it.
            if self.told.replace(Some(0)) != Some(0) {
                if kit.view.gone_or_going(self.peer) {
                    debug!("node {} ran at this node's address {} before it and left", self.peer, self.addr);
                } else {
                    info!(
                        "node {} ran at this node's address {} before it (a process that ended); not dialing \
                         it: the leader's autopilot swaps a standby in for it, unless that is done already",
                        self.peer, self.addr
                    );
                }
            }
            return DialOutcome::Retry;
        }
        let established = match peer::dial(&self.addr, &hello, &kit.key, kit.tls.as_ref()) {
            Ok(established) => established,
            Err(PeerError::Refused { code, reason, leader, leader_id, domain }) => {
                // Another name first: that the other cluster has a domain says nothing
                // about this one.
                if code == refusal::OTHER_NAME {
                    // A peer's words go into this node's exit line: printable ones only.
                    let words: String = reason.chars().filter(|c| !c.is_control()).collect();
                    if !kit.verdict(self.peer, &self.addr, Verdict::OtherName(words)) {
                        return DialOutcome::Stop;
                    }
                } else if let Err(msg) =
                    kit.first_contact.domain_exists(hello.domain, self.peer, domain, &self.addr)
                {
                    kit.set_fatal(msg);
                    return DialOutcome::Stop;
                }
                return self.refused(code, &reason, leader_id, &leader);
            }
            Err(e) => {
                // Only the secret's verdicts: a refusal for another protocol version is not one.
                let secret = match &e {
                    PeerError::Handshake(crate::proto::handshake::HandshakeError::Rejected(why)) => {
                        why == "authentication failed"
                    }
                    PeerError::Handshake(crate::proto::handshake::HandshakeError::BadProof) => true,
                    _ => false,
                };
                if secret && !kit.verdict(self.peer, &self.addr, Verdict::OtherSecret) {
                    return DialOutcome::Stop;
                }
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
        if p.name != hello.name {
            // The listener judges names too; this side checks what it was told.
            let words = super::accept::name_words((p.node_id, &p.name), (hello.node_id, &hello.name));
            if !kit.verdict(self.peer, &self.addr, Verdict::OtherName(words.clone())) {
                return DialOutcome::Stop;
            }
            return refused(words);
        }
        kit.verdict(self.peer, &self.addr, Verdict::Agreed);
        if p.node_id != self.peer {
            // A fresh process at the address where `self.peer` ran: the self-healing
            // recipe's restart (docs/operations.md, "Self-healing"), not a mistake — when
            // that node is known at this address, or not known at all yet.
            let known_at = kit.view.addr_of(p.node_id);
            if known_at.is_empty() || known_at == self.addr {
                if kit.view.gone_or_going(self.peer) {
                    // Its place is settled already (it left, or leaves): nothing to say
                    // beyond the "left the cluster" line.
                    debug!(
                        "{}: node {} runs there, where node {} ran before it left",
                        self.addr, p.node_id, self.peer
                    );
                } else if self.told.replace(Some(p.node_id)) != Some(p.node_id) {
                    info!(
                        "node {} now runs at {}, where node {} ran: a restarted process under a new id; node \
                         {}'s process ended, and the leader's autopilot swaps a standby in for it, unless that \
                         is done already",
                        p.node_id, self.addr, self.peer, self.peer
                    );
                } else {
                    debug!("{}: node {} runs there, not node {}", self.addr, p.node_id, self.peer);
                }
                return DialOutcome::Retry;
            }
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
        if failure.kind == UNREACHABLE || closed_in_handshake(e) {
            self.unreachable(&failure.text);
            return;
        }
        if self.last_failure.replace(failure.kind) != failure.kind {
            // Lines suppressed before were of the other kind: not counted in this one.
            self.failures_log.restart();
            log::warn!("{}", failure.text);
        } else {
            crate::warn_limited!(self.failures_log, "{}", failure.text);
        }
    }

    /// A peer that does not answer (nothing listens, no route, no answer in time). A
    /// member that stopped, died or restarts is routine under self-healing: said at
    /// info, or at debug for one that said it stops or has left. A warning only when it
    /// stays unreachable and still a member for [`UNREACHABLE_WARN_MS`]: by then the
    /// autopilot would have replaced it had it a standby to take its place.
    fn unreachable(&self, text: &str) {
        let now = crate::lograte::process_ms();
        let first = self.last_failure.replace(UNREACHABLE) != UNREACHABLE;
        if first {
            self.failures_log.restart();
            self.unreachable_since.set(now);
        }
        if self.kit.view.gone_or_going(self.peer) {
            debug!("{text} (it stopped or left the cluster)");
            return;
        }
        if first {
            info!("{text}");
            return;
        }
        let Some(suppressed) = self.failures_log.allow() else { return };
        let for_ms = now.saturating_sub(self.unreachable_since.get());
        let dead_ms = self.kit.view.autopilot().dead_ms.unwrap_or(0);
        if for_ms < UNREACHABLE_WARN_MS.max(dead_ms.saturating_mul(2)) {
            debug!("{text}{}", crate::lograte::suppressed_note(suppressed));
            return;
        }
        warn!(
            "{text}, for {} s now, and it is still a member: if its host is gone for good, start a fresh node \
             (TICKETING_CLUSTER_STATE=join) for the autopilot to swap in for it (docs/operations.md, \
             \"Self-healing\"){}",
            for_ms / 1000,
            crate::lograte::suppressed_note(suppressed)
        );
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
                    PEER_REFUSED_LOG[usize::from(code).min(8)],
                    "node {} at {} refused this node: {reason}",
                    self.peer,
                    self.addr
                );
                DialOutcome::Retry
            }
        }
    }
}
