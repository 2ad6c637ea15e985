//! Every connection failure of the CLI names its cause (docs/cli.md, "When a command
//! fails"): a closed port, a wrong auth token, a TLS certificate for another name, TLS
//! against a plain server and the other way round, and a cluster without a quorum.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("TICKETING_ADDRS")
        .env_remove("TICKETING_TLS_CA")
        .env("TICKETING_AUTH_TOKEN", TOKEN);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Runs `ticketing query k --addr ADDR` and returns (exit status, stderr).
fn query(addr: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = cli(&["query", "k", "--addr", addr], env);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_closed_port_and_a_wrong_token_are_told_apart() {
    let port = free_port_pair();
    let (code, err) = query(&format!("127.0.0.1:{port}"), &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("connection refused: no server listens there"), "{err}");

    let server = start_server(&[]);
    let (code, err) =
        query(&server.addr.to_string(), &[("TICKETING_AUTH_TOKEN", "not-the-server-secret-0123")]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("refused our auth token"), "{err}");
    assert!(!err.contains("connection refused"), "{err}");
}

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a server certificate for `names`, as files.
    fn new(names: &[&str]) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

#[test]
fn tls_mistakes_are_named() {
    // A certificate for another name than the one the client dials.
    let pki = Pki::new(&["127.0.0.9"]);
    let (cert, key, ca) = (pki.path("cert.pem"), pki.path("key.pem"), pki.path("ca.pem"));
    let tls_server = start_server(&[("TICKETING_TLS_CERT", &cert), ("TICKETING_TLS_KEY", &key)]);
    let (code, err) = query(&tls_server.addr.to_string(), &[("TICKETING_TLS_CA", &ca)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("not valid for") && err.contains("subjectAltName"), "{err}");
    // A plain client against that TLS server.
    let (code, err) = query(&tls_server.addr.to_string(), &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("set TICKETING_TLS_CA"), "{err}");
    // A TLS client against a plain server.
    let plain = start_server(&[]);
    let (code, err) = query(&plain.addr.to_string(), &[("TICKETING_TLS_CA", &ca)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("does not speak TLS"), "{err}");
}

#[test]
fn a_cluster_without_a_majority_says_no_quorum() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let survivor = (leader + 1) % 3;
    for i in 0..3 {
        if i != survivor {
            cluster.kill(i);
        }
    }
    // Let the survivor notice it has no leader (an election timeout and a bit).
    std::thread::sleep(Duration::from_millis(3000));
    let out = cli(&["query", "k", "--addr", &cluster.addr(survivor).to_string()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no quorum") && err.contains("1 of its 3 voters answer"), "{err}");
}
