//! Helpers shared by the integration tests: start the real binary, speak the raw
//! protocol to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ticketing::proto::frame::{decode_response, encode_request, Request, Response};
use ticketing::proto::handshake::{self, Welcome, CLIENT_LABELS};
use ticketing::proto::io::FrameReader;
use ticketing::proto::limits::RESPONSE_FRAME_LEN_MAX;

pub mod bindings;
pub mod ports;
#[allow(unused_imports)]
pub use ports::{free_port, free_port_pair};

pub const TOKEN: &str = "test-secret-0123456789";
/// The peer and operator secret of test clusters (it must differ from `TOKEN`).
pub const PEER_TOKEN: &str = "test-peer-secret-0123456789";

/// A `ticketing server` process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: mpsc::Receiver<String>,
}

impl ServerProcess {
    /// The exit code once the process has exited by itself, waiting up to `within`;
    /// panics (naming `what`) if it is still running then.
    pub fn exit_code_within(&mut self, within: Duration, what: &str) -> Option<i32> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(std::time::Instant::now() < deadline, "{what} kept running");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl ServerProcess {
    /// The first line of its log from now on that `matches`, waiting up to `within`;
    /// panics (naming `what`, with the lines read) if none comes.
    pub fn wait_log(&self, within: Duration, what: &str, matches: impl Fn(&str) -> bool) -> String {
        self.log_until(within, what, matches).pop().unwrap()
    }

    /// [`ServerProcess::wait_log`], returning the lines read before the match too.
    pub fn log_until(&self, within: Duration, what: &str, matches: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = std::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) => {
                    let found = matches(&line);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("no line of {what} within {within:?}; the log:\n{}", seen.join("\n")),
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ticketing")
}

/// Starts a standalone server on an ephemeral loopback port with `extra` environment.
pub fn start_server(extra: &[(&str, &str)]) -> ServerProcess {
    let mut cmd = Command::new(bin());
    cmd.arg("server")
        .env_clear()
        .env("TICKETING_LISTEN", "127.0.0.1:0")
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    // The child is killed and waited for by `ServerProcess::drop`.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().expect("start ticketing server");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    // TICKETING_TEST_LOGS=DIR keeps every server's log in DIR/<pid>.log for debugging.
    let mut keep = std::env::var_os("TICKETING_TEST_LOGS").map(|dir| {
        let path = std::path::Path::new(&dir).join(format!("{}.log", child.id()));
        std::fs::File::create(path).expect("log file")
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(file) = keep.as_mut() {
                let _ = writeln!(file, "{line}");
            }
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // What it printed before it listened: shown if it never does.
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(line) => line,
            Err(e) => {
                let exit = match e {
                    mpsc::RecvTimeoutError::Disconnected => {
                        format!("exited ({:?})", child.wait().ok().and_then(|s| s.code()))
                    }
                    mpsc::RecvTimeoutError::Timeout => "printed no listen address within 10 s".to_string(),
                };
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server {exit}; environment {extra:?}; its log:\n{}", before.join("\n"));
            }
        };
        if let Some(rest) = line.split(" listening on ").nth(1) {
            let addr: SocketAddr = rest.split_whitespace().next().unwrap().parse().unwrap();
            return ServerProcess { child, addr, log: rx };
        }
        before.push(line);
    }
}

/// A raw protocol connection.
pub struct Raw {
    pub stream: TcpStream,
    pub frames: FrameReader<TcpStream>,
    pub welcome: Welcome,
}

pub fn connect(addr: SocketAddr) -> Raw {
    connect_with(addr, TOKEN).expect("handshake")
}

pub fn connect_with(addr: SocketAddr, token: &str) -> Result<Raw, handshake::HandshakeError> {
    let mut stream = TcpStream::connect(addr).map_err(handshake::HandshakeError::Io)?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.set_nodelay(true).unwrap();
    let welcome =
        handshake::client_handshake(&mut stream, &handshake::auth_key(token.as_bytes()), &CLIENT_LABELS)?;
    let frames = FrameReader::new(stream.try_clone().unwrap(), RESPONSE_FRAME_LEN_MAX);
    Ok(Raw { stream, frames, welcome })
}

impl Raw {
    pub fn send(&mut self, id: u32, request: &Request) {
        let mut buf = Vec::new();
        encode_request(&mut buf, id, request);
        self.stream.write_all(&buf).unwrap();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    pub fn recv(&mut self) -> (u32, Response) {
        let payload = self.frames.read_payload().expect("a response frame");
        decode_response(payload).expect("a valid response")
    }

    pub fn call(&mut self, id: u32, request: &Request) -> Response {
        self.send(id, request);
        let (got, response) = self.recv();
        assert_eq!(got, id, "response id");
        response
    }

    /// True when the server closed the connection (EOF or reset) within the timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
        }
    }
}

pub fn acquire(key: &str, owner: &str, lease_s: u8, wait_ms: u32) -> Request {
    Request::Acquire { lease_s, wait_ms, key: key.into(), owner: owner.into() }
}

pub fn release(key: &str, owner: &str, token: u64) -> Request {
    Request::Release { token, key: key.into(), owner: owner.into() }
}

pub fn granted_token(response: &Response) -> u64 {
    match response {
        Response::Granted { token, .. } => *token,
        other => panic!("expected G, got {other:?}"),
    }
}

/// A cluster of real processes on 127.0.0.1..=127.0.0.n, all on one port.
pub struct Cluster {
    pub port: u16,
    pub nodes: Vec<Option<ServerProcess>>,
    pub peers: String,
}

impl Cluster {
    pub fn start(n: usize, extra: &[(&str, &str)]) -> Cluster {
        let port = free_port_pair();
        let peers: Vec<String> = (1..=n).map(|i| format!("{i}@127.0.0.{i}:{port}")).collect();
        let peers = peers.join(",");
        let mut cluster = Cluster { port, nodes: Vec::new(), peers };
        for i in 1..=n {
            let node = cluster.spawn(i as u64, &format!("127.0.0.{i}:{port}"), "new", extra);
            cluster.nodes.push(Some(node));
        }
        cluster
    }

