//! A userspace delay line between nodes: this kernel has no `sch_netem`, so the fault
//! suite shapes peer links with a TCP proxy in front of each node's peer port.
//!
//! Each accepted connection is forwarded to the node; each direction is a delay line:
//! a reader thread stamps every chunk it reads with the time it may leave, a writer
//! thread writes it then. What a [`Shape`] sets:
//!
//! - **latency and jitter**: a chunk leaves `latency ± jitter` after it was read
//!   (uniform), never before the chunk ahead of it — a TCP stream keeps its order, so
//!   jitter shows as bunching, as on a real link;
//! - **bandwidth**: at most `bytes_per_s` leave per second (a chunk waits for the ones
//!   ahead of it to have "crossed" the link);
//! - **loss**: TCP turns a lost segment into a retransmission, so the application sees
//!   delay, not loss: with probability `loss_per_mille` a chunk is held one
//!   retransmission timeout longer (`RTO_MS`), and everything behind it waits too.
//!   Loss can be set for one direction only.
//!
//! The queue between reader and writer is bounded (`QUEUE_CHUNKS`), so a node that
//! stops reading (paused) pushes back on its dialer as a real link would.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{rng, Rng};

/// What one direction of a link does to the bytes crossing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub latency_ms: u64,
    /// Uniform in [-jitter, +jitter] around the latency.
    pub jitter_ms: u64,
    /// 0: unlimited.
    pub bytes_per_s: u64,
    /// Chunks held one retransmission timeout longer, per thousand.
    pub loss_per_mille: u64,
}

impl Shape {
    pub fn latency(latency_ms: u64, jitter_ms: u64) -> Shape {
        Shape { latency_ms, jitter_ms, ..Shape::default() }
    }
}

/// What a lost segment costs on a TCP connection: the minimum retransmission timeout.
pub const RTO_MS: u64 = 200;
/// Chunks queued per direction at most.
const QUEUE_CHUNKS: usize = 1024;
const CHUNK_BYTES: usize = 64 * 1024;

struct Shared {
    target: SocketAddr,
    /// (toward the node, from the node)
    shapes: Mutex<(Shape, Shape)>,
    stop: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    seed: Mutex<Rng>,
    /// Bytes read so far, both directions, every connection.
    read: AtomicU64,
}

/// A delaying proxy on `listen` in front of `target`. Dropping it closes everything.
pub struct DelayProxy {
    listen: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts it; `to_node` shapes the bytes toward `target` (what dialers send),
    /// `from_node` the bytes back.
    pub fn start(
        listen: SocketAddr,
        target: SocketAddr,
        to_node: Shape,
        from_node: Shape,
        seed: u64,
    ) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind(listen)?;
        let shared = Arc::new(Shared {
            target,
            shapes: Mutex::new((to_node, from_node)),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            seed: Mutex::new(rng(seed)),
            read: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("delay-{listen}"))
            .spawn(move || accept_loop(listener, s))?;
        Ok(DelayProxy { listen, shared, acceptor: Some(acceptor) })
    }

    /// Changes the shapes of every connection, current and future.
    pub fn set_shape(&self, to_node: Shape, from_node: Shape) {
        *self.shared.shapes.lock().unwrap() = (to_node, from_node);
    }

    pub fn shapes(&self) -> (Shape, Shape) {
        *self.shared.shapes.lock().unwrap()
    }

    /// Bytes the proxy has read so far (both directions, every connection), each chunk
    /// counted once it is stamped with its time to leave.
    pub fn bytes_read(&self) -> u64 {
        self.shared.read.load(Ordering::SeqCst)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.listen, Duration::from_millis(200));
        for s in self.shared.sockets.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        let threads = std::mem::take(&mut *self.shared.threads.lock().unwrap());
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = stream else { continue };
        let Ok(server) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(1)) else {
            continue; // the node is gone: the dialer sees the connection close
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { continue };
        {
            let mut sockets = shared.sockets.lock().unwrap();
            sockets.retain(|s| s.peer_addr().is_ok());
            sockets.push(c2);
            sockets.push(s2);
        }
        let seed = shared.seed.lock().unwrap().next();
        for (dir, from, to) in [(0usize, &client, &server), (1, &server, &client)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else { continue };
            let (tx, rx) = crossbeam_channel::bounded::<(Instant, Vec<u8>)>(QUEUE_CHUNKS);
            let s = shared.clone();
            let reader = std::thread::spawn(move || read_side(&s, dir, from, tx, rng(seed ^ dir as u64)));
            let writer = std::thread::spawn(move || write_side(rx, to));
            let mut threads = shared.threads.lock().unwrap();
            threads.retain(|t| !t.is_finished());
            threads.push(reader);
            threads.push(writer);
        }
    }
}

/// Reads chunks and stamps each with the time it may leave.
fn read_side(
    shared: &Shared,
    dir: usize,
    mut from: TcpStream,
    tx: crossbeam_channel::Sender<(Instant, Vec<u8>)>,
    mut rng: Rng,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    // When the previous chunk leaves, and when the link is free again (bandwidth).
    let mut last_due = Instant::now();
    let mut link_free = Instant::now();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let now = Instant::now();
        let shape = if dir == 0 { shared.shapes.lock().unwrap().0 } else { shared.shapes.lock().unwrap().1 };
        let jitter = if shape.jitter_ms == 0 { 0 } else { rng.below(2 * shape.jitter_ms + 1) };
        let mut delay_ms = (shape.latency_ms + jitter).saturating_sub(shape.jitter_ms);
        if shape.loss_per_mille > 0 && rng.below(1000) < shape.loss_per_mille {
            delay_ms += RTO_MS;
        }
        let mut due = (now + Duration::from_millis(delay_ms)).max(last_due);
        if let Some(us) = (n as u64 * 1_000_000).checked_div(shape.bytes_per_s) {
            link_free = due.max(link_free) + Duration::from_micros(us);
            due = link_free;
        }
        last_due = due;
        shared.read.fetch_add(n as u64, Ordering::SeqCst);
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    // Dropping `tx` ends the writer once it has written what is queued.
}

fn write_side(rx: crossbeam_channel::Receiver<(Instant, Vec<u8>)>, mut to: TcpStream) {
    for (due, bytes) in rx {
        let now = Instant::now();
        if due > now {
            // sleep: the delay the proxy injects, until the bytes are due.
            std::thread::sleep(due - now);
        }
        if to.write_all(&bytes).is_err() {
            // Wakes the other direction's reader too.
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
