//! The peer port's handshake: docs/protocol.md §3 with the peer labels, then one PEER HELLO
//! each way (docs/protocol-cluster.md §2). Blocking, done on short-lived threads; the
//! established connection is then handed to the event loop.
//!
//! ```text
//! PEER HELLO   = len u32 · 'H' · node_id u64 · incarnation u64 · domain u64 · addr str8
//!                [· name str8]                              (only when the node has a name)
//! PEER REFUSAL = len u32 · 'X' · code u8 · reason str8      (then the listener closes)
//! ```
//! The dialer sends its HELLO first; the listener answers with its own or a refusal.
//! After that only the dialer sends Raft frames on the connection: every node dials
//! each peer for its own messages, so each direction has its own TCP stream.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use byteorder::{BigEndian, ByteOrder};

pub use crate::established::{Established, PeerHello};
use crate::proto::handshake::{self, Welcome, PEER_LABELS};
use crate::proto::limits::{check_cluster_name, CLUSTER_NAME_LEN_MAX};
use crate::transport::{self, Duplex};

pub use crate::proto::addr::PEER_PORT_OFFSET;
/// A peer handshake not finished within this long is abandoned.
pub const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a dial may take to connect.
pub const DIAL_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest PEER HELLO / REFUSAL frame `len`.
const HELLO_LEN_MAX: usize = 1 + 8 + 8 + 8 + 1 + 255 + 1 + CLUSTER_NAME_LEN_MAX;
const _: () = assert!(1 + 1 + 1 + 255 + 8 <= HELLO_LEN_MAX, "a REFUSAL fits too");

/// Refusal codes.
pub mod refusal {
    /// This node id was already used by another process in this domain: a restarted
    /// node must be replaced under a new NodeId (docs/operations.md).
    pub const NODE_ID_REUSED: u8 = 1;
    /// The two nodes belong to different fencing domains.
    pub const OTHER_DOMAIN: u8 = 2;
    /// The dialer used the listener's own node id.
    pub const SAME_NODE: u8 = 3;
    /// The dialer is not a member of the listener's configuration (nor, before the
    /// listener knows one, a configured peer or a leader a configured peer named).
    pub const NOT_MEMBER: u8 = 4;
    /// The PEER HELLO was malformed (its address is not UTF-8 `host:port`, say).
    pub const BAD_HELLO: u8 = 5;
    /// The dialer was a member and a committed configuration removed it: it stops.
    pub const REMOVED: u8 = 6;
    /// With TLS: the dialer's certificate is not valid for the host its node id is
    /// known at.
    pub const CERT_MISMATCH: u8 = 7;
    /// The two nodes have different cluster names (`TICKETING_CLUSTER_NAME`; one of
    /// them may have none).
    pub const OTHER_NAME: u8 = 8;
}

/// Why a listener refuses a PEER HELLO, and the leader it knows (0: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u8,
    pub reason: String,
    pub leader_id: u64,
}

/// Why a peer connection could not be made.
#[derive(Debug)]
pub enum PeerError {
    Io(io::Error),
    Handshake(handshake::HandshakeError),
    /// The listener refused us with this code and reason; `leader_id` and `leader` are
    /// the leader it knows (0 and empty when none): the id from the refusal, the client
    /// address from its WELCOME; `domain` is the fencing domain its WELCOME reported.
    Refused {
        code: u8,
        reason: String,
        leader: String,
        leader_id: u64,
        domain: u64,
    },
    Malformed(&'static str),
    /// Dialer side, without TLS: the peer port stayed silent and answers a TLS
    /// ClientHello (`crate::tls::speaks_tls`): TLS is on there and off here.
    SpeaksTls,
    /// Listener side, without TLS: a plain node asked whether this port speaks TLS
    /// (`crate::tls::rest_is_probe`), as it does when the greeting is slow to come.
    TlsProbe,
    /// Listener side: the dialer sent not a byte before it closed the connection or the
    /// handshake timed out (with TLS on this port: it never started TLS).
    Silent(io::Error),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::Io(e) => write!(f, "{e}"),
            PeerError::Handshake(e) => write!(f, "{e}"),
            PeerError::Refused { code, reason, .. } => write!(f, "refused (code {code}): {reason}"),
            PeerError::Malformed(why) => write!(f, "malformed peer hello: {why}"),
            PeerError::SpeaksTls => write!(f, "the peer port speaks TLS and this node does not"),
            PeerError::TlsProbe => write!(f, "a plain node asked whether this port speaks TLS"),
            PeerError::Silent(e) => write!(f, "the dialer sent nothing: {e}"),
        }
    }
}

