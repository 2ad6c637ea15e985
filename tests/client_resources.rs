//! What a client holds, and that it gives it back (docs/client.md, "Shutdown"): a
//! dropped client closes its sockets even while threads that used it live on.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{eventually, TOKEN};
use ticketing::client::Client;

/// The inodes of this process's TCP sockets connected to `port` (from /proc/net/tcp).
fn tcp_inodes_to(port: u16) -> HashSet<u64> {
    let mut out = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(remote) = fields.get(2) else { continue };
            let remote_port = remote.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port) {
                if let Some(inode) = fields.get(9).and_then(|i| i.parse::<u64>().ok()) {
                    out.insert(inode);
                }
            }
        }
    }
    out
}

/// How many of this process's open file descriptors are TCP sockets connected to `port`.
fn sockets_open_to(port: u16) -> usize {
    let inodes = tcp_inodes_to(port);
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()
        })
        .filter(|inode| inodes.contains(inode))
        .count()
}

#[test]
fn a_dropped_client_closes_its_sockets_even_while_threads_that_used_it_live_on() {
    if !std::path::Path::new("/proc/self/fd").is_dir() {
        eprintln!("SKIPPED: no /proc/self/fd here");
        return;
    }
    let server = common::start_server(&[]);
    let port = server.addr.port();
    let client = Client::builder().addrs([server.addr.to_string()]).auth_token(TOKEN).build().unwrap();
    // A thread that uses the client, drops its handle and lives on (a worker pool's
    // thread would): nothing it keeps may hold the client's connections.
    let (used_tx, used_rx) = std::sync::mpsc::channel();
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
    let worker_client = client.clone();
    let worker = std::thread::spawn(move || {
        for n in 0..20 {
            worker_client.query(&format!("k{n}")).expect("query");
        }
        drop(worker_client);
        used_tx.send(()).unwrap();
        let _ = exit_rx.recv();
    });
    used_rx.recv().unwrap();
    assert!(eventually(Duration::from_secs(5), || sockets_open_to(port) == 2), "two connections to one seed");
    drop(client);
    assert!(
        eventually(Duration::from_secs(5), || sockets_open_to(port) == 0),
        "{} sockets to the server still open after the client was dropped",
        sockets_open_to(port)
    );
    exit_tx.send(()).unwrap();
    worker.join().unwrap();
}
