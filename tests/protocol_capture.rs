//! Records the bytes of a real client session — handshake, ACQUIRE → G, RELEASE → R —
//! against a real `ticketing server` process, checks every byte that is not random
//! against the layout of docs/protocol.md, and checks the random ones by recomputing
//! the HMACs from the captured nonces. Run with `--nocapture` to print the dump that
//! docs/protocol.md §6 shows.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{start_server, TOKEN};
use ticketing::proto::frame::{encode_request, Request};
use ticketing::proto::handshake::{self, CLIENT_LABELS};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    ToServer,
    ToClient,
}

/// A stream that keeps a copy of every byte, by direction, merging consecutive chunks.
struct Tap {
    inner: TcpStream,
    log: Vec<(Dir, Vec<u8>)>,
}

impl Tap {
    fn record(&mut self, dir: Dir, bytes: &[u8]) {
        match self.log.last_mut() {
            Some((d, buf)) if *d == dir => buf.extend_from_slice(bytes),
            _ => self.log.push((dir, bytes.to_vec())),
        }
    }

    /// Reads one response frame (u32 length + payload).
    fn read_frame(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.read_exact(&mut body).unwrap();
        [len.to_vec(), body].concat()
    }
}

impl Read for Tap {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.record(Dir::ToClient, &buf[..n]);
        Ok(n)
    }
}

impl Write for Tap {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.record(Dir::ToServer, &buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| line.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn a_real_session_byte_by_byte() {
    let server = start_server(&[("TICKETING_NODE_ID", "1")]);
    let stream = TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut tap = Tap { inner: stream, log: Vec::new() };
    let key = handshake::auth_key(TOKEN.as_bytes());
    let welcome = handshake::client_handshake(&mut tap, &key, &CLIENT_LABELS).unwrap();

    let (key_name, owner) = ("seat:42", "box-office-1");
    let mut frame = Vec::new();
    encode_request(
        &mut frame,
        1,
        &Request::Acquire { lease_s: 30, wait_ms: 5000, key: key_name.into(), owner: owner.into() },
    );
    tap.write_all(&frame).unwrap();
    let granted = tap.read_frame();
    let token = u64_at(&granted, 9);
    frame.clear();
    encode_request(&mut frame, 2, &Request::Release { token, key: key_name.into(), owner: owner.into() });
    tap.write_all(&frame).unwrap();
    let released = tap.read_frame();

    let log = tap.log.clone();
    // HELLO, AUTH, WELCOME, ACQUIRE, G, RELEASE, R: strictly alternating directions.
    let dirs: Vec<Dir> = log.iter().map(|(d, _)| *d).collect();
    use Dir::*;
    assert_eq!(dirs, [ToClient, ToServer, ToClient, ToServer, ToClient, ToServer, ToClient]);
    let [hello, auth, welcome_raw, acquire, g, release, r] =
        <[Vec<u8>; 7]>::try_from(log.into_iter().map(|(_, b)| b).collect::<Vec<_>>()).unwrap();
    assert_eq!((g.as_slice(), r.as_slice()), (granted.as_slice(), released.as_slice()));

    // HELLO: magic, version, port kind, reserved; then the server nonce (random).
    assert_eq!(hello.len(), 40);
    assert_eq!(&hello[..8], b"TKT1\x01C\x00\x00");
    let server_nonce: [u8; 32] = hello[8..40].try_into().unwrap();
    // AUTH: magic, version, reserved; client nonce (random); mac over both nonces.
    assert_eq!(auth.len(), 72);
    assert_eq!(&auth[..8], b"TKT1\x01\x00\x00\x00");
    let client_nonce: [u8; 32] = auth[8..40].try_into().unwrap();
    assert_eq!(&auth[40..72], &handshake::client_mac(&key, &CLIENT_LABELS, &server_nonce, &client_nonce)[..]);
    // WELCOME: 'W', proof, node id 1, role 'S', domain (random), leader = own address.
    assert_eq!(welcome_raw[0], b'W');
    assert_eq!(
        &welcome_raw[1..33],
        &handshake::server_proof(&key, &CLIENT_LABELS, &client_nonce, &server_nonce)[..]
    );
    assert_eq!(u64_at(&welcome_raw, 33), 1);
    assert_eq!(welcome_raw[41], b'S');
    assert_eq!(u64_at(&welcome_raw, 42), welcome.domain);
    assert_ne!(welcome.domain, 0);
    let leader = server.addr.to_string();
    assert_eq!(welcome_raw[50] as usize, leader.len());
    assert_eq!(&welcome_raw[51..], leader.as_bytes());
    // ACQUIRE id 1: len, 'A', id, lease 30, wait 5000, key, owner.
    let mut want = Vec::new();
    want.extend_from_slice(&(5 + 1 + 4 + 1 + key_name.len() as u32 + 1 + owner.len() as u32).to_be_bytes());
    want.extend_from_slice(b"A\x00\x00\x00\x01\x1e\x00\x00\x13\x88");
    want.push(key_name.len() as u8);
    want.extend_from_slice(key_name.as_bytes());
    want.push(owner.len() as u8);
    want.extend_from_slice(owner.as_bytes());
    assert_eq!(acquire, want);
    // G id 1: token (the grant's; about the Unix time in µs), lease 30 000 ms.
    assert_eq!(&g[..9], b"\x00\x00\x00\x11G\x00\x00\x00\x01");
    assert_eq!(&g[17..21], &30_000u32.to_be_bytes());
    let now_us =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    assert!(token <= now_us && now_us - token < 60_000_000, "token {token} is about now ({now_us})");
    // RELEASE id 2: len, 'R', id, token, key, owner. R id 2: no body.
    assert_eq!(
        &release[..9],
        &[&(5 + 8 + 1 + 7 + 1 + 12u32).to_be_bytes()[..], b"R\x00\x00\x00\x02"].concat()[..]
    );
    assert_eq!(u64_at(&release, 9), token);
    assert_eq!(r, b"\x00\x00\x00\x05R\x00\x00\x00\x02");

    for (name, bytes) in [
        ("HELLO (server -> client)", &hello),
        ("AUTH (client -> server)", &auth),
        ("WELCOME (server -> client)", &welcome_raw),
        ("ACQUIRE id=1 (client -> server)", &acquire),
        ("GRANTED id=1 (server -> client)", &g),
        ("RELEASE id=2 (client -> server)", &release),
        ("RELEASED id=2 (server -> client)", &r),
    ] {
        eprintln!("{name}, {} bytes\n{}\n", bytes.len(), hex(bytes));
    }
    eprintln!("token {token}, domain {}, leader {leader}", welcome.domain);
}
