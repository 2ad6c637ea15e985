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

pub const TOKEN: &str = "test-secret-0123456789";

/// A `ticketing server` process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: mpsc::Receiver<String>,
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
    let mut child = cmd.spawn().expect("start ticketing server");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("server printed its listen address");
        if let Some(rest) = line.split(" listening on ").nth(1) {
            let addr: SocketAddr = rest.split_whitespace().next().unwrap().parse().unwrap();
            return ServerProcess {
                child,
                addr,
                log: rx,
            };
        }
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
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let welcome = handshake::client_handshake(
        &mut stream,
        &handshake::auth_key(token.as_bytes()),
        &CLIENT_LABELS,
    )?;
    let frames = FrameReader::new(stream.try_clone().unwrap(), RESPONSE_FRAME_LEN_MAX);
    Ok(Raw {
        stream,
        frames,
        welcome,
    })
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
            Err(e) => {
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut
            }
        }
    }
}

pub fn acquire(key: &str, owner: &str, lease_s: u8, wait_ms: u32) -> Request {
    Request::Acquire {
        lease_s,
        wait_ms,
        key: key.into(),
        owner: owner.into(),
    }
}

pub fn release(key: &str, owner: &str, token: u64) -> Request {
    Request::Release {
        token,
        key: key.into(),
        owner: owner.into(),
    }
}

pub fn granted_token(response: &Response) -> u64 {
    match response {
        Response::Granted { token, .. } => *token,
        other => panic!("expected G, got {other:?}"),
    }
}
