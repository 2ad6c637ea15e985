//! A running node: `Server::start` binds the ports and starts the lock-table thread
//! (and, in a cluster, the Raft and peer threads), the accept loop and the metrics
//! listener; `Server::shutdown` stops them in order.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::info;

use super::accept::{accept_loop, wake_addr};
use super::health::{health_check, ready_check, AliveFlag};
use super::inbox::{self, TableMsg};
use super::limits::Limits;
use super::lock_thread::{self, LogLink};
use super::outbox::NodeBudget;
use super::shared::Shared;
use super::status::{Counters, NodeInfo};
use crate::cluster::{self, view::ClusterView, ClusterHandles, ClusterStart};
use crate::config::Config;
use crate::lock::TableConfig;
use crate::messages::Clock;
use crate::replica::Replica;
use crate::tls;

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
        let (table_tx, table_rx) = inbox::inbox();
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
                let waker = crate::raft_waker::waker(&poll)?;
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
            budget: Arc::new(NodeBudget::default()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_bind_is_advertised_as_unknown_and_a_real_one_as_itself() {
        assert_eq!(advertised_addr("0.0.0.0:5225".parse().unwrap()), "");
        assert_eq!(advertised_addr("[::]:5225".parse().unwrap()), "");
        assert_eq!(advertised_addr("10.0.0.1:5225".parse().unwrap()), "10.0.0.1:5225");
    }
}
