//! Facts of real server processes the cluster tests wait on instead of sleeping: a
//! key's queued waiters, a process the kernel has stopped, a line in a node's log file,
//! and a value polled until it appears — each one a bounded wait built on
//! [`eventually`](super::wait::eventually).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use ticketing::proto::frame::{Request, Response};

use super::raw::call;
use super::wait::eventually;
pub use super::wait::eventually_some;

/// How many requests wait on `key` at the node at `addr` (its QUERY), on a fresh
/// connection; `None` when the key is free or the node does not answer.
pub fn waiters(addr: SocketAddr, key: &str) -> Option<u32> {
    match call(addr, &Request::Query { key: key.into() }, Duration::from_secs(2))? {
        Response::Holder { waiters, .. } => Some(waiters),
        _ => None,
    }
}

/// Waits up to `within` until exactly `n` requests wait on `key` at `addr`.
pub fn wait_waiters(addr: SocketAddr, key: &str, n: u32, within: Duration) -> bool {
    eventually(within, || waiters(addr, key) == Some(n))
}

/// True when every thread of the process `pid` is stopped (by SIGSTOP: state `T` in
/// each /proc/PID/task/TID/stat). The main thread alone is not enough: the kernel tells
/// one thread of a stopping process first and it stops the others when it next runs, so
/// on a busy machine another thread can still read and answer a request after the main
/// thread shows `T`.
pub fn is_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    let mut any = false;
    for task in tasks {
        let Ok(task) = task else { return false };
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        if !matches!(state, Some("T") | Some("t")) {
            return false;
        }
        any = true;
    }
    any
}

/// Waits up to `within` until the kernel has stopped every thread of the process `pid`
/// (a SIGSTOP is delivered some time after kill(1) returns).
pub fn wait_stopped(pid: u32, within: Duration) -> bool {
    eventually(within, || is_stopped(pid))
}

/// Waits up to `within` until the log file at `path` holds a line with `needle`.
pub fn wait_log_file(path: &Path, needle: &str, within: Duration) -> bool {
    eventually(within, || std::fs::read_to_string(path).is_ok_and(|t| t.lines().any(|l| l.contains(needle))))
}
