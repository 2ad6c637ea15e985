//! The accept loop: takes client connections, refuses those over the caps at once (a
//! refused client loses a reconnect, the node no thread), and gives each of the rest a
//! thread of its own.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::connection;
use super::inbox::TableMsg;
use super::limits::CONNECTION_STACK_BYTES;
use super::shared::Shared;
use crate::lock::ConnId;

/// The address that reaches a listener bound to `bound` from this host: a connection
/// of the node's own wakes the blocking accept at shutdown.
pub fn wake_addr(bound: SocketAddr) -> SocketAddr {
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

pub fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
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
