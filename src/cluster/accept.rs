//! The peer port's acceptor: takes peer connections, runs each handshake on a
//! short-lived thread, and judges who may speak Raft to this node.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;
use log::{debug, info};

use super::explain;
use super::first_contact::FirstContact;
use super::peer::{self, refusal, PeerError, PeerHello};
use super::view::{self, ClusterView, NotAdmitted};
use crate::messages::{DomainSource, ToRaft};
use crate::proto::handshake::Welcome;
use crate::raft_waker::RaftWaker;

/// Concurrent peer handshakes at most; more connections are closed at once. Members
/// are few (3 or 5, plus a learner) and dial one connection each at a time.
pub const PEER_HANDSHAKES_MAX: usize = 128;
/// Concurrent peer handshakes from one IP address at most: a member needs one, so
/// silent connections from a few addresses cannot take every place.
pub const PEER_HANDSHAKES_PER_IP_MAX: usize = 8;

/// Refused PEER HELLOs, logged at most once a second per reason.
pub(super) static PEER_REFUSED_LOG: [crate::lograte::RateLimit; 9] =
    [const { crate::lograte::RateLimit::new() }; 9];

/// Accepts peer connections and runs their handshakes on short-lived threads.
pub(super) struct Acceptor {
    pub(super) me: u64,
    pub(super) key: Arc<ring::hmac::Key>,
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    pub(super) raft_tx: Sender<ToRaft>,
    pub(super) waker: Arc<RaftWaker>,
    pub(super) view: Arc<ClusterView>,
    pub(super) domain: DomainSource,
    pub(super) hello: Arc<dyn Fn() -> PeerHello + Send + Sync>,
    pub(super) stopping: Arc<AtomicBool>,
    pub(super) first_contact: Arc<FirstContact>,
    pub(super) fatal: Arc<Mutex<Option<String>>>,
    /// Handshakes running now.
    pub(super) handshakes: Arc<crate::slots::HandshakeTable>,
}

impl Acceptor {
    pub(super) fn run(self, listener: TcpListener) {
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
        // Before membership: a node of another cluster is told so, not that it is no
        // member (which would send it looking for a leader to add it).
        let ours = (self.hello)().name;
        if hello.name != ours {
            return Err((refusal::OTHER_NAME, name_words((self.me, &ours), (hello.node_id, &hello.name))));
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
            // A node that knows no configuration yet (waiting, or joining: its first
            // entries are on their way) refuses the members that dial it: expected, and
            // said by its join thread already.
            Err(PeerError::Refused { code: refusal::NOT_MEMBER, reason, .. })
                if !self.view.admission().config_known =>
            {
                debug!("{from}: peer refused before this node knows a configuration: {reason}");
            }
            // A node a committed configuration removed — one that left before it stops
            // (a planned restart), or one replaced while cut off — is told so and stops
            // by itself, saying why: nothing for this node's operator to do.
            Err(PeerError::Refused { code: refusal::REMOVED, reason, .. }) => {
                debug!("{from}: peer refused: {reason}");
            }
            // A node this node's configuration does not name (yet): a standby whose
            // configuration lags behind the swap that made the dialer a voter, a node
            // joining under a fixed id before `admin replace`. Routine; the dialer
            // keeps trying, and a node that never joins says so itself (its STATUS).
            Err(PeerError::Refused { code: refusal::NOT_MEMBER, reason, .. }) => {
                if let Some(n) = PEER_REFUSED_LOG[usize::from(refusal::NOT_MEMBER).min(6)].allow() {
                    info!("{from}: peer refused: {reason}{}", crate::lograte::suppressed_note(n));
                }
            }
            Err(PeerError::Refused { code, reason, .. }) => {
                crate::warn_limited!(
                    PEER_REFUSED_LOG[usize::from(code).min(8)],
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

/// The words of a refusal for another cluster name, the same on both sides of the link:
/// each node (id, name) and its name (empty: none).
pub(super) fn name_words(refuser: (u64, &str), dialer: (u64, &str)) -> String {
    let name = |n: &str| if n.is_empty() { "none".to_owned() } else { format!("{n:?}") };
    format!(
        "node {} has TICKETING_CLUSTER_NAME {} and node {} has {}",
        refuser.0,
        name(refuser.1),
        dialer.0,
        name(dialer.1)
    )
}

/// Strangers admitted to ask for votes, logged at most once a second.
static PEER_STRANGER_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::new();

/// Peer connections closed for too many handshakes, logged at most once a second.
static PEER_BUSY_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::new();
