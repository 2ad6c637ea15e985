//! The server: an accept loop, a thread per client connection, and one lock-table
//! thread that owns all lock state (see ARCHITECTURE in the docs).

pub mod config;
mod connection;
mod lock_thread;
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

use crate::lock::{ConnId, TableConfig};
use crate::replica::Replica;
use lock_thread::TableMsg;
use status::{Counters, NodeInfo};

/// Client connections served at once; more are closed at accept.
pub const CONNECTIONS_MAX: usize = 10_000;

/// State shared by the accept loop and every connection thread.
pub(crate) struct Shared {
    info: NodeInfo,
    counters: Arc<Counters>,
    auth_key: ring::hmac::Key,
    tls: Option<Arc<rustls::ServerConfig>>,
    table: Sender<TableMsg>,
    /// Requests pending in the lock-table thread, all connections together.
    pending: AtomicUsize,
    stopping: AtomicBool,
    /// Sockets of open connections, so a shutdown can close them all.
    sockets: Mutex<std::collections::HashMap<ConnId, TcpStream>>,
}

impl Shared {
    fn status_text(&self) -> String {
        status::standalone_text(&self.info, &self.counters)
    }
}

/// A running node. Dropping it does not stop it; call [`Server::shutdown`].
pub struct Server {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    accept_thread: Option<JoinHandle<()>>,
    table_thread: Option<JoinHandle<()>>,
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the operating system's random source failed");
    u64::from_be_bytes(bytes)
}

impl Server {
    /// Binds the client port, starts the threads and returns at once.
    pub fn start(config: Config) -> std::io::Result<Server> {
        if config.cluster.is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "cluster mode is not available in this build",
            ));
        }
        let tls = match &config.tls {
            Some(files) => Some(tls::server_config(files).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)?;
        let local_addr = listener.local_addr()?;
        // The fencing domain: random and non-zero, chosen at bootstrap (SPEC §5).
        let domain = loop {
            let d = random_u64();
            if d != 0 {
                break d;
            }
        };
        let advertised = advertised_addr(local_addr);
        let info = NodeInfo {
            node_id: config.node_id,
            addr: advertised,
            started: Instant::now(),
        };
        let counters = Arc::new(Counters::default());
        let replica = Replica::new(TableConfig {
            node: config.node_id,
            incarnation: random_u64(),
            waiters_per_key_max: config.max_waiters,
        });
        let (table_tx, table_rx) = crossbeam_channel::unbounded();
        let table_thread = {
            let counters = counters.clone();
            std::thread::Builder::new()
                .name("lock-table".into())
                .spawn(move || lock_thread::run_standalone(replica, domain, table_rx, counters))?
        };
        let shared = Arc::new(Shared {
            info,
            counters,
            auth_key: crate::proto::handshake::auth_key(&config.auth_token),
            tls,
            table: table_tx,
            pending: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            sockets: Mutex::new(Default::default()),
        });
        // Clients must never see domain 0 from a standalone node: wait for the lock
        // thread to record it (it does so before anything else).
        let give_up = Instant::now() + Duration::from_secs(5);
        while shared.counters.domain.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        let accept_thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("accept".into())
                .spawn(move || accept_loop(listener, shared))?
        };
        info!(
            "standalone node {} listening on {local_addr}{} (domain {domain})",
            config.node_id,
            if config.tls.is_some() {
                " with TLS"
            } else {
                ""
            }
        );
        Ok(Server {
            shared,
            local_addr,
            accept_thread: Some(accept_thread),
            table_thread: Some(table_thread),
        })
    }

    /// The bound client address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection, stops the lock-table thread and waits
    /// for the threads to end (connections: at most about two seconds).
    pub fn shutdown(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&wake_addr(self.local_addr), Duration::from_secs(1));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        for socket in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        let _ = self.shared.table.send(TableMsg::Stop);
        if let Some(t) = self.table_thread.take() {
            let _ = t.join();
        }
        let give_up = Instant::now() + Duration::from_secs(2);
        while self.shared.counters.connections.load(Ordering::SeqCst) > 0
            && Instant::now() < give_up
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        info!("stopped");
    }
}

/// The address clients should dial, as reported in WELCOME and STATUS: the bound
/// address, with a wildcard host replaced by loopback.
fn advertised_addr(bound: SocketAddr) -> String {
    wake_addr(bound).to_string()
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
            shared
                .sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(conn, clone);
        }
        shared.counters.connections.fetch_add(1, Ordering::SeqCst);
        let worker = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{conn}"))
            .spawn(move || {
                connection::serve(tcp, peer, conn, worker.clone());
                worker
                    .sockets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&conn);
                worker.counters.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            error!("{peer}: cannot start a connection thread: {e}");
            shared
                .sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&conn);
            shared.counters.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// `ticketing server`: configuration from the environment, run until SIGTERM/SIGINT.
/// Returns the process exit status: 0 after a graceful stop, 2 for bad configuration,
/// 1 when the node cannot start.
pub fn run_from_env() -> i32 {
    init_logging();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("ticketing: {e}");
            return 2;
        }
    };
    if let Some(files) = &config.tls {
        if let Err(e) = tls::server_config(files) {
            eprintln!("ticketing: {e}");
            return 2;
        }
    }
    if config.cluster.is_some() {
        eprintln!(
            "ticketing: TICKETING_CLUSTER_PEERS: cluster mode is not available in this build yet"
        );
        return 2;
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
    while !signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
    info!("stop requested");
    server.shutdown();
    0
}

/// Logs to stderr through env_logger; `RUST_LOG` filters, `info` by default.
pub fn init_logging() {
    let env = env_logger::Env::default().default_filter_or("info");
    let _ = env_logger::Builder::from_env(env)
        .format_timestamp_millis()
        .try_init();
}
