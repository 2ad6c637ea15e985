//! What a node's start-up hands each mode (standalone.rs, clustered.rs) and what the
//! mode hands back: below node.rs and the modes, so that arrows run one way.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::health::AliveFlag;
use super::inbox::TableSender;
use super::status::Counters;
use crate::cluster::ClusterHandles;
use crate::lock::TableConfig;
use crate::messages::Clock;
use crate::metrics::Metrics;
use crate::replica::Replica;

pub(super) fn invalid_input(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// What every node has, whichever its mode, before its threads start.
pub(super) struct Parts {
    /// The lock table's bounds, this node's id and its process incarnation.
    pub config: TableConfig,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<Clock>,
    /// The lock-table thread's inbox.
    pub table: TableSender,
    /// False once the lock-table thread ended (for `/healthz`).
    pub table_running: Arc<AtomicBool>,
}

impl Parts {
    /// An empty replica of the lock state.
    pub fn replica(&self) -> Replica {
        Replica::new(self.config.clone())
    }

    /// The flag the lock-table thread clears when it ends.
    pub fn table_alive(&self) -> AliveFlag {
        AliveFlag(self.table_running.clone())
    }
}

/// What a mode's start-up (standalone.rs, clustered.rs) started.
pub(super) struct Started {
    /// The node's address as WELCOME and STATUS report it.
    pub advertised: String,
    pub table_thread: JoinHandle<()>,
    pub cluster: Option<ClusterHandles>,
}
