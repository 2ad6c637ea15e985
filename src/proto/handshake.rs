//! The challenge-response handshake (docs/protocol.md §3): HELLO → AUTH → WELCOME or `X`.
//!
//! The auth token is the HMAC key and never crosses the wire. The server's fresh nonce
//! makes a recorded AUTH useless on a new connection; the server's proof lets the
//! client know it talks to a holder of the same token. Tags are compared only with
//! `ring::hmac::verify`, which runs in constant time.

use std::io::{self, Read, Write};

use byteorder::{BigEndian, ByteOrder};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// First four bytes of HELLO and AUTH.
pub const MAGIC: [u8; 4] = *b"TKT1";
/// Protocol version spoken by this build.
pub const VERSION: u8 = 1;
/// Size of HELLO in bytes.
pub const HELLO_LEN: usize = 40;
/// Size of AUTH in bytes.
pub const AUTH_LEN: usize = 72;
/// Size of a nonce and of a mac, in bytes.
pub const NONCE_LEN: usize = 32;

pub type Nonce = [u8; NONCE_LEN];
pub type Mac = [u8; 32];

/// The two HMAC message labels of one port kind.
#[derive(Clone, Copy, Debug)]
pub struct Labels {
    pub port_kind: u8,
    pub client: &'static [u8],
    pub server: &'static [u8],
}

/// Labels of the client port.
pub const CLIENT_LABELS: Labels =
    Labels { port_kind: b'C', client: b"ticketing client v1", server: b"ticketing server v1" };

/// Labels of the peer port.
pub const PEER_LABELS: Labels =
    Labels { port_kind: b'P', client: b"ticketing peer v1", server: b"ticketing peer-server v1" };

/// Role letters in WELCOME.
pub mod role {
    pub const LEADER: u8 = b'L';
    pub const FOLLOWER: u8 = b'F';
    pub const CANDIDATE: u8 = b'C';
    pub const LEARNER: u8 = b'N';
    pub const STANDALONE: u8 = b'S';
}

/// What a WELCOME tells the client about the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub node_id: u64,
    pub role: u8,
    pub domain: u64,
    /// The leader's client address as configured; empty when unknown.
    pub leader: String,
}

#[derive(Debug)]
pub enum HandshakeError {
    Io(io::Error),
    /// The peer does not speak TKT1.
    BadMagic,
    /// Server side: the dialer started TLS (a TLS record where AUTH belongs) at a port
    /// without TLS.
    SpokeTls,
    /// The peer speaks another protocol version.
    VersionMismatch(u8),
    /// Connected to the wrong kind of port (client vs peer).
    WrongPortKind(u8),
    /// The client's mac did not verify (server side).
    AuthFailed,
    /// The server's proof did not verify (client side): not our server, or another token.
    BadProof,
    /// The server answered `X` with this reason.
    Rejected(String),
    /// The server's answer was not a WELCOME or `X`.
    Malformed(&'static str),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "handshake i/o: {e}"),
            HandshakeError::BadMagic => write!(f, "peer does not speak the TKT1 protocol"),
            HandshakeError::SpokeTls => write!(f, "peer started TLS at a port without TLS"),
            HandshakeError::VersionMismatch(v) => write!(f, "protocol version {v} is not 1"),
            HandshakeError::WrongPortKind(k) => {
                write!(f, "connected to a port of kind {:?}", *k as char)
            }
            HandshakeError::AuthFailed => write!(f, "authentication failed"),
            HandshakeError::BadProof => {
                write!(f, "server proof did not verify (wrong auth token or not a Ticketing server)")
            }
            HandshakeError::Rejected(why) => write!(f, "server refused the handshake: {why}"),
            HandshakeError::Malformed(why) => write!(f, "malformed handshake: {why}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

/// The HMAC key made from an auth token.
pub fn auth_key(token: &[u8]) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, token)
}

/// A fresh nonce from the operating system's CSPRNG.
pub fn fresh_nonce() -> Nonce {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new().fill(&mut nonce).expect("the operating system's random source failed");
    nonce
}

fn mac_of(key: &hmac::Key, label: &[u8], first: &Nonce, second: &Nonce) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(label);
    ctx.update(first);
    ctx.update(second);
    ctx.sign()
}

