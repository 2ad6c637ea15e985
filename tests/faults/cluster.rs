//! Real `ticketing server` processes for the fault suite. Each process incarnation
//! `n` gets its own address (127.0.x.y), NodeId and — inside the namespace — its own
//! uid, whose connections iptables marks so partitions can name the dialing node.

use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ticketing::proto::frame::{decode_response, encode_request, Request, Response};
use ticketing::proto::handshake::{self, CLIENT_LABELS};
use ticketing::proto::io::FrameReader;
use ticketing::proto::limits::RESPONSE_FRAME_LEN_MAX;

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

pub const TOKEN: &str = "fault-suite-secret-0123456789";
/// The peer secret (it must differ from the client secret).
pub const PEER_TOKEN: &str = "fault-suite-peer-secret-0123456789";
const UID_BASE: u32 = 20_000;

pub struct NodeProc {
    pub id: u64,
    /// Incarnation number; also the connection mark of its connections.
    pub n: u32,
    pub addr: SocketAddr,
    pub child: Child,
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
        let _ = Command::new("kill").args([sig, &self.child.id().to_string()]).status();
        match sig {
            "-STOP" => self.paused = true,
            "-CONT" => self.paused = false,
            _ => {}
        }
    }
    /// The exit code once the process exited by itself, waiting up to `within`; `None`
    /// if it still runs then (or was killed by a signal).
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(id) = status(p.addr).and_then(|s| s.get("node_id").and_then(|v| v.parse().ok())) {
                p.id = id;
                return Ok(p);
            }
            if Instant::now() > deadline {
                return Err(format!("the fresh node at {} answers no STATUS: {}", p.addr, tail(&p.log, 20)));
            }
            std::thread::sleep(Duration::from_millis(20));
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
        let file = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
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
        let mut cmd = Command::new(&self.bin);
        cmd.arg("server").env_clear();
        if fixed_id {
            cmd.env("TICKETING_NODE_ID", id.to_string());
        }
        cmd.env("TICKETING_LISTEN", listen.to_string())
            .env("TICKETING_CLUSTER_SELF", addr.to_string())
            .env("TICKETING_CLUSTER_PEERS", peers)
            .env("TICKETING_CLUSTER_STATE", state)
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        if self.use_uids {
            let uid = UID_BASE + n;
            if let Some(ns) = net {
                ns.mark_uid(uid, n + 1)?;
            }
            cmd.uid(uid).gid(UID_BASE);
        }
        let child = cmd.spawn().map_err(|e| format!("start node {id}: {e}"))?;
        let mut p = NodeProc { id, n, addr, child, paused: false, log, proxies };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let text = std::fs::read_to_string(&p.log).unwrap_or_default();
            if text.contains(" listening on ") {
                return Ok(p);
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(format!("node {id} exited at start ({status}): {}", tail(&p.log, 20)));
            }
            if Instant::now() > deadline {
                p.kill9();
                return Err(format!("node {id} did not start listening: {}", tail(&p.log, 20)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.leader() {
                return Some(l);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `Replace {old, new, addr}` to the leader until it is done (or `within`
    /// passes). True when the committed voters have `new` and not `old`.
    pub fn replace(&self, old: u64, new: u64, addr: SocketAddr, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            let Some(l) = self.leader() else {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
            match call(self.nodes[l].addr, &Request::Replace { old, new, addr: addr.to_string() }, left) {
                Some(Response::Status { text }) if text.contains("replaced") => return Ok(()),
                Some(other) => last = format!("{other:?}"),
                None => last = "no answer".into(),
            }
            // A refusal because the id is "already used" may mean an earlier attempt
            // got through: look at the voters.
            if let Some(l) = self.leader() {
                if let Some(s) = status(self.nodes[l].addr) {
                    let voters = s.get("voters").cloned().unwrap_or_default();
                    let ids: Vec<&str> = voters.split(',').filter_map(|v| v.split('@').next()).collect();
                    if ids.contains(&new.to_string().as_str()) && !ids.contains(&old.to_string().as_str()) {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!("replace {old} by {new}: not done within {within:?} (last answer: {last})"))
    }

    /// Nodes that exited although the harness did not kill them.
    pub fn unexpected_exits(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &mut self.nodes {
            if let Ok(Some(status)) = p.child.try_wait() {
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

pub fn tail(path: &PathBuf, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One request on a fresh raw connection with short timeouts.
pub fn call(addr: SocketAddr, request: &Request, read_timeout: Duration) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    // Admin ops need the operator (peer) secret; it is accepted on the client port too.
    let token = if request.is_admin() { PEER_TOKEN } else { TOKEN };
    handshake::client_handshake(&mut stream, &handshake::auth_key(token.as_bytes()), &CLIENT_LABELS).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    let mut buf = Vec::new();
    encode_request(&mut buf, 1, request);
    std::io::Write::write_all(&mut stream, &buf).ok()?;
    let mut frames = FrameReader::new(stream, RESPONSE_FRAME_LEN_MAX);
    let payload = frames.read_payload().ok()?;
    decode_response(payload).ok().map(|(_, r)| r)
}

pub fn status(addr: SocketAddr) -> Option<HashMap<String, String>> {
    match call(addr, &Request::Status, Duration::from_secs(1))? {
        Response::Status { text } => Some(
            text.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        _ => None,
    }
}
