//! A 3-node cluster with TLS on both ports: peers verify each other against
//! TICKETING_TLS_CA, clients verify the servers.

mod common;

use std::time::Duration;

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
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(path("cert.pem"), cert.pem()).unwrap();
    std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(path("ca.pem"), ca.pem()).unwrap();
    let (cert_path, key_path, ca_path) = (path("cert.pem"), path("key.pem"), path("ca.pem"));
    let tls = [
        ("TICKETING_TLS_CERT", cert_path.as_str()),
        ("TICKETING_TLS_KEY", key_path.as_str()),
        ("TICKETING_TLS_CA", ca_path.as_str()),
    ];
    let mut cluster = Cluster::start(3, &tls);
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client = Client::builder().addrs(addrs).auth_token(TOKEN).tls_ca_file(&ca_path).build().unwrap();
    // A leader is elected over TLS peer links and serves grants committed by a majority.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let lock = loop {
        match client.acquire("tls-seat", Duration::from_secs(60), Duration::from_secs(1)) {
            Ok(lock) => break lock,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "no grant over TLS: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let status = client.status().unwrap();
    // Kill the leader: the remaining two still elect a leader over TLS and keep the lock.
    let leader_addr = status.lines().find_map(|l| l.strip_prefix("leader=")).unwrap().to_owned();
    assert!(!leader_addr.is_empty(), "{status}");
    let leader = (0..3).find(|i| cluster.addr(*i).to_string() == leader_addr).unwrap();
    let token = lock.token();
    std::mem::forget(lock);
    cluster.kill(leader);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match client.query("tls-seat") {
            Ok(Some(holder)) => {
                assert_eq!(holder.token, token);
                break;
            }
            Ok(None) => panic!("the lock was lost in the failover"),
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "no leader after failover: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}
