//! The server: an accept loop, a thread per client connection, and one lock-table
//! thread that owns all lock state; in a cluster also the Raft thread and the peer
//! port (see docs/architecture.md).

mod connection;
mod handshake_log;
pub mod lock_thread;
pub mod signals;
pub mod status;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{info, warn};

pub use crate::config::{Config, ConfigError};

use crate::cluster::{self, view::ClusterView, ClusterHandles, ClusterStart};
use crate::lock::{ConnId, TableConfig};
use crate::messages::Clock;
use crate::proto::handshake::{role, Welcome};
use crate::replica::Replica;
use crate::tls;
use lock_thread::{LogLink, TableMsg};
use status::{Counters, NodeInfo};

/// Client connections served at once at most; more are closed at accept. Fewer when
/// the open-files limit is low (see [`Limits`]).
pub const CONNECTIONS_MAX: usize = 10_000;
/// Client connections still in their handshake at once, at most.
pub const HANDSHAKES_MAX: usize = 1024;
/// Client connections in their handshake from one IP address at once, at most.
pub const HANDSHAKES_PER_IP_MAX: usize = 64;
/// File descriptors kept for everything but client connections: the listeners, peer
/// links and their handshakes, dialers, logs.
pub const RESERVED_FDS: u64 = 256;
/// How long a connection waits for the lock-table thread's TOP KEYS answer before
/// answering `E 4`.
pub const TOP_KEYS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
pub use crate::slots::CONNECTION_STACK_BYTES;

/// The connection caps in force, from the open-files limit: every connection costs
/// one descriptor, and `RESERVED_FDS` stay free for the cluster's own links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Authenticated connections, all sources.
    pub connections_max: usize,
    /// Open connections from one IP address (half the total: no single host can take
    /// every place).
    pub connections_per_ip_max: usize,
    pub handshakes_max: usize,
    pub handshakes_per_ip_max: usize,
}

impl Limits {
    /// The caps for an open-files limit of `open_files`.
    pub fn for_open_files(open_files: u64) -> Limits {
        let budget = open_files.saturating_sub(RESERVED_FDS).max(64) as usize;
        let handshakes_max = (budget / 8).clamp(16, HANDSHAKES_MAX);
        let connections_max = (budget - handshakes_max).clamp(16, CONNECTIONS_MAX);
        Limits {
            connections_max,
            connections_per_ip_max: (connections_max / 2).max(1),
            handshakes_max,
            handshakes_per_ip_max: HANDSHAKES_PER_IP_MAX.min(handshakes_max),
        }
    }
}

/// State shared by the accept loop and every connection thread.
pub(crate) struct Shared {
    info: NodeInfo,
    counters: Arc<Counters>,
    /// What the node counts (docs/metrics.md); STATUS shows the lock counters too.
    metrics: Arc<crate::metrics::Metrics>,
    auth_key: ring::hmac::Key,
    /// The operator (peer) secret's key: a client that proves it may use admin ops.
    operator_key: Option<ring::hmac::Key>,
    tls: Option<Arc<rustls::ServerConfig>>,
    table: lock_thread::TableSender,
    /// The cluster as the Raft thread last published it; `None` standalone.
    cluster: Option<Arc<ClusterView>>,
    /// The Raft thread's inbox (for `admin replace`); `None` standalone.
    raft: Option<(Sender<crate::messages::ToRaft>, Arc<crate::cluster::raft_thread::RaftWaker>)>,
    /// Requests pending in the lock-table thread, all connections together.
    pending: AtomicUsize,
    /// Bytes of answers owed or unwritten, all connections together.
    queued_bytes: AtomicUsize,
    limits: Limits,
    /// Connections in their handshake.
    handshakes: Arc<crate::slots::HandshakeTable>,
    /// Open connections (in the handshake or after it), per source address group.
    per_ip: Arc<crate::slots::GroupCounter>,
    stopping: AtomicBool,
    /// Sockets of open connections (shared with the connection: no descriptor of
    /// their own), so a shutdown can close them all.
    sockets: Mutex<std::collections::HashMap<ConnId, Arc<TcpStream>>>,
}

impl Shared {
    /// The figures a scrape reads from where the node keeps them anyway.
    fn refresh_metrics(&self, m: &crate::metrics::Metrics) {
        let c = &self.counters;
        m.lock.keys_held.set(c.keys_held.load(Ordering::Relaxed));
        m.lock.waiters.set(c.waiters.load(Ordering::Relaxed));
        m.lock.keys_with_waiters.set(c.keys_with_waiters.load(Ordering::Relaxed));
        m.raft.applied_index.set(c.applied_index.load(Ordering::Relaxed));
        let handshaking = self.handshakes.running() as u64;
        m.server.connections_handshake.set(handshaking);
        m.server
            .connections_authenticated
            .set(c.connections.load(Ordering::Relaxed).saturating_sub(handshaking));
        m.server.requests_pending.set(self.pending.load(Ordering::Relaxed) as u64);
    }

