//! `ticketing server` as a process: configuration from the environment, logging, the
//! signal handlers and the panic hook, then run until a signal or a reason to stop, and
//! the exit status that says which.

use std::time::Duration;

use log::{info, warn};

use super::node::Server;
use super::signals;
use crate::config::Config;
use crate::tls;

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
        // Wakes at once on SIGTERM or SIGINT; otherwise looks again in 50 ms.
        signals::wait(Duration::from_millis(50));
    }
    if status == 0 && !server.removed() {
        // SIGTERM: tell the others; a leader hands leadership over first, so clients
        // lose no time; a voter lets a standby take its place.
        server.before_stop();
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
