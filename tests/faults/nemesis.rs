//! The nemeses. One fault at a time: inject, hold for a few seconds, heal, then a
//! quiet period in which the checker expects grants to resume.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::cluster::Cluster;
use super::netns::Netns;
use super::workload::Shared;
use super::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    KillReplace,
    PauseNode,
    PartitionHalves,
    IsolateLeader,
    MajoritiesRing,
    OneWay,
    Loss,
    Delay,
    ClientPause,
}

pub const ALL: [Kind; 9] = [
    Kind::KillReplace,
    Kind::PauseNode,
    Kind::PartitionHalves,
    Kind::IsolateLeader,
    Kind::MajoritiesRing,
    Kind::OneWay,
    Kind::Loss,
    Kind::Delay,
    Kind::ClientPause,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::KillReplace => "kill9+replace",
            Kind::PauseNode => "pause-node",
            Kind::PartitionHalves => "partition-halves",
            Kind::IsolateLeader => "isolate-leader",
            Kind::MajoritiesRing => "majorities-ring",
            Kind::OneWay => "one-way-partition",
            Kind::Loss => "packet-loss",
            Kind::Delay => "packet-delay",
            Kind::ClientPause => "client-pause",
        }
    }

    pub fn needs_network(self) -> bool {
        !matches!(self, Kind::KillReplace | Kind::PauseNode | Kind::ClientPause)
    }
}

/// The kinds a run can use: all, or the process-level ones without a namespace.
/// Delay needs `netem`; without it the delay slot uses a token-bucket throttle.
pub fn available(net: Option<&Netns>) -> Vec<Kind> {
    ALL.iter().copied().filter(|k| net.is_some() || !k.needs_network()).collect()
}

/// A seeded schedule: shuffled rounds over the available kinds, so a short run
/// still sees many different kinds.
pub fn schedule(rng: &mut Rng, kinds: &[Kind], count: usize) -> Vec<Kind> {
    let mut out = Vec::new();
    while out.len() < count {
        let mut round = kinds.to_vec();
        for i in (1..round.len()).rev() {
            round.swap(i, rng.below(i as u64 + 1) as usize);
        }
        out.extend(round);
    }
    out.truncate(count);
    out
}

/// Directed (from, to) node pairs whose traffic is dropped → iptables rules. A
/// connection is identified by the mark of the node that dialed it and its original
/// destination address (the acceptor).
pub fn block_rules(cluster: &Cluster, pairs: &[(usize, usize)], extra: &str) -> Vec<String> {
    let mut rules = Vec::new();
    for &(a, b) in pairs {
        let (na, nb) = (&cluster.nodes[a], &cluster.nodes[b]);
        // a dialed b: a's packets are the ORIGINAL direction.
        rules.push(format!(
            "-A TKT -m connmark --mark {} -m conntrack --ctorigdst {} --ctdir ORIGINAL{extra} -j DROP",
            na.mark(),
            nb.ip()
        ));
        // b dialed a: a's packets are the REPLY direction.
        rules.push(format!(
            "-A TKT -m connmark --mark {} -m conntrack --ctorigdst {} --ctdir REPLY{extra} -j DROP",
            nb.mark(),
            na.ip()
        ));
    }
    rules
}

fn both_ways(groups_of: impl Fn(usize, usize) -> bool, n: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if a != b && !groups_of(a, b) {
                pairs.push((a, b));
            }
        }
    }
    pairs
}

pub struct Injected {
    pub detail: String,
    /// Whether healing must replace a killed node.
    pub killed: Option<usize>,
}

