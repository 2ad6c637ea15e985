//! A 3-node cluster with TLS on both ports: peers verify each other against
//! TICKETING_TLS_CA, clients verify the servers.

mod common;

use std::cell::RefCell;
use std::time::Duration;

use common::children::{Within, CLI};
use common::facts_cluster::eventually_some;
use common::ports::addr_in_use;
use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use ticketing::client::Client;

#[test]
fn a_tls_cluster_elects_replicates_and_serves_verified_clients() {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    // One certificate for the three loopback addresses (IP SANs).
    let names: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}")).collect();
    let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let files = pem_files(&cert, &key, &ca);
    let (cert_path, key_path, ca_path) = (files.cert.clone(), files.key.clone(), files.ca.clone());
    let tls = [
        ("TICKETING_TLS_CERT", cert_path.as_str()),
        ("TICKETING_TLS_KEY", key_path.as_str()),
        ("TICKETING_TLS_CA", ca_path.as_str()),
    ];
    let mut cluster = Cluster::start(3, &tls);
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client = Client::builder().addrs(addrs).auth_token(TOKEN).tls_ca_file(&ca_path).build().unwrap();
    // A leader is elected over TLS peer links and serves grants committed by a majority.
    let last = RefCell::new(String::new());
    let lock = eventually_some(Duration::from_secs(20), || {
        client
            .acquire("tls-seat", Duration::from_secs(60), Duration::from_secs(1))
            .map_err(|e| last.replace(e.to_string()))
            .ok()
    })
    .unwrap_or_else(|| panic!("no grant over TLS: {}", last.borrow()));
    let status = client.status().unwrap();
    // Kill the leader: the remaining two still elect a leader over TLS and keep the lock.
    let leader_addr = status.lines().find_map(|l| l.strip_prefix("leader=")).unwrap().to_owned();
    assert!(!leader_addr.is_empty(), "{status}");
    let leader = (0..3).find(|i| cluster.addr(*i).to_string() == leader_addr).unwrap();
    let token = lock.token();
    std::mem::forget(lock);
    cluster.kill(leader);
    let holder = eventually_some(Duration::from_secs(20), || match client.query("tls-seat") {
        Ok(Some(holder)) => Some(holder),
        Ok(None) => panic!("the lock was lost in the failover"),
        Err(e) => {
            last.replace(e.to_string());
            None
        }
    })
    .unwrap_or_else(|| panic!("no leader after failover: {}", last.borrow()));
    assert_eq!(holder.token, token);
}

/// A node's certificate, its key and the CA written as `cert.pem`, `key.pem` and
/// `ca.pem` in a directory that lives as long as this value.
struct PemFiles {
    _dir: tempfile::TempDir,
    cert: String,
    key: String,
    ca: String,
}

fn pem_files(cert: &rcgen::Certificate, key: &KeyPair, ca: &rcgen::Certificate) -> PemFiles {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(path("cert.pem"), cert.pem()).unwrap();
    std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(path("ca.pem"), ca.pem()).unwrap();
    let (cert, key, ca) = (path("cert.pem"), path("key.pem"), path("ca.pem"));
    PemFiles { _dir: dir, cert, key, ca }
}

/// A CA and a certificate it signed for `names`, as PEM files in `dir`; returns the
/// paths of (cert, key, ca) and the rcgen objects for further signing.
struct Pki {
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A CA named as rcgen names it by default: two of them share one name.
    fn new() -> Pki {
        Pki::named(None)
    }

    fn named(name: Option<&str>) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        if let Some(name) = name {
            ca_params.distinguished_name.push(rcgen::DnType::CommonName, name);
        }
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        Pki { ca, ca_key }
    }

    fn leaf(&self, names: &[&str]) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert, key)
    }
}

/// A dialing configuration that trusts `pki`'s CA and presents `identity`, if any.
fn dialer_tls(
    trust: &Pki,
    identity: Option<&(rcgen::Certificate, KeyPair)>,
) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trust.ca.der().clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap(),
    };
    std::sync::Arc::new(config)
}

