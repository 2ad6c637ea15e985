//! The client over TLS against the real server, with a throw-away CA from rcgen.

mod common;

use std::time::Duration;

use common::{Server, ServerProcess, TOKEN};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use ticketing::client::{AcquireError, Client, ReleaseOutcome};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it.
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        // A second, unrelated CA: a client trusting only it must refuse the server.
        let other_key = KeyPair::generate().unwrap();
        let mut other = CertificateParams::new(Vec::<String>::new()).unwrap();
        other.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let other = other.self_signed(&other_key).unwrap();
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

fn tls_server(pki: &Pki) -> ServerProcess {
    Server::new().tls(&pki.path("cert.pem"), &pki.path("key.pem")).start()
}

fn tls_client(addr: &str, ca: &str) -> Client {
    Client::builder()
        .addrs([addr])
        .auth_token(TOKEN)
        .owner("tls-owner")
        .tls_ca_file(ca)
        .request_timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

#[test]
fn locks_over_tls_by_name_and_by_ip() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let port = server.addr.port();
    for addr in [format!("localhost:{port}"), server.addr.to_string()] {
        let client = tls_client(&addr, &pki.path("ca.pem"));
        let lock = client.acquire("tls-key", Duration::from_secs(5), Duration::from_secs(2)).unwrap();
        let holder = client.query("tls-key").unwrap().unwrap();
        assert_eq!(holder.token, lock.token());
        assert!(client.status().unwrap().contains("role=standalone"));
        assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    }
}

#[test]
fn many_threads_over_one_tls_client() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let client = tls_client(&server.addr.to_string(), &pki.path("ca.pem"));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..30 {
                    let key = format!("k{}", (t + i) % 4);
                    let lock = client.acquire(&key, Duration::from_secs(5), Duration::from_secs(10)).unwrap();
                    lock.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn an_untrusted_server_is_never_sent_a_request() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let client = tls_client(&server.addr.to_string(), &pki.path("other-ca.pem"));
    let err = client.acquire("k", Duration::from_secs(5), Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
    // A plain-text client cannot talk to the TLS port either.
    let plain = server.client("plain");
    let err = plain.acquire("k", Duration::from_secs(5), Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
}

#[test]
fn a_bad_ca_file_is_a_build_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let build = |ca: &std::path::Path| {
        Client::builder()
            .addrs(["localhost:5225"])
            .auth_token(TOKEN)
            .tls_ca_file(ca)
            .build()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert!(build(&empty).contains("no PEM certificate"));
    assert!(build(&dir.path().join("missing.pem")).contains("cannot read"));
}
