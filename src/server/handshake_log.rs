//! What the client port logs about a failed handshake: the client's address, what was
//! seen and the variable to fix (docs/security.md §5), rate-limited per cause since
//! anyone who can connect can cause these. Failures that name no mistake (a dropped
//! connection, a plain client's probe) are logged at debug.

use std::io;
use std::net::SocketAddr;

use log::debug;

use crate::lograte::RateLimit;
use crate::proto::handshake::HandshakeError;
use crate::proto::limits::HANDSHAKE_TIMEOUT_MS;
use crate::tls_verdict::{rustls_error, tls_cause, TlsCause};

static AUTH_FAILED_LOG: RateLimit = RateLimit::new();
static SPOKE_TLS_LOG: RateLimit = RateLimit::new();
static NO_CLIENT_HELLO_LOG: RateLimit = RateLimit::new();
static CERTIFICATE_LOG: RateLimit = RateLimit::new();

/// Logs the failed handshake `e` of client `peer`. `tls`: this port speaks TLS;
/// `heard`: any byte arrived from the client; `probe`: what it sent was a plain
/// client's question whether this port speaks TLS (`crate::tls::rest_is_probe`).
pub fn log_failure(e: &HandshakeError, peer: SocketAddr, tls: bool, heard: bool, probe: bool) {
    match e {
        HandshakeError::SpokeTls if probe => {
            debug!("{peer}: a plain client asked whether this port speaks TLS (its greeting came late)")
        }
        HandshakeError::AuthFailed => crate::warn_limited!(
            AUTH_FAILED_LOG,
            "client authentication failed from {peer}: it proved neither this node's client secret \
             (TICKETING_AUTH_TOKEN, for clients) nor its peer secret (TICKETING_PEER_AUTH_TOKEN, for `ticketing \
             admin` and joining nodes)"
        ),
        HandshakeError::SpokeTls => crate::warn_limited!(
            SPOKE_TLS_LOG,
            "client {peer} spoke TLS to this plain port (unset TICKETING_TLS_CA on the client, or configure TLS \
             here: docs/tls.md)"
        ),
        // A plain client waits for the greeting, which a TLS port sends only after the
        // ClientHello: it hears nothing and gives up (it asks on a second connection
        // first; that one sends a ClientHello and closes, and lands below at debug).
        HandshakeError::Io(io) if tls && !heard => {
            let when = if matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) {
                format!("within {HANDSHAKE_TIMEOUT_MS} ms")
            } else {
                "before it closed the connection".to_owned()
            };
            crate::warn_limited!(
                NO_CLIENT_HELLO_LOG,
                "client {peer} sent no TLS ClientHello to this TLS port {when} (a plain client? set \
                 TICKETING_TLS_CA on it)"
            );
        }
        HandshakeError::Io(io) if tls => match rustls_error(io).and_then(certificate_words) {
            Some(why) => {
                crate::warn_limited!(CERTIFICATE_LOG, "client TLS handshake failed from {peer}: {why}")
            }
            None => debug!("{peer}: handshake failed: {e}"),
        },
        _ => debug!("{peer}: handshake failed: {e}"),
    }
}

/// Logs a client that closed its connection before it sent a byte of its AUTH (a port
/// probe, a plain client's question whether this port speaks TLS, a command that ended
/// while it still dialed): no mistake, so debug only.
pub fn log_went_away(peer: SocketAddr) {
    debug!("{peer}: closed before it sent a byte of its AUTH (it went away)");
}

/// A client's verdict on this node's certificate, if that is what failed.
fn certificate_words(e: &rustls::Error) -> Option<String> {
    Some(match tls_cause(e) {
        TlsCause::OursNotFromTheirCa => {
            "it does not trust this node's certificate (TICKETING_TLS_CERT): it is \
                                         not signed by the CA in the client's TICKETING_TLS_CA"
                .to_owned()
        }
        TlsCause::OursExpired => {
            "it refuses this node's certificate (TICKETING_TLS_CERT) as expired or not valid yet".to_owned()
        }
        TlsCause::OursRefused => format!(
            "it refuses this node's certificate (TICKETING_TLS_CERT): {e}; does the certificate list the \
             address the client dials as a subjectAltName?"
        ),
        _ => return None,
    })
}
