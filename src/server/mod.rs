//! The server: an accept loop, a thread per client connection, and one lock-table
//! thread that owns all lock state; in a cluster also the Raft thread and the peer
//! port (see docs/architecture.md).

pub mod config;
mod connection;
pub mod lock_thread;
pub mod signals;
pub mod status;
pub mod tls;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{error, info, warn};
use ring::rand::{SecureRandom, SystemRandom};

pub use config::{Config, ConfigError};

use crate::cluster::{self, view::ClusterView, ClusterHandles, ClusterStart};
use crate::lock::{ConnId, TableConfig};
use crate::proto::handshake::{role, Welcome};
use crate::replica::Replica;
use lock_thread::{Clock, LogLink, TableMsg};
use status::{Counters, NodeInfo};

/// Client connections served at once; more are closed at accept.
pub const CONNECTIONS_MAX: usize = 10_000;

/// State shared by the accept loop and every connection thread.
pub(crate) struct Shared {
    info: NodeInfo,
    counters: Arc<Counters>,
    auth_key: ring::hmac::Key,
    /// The operator (peer) secret's key: a client that proves it may use admin ops.
    operator_key: Option<ring::hmac::Key>,
    tls: Option<Arc<rustls::ServerConfig>>,
    table: Sender<TableMsg>,
    /// The cluster as the Raft thread last published it; `None` standalone.
    cluster: Option<Arc<ClusterView>>,
    /// The Raft thread's inbox (for `admin replace`); `None` standalone.
    raft: Option<(Sender<cluster::raft_thread::ToRaft>, Arc<mio::Waker>)>,
    /// Requests pending in the lock-table thread, all connections together.
    pending: AtomicUsize,
    stopping: AtomicBool,
    /// Sockets of open connections, so a shutdown can close them all.
    sockets: Mutex<std::collections::HashMap<ConnId, TcpStream>>,
}

impl Shared {
    fn status_text(&self) -> String {
        match &self.cluster {
            None => status::standalone_text(&self.info, &self.counters),
            Some(view) => status::cluster_text(&self.info, &self.counters, view),
        }
    }

    /// The answer to the admin op MEMBERS: this node's view of the membership.
    fn members_answer(&self) -> crate::proto::Response {
        match &self.cluster {
            None => crate::proto::Response::Error {
                code: crate::proto::ErrorCode::Invalid,
                message: "membership needs a cluster; this node is standalone".into(),
            },
            Some(view) => crate::proto::Response::Status { text: status::members_text(&self.info, view) },
        }
    }

    fn welcome(&self) -> Welcome {
        let (role, leader) = match &self.cluster {
            None => (role::STANDALONE, self.info.addr.clone()),
            Some(view) => view.welcome_role(),
        };
        Welcome {
            node_id: self.info.node_id,
            role,
            domain: self.counters.domain.load(Ordering::Relaxed),
            leader,
        }
    }
}

/// A running node. Dropping it does not stop it; call [`Server::shutdown`].
pub struct Server {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    accept_thread: Option<JoinHandle<()>>,
    table_thread: Option<JoinHandle<()>>,
    cluster: Option<ClusterHandles>,
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    SystemRandom::new().fill(&mut bytes).expect("the operating system's random source failed");
    u64::from_be_bytes(bytes)
}

