//! The metrics listener (`TICKETING_METRICS_LISTEN`): plain HTTP/1.1 on std, one
//! request per connection, on threads of its own, so a scrape can never slow the lock
//! path (it only reads atomics).
//!
//! Paths: `/metrics` (the text exposition format 0.0.4), `/healthz` (200 while the
//! node's threads run), `/readyz` (200 while the node can serve or redirect, 503 with
//! a one-line reason otherwise). Bounded like every listener of the node: a request
//! of at most `REQUEST_BYTES_MAX`, its first byte within `FIRST_BYTE_DEADLINE` and the
//! whole of it within `READ_DEADLINE`, the answer written within `WRITE_DEADLINE`, at
//! most `CONNECTIONS_MAX` connections served at once and `CONNECTIONS_PER_IP_MAX` from
//! one address (more are closed at accept): one address holding connections open
//! cannot keep the scrapes of others out.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::process::ProcessFigures;
use super::Metrics;

/// Largest request (request line and headers) read, in bytes.
pub const REQUEST_BYTES_MAX: usize = 8 * 1024;
/// The request's first byte must arrive within this long (a scraper sends its request
/// as soon as it is connected).
pub const FIRST_BYTE_DEADLINE: Duration = Duration::from_secs(1);
/// The whole request must arrive within this long.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// The whole answer must be taken within this long.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 8;
/// Connections served at once from one IP address (an IPv6 address counts by its /64).
pub const CONNECTIONS_PER_IP_MAX: usize = 2;

/// `Ok` when the node is fit for the check, else the one-line reason.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the listener answers with.
#[derive(Clone)]
pub struct Endpoints {
    pub metrics: Arc<Metrics>,
    /// Copies figures the node keeps elsewhere (its STATUS counters, the connection
    /// table) into `metrics` just before a scrape renders them: they cost the paths
    /// that keep them nothing more.
    pub refresh: Arc<dyn Fn(&Metrics) + Send + Sync>,
    /// `/healthz`: the node's loops run.
    pub health: Check,
    /// `/readyz`: the node can serve or redirect requests.
    pub ready: Check,
}

