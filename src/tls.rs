//! TLS for the server's ports: rustls with the ring provider only (aws-lc is never built).

use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::{ConfigError, TlsFiles};
use crate::tls_verdict::TlsCause;

/// The ring crypto provider, shared by every TLS configuration of the process.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The node's certificate chain and key from `files`; errors name the variable whose
/// file is at fault.
fn identity(files: &TlsFiles) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ConfigError> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(&files.cert).and_then(|iter| iter.collect()).map_err(|e| {
            ConfigError { var: "TICKETING_TLS_CERT", message: format!("{}: {e}", files.cert.display()) }
        })?;
    if certs.is_empty() {
        return Err(ConfigError {
            var: "TICKETING_TLS_CERT",
            message: format!("{} holds no PEM certificate", files.cert.display()),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| ConfigError {
        var: "TICKETING_TLS_KEY",
        message: format!("{}: {e}", files.key.display()),
    })?;
    Ok((certs, key))
}

/// Checks the node's own certificate before anything listens, so that a certificate
/// peers or clients would refuse stops the node at start with the variable to fix,
/// instead of every handshake failing later:
/// - it must parse as an X.509 v3 end-entity certificate;
/// - in a cluster (`self_addr` given) it must be valid, against `TICKETING_TLS_CA`, both
///   as a server certificate for the host of `TICKETING_CLUSTER_SELF` (peers dial that
///   name) and as a client certificate (peers require one: mutual TLS, which needs the
///   clientAuth extended key usage when the certificate lists usages).
pub fn check_own_certificate(files: &TlsFiles, self_addr: Option<&str>) -> Result<(), ConfigError> {
    let (certs, _) = identity(files)?;
    let cert_error = |message: String| ConfigError { var: "TICKETING_TLS_CERT", message };
    let path = files.cert.display();
    if let Err(e) = rustls::server::ParsedCertificate::try_from(&certs[0]) {
        let hint = match e {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(ref other))
                if other.to_string().contains("UnsupportedCertVersion") =>
            {
                ": it is an X.509 version 1 certificate; make a version 3 one with a subjectAltName \
                 (docs/tls.md)"
            }
            _ => "",
        };
        return Err(cert_error(format!("{path}: the certificate cannot be used: {e}{hint}")));
    }
    let Some(self_addr) = self_addr else { return Ok(()) };
    let roots = Arc::new(roots(files)?);
    let now = rustls::pki_types::UnixTime::now();
    let (end_entity, intermediates) = (&certs[0], &certs[1..]);
    let host = self_addr.rsplit_once(':').map_or(self_addr, |(h, _)| h).trim_matches(['[', ']']);
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| ConfigError { var: "TICKETING_CLUSTER_SELF", message: format!("{host:?}: {e}") })?;
    let server = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| ConfigError { var: "TICKETING_TLS_CA", message: format!("cannot verify peers: {e}") })?;
    if let Err(e) = server.verify_server_cert(end_entity, intermediates, &name, &[], now) {
        let ca = files.ca.as_deref().map_or_else(String::new, |ca| format!(" ({})", ca.display()));
        // The cause decides the advice: a certificate of another CA is not fixed by a
        // subjectAltName.
        let why = match crate::tls_verdict::tls_cause(&e) {
            TlsCause::TheirsNotFromOurCa => format!(
                "it is not signed by the CA in TICKETING_TLS_CA{ca}: sign it with that CA, or set \
                 TICKETING_TLS_CA to the cluster's CA bundle"
            ),
            TlsCause::TheirsNotForName => format!("it needs a subjectAltName for {host}"),
            TlsCause::TheirsExpired => "it has expired: renew it".to_owned(),
            _ => format!("it needs a subjectAltName for {host}, signed by TICKETING_TLS_CA{ca}"),
        };
        return Err(cert_error(format!(
            "{path}: peers dial this node as {host} (TICKETING_CLUSTER_SELF) and would refuse this \
             certificate: {e}; {why} (docs/tls.md)"
        )));
    }
    let client = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| ConfigError { var: "TICKETING_TLS_CA", message: format!("cannot verify peers: {e}") })?;
    if let Err(e) = client.verify_client_cert(end_entity, intermediates, now) {
        return Err(cert_error(format!(
            "{path}: peers require this node's certificate when it dials them (mutual TLS) and would \
             refuse it: {e}; if it lists extended key usages, it needs clientAuth as well as serverAuth \
             (docs/tls.md)"
        )));
    }
    Ok(())
}

fn key_mismatch(e: rustls::Error) -> ConfigError {
    ConfigError { var: "TICKETING_TLS_KEY", message: format!("does not fit the certificate: {e}") }
}

/// The client port's configuration: the node's certificate; clients authenticate with
/// the secret, not with certificates.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let (certs, key) = identity(files)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(key_mismatch)?;
    Ok(Arc::new(config))
}

/// The peer port's listening configuration: mutual TLS. A dialing node must present a
/// certificate that `TICKETING_TLS_CA` signed (the peer secret is checked after that).
pub fn peer_server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let (certs, key) = identity(files)?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots(files)?), provider())
            .build()
            .map_err(|e| ConfigError {
                var: "TICKETING_TLS_CA",
                message: format!("cannot verify peers: {e}"),
            })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(key_mismatch)?;
    Ok(Arc::new(config))
}

/// The dialing side's configuration for the peer port: peers' certificates are
/// verified against `TICKETING_TLS_CA` (required in a cluster), and the node presents
/// its own certificate (mutual TLS).
pub fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let (certs, key) = identity(files)?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(roots(files)?)
        .with_client_auth_cert(certs, key)
        .map_err(key_mismatch)?;
    Ok(Arc::new(config))
}

