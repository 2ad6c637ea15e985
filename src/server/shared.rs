//! What the accept loop and every connection thread share: the node's identity and
//! secrets, its counters and metrics, the lock-table and Raft inboxes, the connection
//! caps and the node's byte budget; and the answers a connection makes from them alone.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

use super::inbox::{TableMsg, TableSender};
use super::limits::Limits;
use super::outbox::NodeBudget;
use super::status::{self, Counters, NodeInfo};
use crate::cluster::view::ClusterView;
use crate::lock::ConnId;
use crate::proto::handshake::{role, Welcome};

/// How long a connection waits for the lock-table thread's TOP KEYS answer before
/// answering `E 4`.
pub const TOP_KEYS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// State shared by the accept loop and every connection thread.
pub struct Shared {
    pub(super) info: NodeInfo,
    pub(super) counters: Arc<Counters>,
    /// What the node counts (docs/metrics.md); STATUS shows the lock counters too.
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    pub(super) auth_key: ring::hmac::Key,
    /// The operator (peer) secret's key: a client that proves it may use admin ops.
    pub(super) operator_key: Option<ring::hmac::Key>,
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    pub(super) table: TableSender,
    /// The cluster as the Raft thread last published it; `None` standalone.
    pub(super) cluster: Option<Arc<ClusterView>>,
    /// The Raft thread's inbox (for `admin replace`); `None` standalone.
    pub(super) raft: Option<(Sender<crate::messages::ToRaft>, Arc<crate::raft_waker::RaftWaker>)>,
    /// What all connections owe and have queued together (src/server/outbox.rs).
    pub(super) budget: Arc<NodeBudget>,
    pub(super) limits: Limits,
    /// Connections in their handshake.
    pub(super) handshakes: Arc<crate::slots::HandshakeTable>,
    /// Open connections (in the handshake or after it), per source address group.
    pub(super) per_ip: Arc<crate::slots::GroupCounter>,
    pub(super) stopping: AtomicBool,
    /// Sockets of open connections (shared with the connection: no descriptor of
    /// their own), so a shutdown can close them all.
    pub(super) sockets: Mutex<std::collections::HashMap<ConnId, Arc<TcpStream>>>,
}

impl Shared {
    /// The figures a scrape reads from where the node keeps them anyway.
    pub(super) fn refresh_metrics(&self, m: &crate::metrics::Metrics) {
        let c = &self.counters;
        m.lock.keys_held.set(c.keys_held.load(Ordering::Relaxed));
        m.lock.waiters.set(c.waiters.load(Ordering::Relaxed));
        m.lock.keys_with_waiters.set(c.keys_with_waiters.load(Ordering::Relaxed));
        m.lock.pooled_holds.set(c.pooled_holds.load(Ordering::Relaxed));
        m.lock.permits_in_use.set(c.permits_in_use.load(Ordering::Relaxed));
        m.raft.applied_index.set(c.applied_index.load(Ordering::Relaxed));
        let handshaking = self.handshakes.running() as u64;
        m.server.connections_handshake.set(handshaking);
        m.server
            .connections_authenticated
            .set(c.connections.load(Ordering::Relaxed).saturating_sub(handshaking));
        m.server.requests_pending.set(self.budget.pending() as u64);
    }

    /// Asks the lock-table thread for TOP KEYS and waits for its answer (it answers at
    /// once, between batches).
    pub(super) fn top_keys(&self, n: u8) -> crate::proto::Response {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let busy = || crate::proto::Response::Error {
            code: crate::proto::ErrorCode::Overloaded,
            message: "the lock table did not answer TOP KEYS in time".into(),
        };
        if self.table.send(TableMsg::TopKeys { n, reply }).is_err() {
            return busy();
        }
        answer.recv_timeout(TOP_KEYS_WAIT).unwrap_or_else(|_| busy())
    }

    pub(super) fn status_text(&self) -> String {
        match &self.cluster {
            None => status::standalone_text(&self.info, &self.counters, &self.metrics),
            Some(view) => status::cluster_text(&self.info, &self.counters, &self.metrics, view),
        }
    }

    /// The answer to the admin op MEMBERS: this node's view of the membership.
    pub(super) fn members_answer(&self) -> crate::proto::Response {
        match &self.cluster {
            None => crate::proto::Response::Error {
                code: crate::proto::ErrorCode::Invalid,
                message: "membership needs a cluster; this node is standalone".into(),
            },
            Some(view) => crate::proto::Response::Status { text: status::members_text(&self.info, view) },
        }
    }

    pub(super) fn welcome(&self) -> Welcome {
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
