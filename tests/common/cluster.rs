//! Clusters of real `ticketing server` processes on 127.0.0.1..=127.0.0.n, all on one
//! client port (peer port + 1000), each node started by the one launcher
//! ([`Server`](super::process::Server)) as a member.

use std::net::SocketAddr;
use std::time::Duration;

use ticketing::proto::frame::{Request, Response};

use super::ports::{free_port_pair, with_fresh_ports};
use super::process::{Server, ServerProcess};
use super::raw::{connect_with, operator};
use super::wait::eventually_every;
use super::TOKEN;

/// A cluster of real processes; node `i` (0-based) is NodeId `i + 1` at 127.0.0.(i+1).
pub struct Cluster {
    pub port: u16,
    /// `None` once killed (or taken out by the test).
    pub nodes: Vec<Option<ServerProcess>>,
    /// `ID@ADDR,...` of the founders.
    pub peers: String,
}

impl Cluster {
    /// `n` founders (`new`), every node with `extra` environment too; on new ports
    /// when one was taken ([`with_fresh_ports`]).
    pub fn start(n: usize, extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_each(n, |_, _| extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).0
    }

    /// [`Cluster::start`] with node `i`'s (1-based) own environment, `env(i, port)`,
    /// where `port` is a port picked for this attempt beside the cluster's (a metrics
    /// port, say), returned with the cluster.
    pub fn start_each(n: usize, env: impl Fn(usize, u16) -> Vec<(String, String)>) -> (Cluster, u16) {
        with_fresh_ports(&format!("a cluster of {n}"), || {
            let (mut cluster, other) = (Cluster::empty(free_port_pair(), n), super::ports::free_port());
            for i in 1..=n {
                let vars = env(i, other);
                let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let addr = format!("127.0.0.{i}:{}", cluster.port);
                cluster.nodes.push(Some(cluster.try_spawn(i as u64, &addr, "new", &vars)?));
            }
            Ok((cluster, other))
        })
    }

    /// No process yet: the peer list of `n` founders on `port`, for a test that starts
    /// the nodes itself (at other listen addresses, say).
    pub fn empty(port: u16, n: usize) -> Cluster {
        let peers: Vec<String> = (1..=n).map(|i| format!("{i}@127.0.0.{i}:{port}")).collect();
        Cluster { port, nodes: Vec::new(), peers: peers.join(",") }
    }

    /// Starts one node process at `addr` with the cluster's peer list.
    pub fn spawn(&self, id: u64, addr: &str, state: &str, extra: &[(&str, &str)]) -> ServerProcess {
        self.try_spawn(id, addr, state, extra).unwrap_or_else(|why| panic!("node {id} at {addr}: {why}"))
    }

    /// Starts one node process at 127.0.0.`host` on the cluster's port — or, when that
    /// address was taken, on new ports ([`with_fresh_ports`]) — with the cluster's peer
    /// list: for a node no peer list names in advance (one that joins). It, and its
    /// address.
    pub fn spawn_on(
        &self,
        id: u64,
        host: u8,
        state: &str,
        extra: &[(&str, &str)],
    ) -> (ServerProcess, String) {
        let mut port = self.port;
        with_fresh_ports(&format!("node {id} at 127.0.0.{host}"), || {
            let addr = format!("127.0.0.{host}:{port}");
            port = free_port_pair();
            Ok((self.try_spawn(id, &addr, state, extra)?, addr))
        })
    }

    /// [`Cluster::spawn`], or why it did not listen.
    pub fn try_spawn(
        &self,
        id: u64,
        addr: &str,
        state: &str,
        extra: &[(&str, &str)],
    ) -> Result<ServerProcess, String> {
        Server::new().listen(addr).member(Some(id), addr, &self.peers, state).envs(extra).try_start()
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        format!("127.0.0.{}:{}", i + 1, self.port).parse().unwrap()
    }

    /// The client addresses of the nodes, in order.
    pub fn addrs(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.addr(i).to_string()).collect()
    }

    /// Index of the node that says it leads, waiting up to `timeout`.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        // Every 50 ms: each look asks every node.
        eventually_every(timeout, Duration::from_millis(50), || {
            (0..self.nodes.len()).find(|&i| self.nodes[i].is_some() && serving_leader(self.addr(i)))
        })
        .unwrap_or_else(|| panic!("no leader within {timeout:?}"))
    }

    /// Sends `admin replace` (old by new at `addr`) to node `at` on an operator
    /// connection and waits up to 90 s for the answer.
    pub fn admin_replace(&self, at: usize, old: u64, new: u64, addr: &str) -> Response {
        let mut c = operator(self.addr(at));
        c.stream.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
        c.call(1, &Request::Replace { old, new, addr: addr.into() })
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            node.kill();
        }
    }

    pub fn signal(&self, i: usize, sig: &str) {
        assert!(self.nodes[i].as_ref().unwrap().signal(sig), "kill {sig} to node {}", i + 1);
    }
}

/// True when the node at `addr` welcomes as the leader and serves: the leader serves
/// once its no-op is applied, checked with a QUERY.
pub fn serving_leader(addr: SocketAddr) -> bool {
    let Ok(mut c) = connect_with(addr, TOKEN) else { return false };
    if c.welcome.role != b'L' {
        return false;
    }
    c.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    matches!(c.call(1, &Request::Query { key: "probe".into() }), Response::Free | Response::Holder { .. })
}
