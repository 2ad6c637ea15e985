//! Real `ticketing server` processes for the fault suite. Each process incarnation
//! `n` gets its own address (127.0.x.y), NodeId and — inside the namespace — its own
//! uid, whose connections iptables marks so partitions can name the dialing node.
//! Each process is started by the harness's launcher (tests/common/process.rs) with its
//! output in a log file, which outlives the process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ticketing::proto::frame::{Request, Response};

use crate::common::facts_cluster::eventually_some;
use crate::common::raw::{call, status};
use crate::common::wait::eventually_every;
use crate::common::{tail, Server, ServerProcess};

use super::delay::{DelayProxy, Shape};
use super::netns::Netns;

/// Peer links shaped by delay proxies (`delay.rs`): every node's peer port sits behind
/// one, so every message between two nodes crosses one proxy (the one in front of the
/// node it goes to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    /// Toward every node, and back.
    pub shape: Shape,
    /// The first founding node's shape instead (a slow node), if any.
    pub slow: Option<Shape>,
}

const UID_BASE: u32 = 20_000;

pub struct NodeProc {
    pub id: u64,
    /// Incarnation number; also the connection mark of its connections.
    pub n: u32,
    pub addr: SocketAddr,
    pub server: ServerProcess,
    pub paused: bool,
    pub log: PathBuf,
    /// With shaped links: the proxies in front of its client and peer ports.
    pub proxies: Vec<DelayProxy>,
}

impl NodeProc {
    pub fn ip(&self) -> String {
        self.addr.ip().to_string()
    }
    pub fn mark(&self) -> u32 {
        self.n + 1
    }
    pub fn signal(&mut self, sig: &str) {
        // A process that exited already is not an error here: the checks see it.
        let _ = self.server.signal(sig);
        match sig {
            "-STOP" => self.paused = true,
            "-CONT" => self.paused = false,
            _ => {}
        }
    }
    /// The exit code once the process exited by itself, waiting up to `within`; `None`
    /// if it still runs then (or was killed by a signal).
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        self.server.wait_exit(within)
    }

    pub fn kill9(&mut self) {
        self.server.kill();
    }
}

pub struct Cluster {
    /// The current voters, as the harness believes.
    pub nodes: Vec<NodeProc>,
    /// Processes killed (kept for their logs).
    pub retired: Vec<NodeProc>,
    pub port: u16,
    pub dir: PathBuf,
    next_n: u32,
    next_id: u64,
    use_uids: bool,
    /// The binary the nodes run. With per-node uids, a copy in a world-readable
    /// temporary directory: the build directory may not be reachable for other uids
    /// (a checkout under /root, say).
    bin: PathBuf,
    _bin_dir: Option<tempfile::TempDir>,
    pub links: Option<Links>,
    /// Environment every node of this cluster gets (`start_with_env`).
    pub env: Vec<(String, String)>,
}

fn addr_of(n: u32, port: u16) -> SocketAddr {
    format!("127.0.{}.{}:{port}", n / 200, n % 200 + 1).parse().unwrap()
}

/// With shaped links, where the node really listens (its proxies take `addr_of`).
fn behind_proxy(n: u32, port: u16) -> SocketAddr {
    format!("127.1.{}.{}:{port}", n / 200, n % 200 + 1).parse().unwrap()
}

fn with_port(addr: SocketAddr, port: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), port)
}

impl Cluster {
    pub fn start(size: usize, port: u16, dir: PathBuf, net: Option<&Netns>) -> Result<Cluster, String> {
        Cluster::start_with(size, port, dir, net, None)
    }

    /// `start`, with peer links shaped by delay proxies when `links` is set.
    pub fn start_with(
        size: usize,
        port: u16,
        dir: PathBuf,
        net: Option<&Netns>,
        links: Option<Links>,
    ) -> Result<Cluster, String> {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_ticketing"));
        let (bin, bin_dir) = if net.is_some() {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::Builder::new().prefix("tkt-bin-").tempdir().map_err(|e| e.to_string())?;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
            let copy = dir.path().join("ticketing");
            std::fs::copy(&built, &copy).map_err(|e| format!("copy the binary: {e}"))?;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
            (copy, Some(dir))
        } else {
            (built, None)
        };
        let mut c = Cluster {
            nodes: Vec::new(),
            retired: Vec::new(),
            port,
            dir,
            next_n: 0,
            next_id: 1,
            use_uids: net.is_some(),
            bin,
            _bin_dir: bin_dir,
            links,
            env: Vec::new(),
        };
        c.start_founders(size, net)?;
        Ok(c)
    }

    /// `start` (without delay proxies), every node with `env` too.
    pub fn start_with_env(
        size: usize,
        port: u16,
        dir: PathBuf,
        net: Option<&Netns>,
        env: &[(&str, &str)],
    ) -> Result<Cluster, String> {
        let mut c = Cluster::start_with(0, port, dir, net, None)?;
        c.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        c.start_founders(size, net)?;
        Ok(c)
    }

    fn start_founders(&mut self, size: usize, net: Option<&Netns>) -> Result<(), String> {
        let port = self.port;
        let c = self;
        let addrs: Vec<(u64, SocketAddr)> =
            (0..size as u32).map(|n| (n as u64 + 1, addr_of(n, port))).collect();
        let peers: Vec<String> = addrs.iter().map(|(id, a)| format!("{id}@{a}")).collect();
        for _ in 0..size {
            let p = c.spawn("new", &peers.join(","), net)?;
            c.nodes.push(p);
        }
        Ok(())
    }

    /// Starts the next incarnation (new NodeId, new address).
    pub fn spawn(&mut self, state: &str, peers: &str, net: Option<&Netns>) -> Result<NodeProc, String> {
        self.spawn_with(state, peers, net, None, true, &[])
    }

