//! Servers the tests start at ports picked in advance start again on other ports when
//! one was taken between its check and the server's bind (tests/common/ports.rs): here
//! the port is taken on purpose, right after its check, as another process could.

mod common;

use std::time::Duration;

use common::ports::{closed_addr, steal_next, stolen};
use common::rolling::Nodes;
use common::{Cluster, Server};

#[test]
fn a_cluster_whose_port_was_taken_starts_on_another() {
    steal_next();
    let cluster = Cluster::start(3, &[]);
    let taken = stolen();
    assert_eq!(taken.len(), 1, "the first port picked was taken");
    assert_ne!(cluster.port, taken[0], "the cluster started on another port");
    cluster.wait_leader(Duration::from_secs(15));
}

#[test]
fn founders_and_standbys_whose_port_was_taken_start_on_another() {
    steal_next();
    let nodes = Nodes::start(3, 1, &[]);
    let taken = stolen();
    assert_eq!(taken.len(), 1, "the first port picked was taken");
    assert_ne!(nodes.port, taken[0]);
    assert_eq!(nodes.live.len(), 4, "three founders and a standby");
}

#[test]
fn a_server_on_a_taken_port_says_so() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let why = Server::new().listen(&addr).try_start().err().expect("no second server on the port");
    assert!(common::ports::addr_in_use(&why), "{why}");
}

#[test]
fn a_closed_address_refuses_connections() {
    let closed = closed_addr();
    let err = std::net::TcpStream::connect(closed.addr).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(std::net::TcpListener::bind(closed.addr).is_err(), "nobody else can bind it");
}