fn verify_mac(key: &hmac::Key, label: &[u8], first: &Nonce, second: &Nonce, tag: &Mac) -> bool {
    let mut msg = Vec::with_capacity(label.len() + 2 * NONCE_LEN);
    msg.extend_from_slice(label);
    msg.extend_from_slice(first);
    msg.extend_from_slice(second);
    hmac::verify(key, &msg, tag).is_ok()
}

/// Client mac = HMAC(token, client label ‖ server nonce ‖ client nonce).
pub fn client_mac(key: &hmac::Key, labels: &Labels, server: &Nonce, client: &Nonce) -> Mac {
    to_mac(mac_of(key, labels.client, server, client))
}

/// Server proof = HMAC(token, server label ‖ client nonce ‖ server nonce).
pub fn server_proof(key: &hmac::Key, labels: &Labels, client: &Nonce, server: &Nonce) -> Mac {
    to_mac(mac_of(key, labels.server, client, server))
}

fn to_mac(tag: hmac::Tag) -> Mac {
    let mut mac = [0u8; 32];
    mac.copy_from_slice(tag.as_ref());
    mac
}

pub fn encode_hello(labels: &Labels, nonce: &Nonce) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    out[5] = labels.port_kind;
    // out[6..8]: reserved u16 = 0
    out[8..].copy_from_slice(nonce);
    out
}

/// Checks a HELLO and returns the server nonce.
pub fn decode_hello(raw: &[u8; HELLO_LEN], labels: &Labels) -> Result<Nonce, HandshakeError> {
    if raw[..4] != MAGIC {
        return Err(HandshakeError::BadMagic);
    }
    if raw[4] != VERSION {
        return Err(HandshakeError::VersionMismatch(raw[4]));
    }
    if raw[5] != labels.port_kind {
        return Err(HandshakeError::WrongPortKind(raw[5]));
    }
    Ok(raw[8..].try_into().expect("32 bytes"))
}

