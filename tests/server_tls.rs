//! TLS on the client port with a throw-away CA (rustls, ring provider).

mod common;

use std::net::TcpStream;
use std::sync::Arc;

use common::children::{Within, TOOL};
use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use ticketing::proto::frame::{decode_response, encode_request, Request, Response};
use ticketing::proto::handshake::{auth_key, client_handshake, CLIENT_LABELS};
use ticketing::proto::io::FrameReader;
use ticketing::transport::{self, Duplex};

struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
}

fn make_pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
    Pki { dir, ca_pem: ca.pem() }
}

fn tls_client(ca_pem: &str) -> rustls::Connection {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    rustls::Connection::Client(rustls::ClientConnection::new(Arc::new(config), name).unwrap())
}

#[test]
fn locks_over_tls_and_plain_clients_are_refused() {
    let pki = make_pki();
    let cert = pki.dir.path().join("cert.pem");
    let key = pki.dir.path().join("key.pem");
    let server = start_server(&[
        ("TICKETING_TLS_CERT", cert.to_str().unwrap()),
        ("TICKETING_TLS_KEY", key.to_str().unwrap()),
    ]);

    let tcp = TcpStream::connect(server.addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let (mut reader, mut writer) = transport::split(tcp, Some(tls_client(&pki.ca_pem))).unwrap();
    let welcome = client_handshake(
        &mut Duplex { reader: &mut reader, writer: &mut writer },
        &auth_key(TOKEN.as_bytes()),
        &CLIENT_LABELS,
    )
    .unwrap();
    assert_eq!(welcome.role, b'S');
    let mut frames = FrameReader::new(reader, 65_535);
    let mut call = |id: u32, req: &Request| -> Response {
        let mut buf = Vec::new();
        encode_request(&mut buf, id, req);
        std::io::Write::write_all(&mut writer, &buf).unwrap();
        let (got, resp) = decode_response(frames.read_payload().unwrap()).unwrap();
        assert_eq!(got, id);
        resp
    };
    let token = granted_token(&call(1, &acquire("tls-key", "o", 10, 0)));
    assert_eq!(call(2, &release("tls-key", "o", token)), Response::Released);
    assert_eq!(call(3, &Request::Ping), Response::Pong);

    // A client that skips TLS never gets a HELLO it can use.
    let plain = connect_with(server.addr, TOKEN);
    assert!(plain.is_err(), "a plain client completed a handshake with a TLS port");
}

#[test]
fn a_key_that_is_not_pem_exits_2_naming_the_variable() {
    let pki = make_pki();
    let cert = pki.dir.path().join("cert.pem");
    let bad = pki.dir.path().join("bad.pem");
    std::fs::write(&bad, "not a key").unwrap();
    let out = std::process::Command::new(bin())
        .arg("server")
        .env_clear()
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_LISTEN", "127.0.0.1:0")
        .env("TICKETING_TLS_CERT", &cert)
        .env("TICKETING_TLS_KEY", &bad)
        .output_within(TOOL);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TICKETING_TLS_KEY"));
}

/// An X.509 version 1 certificate (what `openssl x509 -req` makes without extensions)
/// is blamed on TICKETING_TLS_CERT with what to do, not on the key.
#[test]
fn a_version_1_certificate_is_blamed_on_the_certificate() {
    if std::process::Command::new("openssl").arg("version").try_output_within(TOOL).is_err() {
        eprintln!("SKIPPED: no openssl command to make a version 1 certificate");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out =
            std::process::Command::new("openssl").args(args).current_dir(dir.path()).output_within(TOOL);
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
    ]);
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let out = std::process::Command::new(bin())
        .arg("server")
        .env_clear()
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_LISTEN", "127.0.0.1:0")
        .env("TICKETING_TLS_CERT", path("cert.pem"))
        .env("TICKETING_TLS_KEY", path("key.pem"))
        .output_within(TOOL);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("ticketing: TICKETING_TLS_CERT:") && stderr.contains("version 1"), "{stderr}");
}

/// The client port names a client's mistake in its log, with the client's address and
/// the variable to fix; a plain client's question "do you speak TLS?" is no warning, nor
/// is a client that closes before it said anything (a command that went away).
#[test]
fn the_client_port_logs_what_a_client_got_wrong() {
    let within = std::time::Duration::from_secs(5);
    let pki = make_pki();
    // A plain port: a plain client's probe (no warning: the line below must be the TLS
    // client's), a TLS client, then a client with another secret.
    let plain = start_server(&[]);
    assert_eq!(ticketing::tls::speaks_tls(plain.addr, within), Some(false));
    let tcp = TcpStream::connect(plain.addr).unwrap();
    let local = tcp.local_addr().unwrap();
    tcp.set_read_timeout(Some(within)).unwrap();
    let (mut reader, mut writer) = transport::split(tcp, Some(tls_client(&pki.ca_pem))).unwrap();
    let spoke_tls = client_handshake(
        &mut Duplex { reader: &mut reader, writer: &mut writer },
        &auth_key(TOKEN.as_bytes()),
        &CLIENT_LABELS,
    );
    assert!(spoke_tls.is_err());
    let line = plain.wait_log(within, "the plain port", |l| l.contains("spoke TLS"));
    assert!(
        line.contains("WARN")
            && line.contains(&format!(
                "client {local} spoke TLS to this plain port (unset TICKETING_TLS_CA on the client"
            )),
        "{line}"
    );
    assert!(connect_with(plain.addr, "another-secret-0123456789").is_err());
    let line = plain.wait_log(within, "the plain port", |l| l.contains("authentication failed"));
    assert!(
        line.contains("client authentication failed from 127.0.0.1:")
            && line.contains("it proved neither this node's client secret (TICKETING_AUTH_TOKEN"),
        "{line}"
    );

    // A TLS port: a plain client's probe (a ClientHello, then it closes), then its
    // connection that waited for a greeting in vain.
    let cert = pki.dir.path().join("cert.pem");
    let key = pki.dir.path().join("key.pem");
    let tls = start_server(&[
        ("TICKETING_TLS_CERT", cert.to_str().unwrap()),
        ("TICKETING_TLS_KEY", key.to_str().unwrap()),
        ("RUST_LOG", "info,ticketing::server::handshake_log=debug"),
    ]);
    assert_eq!(ticketing::tls::speaks_tls(tls.addr, within), Some(true));
    // The probe's closed handshake is logged at debug, not as a warning: it went away.
    let probe = tls.log_until(within, "the probe's handshake", |l| l.contains("went away"));
    let line = probe.last().unwrap();
    assert!(line.contains("DEBUG") && !probe.iter().any(|l| l.contains("WARN")), "{probe:?}");
    // A TLS command that ended before its ClientHello left (it had its answer from
    // another node): it went away, and that is no warning.
    drop(TcpStream::connect(tls.addr).unwrap());
    // A plain client: it waits for a greeting in vain, then closes.
    let silent = TcpStream::connect(tls.addr).unwrap();
    let local = silent.local_addr().unwrap();
    assert!(!ticketing::tls::greeting_within(&silent, ticketing::tls::GREETING_PROBE_AFTER));
    drop(silent);
    let lines = tls.log_until(within, "the TLS port", |l| l.contains("ClientHello"));
    let line = lines.last().unwrap();
    assert!(
        line.contains("WARN")
            && line.contains(&format!("client {local} sent no TLS ClientHello to this TLS port"))
            && line.contains("set TICKETING_TLS_CA on it"),
        "{line}"
    );
    assert!(
        !lines[..lines.len() - 1].iter().any(|l| l.contains("WARN")),
        "the probe was warned about: {lines:?}"
    );
}
