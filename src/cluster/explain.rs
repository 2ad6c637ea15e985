//! A failed peer handshake in an operator's words, on each side of the link: what was
//! seen, and the variable to fix (docs/tls.md "When it goes wrong", docs/security.md
//! §5). The dialer says why it cannot talk to a peer; the listener logs who failed,
//! from where and why, rate-limited per cause (outsiders can cause these at will).
//!
//! What the listener knows: the source address always; the node id never for certain —
//! a dialer names itself in its PEER HELLO, which comes after the secret and TLS
//! checks. It guesses the id from the source address when only one node is known at
//! that IP address (loopback excepted: every local process dials from 127.0.0.1).

use std::io;

use log::debug;

use super::peer::PeerError;
use crate::lograte::RateLimit;
use crate::proto::handshake::HandshakeError;
use crate::tls_verdict::{rustls_error, tls_cause, TlsCause};

/// The variables that turn TLS on, as the messages name them.
const TLS_VARS: &str = "TICKETING_TLS_CERT, TICKETING_TLS_KEY and TICKETING_TLS_CA";

/// A dial failure, said once: `kind` tells one cause from another (a new cause is
/// logged at once, a repeated one at the dialer's slower pace).
#[derive(Debug, PartialEq, Eq)]
pub struct DialFailure {
    pub kind: &'static str,
    pub text: String,
}

/// Why dialing node `peer` at client address `addr` (its peer port `port`, reached
/// by `host`) failed. `tls`: this node dials with TLS.
pub fn dial_failure(peer: u64, addr: &str, port: u16, host: &str, tls: bool, e: &PeerError) -> DialFailure {
    let at = format!("node {peer} at {addr} (peer port {port})");
    let said = |kind, text: String| DialFailure { kind, text };
    match e {
        PeerError::Io(e) => said("unreachable", format!("cannot reach {at}: {e}")),
        PeerError::SpeaksTls => said(
            "tls-there",
            format!("{at} speaks TLS and this node does not: set {TLS_VARS} (docs/tls.md)"),
        ),
        PeerError::Handshake(HandshakeError::Rejected(_)) => said(
            "secret",
            format!("{at} refused our peer secret (TICKETING_PEER_AUTH_TOKEN differs from the cluster's)"),
        ),
        PeerError::Handshake(HandshakeError::BadProof) => said(
            "proof",
            format!(
                "{at} holds another peer secret: its proof does not match our TICKETING_PEER_AUTH_TOKEN (or it \
                 is not a Ticketing node)"
            ),
        ),
        PeerError::Handshake(HandshakeError::WrongPortKind(b'C')) => said(
            "port",
            format!("{at}: port {port} is a client port, not a peer port (TICKETING_CLUSTER_PEERS)"),
        ),
        PeerError::Handshake(HandshakeError::BadMagic | HandshakeError::WrongPortKind(_)) => said(
            "port",
            format!("{at}: port {port} is not a Ticketing peer port (another service listens there)"),
        ),
        PeerError::Handshake(HandshakeError::Io(io)) => said("tls", dial_io(&at, host, tls, io)),
        other => said("other", format!("{at}: {other}")),
    }
}