fn invalid_input(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

impl Server {
    /// Binds the client port (and the peer port in a cluster), starts the threads and
    /// returns at once.
    pub fn start(config: Config) -> std::io::Result<Server> {
        config.check().map_err(|e| invalid_input(e.to_string()))?;
        let tls = match &config.tls {
            Some(files) => Some(tls::server_config(files).map_err(|e| invalid_input(e.to_string()))?),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)?;
        let local_addr = listener.local_addr()?;
        let incarnation = random_u64();
        let counters = Arc::new(Counters::default());
        let replica = Replica::new(TableConfig {
            node: config.node_id,
            incarnation,
            waiters_per_key_max: config.max_waiters,
        });
        let (table_tx, table_rx) = crossbeam_channel::unbounded();
        let clock = Arc::new(Clock::new());
        let (advertised, table_thread, cluster) = match &config.cluster {
            None => {
                let counters = counters.clone();
                let domain = lock_thread::random_domain();
                let thread = std::thread::Builder::new()
                    .name("lock-table".into())
                    .spawn(move || lock_thread::run_standalone(replica, domain, table_rx, counters))?;
                (advertised_addr(local_addr), thread, None)
            }
            Some(cluster_config) => {
                let poll = mio::Poll::new()?;
                let waker = cluster::raft_thread::waker(&poll)?;
                let (raft_tx, raft_rx) = crossbeam_channel::unbounded();
                let (tls_client, tls_peer_server) = match &config.tls {
                    Some(files) => (
                        Some(tls::client_config(files).map_err(|e| invalid_input(e.to_string()))?),
                        Some(tls::peer_server_config(files).map_err(|e| invalid_input(e.to_string()))?),
                    ),
                    None => (None, None),
                };
                let view =
                    Arc::new(ClusterView::new(cluster_config.peers.iter().map(|p| (p.id, p.addr.clone()))));
                let link = LogLink::Raft { tx: raft_tx.clone(), waker: waker.clone(), snapshot_index: 0 };
                let thread = {
                    let view = view.clone();
                    let counters = counters.clone();
                    let clock = clock.clone();
                    std::thread::Builder::new().name("lock-table".into()).spawn(move || {
                        lock_thread::run_cluster(replica, link, table_rx, counters, &clock, view)
                    })?
                };
                let handles = cluster::start(ClusterStart {
                    view,
                    config: &config,
                    cluster: cluster_config,
                    incarnation,
                    counters: counters.clone(),
                    to_table: table_tx.clone(),
                    raft_tx,
                    raft_rx,
                    poll,
                    waker,
                    clock: clock.clone(),
                    tls_server: tls_peer_server,
                    tls_client,
                    seed: random_u64(),
                })?;
                (cluster_config.self_addr.clone(), thread, Some(handles))
            }
        };
        let info = NodeInfo { node_id: config.node_id, addr: advertised, started: Instant::now() };
        let shared = Arc::new(Shared {
            info,
            counters,
            auth_key: crate::proto::handshake::auth_key(&config.auth_token),
            operator_key: config.peer_auth_token.as_deref().map(crate::proto::handshake::auth_key),
            tls,
            table: table_tx,
            cluster: cluster.as_ref().map(|c| c.view.clone()),
            raft: cluster.as_ref().map(|c| (c.raft_tx.clone(), c.waker.clone())),
            pending: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            sockets: Mutex::new(Default::default()),
        });
        if config.cluster.is_none() {
            // Clients must never see domain 0 from a standalone node: wait for the lock
            // thread to record it (it does so before anything else).
            let give_up = Instant::now() + Duration::from_secs(5);
            while shared.counters.domain.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let accept_thread = {
            let shared = shared.clone();
            std::thread::Builder::new().name("accept".into()).spawn(move || accept_loop(listener, shared))?
        };
        let mode = if config.cluster.is_some() { "cluster" } else { "standalone" };
        info!(
            "{mode} node {} listening on {local_addr}{}",
            config.node_id,
            if config.tls.is_some() { " with TLS" } else { "" }
        );
        Ok(Server {
            shared,
            local_addr,
            accept_thread: Some(accept_thread),
            table_thread: Some(table_thread),
            cluster,
        })
    }

    /// The bound client address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// True once this node learned it was removed from the cluster.
    pub fn removed(&self) -> bool {
        self.shared.cluster.as_ref().is_some_and(|view| view.removed.load(Ordering::SeqCst))
    }

    /// Why this node must stop, if it must (e.g. its NodeId was already used).
    pub fn fatal(&self) -> Option<String> {
        let cluster = self.cluster.as_ref()?;
        let fatal = cluster.fatal.lock().unwrap_or_else(|p| p.into_inner());
        fatal.clone()
    }

    /// Stops accepting, closes every connection, stops the lock-table thread (and the
    /// cluster threads) and waits for the threads to end (connections: at most about
    /// two seconds).
    pub fn shutdown(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&wake_addr(self.local_addr), Duration::from_secs(1));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        for socket in self.shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).values() {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        if let Some(cluster) = self.cluster.take() {
            cluster.stop();
        }
        let _ = self.shared.table.send(TableMsg::Stop);
        if let Some(t) = self.table_thread.take() {
            let _ = t.join();
        }
        let give_up = Instant::now() + Duration::from_secs(2);
        while self.shared.counters.connections.load(Ordering::SeqCst) > 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        info!("stopped");
    }
}

/// The standalone node's own address as WELCOME and STATUS report it: the bound
/// address, or empty ("unknown") when bound to a wildcard — which host name or address
/// remote clients use to reach it is not known here.
fn advertised_addr(bound: SocketAddr) -> String {
    if bound.ip().is_unspecified() {
        String::new()
    } else {
        bound.to_string()
    }
}

fn wake_addr(bound: SocketAddr) -> SocketAddr {
    let mut addr = bound;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let next_conn = AtomicU64::new(1);
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // Out of file descriptors and the like: back off instead of spinning.
                warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if shared.counters.connections.load(Ordering::SeqCst) as usize >= CONNECTIONS_MAX {
            warn!("{peer}: refused, {CONNECTIONS_MAX} connections already open");
            continue;
        }
        let conn = next_conn.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = tcp.try_clone() {
            shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, clone);
        }
        shared.counters.connections.fetch_add(1, Ordering::SeqCst);
        let worker = shared.clone();
        let spawned = std::thread::Builder::new().name(format!("conn-{conn}")).spawn(move || {
            connection::serve(tcp, peer, conn, worker.clone());
            worker.sockets.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
            worker.counters.connections.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            error!("{peer}: cannot start a connection thread: {e}");
            shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
            shared.counters.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// `ticketing server`: configuration from the environment, run until SIGTERM/SIGINT.
/// Returns the process exit status: 0 after a graceful stop, 2 for bad configuration
/// (or a NodeId that was already used), 1 when the node cannot start.
pub fn run_from_env() -> i32 {
    init_logging();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("ticketing: {e}");
            return 2;
        }
    };
    for warning in &config.warnings {
        warn!("{warning}");
    }
    if let Some(files) = &config.tls {
        let checked = tls::server_config(files).and_then(|_| match &config.cluster {
            Some(_) => tls::client_config(files).and_then(|_| tls::peer_server_config(files)).map(|_| ()),
            None => Ok(()),
        });
        if let Err(e) = checked {
            eprintln!("ticketing: {e}");
            return 2;
        }
    }
    signals::install();
    let listen = config.listen;
    let server = match Server::start(config) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("ticketing: cannot start on {listen}: {e}");
            return 1;
        }
    };
    let mut status = 0;
    while !signals::stop_requested() {
        if let Some(why) = server.fatal() {
            eprintln!("ticketing: {why}");
            status = 2;
            break;
        }
        if server.removed() {
            // Give the leader a moment to see this node's last acknowledgements.
            std::thread::sleep(Duration::from_millis(500));
            eprintln!("ticketing: this node was removed from the cluster; stopping");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    info!("stopping");
    server.shutdown();
    status
}

/// Logs to stderr through env_logger; `RUST_LOG` filters, `info` by default.
pub fn init_logging() {
    let env = env_logger::Env::default().default_filter_or("info");
    let _ = env_logger::Builder::from_env(env).format_timestamp_millis().try_init();
}