#[test]
fn the_peer_port_requires_a_certificate_from_the_ca_valid_for_the_node_it_claims() {
    use ticketing::cluster::peer::{self, refusal, PeerError, PeerHello};
    let pki = Pki::new();
    let node_identity = pki.leaf(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(path("cert.pem"), node_identity.0.pem()).unwrap();
    std::fs::write(path("key.pem"), node_identity.1.serialize_pem()).unwrap();
    std::fs::write(path("ca.pem"), pki.ca.pem()).unwrap();
    let (cert_path, key_path, ca_path) = (path("cert.pem"), path("key.pem"), path("ca.pem"));
    let tls = [
        ("TICKETING_TLS_CERT", cert_path.as_str()),
        ("TICKETING_TLS_KEY", key_path.as_str()),
        ("TICKETING_TLS_CA", ca_path.as_str()),
    ];
    let cluster = Cluster::start(3, &tls);
    // Wait for a leader through a verified client.
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client = Client::builder().addrs(addrs).auth_token(TOKEN).tls_ca_file(&ca_path).build().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while client.acquire("k", Duration::from_secs(5), Duration::from_secs(1)).is_err() {
        assert!(std::time::Instant::now() < deadline, "no leader over TLS");
    }
    let target = cluster.addr(0).to_string();
    let key = ticketing::proto::handshake::auth_key(PEER_TOKEN.as_bytes());
    let hello = PeerHello {
        node_id: 2,
        incarnation: 5,
        domain: 0,
        addr: cluster.addr(1).to_string(),
        name: String::new(),
    };
    // No certificate, and one from another CA: the TLS handshake itself fails.
    let stranger = Pki::new();
    let foreign_identity = stranger.leaf(&["127.0.0.2"]);
    let foreign = {
        // Trusts our CA (to get as far as the server's certificate) but presents a
        // certificate signed by another one.
        dialer_tls(&pki, Some(&foreign_identity))
    };
    for (what, config) in [("no certificate", dialer_tls(&pki, None)), ("another CA", foreign)] {
        match peer::dial(&target, &hello, &key, Some(&config)) {
            Err(PeerError::Refused { .. }) | Ok(_) => panic!("{what}: admitted to the TLS handshake"),
            Err(_) => {}
        }
    }
    // A certificate of the right CA, for another host than node 2's: refused.
    let other_host = pki.leaf(&["127.0.0.9"]);
    match peer::dial(&target, &hello, &key, Some(&dialer_tls(&pki, Some(&other_host)))) {
        Err(PeerError::Refused { code, .. }) => assert_eq!(code, refusal::CERT_MISMATCH),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("a certificate for 127.0.0.9 spoke as node 2"),
    }
    // The node logged the failed handshakes at warn, and still serves.
    let log: Vec<String> = cluster.nodes[0].as_ref().unwrap().log.try_iter().collect();
    assert!(log.iter().any(|l| l.contains("WARN") && l.contains("peer TLS handshake failed")), "{log:?}");
    let lock = client.acquire("after", Duration::from_secs(5), Duration::from_secs(2)).unwrap();
    drop(lock);
}

/// Runs `ticketing server` as cluster node 1 of three with `cert` (PEM) and its key,
/// and returns (exit status, stderr) — for certificates that must stop it at start.
fn start_with_certificate(pki: &Pki, cert: &rcgen::Certificate, key: &KeyPair) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(path("cert.pem"), cert.pem()).unwrap();
    std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(path("ca.pem"), pki.ca.pem()).unwrap();
    // Again on new ports if it stopped because its address was taken.
    with_fresh_ports("node 1 with the certificate", || {
        let port = free_port_pair();
        let peers: String = (1..=3).map(|i| format!("{i}@127.0.0.{i}:{port}")).collect::<Vec<_>>().join(",");
        let out = std::process::Command::new(bin())
            .arg("server")
            .env_clear()
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
            .env("TICKETING_LISTEN", format!("127.0.0.1:{port}"))
            .env("TICKETING_NODE_ID", "1")
            .env("TICKETING_CLUSTER_SELF", format!("127.0.0.1:{port}"))
            .env("TICKETING_CLUSTER_PEERS", peers)
            .env("TICKETING_TLS_CERT", path("cert.pem"))
            .env("TICKETING_TLS_KEY", path("key.pem"))
            .env("TICKETING_TLS_CA", path("ca.pem"))
            .output_within(CLI);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match addr_in_use(&stderr) {
            true => Err(stderr),
            false => Ok((out.status.code(), stderr)),
        }
    })
}