    /// Starts one node process with the cluster's peer list.
    pub fn spawn(&self, id: u64, addr: &str, state: &str, extra: &[(&str, &str)]) -> ServerProcess {
        let mut env: Vec<(String, String)> = vec![
            ("TICKETING_LISTEN".into(), addr.into()),
            ("TICKETING_NODE_ID".into(), id.to_string()),
            ("TICKETING_CLUSTER_SELF".into(), addr.into()),
            ("TICKETING_CLUSTER_PEERS".into(), self.peers.clone()),
            ("TICKETING_CLUSTER_STATE".into(), state.into()),
            ("TICKETING_PEER_AUTH_TOKEN".into(), PEER_TOKEN.into()),
        ];
        for (k, v) in extra {
            env.push((k.to_string(), v.to_string()));
        }
        let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        start_server(&refs)
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        format!("127.0.0.{}:{}", i + 1, self.port).parse().unwrap()
    }

    /// Index of the node that says it leads, waiting up to `timeout`.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            for (i, node) in self.nodes.iter().enumerate() {
                if node.is_none() {
                    continue;
                }
                if let Ok(mut c) = connect_with(self.addr(i), TOKEN) {
                    if c.welcome.role == b'L' {
                        // The leader serves once its no-op is applied: check with a QUERY.
                        c.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                        if let Response::Free | Response::Holder { .. } =
                            c.call(1, &Request::Query { key: "probe".into() })
                        {
                            return i;
                        }
                    }
                }
            }
            assert!(std::time::Instant::now() < deadline, "no leader within {timeout:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
    }

    pub fn signal(&self, i: usize, sig: &str) {
        let pid = self.nodes[i].as_ref().unwrap().child.id().to_string();
        assert!(std::process::Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }
}

/// STATUS as a map.
pub fn status_map(c: &mut Raw, id: u32) -> std::collections::HashMap<String, String> {
    match c.call(id, &Request::Status) {
        Response::Status { text } => text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// A child process killed (and reaped) however the test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
