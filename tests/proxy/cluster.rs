//! A real 3-node cluster whose advertised client addresses are fault proxies.
//!
//! Node i listens on 127.0.0.(10+i):P and advertises 127.0.0.i:P, where a [`Proxy`]
//! forwards to it; a plain relay forwards the peer port P+1000 the same way. So `M`,
//! WELCOME and STATUS name the proxies, and every client byte crosses one.

use std::net::SocketAddr;
use std::time::Duration;

use super::Proxy;
use crate::common::{connect_with, eventually_every, free_port_pair, with_fresh_ports, Cluster, TOKEN};
use ticketing::proto::frame::{Request, Response};

pub struct ProxiedCluster {
    pub cluster: Cluster,
    /// Client-port proxies, one per node: the addresses the cluster advertises.
    pub proxies: Vec<Proxy>,
    _peer_relays: Vec<Proxy>,
    /// Where the nodes really listen (for checks that must not cross a proxy).
    pub direct: Vec<SocketAddr>,
}

impl ProxiedCluster {
    /// On a port picked for it, again on another when one of its addresses was taken.
    pub fn start() -> ProxiedCluster {
        with_fresh_ports("a proxied cluster", ProxiedCluster::try_start)
    }

    fn try_start() -> Result<ProxiedCluster, String> {
        let p = free_port_pair();
        let sock = |ip: usize, port: u16| -> SocketAddr { format!("127.0.0.{ip}:{port}").parse().unwrap() };
        let proxies: Vec<Proxy> =
            (1..=3).map(|i| Proxy::try_start_at(sock(i, p), sock(10 + i, p))).collect::<Result<_, _>>()?;
        let relays: Vec<Proxy> = (1..=3)
            .map(|i| Proxy::try_start_at(sock(i, p + 1000), sock(10 + i, p + 1000)))
            .collect::<Result<_, _>>()?;
        let mut cluster = Cluster::empty(p, 3);
        for i in 1..=3 {
            let listen = sock(10 + i, p).to_string();
            let node = cluster.try_spawn(
                i as u64,
                &sock(i, p).to_string(),
                "new",
                &[("TICKETING_LISTEN", &listen)],
            )?;
            cluster.nodes.push(Some(node));
        }
        let direct = (1..=3).map(|i| sock(10 + i, p)).collect();
        Ok(ProxiedCluster { cluster, proxies, _peer_relays: relays, direct })
    }

    /// The advertised (proxy) addresses.
    pub fn addrs(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.addr_string()).collect()
    }

    /// Index of the serving leader, asked on direct connections (no proxy bytes).
    pub fn leader(&self, timeout: Duration) -> usize {
        let serving = |i: usize| {
            let Ok(mut c) = connect_with(self.direct[i], TOKEN) else { return false };
            if c.welcome.role != b'L' {
                return false;
            }
            c.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            matches!(
                c.call(1, &Request::Query { key: "probe".into() }),
                Response::Free | Response::Holder { .. }
            )
        };
        // Every 50 ms: each look asks every node.
        eventually_every(timeout, Duration::from_millis(50), || {
            (0..self.direct.len()).find(|&i| self.cluster.nodes[i].is_some() && serving(i))
        })
        .unwrap_or_else(|| panic!("no leader within {timeout:?}"))
    }
}
