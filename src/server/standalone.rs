//! A standalone node's start-up: the lock-table thread over a log that commits on
//! append, leading from its first moment.

use std::net::SocketAddr;

use super::inbox::TableInbox;
use super::lock_thread::{self, LockThread};
use super::log_link::LoopbackLog;
use super::parts::{Parts, Started};

/// Starts the lock-table thread; the node answers as soon as the accept loop runs.
pub(super) fn start(parts: &Parts, inbox: TableInbox, bound: SocketAddr) -> std::io::Result<Started> {
    let mut replica = parts.replica();
    let mut log = LoopbackLog::default();
    lock_thread::lead_alone(&mut replica, &mut log, &parts.clock, &parts.counters);
    let table_thread = LockThread {
        replica,
        log,
        inbox,
        counters: parts.counters.clone(),
        metrics: parts.metrics.clone(),
        clock: parts.clock.clone(),
        view: None,
        alive: parts.table_alive(),
    }
    .spawn()?;
    Ok(Started { advertised: advertised_addr(bound), table_thread, cluster: None })
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
