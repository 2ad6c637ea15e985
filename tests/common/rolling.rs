//! Self-healing clusters of real processes started the way deploy/ticketing-node.service
//! starts every node after the founders (`join`, no node id: a fresh one drawn, the
//! members' addresses as seeds), and the planned restart of a voter as that unit does
//! one: SIGTERM, the process exits, a fresh process starts at the same address and
//! joins as a standby. Timed for the tests and the measurement of planned restarts
//! (docs/operations.md "Upgrading").

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ticketing::proto::frame::{Request, Response};

use super::facts_cluster::eventually_some;
use super::ports::{free_port_pair, with_fresh_ports};
use super::process::{Server, ServerProcess};
use super::raw::{call, status};
use super::wait::eventually_every;

/// One node process and the id it runs under.
pub struct Member {
    pub id: u64,
    pub addr: SocketAddr,
    pub process: ServerProcess,
}

/// Voters founded with ids 1..=n at 127.0.0.1..=n, standbys and fresh processes
/// after them, every one with `env` too.
pub struct Nodes {
    pub port: u16,
    /// The live processes, in the order they started (a restarted one goes last).
    pub live: Vec<Member>,
    /// Processes that stopped.
    pub gone: Vec<Member>,
    /// The client addresses given to every fresh process (`TICKETING_CLUSTER_PEERS`).
    pub seeds: String,
    env: Vec<(String, String)>,
    next_host: usize,
    /// Every node serves `/metrics` on its host at this port, when set.
    pub metrics_port: Option<u16>,
}

/// What one planned restart took, from its SIGTERM.
#[derive(Clone, Debug)]
pub struct Restart {
    /// The voter stopped, and the standby that took its place.
    pub old: u64,
    pub new_voter: Option<u64>,
    /// When the process exited, and when the leader's voters no longer named it and
    /// were three (or five) again.
    pub exited: Duration,
    pub whole: Duration,
    /// How long the cluster ran with fewer healthy voters than it has places: from the
    /// exit until the voter set was whole again (zero when it was whole first).
    pub short: Duration,
    /// When its fresh successor was a standby, ready for the next restart.
    pub standby: Duration,
    /// Its exit code.
    pub code: Option<i32>,
}

impl Nodes {
    /// `voters` founders and `standbys` standbys, each standby caught up.
    pub fn start(voters: usize, standbys: usize, env: &[(&str, &str)]) -> Nodes {
        Nodes::launch(voters, standbys, env, false)
    }

    /// [`Nodes::start`], every node serving `/metrics` at its host and one port.
    pub fn start_with_metrics(voters: usize, standbys: usize, env: &[(&str, &str)]) -> Nodes {
        Nodes::launch(voters, standbys, env, true)
    }

