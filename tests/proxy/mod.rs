//! A fault-injecting TCP proxy for the client tests.
//!
//! [`Proxy::start`] listens on `127.0.0.1:0` (or [`Proxy::start_at`] on a given
//! address) and forwards every accepted connection to one target address, with one
//! pair of pump threads per connection. The faults are changed at run time through the
//! handle and apply to every connection, current and future:
//!
//! - [`Proxy::cut_after`]: after `n` more bytes in one direction, close both sides of
//!   the connection that carried them (one shot);
//! - [`Proxy::delay`]: hold every chunk read in one direction this long before
//!   forwarding it (order is kept);
//! - [`Proxy::blackhole`]: keep the connections open but drop the bytes of one direction;
//! - [`Proxy::refuse`]: accept new connections and close them at once;
//! - [`Proxy::cut_all`] / [`Proxy::cut_oldest`]: close live connections now.
//!
//! Counters (bytes forwarded and dropped per direction, connections accepted, refused
//! and live, accept instants) let a test check what crossed the wire. Dropping the
//! handle closes every socket and joins every thread.
#![allow(dead_code)]

pub mod cluster;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{eventually, eventually_every};

/// A direction of the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From the client to the server (requests).
    ToServer,
    /// From the server to the client (HELLO, WELCOME, answers).
    ToClient,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::ToServer => 0,
            Dir::ToClient => 1,
        }
    }
}

/// Bytes of AUTH, the client's only handshake message (docs/protocol.md §3).
pub const AUTH_LEN: u64 = 72;

/// Longest a pump sleeps at once while delaying, so a stop is noticed quickly.
const SLEEP_SLICE: Duration = Duration::from_millis(10);
/// Longest wait for the target to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Faults {
    /// Bytes still allowed through before the carrying connection is cut.
    cut_after: [Option<u64>; 2],
    delay: [Duration; 2],
    blackhole: [bool; 2],
    refuse: bool,
}

/// One proxied connection: the client-side and the target-side socket.
struct Pair {
    client: TcpStream,
    server: TcpStream,
    alive: AtomicBool,
    /// Bytes forwarded on this connection, per direction.
    forwarded: [AtomicU64; 2],
    /// Every byte forwarded to the server, for [`Proxy::requests`].
    sent: Mutex<Vec<u8>>,
}

impl Pair {
    fn cut(&self) {
        if self.alive.swap(false, Ordering::AcqRel) {
            let _ = self.client.shutdown(Shutdown::Both);
            let _ = self.server.shutdown(Shutdown::Both);
        }
    }
}

