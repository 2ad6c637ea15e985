//! Making a session: TCP (each resolved address in turn, [`CONNECT_TIMEOUT`] each),
//! TLS if configured (rustls, the server name being the address's host), then the
//! challenge-response handshake with the server's proof checked. A failure is one
//! sentence naming its cause and what to check.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring::hmac;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::proto::addr::host_of;
use crate::proto::handshake::{client_handshake, HandshakeError, Welcome, CLIENT_LABELS};
use crate::proto::limits::HANDSHAKE_TIMEOUT_MS;
use crate::transport::{self, Duplex, ReadHalf, WriteHalf};

/// Longest wait for a TCP connection to one resolved address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for the server's side of the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);

/// What a dial needs: the secret and the TLS configuration, if any.
pub(crate) struct Dialer {
    pub(crate) key: hmac::Key,
    pub(crate) tls: Option<Arc<ClientConfig>>,
}

/// An authenticated connection, split for a reader and a writer.
pub(crate) struct Dialed {
    pub(crate) welcome: Welcome,
    /// The socket address reached (`ip:port`).
    pub(crate) peer: String,
    pub(crate) reader: ReadHalf,
    pub(crate) writer: WriteHalf,
}

impl Dialer {
    /// Connects and authenticates to `addr`. `connected` is told when the TCP
    /// connection is up and the greeting is awaited (a plain client at a TLS server
    /// waits there: the server waits for TLS).
    pub(crate) fn dial(&self, addr: &str, connected: impl FnOnce(String)) -> Result<Dialed, String> {
        self.dial_within(addr, connected, None)
    }

    /// [`Dialer::dial`], all of it (connects and handshake) within `limit` if given.
    pub(crate) fn dial_within(
        &self,
        addr: &str,
        connected: impl FnOnce(String),
        limit: Option<Duration>,
    ) -> Result<Dialed, String> {
        let end = limit.map(|l| Instant::now() + l);
        let left = |cap: Duration| match end {
            Some(end) => cap.min(end.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
            None => cap,
        };
        let host = host_of(addr).ok_or_else(|| format!("address {addr:?} is not host:port"))?;
        let resolved: Vec<SocketAddr> =
            crate::resolve::resolve(addr).map_err(|e| format!("cannot resolve {addr}: {e}"))?;
        let mut last = format!("{addr} resolved to no address");
        let mut sock = None;
        for target in resolved {
            match TcpStream::connect_timeout(&target, left(CONNECT_TIMEOUT)) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = explain_connect_error(&target.to_string(), &e),
            }
        }
        let sock = sock.ok_or(last)?;
        let peer = sock.peer_addr().map_err(|e| format!("{addr}: {e}"))?.to_string();
        let tls = self.tls.is_some();
        connected(if tls {
            format!("{addr}: connected, but the TLS handshake has not finished yet")
        } else {
            format!(
                "{addr}: connected, but the server has not sent its greeting yet (a TLS server waits for TLS: \
                 set TICKETING_TLS_CA)"
            )
        });
        let io = |e: io::Error| format!("{addr}: {e}");
        sock.set_nodelay(true).map_err(io)?;
        let tls_state = match &self.tls {
            None => None,
            Some(config) => {
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("{addr}: bad TLS server name {host:?}: {e}"))?;
                let conn = rustls::ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| format!("{addr}: TLS: {e}"))?;
                Some(rustls::Connection::Client(conn))
            }
        };
        let (mut reader, mut writer) = transport::split(sock, tls_state).map_err(io)?;
        let deadline = Instant::now() + left(HANDSHAKE_TIMEOUT);
        reader.set_deadline(Some(deadline)).map_err(io)?;
        writer.set_write_deadline(Some(deadline)).map_err(io)?;
        let welcome = client_handshake(
            &mut Duplex { reader: &mut reader, writer: &mut writer },
            &self.key,
            &CLIENT_LABELS,
        )
        .map_err(|e| explain_handshake_error(addr, host, tls, &e))?;
        // Why no read deadline from here on: answers to queued ACQUIREs may take up to
        // the longest wait; callers time out on their own, dead-session detection
        // PINGs a silent session, and closing the socket wakes the reader.
        reader.set_deadline(None).map_err(io)?;
        writer.set_write_deadline(None).map_err(io)?;
        Ok(Dialed { welcome, peer, reader, writer })
    }
}

/// A failed TCP connect, said so that the operator knows what to check.
fn explain_connect_error(target: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{target}: connection refused: no server listens there"),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!(
                "{target}: no answer to the connection within {CONNECT_TIMEOUT:?} (host down, or a firewall)"
            )
        }
        _ => format!("{target}: cannot connect: {e}"),
    }
}

/// A failed handshake, said by its cause: the auth token, TLS, or the wrong kind of
/// server. Each names what to check.
pub(crate) fn explain_handshake_error(addr: &str, host: &str, tls: bool, e: &HandshakeError) -> String {
    match e {
        // Our AUTH had the version the server's HELLO named and a well-formed body: a
        // server refuses such an AUTH only for its mac (docs/protocol.md §3).
        HandshakeError::Rejected(_) => format!(
            "{addr}: the server refused our auth token (TICKETING_AUTH_TOKEN is not the server's client secret)"
        ),
        HandshakeError::BadProof => format!(
            "{addr}: the server's proof does not match our auth token: it holds another secret, or it is not \
             a Ticketing server"
        ),
        HandshakeError::WrongPortKind(b'P') => {
            format!("{addr}: this is a node's peer port, not its client port (the client port is 1000 lower)")
        }
        HandshakeError::BadMagic | HandshakeError::WrongPortKind(_) => {
            format!("{addr}: not a Ticketing client port (another service listens there)")
        }
        HandshakeError::Io(io) => explain_handshake_io(addr, host, tls, io),
        other => format!("{addr}: {other}"),
    }
}

fn explain_handshake_io(addr: &str, host: &str, tls: bool, io: &io::Error) -> String {
    let timed_out = matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
    if timed_out && !tls {
        return format!(
            "{addr}: no greeting from the server within {HANDSHAKE_TIMEOUT:?}: does it use TLS? (then set \
             TICKETING_TLS_CA)"
        );
    }
    if !tls || io.kind() != io::ErrorKind::InvalidData {
        return format!("{addr}: {io}");
    }
    use rustls::CertificateError as C;
    let Some(tls_error) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return format!("{addr}: TLS: {io}");
    };
    match tls_error {
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "{addr}: TLS: the server's certificate is not valid for {host:?}: it must list that host as a \
             subjectAltName (docs/tls.md)"
        ),
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            format!("{addr}: TLS: the server's certificate is not signed by the CA in TICKETING_TLS_CA")
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            format!("{addr}: TLS: the server's certificate has expired")
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("{addr}: TLS: the server does not speak TLS (a plain server: unset TICKETING_TLS_CA)")
        }
        other => format!("{addr}: TLS: {other}"),
    }
}