    /// The founders on ports picked for them, then the standbys on those ports; all
    /// started again on others when one was taken ([`with_fresh_ports`]).
    fn launch(voters: usize, standbys: usize, env: &[(&str, &str)], metrics: bool) -> Nodes {
        with_fresh_ports(&format!("{voters} founders and {standbys} standbys"), || {
            let port = free_port_pair();
            let peers: Vec<String> = (1..=voters).map(|i| format!("{i}@127.0.0.{i}:{port}")).collect();
            let mut nodes = Nodes {
                port,
                live: Vec::new(),
                gone: Vec::new(),
                seeds: (1..=voters).map(|i| format!("127.0.0.{i}:{port}")).collect::<Vec<_>>().join(","),
                env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                next_host: voters + 1,
                metrics_port: metrics.then(super::ports::free_port),
            };
            for i in 1..=voters {
                let addr = format!("127.0.0.{i}:{port}");
                let process =
                    nodes.server(&addr).member(Some(i as u64), &addr, &peers.join(","), "new").try_start()?;
                nodes.live.push(Member { id: i as u64, addr: addr.parse().unwrap(), process });
            }
            nodes.wait_leader(Duration::from_secs(30)).expect("a leader");
            for _ in 0..standbys {
                let addr = format!("127.0.0.{}:{}", nodes.next_host, nodes.port);
                nodes.next_host += 1;
                let member = nodes.try_fresh(&addr)?;
                let id = member.id;
                nodes.live.push(member);
                nodes.wait_standby(id, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{e}"));
            }
            Ok(nodes)
        })
    }

    fn server(&self, addr: &str) -> Server {
        let mut server = Server::new().listen(addr);
        for (k, v) in &self.env {
            server = server.env(k, v);
        }
        if let (Some(port), Some((host, _))) = (self.metrics_port, addr.rsplit_once(':')) {
            server = server.env("TICKETING_METRICS_LISTEN", &format!("{host}:{port}"));
        }
        server
    }

    /// A fresh process at `addr` as the unit starts one: `join`, no node id, the
    /// seeds; its id read from STATUS.
    pub fn fresh(&self, addr: &str) -> Member {
        self.try_fresh(addr).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Nodes::fresh`], or why it did not listen.
    fn try_fresh(&self, addr: &str) -> Result<Member, String> {
        let process = self.server(addr).member(None, addr, &self.seeds, "join").try_start()?;
        let addr: SocketAddr = addr.parse().unwrap();
        let id = eventually_some(Duration::from_secs(5), || status(addr)?.get("node_id")?.parse().ok())
            .unwrap_or_else(|| panic!("the fresh node at {addr} answers no STATUS"));
        Ok(Member { id, addr, process })
    }

    pub fn addrs(&self) -> Vec<String> {
        self.live.iter().map(|m| m.addr.to_string()).collect()
    }

    /// The index (in `live`) of the node that says it leads, the highest term first.
    pub fn leader(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, m) in self.live.iter().enumerate() {
            let Some(s) = status(m.addr) else { continue };
            let term = s.get("term").and_then(|t| t.parse().ok()).unwrap_or(0);
            if s.get("role").map(String::as_str) == Some("leader") && best.is_none_or(|(t, _)| term > t) {
                best = Some((term, i));
            }
        }
        best.map(|(_, i)| i)
    }

    pub fn wait_leader(&self, within: Duration) -> Option<usize> {
        eventually_some(within, || self.leader())
    }

    /// The voters (ids) as the leader's STATUS names them (during a joint change, both
    /// halves), if a leader answers.
    pub fn voters(&self) -> Option<BTreeSet<u64>> {
        let l = self.leader()?;
        let voters = status(self.live[l].addr)?.get("voters")?.clone();
        Some(voters.split(',').filter_map(|v| v.split('@').next()?.parse().ok()).collect())
    }

    /// The leader's MEMBERS, as `name=value` lines.
    pub fn members(&self) -> String {
        let Some(l) = self.leader() else { return String::new() };
        match call(self.live[l].addr, &Request::Members, Duration::from_secs(2)) {
            Some(Response::Status { text }) => text,
            _ => String::new(),
        }
    }

    /// Waits until the leader names `id` a standby; how long that took.
    pub fn wait_standby(&self, id: u64, within: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let mut text = String::new();
        // Every 20 ms: each look asks the leader for its MEMBERS.
        let listed = eventually_every(within, Duration::from_millis(20), || {
            text = self.members();
            let listed = text.lines().find_map(|l| l.strip_prefix("standbys="));
            listed.is_some_and(|ids| ids.split(',').any(|s| s == id.to_string())).then(|| started.elapsed())
        });
        listed.ok_or_else(|| format!("node {id} is no standby after {within:?}: {text}"))
    }

    /// The planned restart of voter `live[i]` as the unit does it: SIGTERM; once the
    /// process exited, a fresh one at its address, until it is a standby. Polls every
    /// 5 ms for the exit and the leader's voters; `within` bounds each wait.
    pub fn restart(&mut self, i: usize, within: Duration) -> Result<Restart, String> {
        let (old, addr) = (self.live[i].id, self.live[i].addr);
        let before = self.voters().ok_or("no leader names the voters")?;
        let places = before.len();
        assert!(self.live[i].process.signal("-TERM"), "SIGTERM to node {old}");
        let signalled = Instant::now();
        let (mut exited, mut whole, mut code, mut new_voter) = (None, None, None, None);
        // Every 5 ms: the wait times two facts, each noted when first seen.
        let both = eventually_every(within, Duration::from_millis(5), || {
            if exited.is_none() {
                if let Some(status) = self.live[i].process.child.try_wait().unwrap() {
                    exited = Some(signalled.elapsed());
                    code = status.code();
                }
            }
            if whole.is_none() {
                if let Some(v) = self.voters().filter(|v| v.len() == places && !v.contains(&old)) {
                    whole = Some(signalled.elapsed());
                    new_voter = v.difference(&before).next().copied();
                }
            }
            exited.zip(whole)
        });
        let Some((exited, whole)) = both else {
            return Err(format!(
                "node {old}: exited {exited:?}, voters whole {whole:?} within {within:?}; voters {:?}",
                self.voters()
            ));
        };
        let stopped = self.live.remove(i);
        self.gone.push(stopped);
        let fresh = self.fresh(&addr.to_string());
        let id = fresh.id;
        self.live.push(fresh);
        self.wait_standby(id, within)?;
        Ok(Restart {
            old,
            new_voter,
            exited,
            whole,
            short: whole.saturating_sub(exited),
            standby: signalled.elapsed(),
            code,
        })
    }
}