fn dial_io(at: &str, host: &str, tls: bool, io: &io::Error) -> String {
    let timed_out = matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
    let Some(tls_error) = rustls_error(io).filter(|_| tls) else {
        return if timed_out {
            format!("{at}: no answer to the handshake within {:?}", super::peer::PEER_HANDSHAKE_TIMEOUT)
        } else {
            format!("{at}: handshake: {io}")
        };
    };
    match tls_cause(tls_error) {
        TlsCause::TheirsNotFromOurCa => {
            format!("{at}: its certificate is not signed by the CA in TICKETING_TLS_CA")
        }
        TlsCause::TheirsNotForName => format!(
            "{at}: its certificate is not valid for {host:?}: it must list that host as a subjectAltName \
             (docs/tls.md)"
        ),
        TlsCause::TheirsExpired => format!("{at}: its certificate has expired"),
        TlsCause::OursNotFromTheirCa => format!(
            "{at} refuses our certificate (TICKETING_TLS_CERT): it is not signed by the CA in its \
             TICKETING_TLS_CA"
        ),
        TlsCause::OursExpired => {
            format!("{at} refuses our certificate (TICKETING_TLS_CERT) as expired or not valid yet")
        }
        TlsCause::OursRefused => format!("{at} refuses our certificate (TICKETING_TLS_CERT): {tls_error}"),
        TlsCause::NotTls => format!(
            "{at} does not speak TLS and this node does: unset {TLS_VARS} here, or set them there (docs/tls.md)"
        ),
        TlsCause::TheirsMissing | TlsCause::Other => format!("{at}: TLS: {tls_error}"),
    }
}

/// Listener-side lines, one limiter per cause: a flood of one kind hides no other.
static NO_CLIENT_HELLO_LOG: RateLimit = RateLimit::new();
static CERTIFICATE_LOG: RateLimit = RateLimit::new();
static TLS_OTHER_LOG: RateLimit = RateLimit::new();
static SPOKE_TLS_LOG: RateLimit = RateLimit::new();
static AUTH_FAILED_LOG: RateLimit = RateLimit::new();

/// Logs a failed handshake on this node's peer port from `from` (refusals after the
/// PEER HELLO are logged by the acceptor itself). `tls`: the port speaks TLS;
/// `node_guess` is asked only for a line at warn.
pub fn log_accept_failure(e: &PeerError, from: &str, tls: bool, node_guess: impl FnOnce() -> Option<u64>) {
    // "IP:PORT" or "IP:PORT (node N?)".
    let who = || match node_guess() {
        Some(id) => format!("{from} (node {id}?)"),
        None => from.to_owned(),
    };
    let failed = "peer TLS handshake failed from";
    match e {
        PeerError::Silent(io) if tls => {
            let when = if matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) {
                format!("within {:?}", super::peer::PEER_HANDSHAKE_TIMEOUT)
            } else {
                "before it closed the connection".to_owned()
            };
            crate::warn_limited!(
                NO_CLIENT_HELLO_LOG,
                "{failed} {}: no TLS ClientHello {when} (a node without TLS? set {TLS_VARS} on it)",
                who()
            );
        }
        PeerError::Handshake(HandshakeError::Io(io)) if tls => match rustls_error(io) {
            Some(tls_error) => {
                let (limit, why) = accept_tls_words(tls_error);
                crate::warn_limited!(limit, "{failed} {}: {why}", who());
            }
            // A ClientHello, then the connection ended: what a plain node's question
            // "do you speak TLS?" looks like (`crate::tls::speaks_tls`), not an attack.
            None => debug!("peer TLS handshake from {from} ended before it finished: {io}"),
        },
        PeerError::TlsProbe => {
            debug!("{from}: a plain node asked whether this peer port speaks TLS (its greeting came late)")
        }
        PeerError::Handshake(HandshakeError::SpokeTls) => crate::warn_limited!(
            SPOKE_TLS_LOG,
            "peer {} spoke TLS to this plain peer port (set {TLS_VARS} here too, or unset them on it)",
            who()
        ),
        PeerError::Handshake(HandshakeError::AuthFailed) => crate::warn_limited!(
            AUTH_FAILED_LOG,
            "peer authentication failed from {}: its TICKETING_PEER_AUTH_TOKEN differs from ours",
            who()
        ),
        other => debug!("{from}: peer handshake: {other}"),
    }
}