/// A running metrics listener.
pub struct MetricsServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `listen` and serves `endpoints` until [`MetricsServer::stop`].
    pub fn start(listen: SocketAddr, endpoints: Endpoints) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = stopping.clone();
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || accept_loop(listener, endpoints, stopping))?
        };
        Ok(MetricsServer { addr, stopping, thread: Some(thread) })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        // Without the wake-up connection the accept loop would never return: then the
        // thread is left to end with the process rather than waited for.
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn accept_loop(listener: TcpListener, endpoints: Endpoints, stopping: Arc<AtomicBool>) {
    let busy = Arc::new(AtomicUsize::new(0));
    let per_ip = crate::slots::GroupCounter::new(CONNECTIONS_PER_IP_MAX);
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let Some(ip_slot) = stream.peer_addr().ok().and_then(|peer| per_ip.take(peer.ip())) else {
            continue;
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (worker_endpoints, worker_busy) = (endpoints.clone(), busy.clone());
        let spawned =
            std::thread::Builder::new().name("metrics-conn".into()).stack_size(256 * 1024).spawn(move || {
                let mut stream = stream;
                serve(&mut stream, &worker_endpoints);
                // Places are given back before the close, so a client that saw its
                // answer end can always connect again.
                drop(ip_slot);
                worker_busy.fetch_sub(1, Ordering::SeqCst);
                drop(stream);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One request, one answer, then close.
fn serve(stream: &mut TcpStream, endpoints: &Endpoints) {
    let Some((method, path)) = read_request(stream) else {
        let _ = respond(stream, 400, "text/plain", "bad request\n", false);
        return;
    };
    let head = method == "HEAD";
    if method != "GET" && !head {
        let _ = respond(stream, 405, "text/plain", "only GET and HEAD\n", head);
        return;
    }
    // The query string does not matter.
    let path = path.split('?').next().unwrap_or("");
    let _ = match path {
        "/metrics" => {
            (endpoints.refresh)(&endpoints.metrics);
            let mut body = endpoints.metrics.render(&ProcessFigures::read());
            // What /readyz says, as a gauge an alert can use.
            let ready = u64::from((endpoints.ready)().is_ok());
            body.push_str(&format!(
                "# HELP ticketing_ready 1 while the node can serve or redirect (as /readyz says).\n\
                 # TYPE ticketing_ready gauge\nticketing_ready {ready}\n"
            ));
            respond(stream, 200, "text/plain; version=0.0.4; charset=utf-8", &body, head)
        }
        "/healthz" => match (endpoints.health)() {
            Ok(()) => respond(stream, 200, "text/plain", "ok\n", head),
            Err(why) => respond(stream, 503, "text/plain", &format!("{why}\n"), head),
        },
        "/readyz" => match (endpoints.ready)() {
            Ok(()) => respond(stream, 200, "text/plain", "ready\n", head),
            Err(why) => respond(stream, 503, "text/plain", &format!("{why}\n"), head),
        },
        _ => respond(stream, 404, "text/plain", "not found: /metrics, /healthz, /readyz\n", head),
    };
}

/// Reads the request line and headers (up to the blank line) within the deadline and
/// the size bound; returns (method, path).
fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let start = Instant::now();
    let deadline = start + READ_DEADLINE;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let until = if buf.is_empty() { start + FIRST_BYTE_DEADLINE } else { deadline };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || buf.len() > REQUEST_BYTES_MAX {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = std::str::from_utf8(&buf).ok()?;
    let mut words = text.lines().next()?.split_whitespace();
    let (method, path, version) = (words.next()?, words.next()?, words.next()?);
    version.starts_with("HTTP/1.").then(|| (method.to_owned(), path.to_owned()))
}

fn respond(stream: &mut TcpStream, status: u16, kind: &str, body: &str, head: bool) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body.as_bytes());
    }
    // The deadline is for the whole answer, however slowly the other side reads.
    let deadline = Instant::now() + WRITE_DEADLINE;
    let mut rest = &out[..];
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn paths_methods_and_bad_requests() {
        let metrics = Arc::new(Metrics::default());
        metrics.lock.busy.add(3);
        let ready: Check = Arc::new(|| Err("no leader known".into()));
        let health: Check = Arc::new(|| Ok(()));
        let server = MetricsServer::start(
            "127.0.0.1:0".parse().unwrap(),
            Endpoints { metrics, refresh: Arc::new(|_| {}), health, ready },
        )
        .unwrap();
        let addr = server.local_addr();
        let m = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n") && m.contains("version=0.0.4"), "{m}");
        assert!(m.contains("\nticketing_busy_total 3\n") && m.contains("\nticketing_ready 0\n"), "{m}");
        assert!(get(addr, "GET /healthz HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
        let r = get(addr, "GET /readyz HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503") && r.ends_with("no leader known\n"), "{r}");
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, "garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        let head = get(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"), "{head}");
        // A request larger than the bound gets 400, not an unbounded buffer.
        let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(REQUEST_BYTES_MAX * 2));
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(big.as_bytes());
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        server.stop();
    }

    /// Silent connections from one address take at most its share of places and are
    /// closed after the first-byte deadline; another address is scraped meanwhile.
    #[test]
    fn one_address_cannot_keep_the_scrapes_of_others_out() {
        let metrics = Arc::new(Metrics::default());
        let ok: Check = Arc::new(|| Ok(()));
        let server = MetricsServer::start(
            "0.0.0.0:0".parse().unwrap(),
            Endpoints { metrics, refresh: Arc::new(|_| {}), health: ok.clone(), ready: ok },
        )
        .unwrap();
        let port = server.local_addr().port();
        let at = |ip: &str| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };
        // From 127.0.0.3 (a connection's source is 127.0.0.1 unless bound).
        let from_3 = || -> TcpStream {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.bind(&"127.0.0.3:0".parse::<SocketAddr>().unwrap().into()).unwrap();
            socket.connect(&at("127.0.0.1").into()).unwrap();
            socket.into()
        };
        let silent: Vec<TcpStream> = (0..CONNECTIONS_MAX * 2).map(|_| from_3()).collect();
        std::thread::sleep(Duration::from_millis(100));
        // Beyond its share, 127.0.0.3's connections are closed at once.
        let mut third = from_3();
        third.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let _ = third.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
        let mut out = String::new();
        let _ = third.read_to_string(&mut out);
        assert_eq!(out, "", "refused at accept");
        // Another address is served.
        let other = get(at("127.0.0.1"), "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 200"), "{other}");
        // The two silent connections that were taken are closed after the first-byte
        // deadline (with a 400), not held for the whole read deadline.
        let started = Instant::now();
        let mut closed = 0;
        for mut s in silent {
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut out = Vec::new();
            if s.read_to_end(&mut out).is_ok() && out.starts_with(b"HTTP/1.1 400") {
                closed += 1;
            }
        }
        assert_eq!(closed, CONNECTIONS_PER_IP_MAX);
        assert!(started.elapsed() < READ_DEADLINE, "{:?}", started.elapsed());
        server.stop();
    }
}
