//! The raw protocol from the tests' side: a connection that sends frames and reads
//! answers ([`Raw`]), the requests the tests build, and one-shot requests.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ticketing::proto::frame::{decode_response, encode_request, Request, Response};
use ticketing::proto::handshake::{self, Welcome, CLIENT_LABELS};
use ticketing::proto::io::FrameReader;
use ticketing::proto::limits::RESPONSE_FRAME_LEN_MAX;

use super::{PEER_TOKEN, TOKEN};

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

/// STATUS as a map.
pub fn status_map(c: &mut Raw, id: u32) -> HashMap<String, String> {
    match c.call(id, &Request::Status) {
        Response::Status { text } => status_lines(&text),
        other => panic!("{other:?}"),
    }
}

/// An operator connection: the client port with the operator (peer) secret.
pub fn operator(addr: SocketAddr) -> Raw {
    connect_with(addr, PEER_TOKEN).expect("operator handshake")
}

/// One request on a fresh connection with short timeouts (the operator secret for an
/// admin request, else the client secret); `None` when anything fails.
pub fn call(addr: SocketAddr, request: &Request, read_timeout: Duration) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    // Admin ops need the operator (peer) secret; it is accepted on the client port too.
    let token = if request.is_admin() { PEER_TOKEN } else { TOKEN };
    handshake::client_handshake(&mut stream, &handshake::auth_key(token.as_bytes()), &CLIENT_LABELS).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    let mut buf = Vec::new();
    encode_request(&mut buf, 1, request);
    stream.write_all(&buf).ok()?;
    let mut frames = FrameReader::new(stream, RESPONSE_FRAME_LEN_MAX);
    let payload = frames.read_payload().ok()?;
    decode_response(payload).ok().map(|(_, r)| r)
}

/// `KEY=VALUE` lines as a map.
fn status_lines(text: &str) -> HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// STATUS of the node at `addr` on a fresh connection ([`call`]), as a map.
pub fn status(addr: SocketAddr) -> Option<HashMap<String, String>> {
    match call(addr, &Request::Status, Duration::from_secs(1))? {
        Response::Status { text } => Some(status_lines(&text)),
        _ => None,
    }
}