/// The CA bundle of `TICKETING_TLS_CA`, required in a cluster with TLS.
fn roots(files: &TlsFiles) -> Result<rustls::RootCertStore, ConfigError> {
    let Some(ca) = &files.ca else {
        return Err(ConfigError {
            var: "TICKETING_TLS_CA",
            message: "required to verify peers when TLS is on in a cluster".into(),
        });
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .and_then(|iter| iter.collect())
        .map_err(|e| ConfigError { var: "TICKETING_TLS_CA", message: format!("{}: {e}", ca.display()) })?;
    for cert in certs {
        roots.add(cert).map_err(|e| ConfigError {
            var: "TICKETING_TLS_CA",
            message: format!("{}: {e}", ca.display()),
        })?;
    }
    if roots.is_empty() {
        return Err(ConfigError {
            var: "TICKETING_TLS_CA",
            message: format!("{} holds no PEM certificate", ca.display()),
        });
    }
    Ok(roots)
}

/// True if `cert` is valid for the host of client address `addr` (a DNS name or an IP
/// literal among its subject alternative names). With TLS, a peer's certificate must be
/// valid for the host its node id is known at, so a node cannot speak for another one.
pub fn cert_fits_addr(cert: &CertificateDer<'_>, addr: &str) -> bool {
    let Some((host, _)) = addr.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_matches(['[', ']']);
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_owned()) else {
        return false;
    };
    match rustls::server::ParsedCertificate::try_from(cert) {
        Ok(parsed) => rustls::client::verify_server_name(&parsed, &name).is_ok(),
        Err(_) => false,
    }
}

/// How long a plain dialer waits for the greeting before it asks, on a second
/// connection, whether the other side speaks TLS ([`speaks_tls`]). Why: a TLS server
/// waits for the dialer to speak first and a plain dialer waits for the greeting, so
/// without asking, the mistake would show only when the handshake times out (5 s).
pub const GREETING_PROBE_AFTER: std::time::Duration = std::time::Duration::from_millis(200);
/// Longest wait for the answer to that question.
pub const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_millis(700);

/// True when the other side's first bytes arrive on `sock` within `wait` (or it closed
/// the connection: the handshake will say so). Nothing is consumed.
pub fn greeting_within(sock: &std::net::TcpStream, wait: std::time::Duration) -> bool {
    let wait = wait.max(std::time::Duration::from_millis(1));
    if sock.set_read_timeout(Some(wait)).is_err() {
        return true;
    }
    let arrived = match sock.peek(&mut [0u8; 1]) {
        Ok(_) => true,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    };
    let _ = sock.set_read_timeout(None);
    arrived
}

/// Whether the server at `target` speaks TLS: a fresh connection sends a TLS
/// ClientHello and reads the first byte of the answer. A TLS record (handshake `0x16`
/// or alert `0x15`) says TLS; the plain greeting (`TKT1`) says plain. `None` when no
/// answer comes within `limit` or the connection fails.
///
/// Why it exists: a TLS server waits for the client's ClientHello and a plain node
/// waits for the server's greeting, so a plain dialer at a TLS port hears nothing until
/// a handshake timeout. Asking on a second connection turns that silence into a
/// verdict within a round trip (the one costing a failed handshake in the server's log).
pub fn speaks_tls(target: std::net::SocketAddr, limit: std::time::Duration) -> Option<bool> {
    use std::io::{Read, Write};
    let end = std::time::Instant::now() + limit;
    let left =
        || end.saturating_duration_since(std::time::Instant::now()).max(std::time::Duration::from_millis(1));
    let mut sock = std::net::TcpStream::connect_timeout(&target, left()).ok()?;
    sock.set_write_timeout(Some(left())).ok()?;
    // No certificate is ever checked: only the ClientHello is sent, and only the kind
    // of the first answering byte is looked at.
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(PROBE_SERVER_NAME).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).ok()?;
    }
    sock.write_all(&hello).ok()?;
    sock.set_read_timeout(Some(left())).ok()?;
    let mut first = [0u8; 1];
    match sock.read(&mut first) {
        Ok(1) => match first[0] {
            0x15 | 0x16 => Some(true),
            b'T' => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// The server name (SNI) of [`speaks_tls`]'s ClientHello: how a port without TLS tells
/// that question from a TLS client.
pub const PROBE_SERVER_NAME: &str = "ticketing.invalid";

/// At a port without TLS, after a TLS record arrived where AUTH belongs: true when the
/// rest of what the dialer sent names [`PROBE_SERVER_NAME`] — a plain dialer that got
/// no greeting within [`GREETING_PROBE_AFTER`] (a slow node) asking whether this port
/// speaks TLS, not a TLS dialer. Reads at most 4 KiB, within 100 ms (the rest came in
/// the same write as the record's start).
pub fn rest_is_probe(sock: &std::net::TcpStream) -> bool {
    use std::io::Read;
    let name = PROBE_SERVER_NAME.as_bytes();
    let found = |bytes: &[u8]| bytes.windows(name.len()).any(|w| w == name);
    let end = std::time::Instant::now() + std::time::Duration::from_millis(100);
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < buf.len() && !found(&buf[..got]) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match (&*sock).read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    found(&buf[..got])
}

/// For unit tests of the code around TLS: a server configuration with a throw-away
/// self-signed certificate for `localhost`, and a client configuration that trusts it.
#[cfg(test)]
pub(crate) fn throwaway_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}
