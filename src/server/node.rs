//! A running node: `Server::start` binds the client port, lets its mode start the
//! lock-table thread (standalone.rs; clustered.rs, with the Raft and peer threads),
//! then starts the accept loop and the metrics listener; `Server::shutdown` stops them
//! in order.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::info;

use super::accept::{accept_loop, wake_addr};
use super::health::{health_check, ready_check};
use super::inbox::{self, TableMsg};
use super::limits::Limits;
use super::outbox::NodeBudget;
use super::parts::{invalid_input, Parts, Started};
use super::shared::Shared;
use super::status::{Counters, NodeInfo};
use super::{clustered, standalone};
use crate::cluster::ClusterHandles;
use crate::config::Config;
use crate::lock::TableConfig;
use crate::messages::Clock;
use crate::metrics::http::MetricsServer;
use crate::metrics::Metrics;
use crate::tls;

/// A running node. Dropping it does not stop it; call [`Server::shutdown`].
pub struct Server {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    accept_thread: Option<JoinHandle<()>>,
    table_thread: Option<JoinHandle<()>>,
    cluster: Option<ClusterHandles>,
    metrics_server: Option<MetricsServer>,
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
        let (table, inbox) = inbox::inbox();
        let parts = Parts {
            config: TableConfig {
                node: config.node_id,
                incarnation: crate::random::u64(),
                waiters_per_key_max: config.max_waiters,
                keys_max: config.max_keys,
            },
            counters: Arc::new(Counters::default()),
            metrics: Arc::new(Metrics::default()),
            clock: Arc::new(Clock::new()),
            table,
            table_running: Arc::new(AtomicBool::new(true)),
        };
        parts.metrics.cluster.store(config.cluster.is_some(), Ordering::Relaxed);
        let started = match &config.cluster {
            None => standalone::start(&parts, inbox, local_addr)?,
            Some(cluster) => clustered::start(&config, cluster, &parts, inbox)?,
        };
        let shared = Arc::new(shared(&config, &parts, &started, tls));
        let accept_thread = {
            let shared = shared.clone();
            std::thread::Builder::new().name("accept".into()).spawn(move || accept_loop(listener, shared))?
        };
        log_started(&config, &shared.limits, local_addr);
        let metrics_server = start_metrics(&config, &shared, &parts)?;
        Ok(Server {
            shared,
            local_addr,
            accept_thread: Some(accept_thread),
            table_thread: Some(started.table_thread),
            cluster: started.cluster,
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

    /// Before a stop (SIGTERM), in a cluster: tell the other members this node stops,
    /// hand leadership over if it leads, and with `TICKETING_LEAVE_ON_TERMINATE=on`
    /// wait until a standby took its place (see `ClusterHandles::before_stop`; each
    /// wait bounded).
    pub fn before_stop(&self) {
        if let Some(c) = self.cluster.as_ref() {
            c.before_stop();
        }
    }

    /// Where the metrics listener is bound, if it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_server.as_ref().map(|m| m.local_addr())
    }

    /// Stops accepting, closes every connection, stops the lock-table thread (and the
    /// cluster threads) and waits for the threads to end (connections: at most about
    /// two seconds).
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

/// What the connection threads share.
fn shared(
    config: &Config,
    parts: &Parts,
    started: &Started,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Shared {
    let limits = Limits::for_open_files(crate::sys::raise_open_files_limit());
    let cluster = started.cluster.as_ref();
    Shared {
        info: NodeInfo {
            node_id: config.node_id,
            addr: started.advertised.clone(),
            cluster_name: config.cluster_name.clone().unwrap_or_default(),
            started: Instant::now(),
        },
        counters: parts.counters.clone(),
        metrics: parts.metrics.clone(),
        auth_key: crate::proto::handshake::auth_key(&config.auth_token),
        operator_key: config.peer_auth_token.as_deref().map(crate::proto::handshake::auth_key),
        tls,
        table: parts.table.clone(),
        cluster: cluster.map(|c| c.view.clone()),
        raft: cluster.map(|c| (c.raft_tx.clone(), c.waker.clone())),
        budget: Arc::new(NodeBudget::default()),
        limits,
        handshakes: crate::slots::HandshakeTable::new(limits.handshakes_max, limits.handshakes_per_ip_max),
        per_ip: crate::slots::GroupCounter::new(limits.connections_per_ip_max),
        stopping: AtomicBool::new(false),
        sockets: Mutex::new(Default::default()),
    }
}

fn log_started(config: &Config, l: &Limits, local_addr: SocketAddr) {
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
}

/// The metrics listener (`/metrics`, `/healthz`, `/readyz`), if configured.
fn start_metrics(
    config: &Config,
    shared: &Arc<Shared>,
    parts: &Parts,
) -> std::io::Result<Option<MetricsServer>> {
    let Some(listen) = config.metrics_listen else { return Ok(None) };
    let figures = shared.clone();
    let endpoints = crate::metrics::http::Endpoints {
        metrics: parts.metrics.clone(),
        refresh: Arc::new(move |m| figures.refresh_metrics(m)),
        health: health_check(parts.table_running.clone(), shared.cluster.clone()),
        ready: ready_check(shared.cluster.clone()),
    };
    // Named in the error: "cannot start on" names the client port otherwise.
    let server = MetricsServer::start(listen, endpoints)
        .map_err(|e| std::io::Error::new(e.kind(), format!("TICKETING_METRICS_LISTEN {listen}: {e}")))?;
    info!("metrics on http://{}/metrics", server.local_addr());
    Ok(Some(server))
}