impl From<io::Error> for PeerError {
    fn from(e: io::Error) -> Self {
        PeerError::Io(e)
    }
}

impl From<handshake::HandshakeError> for PeerError {
    fn from(e: handshake::HandshakeError) -> Self {
        PeerError::Handshake(e)
    }
}

pub fn encode_hello(hello: &PeerHello) -> Vec<u8> {
    let addr = &hello.addr.as_bytes()[..hello.addr.len().min(255)];
    let name = &hello.name.as_bytes()[..hello.name.len().min(CLUSTER_NAME_LEN_MAX)];
    let name_len = if name.is_empty() { 0 } else { 1 + name.len() };
    let mut out = Vec::with_capacity(4 + HELLO_LEN_MAX);
    out.extend_from_slice(&((1 + 24 + 1 + addr.len() + name_len) as u32).to_be_bytes());
    out.push(b'H');
    out.extend_from_slice(&hello.node_id.to_be_bytes());
    out.extend_from_slice(&hello.incarnation.to_be_bytes());
    out.extend_from_slice(&hello.domain.to_be_bytes());
    out.push(addr.len() as u8);
    out.extend_from_slice(addr);
    // Why only when set: a node without a name sends the HELLO it always sent.
    if !name.is_empty() {
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    out
}

/// REFUSAL bytes; `leader_id` is the leader the refusing node knows (0: none), which
/// vouches for it to a joining node (docs/protocol-cluster.md §2).
pub fn encode_refusal(code: u8, reason: &str, leader_id: u64) -> Vec<u8> {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    let mut out = Vec::with_capacity(15 + reason.len());
    out.extend_from_slice(&((1 + 1 + 1 + reason.len() + 8) as u32).to_be_bytes());
    out.push(b'X');
    out.push(code);
    out.push(reason.len() as u8);
    out.extend_from_slice(reason);
    out.extend_from_slice(&leader_id.to_be_bytes());
    out
}

/// Reads one PEER HELLO or REFUSAL.
fn read_hello<R: Read>(stream: &mut R) -> Result<PeerHello, PeerError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if !(3..=HELLO_LEN_MAX).contains(&len) {
        return Err(PeerError::Malformed("length out of range"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    match body[0] {
        b'H' => {
            if len < 26 || len < 26 + body[25] as usize {
                return Err(PeerError::Malformed("bad HELLO size"));
            }
            let addr_end = 26 + body[25] as usize;
            let name = match &body[addr_end..] {
                [] => "",
                [n, name @ ..] if *n as usize == name.len() => std::str::from_utf8(name)
                    .ok()
                    .filter(|name| check_cluster_name(name).is_ok())
                    .ok_or(PeerError::Malformed("HELLO cluster name is not a valid name"))?,
                _ => return Err(PeerError::Malformed("bad HELLO size")),
            };
            // Strict: an address that is not UTF-8 `host:port` is refused, never
            // stored or turned into something else.
            let addr = std::str::from_utf8(&body[26..addr_end])
                .map_err(|_| PeerError::Malformed("HELLO address is not UTF-8"))?;
            crate::proto::addr::check_client_addr(addr)
                .map_err(|_| PeerError::Malformed("HELLO address is not host:port"))?;
            Ok(PeerHello {
                node_id: BigEndian::read_u64(&body[1..9]),
                incarnation: BigEndian::read_u64(&body[9..17]),
                domain: BigEndian::read_u64(&body[17..25]),
                addr: addr.to_owned(),
                name: name.to_owned(),
            })
        }
        b'X' => {
            let reason_len = body[2] as usize;
            if len != 3 + reason_len + 8 {
                return Err(PeerError::Malformed("bad REFUSAL size"));
            }
            Err(PeerError::Refused {
                code: body[1],
                reason: String::from_utf8_lossy(&body[3..3 + reason_len]).into_owned(),
                leader: String::new(),
                leader_id: BigEndian::read_u64(&body[3 + reason_len..]),
                domain: 0,
            })
        }
        _ => Err(PeerError::Malformed("neither H nor X")),
    }
}

/// The peer address for a client address: same host, port + 1000.
pub fn peer_addr_of(client_addr: &str) -> Option<(String, u16)> {
    let (host, port) = client_addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    Some((host.trim_matches(['[', ']']).to_owned(), port.checked_add(PEER_PORT_OFFSET)?))
}

/// Dials `client_addr`'s peer port and introduces this node.
pub fn dial(
    client_addr: &str,
    me: &PeerHello,
    key: &ring::hmac::Key,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Established, PeerError> {
    let (host, port) = peer_addr_of(client_addr).ok_or(PeerError::Malformed("bad peer address"))?;
    let target = crate::resolve::resolve_host(&host, port)?
        .into_iter()
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing"))?;
    let tcp = TcpStream::connect_timeout(&target, DIAL_CONNECT_TIMEOUT)?;
    tcp.set_nodelay(true)?;
    // A TLS peer port waits for our ClientHello while we would wait for its greeting:
    // asked on a second connection, the silence is named within a round trip instead
    // of ending in a handshake timeout (the client does the same, src/client/io/dial.rs).
    if tls.is_none()
        && !crate::tls::greeting_within(&tcp, crate::tls::GREETING_PROBE_AFTER)
        && crate::tls::speaks_tls(target, crate::tls::PROBE_LIMIT) == Some(true)
    {
        return Err(PeerError::SpeaksTls);
    }
    let tls = match tls {
        None => None,
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|_| PeerError::Malformed("peer host is not a valid TLS server name"))?;
            let conn = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| io::Error::other(e.to_string()))?;
            Some(rustls::Connection::Client(conn))
        }
    };
    let (mut reader, mut writer) = transport::split(tcp, tls)?;
    reader.set_deadline(Some(Instant::now() + PEER_HANDSHAKE_TIMEOUT))?;
    writer.tcp().set_write_timeout(Some(PEER_HANDSHAKE_TIMEOUT))?;
    let (peer, welcome) = {
        let mut duplex = Duplex { reader: &mut reader, writer: &mut writer };
        let welcome = handshake::client_handshake(&mut duplex, key, &PEER_LABELS)?;
        duplex.write_all(&encode_hello(me))?;
        duplex.flush()?;
        match read_hello(&mut duplex) {
            Ok(peer) => (peer, welcome),
            Err(PeerError::Refused { code, reason, leader_id, .. }) => {
                return Err(PeerError::Refused {
                    code,
                    reason,
                    leader: welcome.leader,
                    leader_id,
                    domain: welcome.domain,
                })
            }
            Err(e) => return Err(e),
        }
    };
    reader.set_deadline(None)?;
    writer.tcp().set_write_timeout(None)?;
    let (tcp, tls, leftover) = transport::unsplit(reader, writer)?;
    Ok(Established { tcp, tls, leftover, peer, welcome_leader: welcome.leader })
}

/// Runs the listener's side on an accepted peer connection. `judge` decides whether
/// the dialer may connect (returning a refusal code and reason if not), given its HELLO
/// and, with TLS, the certificate it presented; `welcome` gives the WELCOME fields and
/// `me` this node's own PEER HELLO.
pub fn accept(
    tcp: TcpStream,
    key: &ring::hmac::Key,
    tls: Option<&Arc<rustls::ServerConfig>>,
    welcome: impl FnOnce() -> Welcome,
    me: impl FnOnce() -> PeerHello,
    judge: impl FnOnce(&PeerHello, Option<&rustls::pki_types::CertificateDer<'static>>) -> Result<(), Refusal>,
) -> Result<Established, PeerError> {
    tcp.set_nodelay(true)?;
    let tls = match tls {
        None => None,
        Some(config) => Some(rustls::Connection::Server(
            rustls::ServerConnection::new(config.clone()).map_err(|e| io::Error::other(e.to_string()))?,
        )),
    };
    let (mut reader, mut writer) = transport::split(tcp, tls)?;
    reader.set_deadline(Some(Instant::now() + PEER_HANDSHAKE_TIMEOUT))?;
    writer.tcp().set_write_timeout(Some(PEER_HANDSHAKE_TIMEOUT))?;
    let peer = {
        let mut duplex = Duplex { reader: &mut reader, writer: &mut writer };
        match handshake::server_handshake(&mut duplex, key, &PEER_LABELS, welcome) {
            Ok(_) => {}
            Err(handshake::HandshakeError::Io(e)) if !duplex.reader.heard() => {
                return Err(PeerError::Silent(e))
            }
            Err(handshake::HandshakeError::SpokeTls) if crate::tls::rest_is_probe(duplex.writer.tcp()) => {
                return Err(PeerError::TlsProbe)
            }
            Err(e) => return Err(e.into()),
        }
        let peer = match read_hello(&mut duplex) {
            Ok(peer) => peer,
            Err(PeerError::Malformed(why)) => {
                let _ = duplex.write_all(&encode_refusal(refusal::BAD_HELLO, why, 0));
                let _ = duplex.flush();
                return Err(PeerError::Malformed(why));
            }
            Err(e) => return Err(e),
        };
        let cert = duplex.reader.peer_certificate();
        if let Err(Refusal { code, reason, leader_id }) = judge(&peer, cert.as_ref()) {
            let _ = duplex.write_all(&encode_refusal(code, &reason, leader_id));
            let _ = duplex.flush();
            return Err(PeerError::Refused { code, reason, leader: String::new(), leader_id, domain: 0 });
        }
        duplex.write_all(&encode_hello(&me()))?;
        duplex.flush()?;
        peer
    };
    reader.set_deadline(None)?;
    writer.tcp().set_write_timeout(None)?;
    let (tcp, tls, leftover) = transport::unsplit(reader, writer)?;
    Ok(Established { tcp, tls, leftover, peer, welcome_leader: String::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_refusal_is_an_error() {
        let mut hello = PeerHello {
            node_id: 7,
            incarnation: 9,
            domain: 11,
            addr: "127.0.0.1:5225".into(),
            name: "".into(),
        };
        let bytes = encode_hello(&hello);
        assert_eq!(bytes.len(), 4 + 26 + 14, "a node without a name sends the HELLO without one");
        assert_eq!(read_hello(&mut &bytes[..]).unwrap(), hello);
        hello.name = "prod-eu.1".into();
        let named = encode_hello(&hello);
        assert_eq!(&named[4 + 26 + 14..], b"\x09prod-eu.1");
        assert_eq!(read_hello(&mut &named[..]).unwrap(), hello);
        for cut in 0..named.len() {
            assert!(read_hello(&mut &named[..cut]).is_err());
        }
        let bytes = encode_refusal(refusal::NODE_ID_REUSED, "replace me", 3);
        match read_hello(&mut &bytes[..]) {
            Err(PeerError::Refused { code: 1, reason, leader_id: 3, .. }) => assert_eq!(reason, "replace me"),
            other => panic!("{other:?}"),
        }
        for cut in 0..bytes.len() {
            assert!(read_hello(&mut &bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_hello_address_that_is_not_utf8_host_port_is_refused() {
        for addr in [&b"\xff\xff:5225"[..], b"no-port", b"a b:5225", &[0xffu8; 255][..]] {
            let mut bytes = encode_hello(&PeerHello {
                node_id: 7,
                incarnation: 9,
                domain: 0,
                addr: "x:1".into(),
                name: "".into(),
            });
            bytes.truncate(4 + 25);
            bytes.push(addr.len() as u8);
            bytes.extend_from_slice(addr);
            let len = (bytes.len() - 4) as u32;
            bytes[..4].copy_from_slice(&len.to_be_bytes());
            assert!(matches!(read_hello(&mut &bytes[..]), Err(PeerError::Malformed(_))), "{addr:?}");
        }
    }

    #[test]
    fn a_hello_whose_name_is_not_a_cluster_name_or_does_not_fill_it_is_refused() {
        let hello = |tail: &[u8]| {
            let mut bytes = encode_hello(&PeerHello {
                node_id: 7,
                incarnation: 9,
                domain: 0,
                addr: "x:1".into(),
                name: "".into(),
            });
            bytes.extend_from_slice(tail);
            let len = (bytes.len() - 4) as u32;
            bytes[..4].copy_from_slice(&len.to_be_bytes());
            read_hello(&mut &bytes[..])
        };
        assert_eq!(hello(b"\x01a").unwrap().name, "a");
        for tail in [&b"\x00"[..], b"\x02a", b"\x01ab", b"\x03a b", b"\x02\xff\xfe", b"\x01a\x00"] {
            assert!(matches!(hello(tail), Err(PeerError::Malformed(_))), "{tail:?}");
        }
    }

    #[test]
    fn peer_port_is_client_port_plus_1000() {
        assert_eq!(peer_addr_of("10.0.0.1:5225"), Some(("10.0.0.1".into(), 6225)));
        assert_eq!(peer_addr_of("[::1]:5225"), Some(("::1".into(), 6225)));
        assert_eq!(peer_addr_of("h:65000"), None);
    }
}