/// The listener's words for a TLS verdict, and the limiter of their kind.
fn accept_tls_words(e: &rustls::Error) -> (&'static RateLimit, String) {
    let certificate = |why: String| (&CERTIFICATE_LOG, why);
    match tls_cause(e) {
        TlsCause::TheirsNotFromOurCa => {
            certificate("its certificate is not signed by the CA in TICKETING_TLS_CA".to_owned())
        }
        TlsCause::TheirsMissing => certificate(
            "it presented no certificate (peer links are mutual TLS: a node presents its TICKETING_TLS_CERT)"
                .to_owned(),
        ),
        TlsCause::TheirsExpired => certificate("its certificate has expired (its TICKETING_TLS_CERT)".to_owned()),
        TlsCause::OursNotFromTheirCa => certificate(
            "it does not trust this node's certificate (TICKETING_TLS_CERT): it is not signed by the CA in its \
             TICKETING_TLS_CA"
                .to_owned(),
        ),
        TlsCause::OursExpired => certificate(
            "it refuses this node's certificate (TICKETING_TLS_CERT) as expired or not valid yet".to_owned(),
        ),
        TlsCause::OursRefused => {
            certificate(format!("it refuses this node's certificate (TICKETING_TLS_CERT): {e}"))
        }
        TlsCause::NotTls => (&TLS_OTHER_LOG, "what it sent is not TLS (not a Ticketing node?)".to_owned()),
        TlsCause::TheirsNotForName | TlsCause::Other => (&TLS_OTHER_LOG, e.to_string()),
    }
}

/// The node id behind source address `from`, as a guess: the one node known at that
/// IP address, if only one is, and if the address is not loopback (see the module
/// docs).
pub fn guess_node(
    from: std::net::SocketAddr,
    nodes_at_ip: impl FnOnce(std::net::IpAddr) -> Vec<u64>,
) -> Option<u64> {
    if from.ip().is_loopback() {
        return None;
    }
    match nodes_at_ip(from.ip())[..] {
        [one] => Some(one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dial(e: PeerError, tls: bool) -> DialFailure {
        dial_failure(2, "10.0.0.2:5225", 6225, "10.0.0.2", tls, &e)
    }

    fn tls_io(e: rustls::Error) -> PeerError {
        PeerError::Handshake(HandshakeError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    #[test]
    fn the_dialer_names_the_variable_for_each_mistake() {
        let secret =
            dial(PeerError::Handshake(HandshakeError::Rejected("authentication failed".into())), false);
        assert!(secret.text.contains("TICKETING_PEER_AUTH_TOKEN differs"), "{}", secret.text);
        let plain = dial(PeerError::SpeaksTls, false);
        assert!(
            plain.text.contains("speaks TLS and this node does not: set TICKETING_TLS_CERT"),
            "{}",
            plain.text
        );
        let ca =
            dial(tls_io(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)), true);
        assert!(ca.text.ends_with("not signed by the CA in TICKETING_TLS_CA"), "{}", ca.text);
        let theirs = dial(tls_io(rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA)), true);
        assert!(theirs.text.contains("refuses our certificate (TICKETING_TLS_CERT)"), "{}", theirs.text);
        let name =
            dial(tls_io(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)), true);
        assert!(name.text.contains("subjectAltName"), "{}", name.text);
        let eof = dial(PeerError::Io(io::ErrorKind::ConnectionRefused.into()), false);
        assert!(
            eof.text.starts_with("cannot reach node 2 at 10.0.0.2:5225 (peer port 6225)"),
            "{}",
            eof.text
        );
        assert_ne!(eof.kind, secret.kind);
    }

    #[test]
    fn the_node_id_is_guessed_only_from_one_node_at_a_routable_address() {
        let from: std::net::SocketAddr = "10.0.0.3:40000".parse().unwrap();
        assert_eq!(guess_node(from, |_| vec![3]), Some(3));
        assert_eq!(guess_node(from, |_| vec![3, 4]), None);
        assert_eq!(guess_node(from, |_| vec![]), None);
        assert_eq!(guess_node("127.0.0.1:40000".parse().unwrap(), |_| vec![1]), None);
    }
}