    /// Starts a fresh process the way docs/deploy.md has a process manager restart one:
    /// `join`, no `TICKETING_NODE_ID` (it draws a fresh one), `seeds` as
    /// `TICKETING_CLUSTER_PEERS`, at `at` (a dead node's address: the same host and
    /// port) or a new address, with `extra` environment. Its id is read from STATUS.
    pub fn spawn_fresh(
        &mut self,
        at: Option<SocketAddr>,
        seeds: &str,
        net: Option<&Netns>,
        extra: &[(&str, &str)],
    ) -> Result<NodeProc, String> {
        assert!(self.links.is_none(), "fresh processes run without delay proxies");
        let mut p = self.spawn_with("join", seeds, net, at, false, extra)?;
        let addr = p.addr;
        match eventually_some(Duration::from_secs(5), || status(addr)?.get("node_id")?.parse().ok()) {
            Some(id) => {
                p.id = id;
                Ok(p)
            }
            None => Err(format!("the fresh node at {} answers no STATUS: {}", p.addr, tail(&p.log, 20))),
        }
    }

    fn spawn_with(
        &mut self,
        state: &str,
        peers: &str,
        net: Option<&Netns>,
        at: Option<SocketAddr>,
        fixed_id: bool,
        extra: &[(&str, &str)],
    ) -> Result<NodeProc, String> {
        let n = self.next_n;
        self.next_n += 1;
        let id = if fixed_id {
            self.next_id += 1;
            self.next_id - 1
        } else {
            0
        };
        let addr = at.unwrap_or_else(|| addr_of(n, self.port));
        let log = self.dir.join(if fixed_id { format!("node-{id}.log") } else { format!("fresh-{n}.log") });
        // With shaped links the node listens behind its proxies: peers dial its
        // configured address (TICKETING_CLUSTER_SELF), the peer proxy's.
        let (listen, proxies) = match self.links {
            None => (addr, Vec::new()),
            Some(links) => {
                let real = behind_proxy(n, self.port);
                let shape = if n == 0 { links.slow.unwrap_or(links.shape) } else { links.shape };
                let peer = self.port + 1000;
                let start = |listen, target, to, from| {
                    DelayProxy::start(listen, target, to, from, u64::from(n) * 7919 + u64::from(self.port))
                        .map_err(|e| format!("delay proxy on {listen}: {e}"))
                };
                let client = start(addr, real, Shape::default(), Shape::default())?;
                let peers = start(with_port(addr, peer), with_port(real, peer), shape, shape)?;
                (real, vec![client, peers])
            }
        };
        let mut server = Server::new()
            .program(&self.bin)
            .listen(&listen.to_string())
            .member(fixed_id.then_some(id), &addr.to_string(), peers, state)
            .log_to(&log)
            .start_within(Duration::from_secs(15));
        for (k, v) in &self.env {
            server = server.env(k, v);
        }
        server = server.envs(extra);
        if self.use_uids {
            let uid = UID_BASE + n;
            if let Some(ns) = net {
                ns.mark_uid(uid, n + 1)?;
            }
            server = server.run_as(uid, UID_BASE);
        }
        let server = server.try_start().map_err(|why| format!("node {id}: {why}"))?;
        Ok(NodeProc { id, n, addr, server, paused: false, log, proxies })
    }

    pub fn client_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|p| p.addr.to_string()).collect()
    }

    pub fn peers(&self) -> String {
        self.nodes.iter().map(|p| format!("{}@{}", p.id, p.addr)).collect::<Vec<_>>().join(",")
    }

    /// The index of the node that leads (the highest term among those saying so).
    pub fn leader(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, p) in self.nodes.iter().enumerate() {
            if p.paused {
                continue;
            }
            if let Some(s) = status(p.addr) {
                let term = s.get("term").and_then(|t| t.parse().ok()).unwrap_or(0);
                if s.get("role").map(String::as_str) == Some("leader") && best.is_none_or(|(t, _)| term > t) {
                    best = Some((term, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    pub fn wait_leader(&self, within: Duration) -> Option<usize> {
        eventually_some(within, || self.leader())
    }

    /// Sends `Replace {old, new, addr}` to the leader until it is done (or `within`
    /// passes). True when the committed voters have `new` and not `old`.
    pub fn replace(&self, old: u64, new: u64, addr: SocketAddr, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        // A try every 300 ms (each asks every node who leads, then the leader).
        let done = eventually_every(within, Duration::from_millis(300), || {
            let l = self.leader()?;
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
            match call(self.nodes[l].addr, &Request::Replace { old, new, addr: addr.to_string() }, left) {
                Some(Response::Status { text }) if text.contains("replaced") => return Some(()),
                Some(other) => last = format!("{other:?}"),
                None => last = "no answer".into(),
            }
            // A refusal because the id is "already used" may mean an earlier attempt
            // got through: look at the voters.
            let s = status(self.nodes[self.leader()?].addr)?;
            let voters = s.get("voters").cloned().unwrap_or_default();
            let ids: Vec<&str> = voters.split(',').filter_map(|v| v.split('@').next()).collect();
            (ids.contains(&new.to_string().as_str()) && !ids.contains(&old.to_string().as_str()))
                .then_some(())
        });
        done.ok_or_else(|| {
            format!("replace {old} by {new}: not done within {within:?} (last answer: {last})")
        })
    }

    /// Nodes that exited although the harness did not kill them.
    pub fn unexpected_exits(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &mut self.nodes {
            if let Ok(Some(status)) = p.server.child.try_wait() {
                out.push(format!(
                    "node {} ({}) exited by itself: {status}; log tail:\n{}",
                    p.id,
                    p.addr,
                    tail(&p.log, 15)
                ));
            }
        }
        out
    }
}
