//! Bad input never crashes the server, never disturbs other connections and never
//! changes lock state (docs/protocol.md §7).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use ticketing::proto::frame::{encode_request, Request, Response};

/// A small deterministic generator (splitmix64), so a failure replays exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Sends `bytes` on a fresh TCP connection and reads whatever comes back until the
/// server closes or goes quiet.
fn blast(addr: std::net::SocketAddr, bytes: &[u8]) {
    let Ok(mut s) = TcpStream::connect(addr) else { panic!("server stopped accepting") };
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let _ = s.write_all(bytes);
    let mut sink = [0u8; 4096];
    while let Ok(n) = s.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
}

/// The witness: a connection holding a key, which must survive everything.
fn witness(addr: std::net::SocketAddr) -> (Raw, u64) {
    let mut c = connect(addr);
    let token = granted_token(&c.call(1, &acquire("witness", "w", 250, 0)));
    (c, token)
}

fn check_witness(c: &mut Raw, token: u64, id: u32) {
    assert_eq!(c.call(id, &Request::Ping), Response::Pong);
    match c.call(id + 1, &Request::Query { key: "witness".into() }) {
        Response::Holder { token: t, owner, .. } => assert_eq!((t, owner.as_str()), (token, "w")),
        other => panic!("witness lost its hold: {other:?}"),
    }
}

#[test]
fn random_bytes_instead_of_a_handshake() {
    let server = start_server(&[]);
    let (mut w, token) = witness(server.addr);
    let mut rng = Rng(1);
    for round in 0..150u32 {
        let len = rng.below(200) as usize;
        let mut bytes = rng.bytes(len);
        if round % 3 == 0 && bytes.len() >= 5 {
            bytes[..5].copy_from_slice(b"TKT1\x01"); // get past the magic sometimes
        }
        blast(server.addr, &bytes);
    }
    check_witness(&mut w, token, 10);
}

#[test]
fn random_frames_after_a_valid_handshake() {
    let server = start_server(&[]);
    let (mut w, token) = witness(server.addr);
    let mut rng = Rng(2);
    let ops = [b'A', b'R', b'Q', b'S', b'P', b'Z', 0, 0xff];
    for round in 0..300u32 {
        let mut c = connect(server.addr);
        c.stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut bytes = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let body_len = rng.below(40) as usize;
            let op = ops[rng.below(ops.len() as u64) as usize];
            let len = if rng.below(10) == 0 { rng.next() as u32 } else { 5 + body_len as u32 };
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.push(op);
            bytes.extend_from_slice(&(rng.below(5) as u32).to_be_bytes());
            bytes.extend_from_slice(&rng.bytes(body_len));
        }
        if round % 7 == 0 {
            let n = 1 + rng.below(64) as usize;
            bytes = rng.bytes(n);
        }
        let _ = c.stream.write_all(&bytes);
        let mut sink = [0u8; 4096];
        while let Ok(n) = c.stream.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
    }
    check_witness(&mut w, token, 10);
}

#[test]
fn every_truncation_of_a_valid_frame() {
    let server = start_server(&[]);
    let (mut w, token) = witness(server.addr);
    let mut frame = Vec::new();
    encode_request(&mut frame, 5, &acquire("witness", "intruder", 30, 0));
    encode_request(&mut frame, 6, &release("witness", "w", token));
    for cut in 0..frame.len() {
        let mut c = connect(server.addr);
        c.send_raw(&frame[..cut]);
        drop(c);
    }
    // The server has noticed every close (only the witness and the asking connection
    // are open), then nothing changed.
    assert!(
        eventually(Duration::from_secs(10), || status_map(&mut connect(server.addr), 1)["connections"]
            == "2"),
        "the cut connections are still open at the server"
    );
    check_witness(&mut w, token, 10);
}