    /// Asks the lock-table thread for TOP KEYS and waits for its answer (it answers at
    /// once, between batches).
    fn top_keys(&self, n: u8) -> crate::proto::Response {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let busy = || crate::proto::Response::Error {
            code: crate::proto::ErrorCode::Overloaded,
            message: "the lock table did not answer TOP KEYS in time".into(),
        };
        if self.table.send(lock_thread::TableMsg::TopKeys { n, reply }).is_err() {
            return busy();
        }
        answer.recv_timeout(TOP_KEYS_WAIT).unwrap_or_else(|_| busy())
    }

    fn status_text(&self) -> String {
        match &self.cluster {
            None => status::standalone_text(&self.info, &self.counters, &self.metrics),
            Some(view) => status::cluster_text(&self.info, &self.counters, &self.metrics, view),
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
    metrics_server: Option<crate::metrics::http::MetricsServer>,
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
        let incarnation = crate::random::u64();
        let counters = Arc::new(Counters::default());
        let replica = Replica::new(TableConfig {
            node: config.node_id,
            incarnation,
            waiters_per_key_max: config.max_waiters,
            keys_max: config.max_keys,
        });
        let (table_tx, table_rx) = lock_thread::inbox();
        let clock = Arc::new(Clock::new());
        let metrics = Arc::new(crate::metrics::Metrics::default());
        metrics.cluster.store(config.cluster.is_some(), Ordering::Relaxed);
        // Set false when the lock-table thread ends, however it ends (for /healthz).
        let table_alive = Arc::new(AtomicBool::new(true));
        let (advertised, table_thread, cluster) = match &config.cluster {
            None => {
                let counters = counters.clone();
                let metrics = metrics.clone();
                let domain = lock_thread::random_domain();
                let alive = AliveFlag(table_alive.clone());
                let thread = std::thread::Builder::new().name("lock-table".into()).spawn(move || {
                    let _alive = alive;
                    lock_thread::run_standalone(replica, domain, table_rx, counters, metrics)
                })?;
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
                view.attach_metrics(metrics.clone());
                let link = LogLink::Raft {
                    tx: raft_tx.clone(),
                    waker: waker.clone(),
                    snapshot_index: 0,
                    log_bytes: 0,
                    wake_due: false,
                };
                let thread = {
                    let view = view.clone();
                    let counters = counters.clone();
                    let metrics = metrics.clone();
                    let clock = clock.clone();
                    let alive = AliveFlag(table_alive.clone());
                    std::thread::Builder::new().name("lock-table".into()).spawn(move || {
                        let _alive = alive;
                        lock_thread::run_cluster(replica, link, table_rx, counters, metrics, &clock, view)
                    })?
                };
                let handles = cluster::start(ClusterStart {
                    view,
                    config: &config,
                    cluster: cluster_config,
                    incarnation,
                    to_table: {
                        let table = table_tx.clone();
                        Box::new(move |news| {
                            let _ = table.send(TableMsg::Log(news));
                        })
                    },
                    domain: {
                        let counters = counters.clone();
                        Arc::new(move || counters.domain.load(Ordering::SeqCst))
                    },
                    raft_tx,
                    raft_rx,
                    poll,
                    waker,
                    clock: clock.clone(),
                    tls_server: tls_peer_server,
                    tls_client,
                    seed: crate::random::u64(),
                })?;
                (cluster_config.self_addr.clone(), thread, Some(handles))
            }
        };
        let info = NodeInfo { node_id: config.node_id, addr: advertised, started: Instant::now() };
        let limits = Limits::for_open_files(crate::sys::raise_open_files_limit());
        let shared = Arc::new(Shared {
            info,
            counters,
            metrics: metrics.clone(),
            auth_key: crate::proto::handshake::auth_key(&config.auth_token),
            operator_key: config.peer_auth_token.as_deref().map(crate::proto::handshake::auth_key),
            tls,
            table: table_tx,
            cluster: cluster.as_ref().map(|c| c.view.clone()),
            raft: cluster.as_ref().map(|c| (c.raft_tx.clone(), c.waker.clone())),
            pending: AtomicUsize::new(0),
            queued_bytes: AtomicUsize::new(0),
            limits,
            handshakes: crate::slots::HandshakeTable::new(
                limits.handshakes_max,
                limits.handshakes_per_ip_max,
            ),
            per_ip: crate::slots::GroupCounter::new(limits.connections_per_ip_max),
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
        let l = shared.limits;
        info!(
            "at most {} client connections ({} per address), {} in their handshake ({} per address)",
            l.connections_max, l.connections_per_ip_max, l.handshakes_max, l.handshakes_per_ip_max
        );
        let mode = if config.cluster.is_some() { "cluster" } else { "standalone" };
        info!(
            "{mode} node {} listening on {local_addr}{}",
            config.node_id,
            if config.tls.is_some() { " with TLS" } else { "" }
        );
        let metrics_server = match config.metrics_listen {
            None => None,
            Some(listen) => {
                let figures = shared.clone();
                let endpoints = crate::metrics::http::Endpoints {
                    metrics,
                    refresh: Arc::new(move |m| figures.refresh_metrics(m)),
                    health: health_check(table_alive, shared.cluster.clone()),
                    ready: ready_check(shared.cluster.clone()),
                };
                // Named in the error: "cannot start on" names the client port otherwise.
                let server = crate::metrics::http::MetricsServer::start(listen, endpoints).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("TICKETING_METRICS_LISTEN {listen}: {e}"))
                })?;
                info!("metrics on http://{}/metrics", server.local_addr());
                Some(server)
            }
        };
        Ok(Server {
            shared,
            local_addr,
            accept_thread: Some(accept_thread),
            table_thread: Some(table_thread),
            cluster,
            metrics_server,
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

    /// Why this node cannot go on, if it cannot (it stops with exit status 1).
    pub fn broken(&self) -> Option<String> {
        self.shared.cluster.as_ref().and_then(|view| view.broken())
    }

    /// Before a stop: a leader hands leadership over first (see
    /// `ClusterHandles::hand_over_before_stop`). True if leadership moved.
    pub fn hand_over_before_stop(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| c.hand_over_before_stop())
    }

    /// Stops accepting, closes every connection, stops the lock-table thread (and the
    /// cluster threads) and waits for the threads to end (connections: at most about
    /// two seconds).
    /// Where the metrics listener is bound, if it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_server.as_ref().map(|m| m.local_addr())
    }

    pub fn shutdown(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(m) = self.metrics_server.take() {
            m.stop();
        }
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

/// Clears its flag when dropped: when the thread that holds it ends, a panic included.
struct AliveFlag(Arc<AtomicBool>);

impl Drop for AliveFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A Raft thread that has not published for this long is stuck (it publishes every
/// loop turn, at least every housekeeping interval: 200 ms).
const RAFT_STUCK_MS: u64 = 2_000;

/// `/healthz`: the lock-table thread runs and, in a cluster, the Raft thread turns.
fn health_check(table_alive: Arc<AtomicBool>, view: Option<Arc<ClusterView>>) -> crate::metrics::http::Check {
    Arc::new(move || {
        if !table_alive.load(Ordering::SeqCst) {
            return Err("the lock-table thread has stopped".into());
        }
        if let Some(view) = &view {
            if let Some(why) = view.broken() {
                return Err(why);
            }
            match view.since_published_ms() {
                Some(ms) if ms <= RAFT_STUCK_MS => {}
                Some(ms) => return Err(format!("the Raft thread has not turned for {ms} ms")),
                None => return Err("the Raft thread has not started".into()),
            }
        }
        Ok(())
    })
}

/// `/readyz`: the node can serve or redirect: standalone always; in a cluster, the
/// leader, or a node that knows a leader.
fn ready_check(view: Option<Arc<ClusterView>>) -> crate::metrics::http::Check {
    Arc::new(move || {
        let Some(view) = &view else { return Ok(()) };
        if view.removed.load(Ordering::SeqCst) {
            return Err("this node was removed from the cluster".into());
        }
        let facts = view.facts();
        // A live leader: this node leads, or heard from its leader within an election
        // timeout. A node that cannot campaign (a learner) keeps its last leader's id
        // when cut off; that alone would redirect clients to a leader that may be gone.
        match facts.leader_id {
            Some(_) if facts.live_leader => Ok(()),
            _ => Err(format!(
                "no leader known (role {}, term {}): this node can neither serve nor redirect",
                crate::cluster::view::role_name(facts.role),
                facts.term
            )),
        }
    })
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

/// Connections refused at accept, logged at most once a second.
static ACCEPT_REFUSED_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::new();

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let next_conn = AtomicU64::new(1);
    let limits = shared.limits;
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // Out of file descriptors and the like: back off instead of spinning.
                crate::warn_limited!(ACCEPT_REFUSED_LOG, "accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Closing at once (the socket is dropped) costs a refused client nothing but a
        // reconnect, and costs the node no thread.
        if shared.counters.connections.load(Ordering::SeqCst) as usize >= limits.connections_max {
            shared.metrics.server.connections_refused.inc();
            crate::warn_limited!(
                ACCEPT_REFUSED_LOG,
                "{peer}: refused, {} connections open",
                limits.connections_max
            );
            continue;
        }
        let Some(slot) = shared.per_ip.take(peer.ip()) else {
            shared.metrics.server.connections_refused.inc();
            crate::warn_limited!(
                ACCEPT_REFUSED_LOG,
                "{peer}: refused, {} connections open from {}",
                limits.connections_per_ip_max,
                peer.ip()
            );
            continue;
        };
        let tcp = Arc::new(tcp);
        let Ok(handshaking) = shared.handshakes.take(peer.ip(), tcp.clone()) else {
            shared.metrics.server.connections_refused.inc();
            crate::warn_limited!(
                ACCEPT_REFUSED_LOG,
                "{peer}: refused, {} handshakes running from its address",
                limits.handshakes_per_ip_max
            );
            continue;
        };
        let conn = next_conn.fetch_add(1, Ordering::Relaxed);
        shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, tcp.clone());
        shared.counters.connections.fetch_add(1, Ordering::SeqCst);
        let guard = ConnGuard { shared: shared.clone(), conn, _ip: slot };
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{conn}"))
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                // The guard gives the connection's places back however this ends,
                // a panic included.
                let guard = guard;
                connection::serve(tcp, peer, conn, guard.shared.clone(), handshaking);
            });
        if let Err(e) = spawned {
            crate::warn_limited!(ACCEPT_REFUSED_LOG, "{peer}: cannot start a connection thread: {e}");
        }
    }
}

/// Gives back an open connection's places (the count, the socket entry, its address's
/// slot) when its thread ends, normally or by a panic.
struct ConnGuard {
    shared: Arc<Shared>,
    conn: ConnId,
    _ip: crate::slots::GroupPlace,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The connection's own clean-up did not run: close the socket (its writer
            // thread then ends) and let the lock table forget the connection (it drops
            // the reply channel; its waiters leave their queues).
            if let Some(socket) =
                self.shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).get(&self.conn)
            {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
            let _ = self.shared.table.send(TableMsg::Closed { conn: self.conn });
        }
        self.shared.sockets.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.conn);
        self.shared.counters.connections.fetch_sub(1, Ordering::SeqCst);
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
        let self_addr = config.cluster.as_ref().map(|c| c.self_addr.as_str());
        let checked = tls::check_own_certificate(files, self_addr)
            .and_then(|_| tls::server_config(files))
            .and_then(|_| match &config.cluster {
                Some(_) => tls::client_config(files).and_then(|_| tls::peer_server_config(files)).map(|_| ()),
                None => Ok(()),
            });
        if let Err(e) = checked {
            eprintln!("ticketing: {e}");
            return 2;
        }
    }
    signals::install();
    crate::invariant::stop_on_violation();
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
        if let Some(why) = server.broken() {
            eprintln!("ticketing: {why}");
            status = 1;
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
    if status == 0 && !server.removed() {
        // SIGTERM to a leader: hand leadership over first, so clients lose no time.
        server.hand_over_before_stop();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_bind_is_advertised_as_unknown_and_a_real_one_as_itself() {
        assert_eq!(advertised_addr("0.0.0.0:5225".parse().unwrap()), "");
        assert_eq!(advertised_addr("[::]:5225".parse().unwrap()), "");
        assert_eq!(advertised_addr("10.0.0.1:5225".parse().unwrap()), "10.0.0.1:5225");
    }

    #[test]
    fn the_caps_follow_the_open_files_limit() {
        let full = Limits::for_open_files(16_384);
        assert_eq!((full.connections_max, full.handshakes_max), (CONNECTIONS_MAX, HANDSHAKES_MAX));
        assert_eq!(full.connections_per_ip_max, CONNECTIONS_MAX / 2);
        // The common soft limit of 1024: descriptors stay for the reserve.
        let low = Limits::for_open_files(1024);
        assert!(low.connections_max + low.handshakes_max + RESERVED_FDS as usize <= 1024, "{low:?}");
        assert!(low.connections_max >= 16 && low.handshakes_max >= 16);
    }
}