#[test]
fn a_certificate_peers_would_refuse_stops_the_node_at_start_naming_the_variable() {
    let pki = Pki::new();
    // No subjectAltName for the host peers dial (TICKETING_CLUSTER_SELF's).
    let (cert, key) = pki.leaf(&["127.0.0.9"]);
    let (code, stderr) = start_with_certificate(&pki, &cert, &key);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.starts_with("ticketing: TICKETING_TLS_CERT:") && stderr.contains("127.0.0.1"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // Extended key usage serverAuth only: peers require a client certificate.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &pki.ca, &pki.ca_key).unwrap();
    let (code, stderr) = start_with_certificate(&pki, &cert, &key);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("ticketing: TICKETING_TLS_CERT:") && stderr.contains("clientAuth"),
        "{stderr}"
    );
    // Signed by another CA than TICKETING_TLS_CA's: said so, and not blamed on the
    // subjectAltName (which is right).
    let (cert, key) = Pki::new().leaf(&["127.0.0.1"]);
    let (code, stderr) = start_with_certificate(&pki, &cert, &key);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("ticketing: TICKETING_TLS_CERT:")
            && stderr.contains("not signed by the CA in TICKETING_TLS_CA")
            && !stderr.contains("subjectAltName"),
        "{stderr}"
    );
    // Both usages, and a name for each node: the cluster starts.
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}")).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.extended_key_usages =
        vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &pki.ca, &pki.ca_key).unwrap();
    let files = pem_files(&cert, &key, &pki.ca);
    let (cert_path, key_path, ca_path) = (files.cert.clone(), files.key.clone(), files.ca.clone());
    let cluster = Cluster::start(
        3,
        &[
            ("TICKETING_TLS_CERT", cert_path.as_str()),
            ("TICKETING_TLS_KEY", key_path.as_str()),
            ("TICKETING_TLS_CA", ca_path.as_str()),
        ],
    );
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client = Client::builder().addrs(addrs).auth_token(TOKEN).tls_ca_file(&ca_path).build().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while client.acquire("k", Duration::from_secs(5), Duration::from_secs(1)).is_err() {
        assert!(std::time::Instant::now() < deadline, "no leader over TLS with both usages");
    }
}

/// Self-healing on a TLS cluster: a follower killed and started again the way
/// docs/deploy.md restarts a node (`join`, no node id, the members' addresses, the same
/// certificate files) joins over TLS as a standby and the autopilot swaps it in.
#[test]
fn a_tls_cluster_heals_a_killed_follower_with_a_fresh_process() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
    let files = pem_files(&cert, &key, &pki.ca);
    let (cert_path, key_path, ca_path) = (files.cert.clone(), files.key.clone(), files.ca.clone());
    let env = [
        ("TICKETING_TLS_CERT", cert_path.as_str()),
        ("TICKETING_TLS_KEY", key_path.as_str()),
        ("TICKETING_TLS_CA", ca_path.as_str()),
        ("TICKETING_AUTOPILOT_DEAD_MS", "6000"),
    ];
    let mut cluster = Cluster::start(3, &env);
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client =
        Client::builder().addrs(addrs.clone()).auth_token(TOKEN).tls_ca_file(&ca_path).build().unwrap();
    let voters = |client: &Client| -> Vec<String> {
        let status = client.status().unwrap_or_default();
        let line = status.lines().find_map(|l| l.strip_prefix("voters=")).unwrap_or("").to_owned();
        line.split(',').filter(|v| !v.is_empty()).map(|v| v.split('@').next().unwrap().to_owned()).collect()
    };
    assert!(eventually(Duration::from_secs(20), || voters(&client).len() == 3), "no leader over TLS");
    let leader_addr =
        client.status().unwrap().lines().find_map(|l| l.strip_prefix("leader=")).unwrap().to_owned();
    let victim = (0..3).find(|i| cluster.addr(*i).to_string() != leader_addr).unwrap();
    cluster.kill(victim);
    let at = cluster.addr(victim).to_string();
    let seeds = addrs.join(",");
    let mut fresh_env = vec![
        ("TICKETING_LISTEN", at.as_str()),
        ("TICKETING_CLUSTER_SELF", at.as_str()),
        ("TICKETING_CLUSTER_PEERS", seeds.as_str()),
        ("TICKETING_CLUSTER_STATE", "join"),
        ("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN),
    ];
    fresh_env.extend_from_slice(&env);
    let _fresh = start_server(&fresh_env);
    let old = (victim + 1).to_string();
    let replaced = |v: &Vec<String>| v.len() == 3 && !v.contains(&old);
    assert!(
        eventually(Duration::from_secs(30), || replaced(&voters(&client))),
        "node {old} not replaced over TLS: voters {:?}",
        voters(&client)
    );
    let lock = client.acquire("tls-healed", Duration::from_secs(5), Duration::from_secs(5)).expect("a grant");
    assert!(lock.token() > 0);
}