struct Shared {
    target: SocketAddr,
    stop: AtomicBool,
    faults: Mutex<Faults>,
    pairs: Mutex<Vec<Arc<Pair>>>,
    pumps: Mutex<Vec<JoinHandle<()>>>,
    accepted_at: Mutex<Vec<Instant>>,
    forwarded: [AtomicU64; 2],
    dropped: [AtomicU64; 2],
    accepted: AtomicUsize,
    refused: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handle on a running proxy. Dropping it stops everything.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on an ephemeral loopback port forwarding to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        Proxy::start_at("127.0.0.1:0".parse().unwrap(), target)
    }

    /// A proxy listening on `listen` forwarding to `target`.
    pub fn start_at(listen: SocketAddr, target: SocketAddr) -> Proxy {
        Proxy::try_start_at(listen, target).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Proxy::start_at`], or why it could not bind `listen`.
    pub fn try_start_at(listen: SocketAddr, target: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind(listen).map_err(|e| format!("proxy bind {listen}: {e}"))?;
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            target,
            stop: AtomicBool::new(false),
            faults: Mutex::new(Faults::default()),
            pairs: Mutex::new(Vec::new()),
            pumps: Mutex::new(Vec::new()),
            accepted_at: Mutex::new(Vec::new()),
            forwarded: Default::default(),
            dropped: Default::default(),
            accepted: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("proxy-accept-{}", addr.port()))
                .spawn(move || accept_loop(&shared, listener))
                .unwrap()
        };
        Ok(Proxy { addr, shared, acceptor: Some(acceptor) })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as a string, for `Client::builder().addrs(..)`.
    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// After `n` more bytes in `dir` (counted over all connections), the connection
    /// that carried the last of them is closed on both sides; bytes beyond `n` in that
    /// chunk are not forwarded. `n = 0`: the next connection with a byte in `dir` is
    /// closed without forwarding it. One shot: the fault clears once it fired.
    pub fn cut_after(&self, dir: Dir, n: u64) {
        lock(&self.shared.faults).cut_after[dir.index()] = Some(n);
    }

    /// True while a `cut_after` has not fired yet.
    pub fn cut_pending(&self, dir: Dir) -> bool {
        lock(&self.shared.faults).cut_after[dir.index()].is_some()
    }

    /// Holds every chunk read in `dir` for `delay` before forwarding it.
    pub fn delay(&self, dir: Dir, delay: Duration) {
        lock(&self.shared.faults).delay[dir.index()] = delay;
    }

    /// While on, bytes read in `dir` are counted as dropped and not forwarded; the
    /// connections stay open.
    pub fn blackhole(&self, dir: Dir, on: bool) {
        lock(&self.shared.faults).blackhole[dir.index()] = on;
    }

    /// While on, new connections are accepted and closed at once (the target never
    /// sees them).
    pub fn refuse(&self, on: bool) {
        lock(&self.shared.faults).refuse = on;
    }

    /// Closes every live connection now.
    pub fn cut_all(&self) {
        for pair in lock(&self.shared.pairs).iter() {
            pair.cut();
        }
    }

    /// Closes the oldest live connection; false when none is live.
    pub fn cut_oldest(&self) -> bool {
        let pairs = lock(&self.shared.pairs);
        match pairs.iter().find(|p| p.alive.load(Ordering::Acquire)) {
            Some(pair) => {
                pair.cut();
                true
            }
            None => false,
        }
    }

    /// Bytes forwarded in `dir` so far.
    pub fn forwarded(&self, dir: Dir) -> u64 {
        self.shared.forwarded[dir.index()].load(Ordering::Acquire)
    }

    /// Bytes forwarded in `dir` on each live connection, oldest first.
    pub fn forwarded_live(&self, dir: Dir) -> Vec<u64> {
        let pairs = lock(&self.shared.pairs);
        let live = pairs.iter().filter(|p| p.alive.load(Ordering::Acquire));
        live.map(|p| p.forwarded[dir.index()].load(Ordering::Acquire)).collect()
    }

    /// Waits up to `within` until `n` connections are live and each has carried a
    /// request past the client's AUTH ([`AUTH_LEN`] bytes), calling `request` (one
    /// answered request of the client, a PING) before each look. A client writes a
    /// request only on a session past its handshake and spreads its requests over its
    /// ready sessions: so this is the fact that each of its sessions is ready.
    pub fn wait_sessions_ready(&self, n: usize, within: Duration, request: impl Fn()) -> bool {
        eventually(within, || {
            request();
            let each = self.forwarded_live(Dir::ToServer);
            each.len() == n && each.iter().all(|&b| b > AUTH_LEN)
        })
    }

    /// Bytes read in `dir` and not forwarded (black-holed, or beyond a cut).
    pub fn dropped(&self, dir: Dir) -> u64 {
        self.shared.dropped[dir.index()].load(Ordering::Acquire)
    }

    /// The requests forwarded to the server, connection by connection in accept order:
    /// each connection's bytes after its AUTH cut into frames, as (op byte, bytes of the
    /// frame); a frame cut short comes last as (its op byte, or 0 when not even that
    /// crossed, the bytes that did).
    pub fn requests(&self) -> Vec<(u8, u64)> {
        let mut frames = Vec::new();
        for pair in lock(&self.shared.pairs).iter() {
            let sent = lock(&pair.sent);
            let mut rest = sent.get(AUTH_LEN as usize..).unwrap_or(&[]);
            while !rest.is_empty() {
                let whole = rest.get(..4).map(|b| 4 + u32::from_be_bytes(b.try_into().unwrap()) as usize);
                let op = rest.get(4).copied().unwrap_or(0);
                let n = whole.map_or(rest.len(), |w| w.min(rest.len()));
                frames.push((op, n as u64));
                rest = &rest[n..];
            }
        }
        frames
    }

    /// Connections accepted so far, refused ones included.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Acquire)
    }

    /// Connections closed at once because `refuse` was on.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::Acquire)
    }

    /// Connections forwarded and still open.
    pub fn live(&self) -> usize {
        lock(&self.shared.pairs).iter().filter(|p| p.alive.load(Ordering::Acquire)).count()
    }

    /// The instant of every accept, refused ones included, in order.
    pub fn accept_times(&self) -> Vec<Instant> {
        lock(&self.shared.accepted_at).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.cut_all();
        let pumps: Vec<JoinHandle<()>> = lock(&self.shared.pumps).drain(..).collect();
        for pump in pumps {
            let _ = pump.join();
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(client) = conn else { continue };
        lock(&shared.accepted_at).push(Instant::now());
        shared.accepted.fetch_add(1, Ordering::AcqRel);
        if lock(&shared.faults).refuse {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let pair = Arc::new(Pair {
            client,
            server,
            alive: AtomicBool::new(true),
            forwarded: Default::default(),
            sent: Default::default(),
        });
        lock(&shared.pairs).push(Arc::clone(&pair));
        let mut pumps = lock(&shared.pumps);
        for dir in [Dir::ToServer, Dir::ToClient] {
            let shared = Arc::clone(shared);
            let pair = Arc::clone(&pair);
            pumps.push(std::thread::spawn(move || pump(&shared, &pair, dir)));
        }
    }
}

/// What to do with one chunk read in some direction.
struct Verdict {
    delay: Duration,
    blackhole: bool,
    /// Forward only this many bytes, then cut the connection.
    cut_at: Option<usize>,
}

fn judge(shared: &Shared, dir: Dir, n: usize) -> Verdict {
    let mut faults = lock(&shared.faults);
    let i = dir.index();
    let delay = faults.delay[i];
    let blackhole = faults.blackhole[i];
    let mut cut_at = None;
    if !blackhole {
        if let Some(left) = faults.cut_after[i] {
            if left <= n as u64 {
                cut_at = Some(left as usize);
                faults.cut_after[i] = None;
            } else {
                faults.cut_after[i] = Some(left - n as u64);
            }
        }
    }
    Verdict { delay, blackhole, cut_at }
}

fn pump(shared: &Shared, pair: &Pair, dir: Dir) {
    let (mut from, mut to) = match dir {
        Dir::ToServer => (&pair.client, &pair.server),
        Dir::ToClient => (&pair.server, &pair.client),
    };
    let i = dir.index();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let read_at = Instant::now();
        let verdict = judge(shared, dir, n);
        let until = read_at + verdict.delay;
        // The delay the proxy injects, looking every slice for a stop or a cut.
        eventually_every(until.saturating_duration_since(Instant::now()), SLEEP_SLICE, || {
            (shared.stop.load(Ordering::Acquire) || !pair.alive.load(Ordering::Acquire)).then_some(())
        });
        if !pair.alive.load(Ordering::Acquire) {
            break;
        }
        if verdict.blackhole {
            shared.dropped[i].fetch_add(n as u64, Ordering::AcqRel);
            continue;
        }
        let forward = verdict.cut_at.unwrap_or(n);
        if forward > 0 {
            if to.write_all(&buf[..forward]).is_err() {
                break;
            }
            if dir == Dir::ToServer {
                lock(&pair.sent).extend_from_slice(&buf[..forward]);
            }
            pair.forwarded[i].fetch_add(forward as u64, Ordering::AcqRel);
            shared.forwarded[i].fetch_add(forward as u64, Ordering::AcqRel);
        }
        if verdict.cut_at.is_some() {
            shared.dropped[i].fetch_add((n - forward) as u64, Ordering::AcqRel);
            break;
        }
    }
    pair.cut();
}
