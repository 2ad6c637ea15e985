//! The metrics listener (`TICKETING_METRICS_LISTEN`): plain HTTP/1.1 on std, one
//! request per connection, on threads of its own, so a scrape can never slow the lock
//! path (it only reads atomics).
//!
//! Paths: `/metrics` (the text exposition format 0.0.4), `/healthz` (200 while the
//! node's threads run), `/readyz` (200 while the node can serve or redirect, 503 with
//! a one-line reason otherwise). Bounded like every listener of the node: a request
//! of at most `REQUEST_BYTES_MAX`, read within `READ_DEADLINE`, the answer written
//! within `WRITE_DEADLINE`, at most `CONNECTIONS_MAX` connections served at once
//! (more are closed at accept).

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
/// The request must arrive within this long.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// The answer must be taken within this long.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 8;

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
            wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, endpoints: Endpoints, stopping: Arc<AtomicBool>) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (worker_endpoints, worker_busy) = (endpoints.clone(), busy.clone());
        let spawned =
            std::thread::Builder::new().name("metrics-conn".into()).stack_size(256 * 1024).spawn(move || {
                serve(stream, &worker_endpoints);
                worker_busy.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One request, one answer, then close.
fn serve(mut stream: TcpStream, endpoints: &Endpoints) {
    let Some((method, path)) = read_request(&mut stream) else {
        let _ = respond(&mut stream, 400, "text/plain", "bad request\n", false);
        return;
    };
    let head = method == "HEAD";
    if method != "GET" && !head {
        let _ = respond(&mut stream, 405, "text/plain", "only GET and HEAD\n", head);
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
            respond(&mut stream, 200, "text/plain; version=0.0.4; charset=utf-8", &body, head)
        }
        "/healthz" => match (endpoints.health)() {
            Ok(()) => respond(&mut stream, 200, "text/plain", "ok\n", head),
            Err(why) => respond(&mut stream, 503, "text/plain", &format!("{why}\n"), head),
        },
        "/readyz" => match (endpoints.ready)() {
            Ok(()) => respond(&mut stream, 200, "text/plain", "ready\n", head),
            Err(why) => respond(&mut stream, 503, "text/plain", &format!("{why}\n"), head),
        },
        _ => respond(&mut stream, 404, "text/plain", "not found: /metrics, /healthz, /readyz\n", head),
    };
}

/// Reads the request line and headers (up to the blank line) within the deadline and
/// the size bound; returns (method, path).
fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
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
    stream.set_write_timeout(Some(WRITE_DEADLINE))?;
    stream.write_all(&out)?;
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
}