pub fn encode_auth(nonce: &Nonce, mac: &Mac) -> [u8; AUTH_LEN] {
    let mut out = [0u8; AUTH_LEN];
    out[..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    // out[5..8]: reserved
    out[8..40].copy_from_slice(nonce);
    out[40..].copy_from_slice(mac);
    out
}

/// Splits an AUTH into (client nonce, mac) after checking magic and version.
pub fn decode_auth(raw: &[u8; AUTH_LEN]) -> Result<(Nonce, Mac), HandshakeError> {
    if raw[..4] != MAGIC {
        // A TLS handshake record (type 0x16, version 3.x): the dialer has TLS on and
        // this port has not, a mistake worth naming apart from a foreign protocol.
        if raw[0] == 0x16 && raw[1] == 0x03 {
            return Err(HandshakeError::SpokeTls);
        }
        return Err(HandshakeError::BadMagic);
    }
    if raw[4] != VERSION {
        return Err(HandshakeError::VersionMismatch(raw[4]));
    }
    let nonce = raw[8..40].try_into().expect("32 bytes");
    let mac = raw[40..].try_into().expect("32 bytes");
    Ok((nonce, mac))
}

/// WELCOME bytes: `'W'` · proof · node id u64 · role u8 · domain u64 · leader str8.
pub fn encode_welcome(proof: &Mac, welcome: &Welcome) -> Vec<u8> {
    let leader = welcome.leader.as_bytes();
    let leader = &leader[..leader.len().min(255)];
    let mut out = Vec::with_capacity(1 + 32 + 8 + 1 + 8 + 1 + leader.len());
    out.push(b'W');
    out.extend_from_slice(proof);
    out.extend_from_slice(&welcome.node_id.to_be_bytes());
    out.push(welcome.role);
    out.extend_from_slice(&welcome.domain.to_be_bytes());
    out.push(leader.len() as u8);
    out.extend_from_slice(leader);
    out
}

/// `X` bytes: `'X'` · reason str8.
pub fn encode_reject(reason: &str) -> Vec<u8> {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    let mut out = Vec::with_capacity(2 + reason.len());
    out.push(b'X');
    out.push(reason.len() as u8);
    out.extend_from_slice(reason);
    out
}

/// Reads the server's answer to AUTH: a WELCOME (checked against `expected_proof`) or `X`.
pub fn read_welcome<R: Read>(
    stream: &mut R,
    key: &hmac::Key,
    labels: &Labels,
    client: &Nonce,
    server: &Nonce,
) -> Result<Welcome, HandshakeError> {
    let mut kind = [0u8; 1];
    stream.read_exact(&mut kind)?;
    match kind[0] {
        b'W' => {
            let mut fixed = [0u8; 32 + 8 + 1 + 8 + 1];
            stream.read_exact(&mut fixed)?;
            let proof: Mac = fixed[..32].try_into().expect("32 bytes");
            if !verify_mac(key, labels.server, client, server, &proof) {
                return Err(HandshakeError::BadProof);
            }
            let node_id = BigEndian::read_u64(&fixed[32..40]);
            let role = fixed[40];
            let domain = BigEndian::read_u64(&fixed[41..49]);
            let mut leader = vec![0u8; fixed[49] as usize];
            stream.read_exact(&mut leader)?;
            let leader = String::from_utf8_lossy(&leader).into_owned();
            Ok(Welcome { node_id, role, domain, leader })
        }
        b'X' => {
            let mut len = [0u8; 1];
            stream.read_exact(&mut len)?;
            let mut reason = vec![0u8; len[0] as usize];
            stream.read_exact(&mut reason)?;
            Err(HandshakeError::Rejected(String::from_utf8_lossy(&reason).into_owned()))
        }
        _ => Err(HandshakeError::Malformed("answer to AUTH is neither W nor X")),
    }
}

/// The dialing side: reads HELLO, sends AUTH, reads and verifies WELCOME.
pub fn client_handshake<S: Read + Write>(
    stream: &mut S,
    key: &hmac::Key,
    labels: &Labels,
) -> Result<Welcome, HandshakeError> {
    let mut hello = [0u8; HELLO_LEN];
    stream.read_exact(&mut hello)?;
    let server = decode_hello(&hello, labels)?;
    let client = fresh_nonce();
    let mac = client_mac(key, labels, &server, &client);
    stream.write_all(&encode_auth(&client, &mac))?;
    stream.flush()?;
    read_welcome(stream, key, labels, &client, &server)
}

/// The accepting side: sends HELLO, reads AUTH, verifies it and answers WELCOME, or
/// answers `X` and returns the error (the caller closes the connection).
/// `welcome` is asked only after authentication succeeded, so the node's current
/// role and leader are reported.
pub fn server_handshake<S: Read + Write>(
    stream: &mut S,
    key: &hmac::Key,
    labels: &Labels,
    welcome: impl FnOnce() -> Welcome,
) -> Result<Nonce, HandshakeError> {
    server_handshake_any(stream, &[key], labels, welcome).map(|(nonce, _)| nonce)
}

/// Like [`server_handshake`], but the AUTH may be made with any of `keys`; the proof is
/// made with the key that verified, whose index is returned with the client nonce.
/// (The client port accepts the client secret and the operator secret this way.)
/// Every key is tried, so the time taken does not tell which one matched.
pub fn server_handshake_any<S: Read + Write>(
    stream: &mut S,
    keys: &[&hmac::Key],
    labels: &Labels,
    welcome: impl FnOnce() -> Welcome,
) -> Result<(Nonce, usize), HandshakeError> {
    let server = fresh_nonce();
    stream.write_all(&encode_hello(labels, &server))?;
    stream.flush()?;
    let mut auth = [0u8; AUTH_LEN];
    stream.read_exact(&mut auth)?;
    let (client, mac) = match decode_auth(&auth) {
        Ok(parts) => parts,
        Err(e) => {
            let reason = match &e {
                HandshakeError::VersionMismatch(_) => "unsupported protocol version",
                _ => "not a TKT1 AUTH message",
            };
            let _ = stream.write_all(&encode_reject(reason));
            let _ = stream.flush();
            return Err(e);
        }
    };
    let mut matched = None;
    for (index, key) in keys.iter().enumerate() {
        if verify_mac(key, labels.client, &server, &client, &mac) && matched.is_none() {
            matched = Some(index);
        }
    }
    let Some(index) = matched else {
        let _ = stream.write_all(&encode_reject("authentication failed"));
        let _ = stream.flush();
        return Err(HandshakeError::AuthFailed);
    };
    let proof = server_proof(keys[index], labels, &client, &server);
    stream.write_all(&encode_welcome(&proof, &welcome()))?;
    stream.flush()?;
    Ok((client, index))
}