/// Injects one fault. Returns a description, or an error when it could not.
pub fn inject(
    kind: Kind,
    rng: &mut Rng,
    cluster: &mut Cluster,
    net: Option<&Netns>,
    shared: &Shared,
) -> Result<Injected, String> {
    let n = cluster.nodes.len();
    let leader = cluster.leader();
    // Half the time the leader, else any node.
    let pick = |rng: &mut Rng| match leader {
        Some(l) if rng.below(2) == 0 => l,
        _ => rng.below(n as u64) as usize,
    };
    let desc = |i: usize, c: &Cluster| format!("node {} ({})", c.nodes[i].id, c.nodes[i].addr);
    let lead =
        |c: &Cluster| leader.map(|l| format!(", leader was node {}", c.nodes[l].id)).unwrap_or_default();
    let mut killed = None;
    let detail = match kind {
        Kind::KillReplace => {
            let v = pick(rng);
            let d = format!("kill -9 {}{}", desc(v, cluster), lead(cluster));
            cluster.nodes[v].kill9();
            killed = Some(v);
            d
        }
        Kind::PauseNode => {
            let v = pick(rng);
            cluster.nodes[v].signal("-STOP");
            format!("SIGSTOP {}{}", desc(v, cluster), lead(cluster))
        }
        Kind::ClientPause => {
            let k = 1 + rng.below(3) as u32;
            shared.pause_budget.store(k, Ordering::SeqCst);
            format!("{k} holders stall past their lease, then write")
        }
        _ => {
            let net = net.ok_or("no namespace")?;
            match kind {
                Kind::PartitionHalves => {
                    let mut side = vec![false; n];
                    let mut order: Vec<usize> = (0..n).collect();
                    for i in (1..n).rev() {
                        order.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    for &i in &order[..n / 2] {
                        side[i] = true;
                    }
                    net.set_filter(&block_rules(cluster, &both_ways(|a, b| side[a] == side[b], n), ""))?;
                    let minority: Vec<u64> =
                        (0..n).filter(|i| side[*i]).map(|i| cluster.nodes[i].id).collect();
                    format!("halves: minority {minority:?} | rest{}", lead(cluster))
                }
                Kind::IsolateLeader => {
                    let l = leader.ok_or("no leader to isolate")?;
                    net.set_filter(&block_rules(cluster, &both_ways(|a, b| a != l && b != l, n), ""))?;
                    format!("isolate leader {}", desc(l, cluster))
                }
                Kind::MajoritiesRing => {
                    // 5 nodes: each sees its two ring neighbours (a majority with
                    // itself), no two nodes see the same majority. 3 nodes: a bridge,
                    // one node sees both others which do not see each other.
                    let mut order: Vec<usize> = (0..n).collect();
                    for i in (1..n).rev() {
                        order.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    let pos: Vec<usize> =
                        (0..n).map(|i| order.iter().position(|x| *x == i).unwrap()).collect();
                    let linked = |a: usize, b: usize| {
                        let d = (pos[a] + n - pos[b]) % n;
                        if n == 3 {
                            pos[a] == 0 || pos[b] == 0
                        } else {
                            d <= 1 || d == n - 1
                        }
                    };
                    net.set_filter(&block_rules(cluster, &both_ways(linked, n), ""))?;
                    let ring: Vec<u64> = order.iter().map(|i| cluster.nodes[*i].id).collect();
                    format!("{} {ring:?}{}", if n == 3 { "bridge" } else { "ring" }, lead(cluster))
                }
                Kind::OneWay => {
                    let v = pick(rng);
                    let outbound = rng.below(2) == 0;
                    let pairs: Vec<(usize, usize)> =
                        (0..n).filter(|o| *o != v).map(|o| if outbound { (v, o) } else { (o, v) }).collect();
                    net.set_filter(&block_rules(cluster, &pairs, ""))?;
                    format!(
                        "{} cannot {}{}",
                        desc(v, cluster),
                        if outbound { "send to the others" } else { "hear the others" },
                        lead(cluster)
                    )
                }
                Kind::Loss => {
                    let p = [0.05, 0.1, 0.2, 0.3][rng.below(4) as usize];
                    net.set_filter(&[format!(
                        "-A TKT -m statistic --mode random --probability {p} -j DROP"
                    )])?;
                    format!("drop {:.0}% of all packets on lo", p * 100.0)
                }
                Kind::Delay => {
                    let ms = [20, 50, 100, 200][rng.below(4) as usize];
                    if net.netem {
                        let d = format!("{ms}ms");
                        let j = format!("{}ms", ms / 2);
                        net.exec(&["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", &d, &j])?;
                        format!("netem delay {ms}ms ± {}ms on lo", ms / 2)
                    } else {
                        // This kernel has no sch_netem: slow the link with a token
                        // bucket instead (queueing delay under load, drops on bursts).
                        net.exec(&[
                            "tc",
                            "qdisc",
                            "add",
                            "dev",
                            "lo",
                            "root",
                            "tbf",
                            "rate",
                            "2mbit",
                            "burst",
                            "96kb",
                            "latency",
                            &format!("{ms}ms"),
                        ])?;
                        format!("netem unavailable in this kernel: tbf 2mbit, {ms}ms queue on lo")
                    }
                }
                _ => unreachable!(),
            }
        }
    };
    Ok(Injected { detail, killed })
}

/// Heals whatever `inject` did. For a kill, starts a replacement with a new NodeId
/// and address and has the leader swap it in.
pub fn heal(
    kind: Kind,
    injected: &Injected,
    cluster: &mut Cluster,
    net: Option<&Netns>,
    shared: &Shared,
) -> Result<String, String> {
    match kind {
        Kind::KillReplace => {
            let v = injected.killed.unwrap();
            let old_id = cluster.nodes[v].id;
            let peers = cluster.peers();
            let fresh = cluster.spawn("join", &peers, net)?;
            let (new_id, addr) = (fresh.id, fresh.addr);
            let old = std::mem::replace(&mut cluster.nodes[v], fresh);
            cluster.retired.push(old);
            cluster.replace(old_id, new_id, addr, Duration::from_secs(60))?;
            let addrs = cluster.client_addrs();
            *shared.topology.addrs.lock().unwrap() = addrs;
            shared.topology.gen.fetch_add(1, Ordering::SeqCst);
            Ok(format!("node {new_id} ({addr}) replaced node {old_id}"))
        }
        Kind::PauseNode => {
            for p in cluster.nodes.iter_mut().filter(|p| p.paused) {
                p.signal("-CONT");
            }
            Ok("SIGCONT".into())
        }
        Kind::ClientPause => {
            shared.pause_budget.store(0, Ordering::SeqCst);
            Ok("client pauses over".into())
        }
        _ => {
            net.ok_or("no namespace")?.heal()?;
            Ok("network healed".into())
        }
    }
}

/// How long a fault stays in place.
pub fn hold(kind: Kind, rng: &mut Rng) -> Duration {
    match kind {
        Kind::KillReplace => Duration::from_millis(500 + rng.below(1500)),
        Kind::ClientPause => Duration::from_secs(4),
        _ => Duration::from_millis(2500 + rng.below(2000)),
    }
}
