//! Starting cluster mode: binds the peer port, builds the Raft core, and starts the
//! Raft thread, the acceptor, one dialer per peer and (joining) the join thread.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};
use log::info;

use super::accept::{Acceptor, PEER_HANDSHAKES_MAX, PEER_HANDSHAKES_PER_IP_MAX};
use super::dialer::DialerKit;
use super::first_contact::FirstContact;
use super::handles::ClusterHandles;
use super::join;
use super::peer::{self, PeerHello};
use super::raft_thread::RaftLoop;
use super::view::ClusterView;
use crate::config::{ClusterConfig, ClusterState, Config};
use crate::messages::{Clock, DomainSource, FromLogSink, ToRaft};
use crate::raft::{Raft, RaftConfig};
use crate::raft_waker::RaftWaker;

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
    pub waker: Arc<RaftWaker>,
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
        let name = config.cluster_name.clone().unwrap_or_default();
        let incarnation = s.incarnation;
        move || PeerHello {
            node_id: me,
            incarnation,
            domain: domain(),
            addr: addr.clone(),
            name: name.clone(),
        }
    };

    let mut threads = Vec::new();
    let started_new = cluster.state == ClusterState::New;
    let first_contact = Arc::new(FirstContact::new(
        started_new,
        if started_new { cluster.peers.len() } else { 0 },
        cluster.peers.iter().filter(|p| p.id != me).count(),
    ));
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
            name: config.cluster_name.clone().unwrap_or_default(),
            fatal: fatal.clone(),
        };
        // Not joined at stop: an exchange under way may take seconds, and the thread
        // holds nothing that must be given back.
        std::thread::Builder::new().name("join".into()).spawn(move || joiner.run())?;
    }
    let mut raft_loop =
        RaftLoop::new(raft, s.poll, s.raft_rx, s.to_table, view.clone(), redial, s.clock.clone(), kit);
    raft_loop.standbys_max = cluster.standbys_max;
    threads.push(crate::invariant::spawn_vital("raft", move || raft_loop.run())?);

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
        leave_on_terminate: cluster.leave_on_terminate,
    })
}
