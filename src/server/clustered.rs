//! A cluster node's start-up: the Raft thread, the peer port and the lock-table thread
//! whose log is Raft (raft_link.rs).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::inbox::{TableInbox, TableMsg};
use super::lock_thread::LockThread;
use super::parts::{invalid_input, Parts, Started};
use super::raft_link::RaftLink;
use crate::cluster::{self, view::ClusterView, ClusterStart};
use crate::config::{ClusterConfig, Config};
use crate::tls;

/// Starts the lock-table thread and the cluster's threads (cluster/start.rs).
pub(super) fn start(
    config: &Config,
    cluster: &ClusterConfig,
    parts: &Parts,
    inbox: TableInbox,
) -> std::io::Result<Started> {
    let poll = mio::Poll::new()?;
    let waker = crate::raft_waker::waker(&poll)?;
    let (raft_tx, raft_rx) = crossbeam_channel::unbounded();
    let (tls_client, tls_server) = match &config.tls {
        Some(files) => (
            Some(tls::client_config(files).map_err(|e| invalid_input(e.to_string()))?),
            Some(tls::peer_server_config(files).map_err(|e| invalid_input(e.to_string()))?),
        ),
        None => (None, None),
    };
    let view = Arc::new(ClusterView::new(cluster.peers.iter().map(|p| (p.id, p.addr.clone()))));
    view.attach_metrics(parts.metrics.clone());
    let table_thread = LockThread {
        replica: parts.replica(),
        log: RaftLink::new(raft_tx.clone(), waker.clone()),
        inbox,
        counters: parts.counters.clone(),
        metrics: parts.metrics.clone(),
        clock: parts.clock.clone(),
        view: Some(view.clone()),
        alive: parts.table_alive(),
    }
    .spawn()?;
    let handles = cluster::start(ClusterStart {
        view,
        config,
        cluster,
        incarnation: parts.config.incarnation,
        to_table: {
            let table = parts.table.clone();
            Box::new(move |news| {
                let _ = table.send(TableMsg::Log(news));
            })
        },
        domain: {
            let counters = parts.counters.clone();
            Arc::new(move || counters.domain.load(Ordering::SeqCst))
        },
        raft_tx,
        raft_rx,
        poll,
        waker,
        clock: parts.clock.clone(),
        tls_server,
        tls_client,
        seed: crate::random::u64(),
    })?;
    Ok(Started { advertised: cluster.self_addr.clone(), table_thread, cluster: Some(handles) })
}
