//! Ports for the servers the tests start, and starting servers on them until the ports
//! hold.
//!
//! A port found free with `bind(":0")` comes from the kernel's ephemeral range
//! (32768–60999 on Linux by default), the range the kernel also hands to every
//! outgoing connection and to the next `bind(":0")` of a test running beside: between
//! the check and the server's own bind it can be taken, and the server then exits
//! before it listens. These ports come from below that range, from a process-wide
//! list (no two tests of one binary get the same port), and each is checked free on
//! every loopback address the tests use (127.0.0.1..=127.0.0.9).
//!
//! Checked free is not held: another process (another test binary, a package's suite, a
//! tool) can still bind one before the server does. A standalone server listens on port
//! 0 and says where ([`Server`](super::process::Server) reads it); servers whose ports
//! must be known in advance (a cluster's peer list) start through [`with_fresh_ports`],
//! which starts them again on new ports when one could not bind its address.
//!
//! This file is compiled once per test binary, as `common::ports` (tests/common/mod.rs):
//! one list per process, so two helpers of one binary never hand out the same port.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

/// The ports handed out: `LOW..HIGH` for single ports and the lower port of a pair;
/// a pair's upper port (`p + 1000`) stays below 32768.
const LOW: u16 = 12_000;
const HIGH: u16 = 31_000;

struct Taken {
    next: u32,
    ports: HashSet<u16>,
}

static TAKEN: Mutex<Option<Taken>> = Mutex::new(None);

fn free_everywhere(port: u16) -> bool {
    (1..=9).all(|i| TcpListener::bind((format!("127.0.0.{i}").as_str(), port)).is_ok())
}

/// A port `p` such that `p + offset` is free too (`offset` 0: one port).
fn take(offset: u16) -> u16 {
    let mut guard = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    // Start where another test binary run at the same time is unlikely to be.
    let taken = guard
        .get_or_insert_with(|| Taken { next: std::process::id().wrapping_mul(7919), ports: HashSet::new() });
    let span = u32::from(HIGH - LOW);
    for _ in 0..span {
        let p = LOW + (taken.next % span) as u16;
        taken.next = taken.next.wrapping_add(1);
        let q = p + offset;
        if taken.ports.contains(&p) || taken.ports.contains(&q) {
            continue;
        }
        if free_everywhere(p) && (offset == 0 || free_everywhere(q)) {
            taken.ports.insert(p);
            taken.ports.insert(q);
            if STEAL.with(|steal| steal.replace(false)) {
                let held = TcpListener::bind(("127.0.0.1", p)).expect("the port just found free");
                STOLEN.with(|stolen| stolen.borrow_mut().push(held));
            }
            return p;
        }
    }
    panic!("no free port in {LOW}..{HIGH} on 127.0.0.1..=127.0.0.9");
}

thread_local! {
    /// Whether the next port this thread is handed is taken right after its check.
    static STEAL: Cell<bool> = const { Cell::new(false) };
    /// The listeners holding the ports taken so, until the thread ends.
    static STOLEN: RefCell<Vec<TcpListener>> = const { RefCell::new(Vec::new()) };
}

/// Makes the next port handed out to this thread taken on 127.0.0.1 right after it was
/// found free — as another process can take it — and held until the thread ends: for
/// the tests that show servers start again on other ports ([`with_fresh_ports`]).
pub fn steal_next() {
    STEAL.with(|steal| steal.set(true));
}

/// The ports taken by [`steal_next`] in this thread so far.
pub fn stolen() -> Vec<u16> {
    STOLEN.with(|stolen| stolen.borrow().iter().map(|l| l.local_addr().unwrap().port()).collect())
}

/// A free port `p` such that `p + 1000` (a node's peer port) is free too.
pub fn free_port_pair() -> u16 {
    take(1000)
}

/// One free port.
pub fn free_port() -> u16 {
    take(0)
}

/// How many times [`with_fresh_ports`] starts servers at most.
pub const ATTEMPTS: u32 = 5;

/// Did a server fail to start because its address was taken (see
/// [`Server::try_start`](super::process::Server::try_start))?
pub fn addr_in_use(why: &str) -> bool {
    why.contains(super::process::ADDR_IN_USE)
}

/// Runs `start` — which picks its ports (with [`free_port`], [`free_port_pair`]) and
/// starts its servers on them — until no server failed for an address in use, at most
/// [`ATTEMPTS`] times: another process can bind a port between the check and the
/// server's bind. What a failed attempt started is dropped (killed) with it. Panics with
/// `what` and the last failure otherwise.
pub fn with_fresh_ports<T>(what: &str, mut start: impl FnMut() -> Result<T, String>) -> T {
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        match start() {
            Ok(started) => return started,
            Err(why) if addr_in_use(&why) => {
                eprintln!(
                    "{what}: attempt {attempt} of {ATTEMPTS} found a port taken, starting on others: {why}"
                );
                last = why;
            }
            Err(why) => panic!("{what}: {why}"),
        }
    }
    panic!("{what}: a port was taken on each of {ATTEMPTS} attempts; the last: {last}")
}

/// An address on 127.0.0.1 where no server listens, and none can while this is kept:
/// a socket bound to it that does not listen, so a connection there is refused. A port
/// merely found free could be taken by another process's server before it is used.
pub struct Closed {
    pub addr: SocketAddr,
    _held: socket2::Socket,
}

/// A [`Closed`] address on a port the kernel picks.
pub fn closed_addr() -> Closed {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind 127.0.0.1:0");
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    Closed { addr, _held: socket }
}