/// Nodes set up wrongly against a TLS cluster (docs/tls.md "When it goes wrong"): the
/// node says what it saw and the variable to fix, and the cluster's nodes say it too,
/// naming the address the connection came from.
#[test]
fn a_misconfigured_node_and_the_tls_cluster_both_name_the_mistake() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (cert, key) = pki.leaf(&["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let (cert_path, key_path) = (write("cert.pem", &cert.pem()), write("key.pem", &key.serialize_pem()));
    let ca_path = write("ca.pem", &pki.ca.pem());
    let tls = [
        ("TICKETING_TLS_CERT", cert_path.as_str()),
        ("TICKETING_TLS_KEY", key_path.as_str()),
        ("TICKETING_TLS_CA", ca_path.as_str()),
    ];
    let cluster = Cluster::start(3, &tls);
    // Node 4 joins with the members as its peers, and waits for `admin replace`: it
    // dials their peer ports all along, and is never dialed.
    let misfit = |env: &[(&str, &str)]| cluster.spawn_on(4, 4, "join", env).0;
    let node1 = cluster.nodes[0].as_ref().unwrap();
    let within = Duration::from_secs(10);
    let from_a_node = |l: &str| l.contains("WARN") && l.contains("peer TLS handshake failed from 127.0.0.1:");

    // No TLS: the node asks whether the silent peer port speaks TLS instead of waiting
    // for the handshake to time out. Only that probe's answer says "speaks TLS"; a
    // handshake that timed out says "no answer to the handshake within" instead.
    let plain = misfit(&[]);
    let line = plain.wait_log(within, "the plain node", |l| {
        l.contains("speaks TLS and this node does not") || l.contains("no answer to the handshake within")
    });
    assert!(
        line.contains("speaks TLS and this node does not: set TICKETING_TLS_CERT, TICKETING_TLS_KEY and TICKETING_TLS_CA"),
        "{line}"
    );
    let line = node1
        .wait_log(within, "node 1 about the plain node", |l| from_a_node(l) && l.contains("ClientHello"));
    assert!(line.contains("no TLS ClientHello") && line.contains("set TICKETING_TLS_CERT"), "{line}");
    drop(plain);

    // Another peer secret.
    let mut env = tls.to_vec();
    env.push(("TICKETING_PEER_AUTH_TOKEN", "another-peer-secret-0123456789"));
    let stranger = misfit(&env);
    // Its dialer or its join thread (on the client port), whichever is first; the join
    // thread then stops it (exit 2, docs/configuration.md §3.9).
    stranger.wait_log(within, "the node with another secret", |l| {
        l.contains("(TICKETING_PEER_AUTH_TOKEN differs from the cluster's")
    });
    let line = node1.wait_log(within, "node 1 about the secret", |l| l.contains("authentication failed"));
    assert!(line.contains("from 127.0.0.1:") && line.contains("TICKETING_PEER_AUTH_TOKEN"), "{line}");
    drop(stranger);

    // A certificate from another CA (the node trusts both CAs, so it starts and trusts
    // the cluster): the cluster refuses it, and the node hears why. The two CAs have one
    // name (as when a CA is made again), so the signature is what fails.
    let other = Pki::new();
    let (cert_b, key_b) = other.leaf(&["127.0.0.4"]);
    let (cert_b, key_b) = (write("cert-b.pem", &cert_b.pem()), write("key-b.pem", &key_b.serialize_pem()));
    let both = write("both.pem", &format!("{}{}", pki.ca.pem(), other.ca.pem()));
    let foreign = misfit(&[
        ("TICKETING_TLS_CERT", cert_b.as_str()),
        ("TICKETING_TLS_KEY", key_b.as_str()),
        ("TICKETING_TLS_CA", both.as_str()),
    ]);
    foreign.wait_log(within, "the node with another CA's certificate", |l| {
        l.contains("refuses our certificate (TICKETING_TLS_CERT): it is not signed by the CA in its TICKETING_TLS_CA")
    });
    node1.wait_log(within, "node 1 about the certificate", |l| {
        from_a_node(l) && l.contains("its certificate is not signed by the CA in TICKETING_TLS_CA")
    });
    drop(foreign);

    // Another PKI altogether, its CA named otherwise: the node does not trust the
    // cluster, and tells it so.
    let other = Pki::named(Some("Another CA"));
    let (cert_b, key_b) = other.leaf(&["127.0.0.4"]);
    let (cert_b, key_b) = (write("cert-c.pem", &cert_b.pem()), write("key-c.pem", &key_b.serialize_pem()));
    let other_ca = write("other-ca.pem", &other.ca.pem());
    let outsider = misfit(&[
        ("TICKETING_TLS_CERT", cert_b.as_str()),
        ("TICKETING_TLS_KEY", key_b.as_str()),
        ("TICKETING_TLS_CA", other_ca.as_str()),
    ]);
    outsider.wait_log(within, "the node of another PKI", |l| {
        l.contains("(peer port ") && l.contains("its certificate is not signed by the CA in TICKETING_TLS_CA")
    });
    // On its peer port, or on its client port (the join thread asks the members there
    // first, and stops the node when none can be asked: docs/configuration.md §3.9).
    let from_the_node = |l: &str| from_a_node(l) || l.contains("client TLS handshake failed from 127.0.0.1:");
    node1.wait_log(within, "node 1 about the other PKI", |l| {
        from_the_node(l)
            && l.contains("it does not trust this node's certificate")
            && l.contains("not signed by the CA in")
    });
}
