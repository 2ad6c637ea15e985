//! Self-healing membership on real processes (docs/operations.md "Self-healing"): a
//! node that dies comes back as a fresh process started the way docs/deploy.md's
//! process managers start every restart (`join`, no node id, the members' addresses),
//! joins as a standby, and the leader's autopilot swaps it for its dead self — with no
//! command from anyone. The autopilot's threshold is set to its smallest value for the
//! default timing (3 election timeouts: 6 s) to keep the tests short.

mod common;
mod faults;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::children::{Within, CLI};
use common::facts_cluster::wait_log_file;
use common::grants::Load;
use common::raw::{call, status};
use common::{eventually, eventually_every, free_port_pair, tail, with_fresh_ports, PEER_TOKEN, TOKEN};
use faults::cluster::Cluster;
use faults::netns::Netns;
use ticketing::client::Client;
use ticketing::proto::frame::{Request, Response};

const DEAD_MS: u64 = 6_000;
const ENV: &[(&str, &str)] = &[("TICKETING_AUTOPILOT_DEAD_MS", "6000")];
/// The leader counts from the last answer it had, up to a heartbeat (200 ms) before the
/// node died or was cut off; the test sees the new voters within a poll (100 ms).
const EARLIEST_MS: u64 = DEAD_MS - 300;
/// How long the load may take to show a grant after a change: far more than it takes
/// on an idle machine (milliseconds), for a loaded one.
const GRANT_WITHIN: Duration = Duration::from_secs(5);

/// The admin op MEMBERS of the node at `addr`, as `name=value` lines.
fn members(addr: SocketAddr) -> Option<String> {
    match call(addr, &Request::Members, Duration::from_secs(2))? {
        Response::Status { text } => Some(text),
        _ => None,
    }
}

/// The committed voters as the leader reports them (ids), if a leader answers.
fn voters(cluster: &Cluster) -> Option<Vec<u64>> {
    let l = cluster.leader()?;
    let s = status(cluster.nodes[l].addr)?;
    let voters = s.get("voters")?;
    Some(voters.split(',').filter_map(|v| v.split('@').next()?.parse().ok()).collect())
}

/// True when every live node's STATUS names the live nodes, and only them, as voters.
fn all_know_voters(cluster: &Cluster) -> bool {
    let mut want: Vec<u64> = cluster.nodes.iter().map(|p| p.id).collect();
    want.sort_unstable();
    cluster.nodes.iter().all(|p| {
        let Some(s) = status(p.addr) else { return false };
        let mut ids: Vec<u64> = s
            .get("voters")
            .map(|v| v.split(',').filter_map(|v| v.split('@').next()?.parse().ok()).collect())
            .unwrap_or_default();
        ids.sort_unstable();
        ids == want
    })
}

fn logs(cluster: &Cluster) -> String {
    cluster
        .nodes
        .iter()
        .chain(cluster.retired.iter())
        .map(|p| format!("--- node {} ({}):\n{}", p.id, p.addr, tail(&p.log, 25)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until the leader's voters are exactly the live nodes `want`, each of them
/// answering STATUS as a voter of that configuration.
fn wait_voters(cluster: &Cluster, want: &[u64], within: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut want = want.to_vec();
    want.sort_unstable();
    // Every 100 ms: each look asks every node.
    eventually_every(within, Duration::from_millis(100), || {
        let mut v = voters(cluster)?;
        v.sort_unstable();
        (v == want).then(|| started.elapsed())
    })
    .ok_or_else(|| format!("voters {:?}, wanted {want:?}\n{}", voters(cluster), logs(cluster)))
}

/// Kill `victim` (SIGKILL), start a fresh process at its address as a process manager
/// would, and wait until the cluster has 3 voters again without it. Returns the new
/// voter's id and how long the healing took after the kill.
fn kill_and_restart(cluster: &mut Cluster, victim: usize, seeds: &str) -> (u64, Duration) {
    let old = cluster.nodes.remove(victim);
    let (old_id, at) = (old.id, old.addr);
    let mut old = old;
    old.kill9();
    let killed = Instant::now();
    cluster.retired.push(old);
    let fresh = cluster.spawn_fresh(Some(at), seeds, None, ENV).expect("fresh process");
    let fresh_id = fresh.id;
    assert_ne!(fresh_id, old_id, "a restarted process takes a fresh id");
    cluster.nodes.push(fresh);
    let want: Vec<u64> = cluster.nodes.iter().map(|p| p.id).collect();
    // Dead for DEAD_MS, plus an election when the leader died (its successor counts
    // from its own election), catching up and the joint change.
    wait_voters(cluster, &want, Duration::from_millis(DEAD_MS * 3 + 10_000)).unwrap_or_else(|e| {
        panic!("node {old_id} was not replaced by the fresh node {fresh_id}: {e}");
    });
    (fresh_id, killed.elapsed())
}

#[test]
fn a_killed_follower_then_a_killed_leader_come_back_as_fresh_processes_and_the_cluster_heals_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = with_fresh_ports("a cluster of 3", || {
        Cluster::start_with_env(3, free_port_pair(), dir.path().to_path_buf(), None, ENV)
    });
    let seeds = cluster.client_addrs().join(",");
    cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
    let started = Instant::now();
    let load = Load::start(cluster.client_addrs(), 4, 3);
    assert!(eventually(GRANT_WITHIN, || load.grants_since(started) > 0), "the load runs");

    // A follower dies and its process manager starts a fresh process.
    let leader = cluster.wait_leader(Duration::from_secs(10)).expect("a leader");
    let follower = (leader + 1) % 3;
    let (first, took) = kill_and_restart(&mut cluster, follower, &seeds);
    eprintln!("follower replaced by node {first} {} ms after the kill", took.as_millis());
    assert!(took >= Duration::from_millis(EARLIEST_MS), "replaced before the threshold: {took:?}");
    let after = Instant::now();
    assert!(
        eventually(GRANT_WITHIN, || load.grants_since(after) > 0),
        "grants go on after the first healing\n{}",
        logs(&cluster)
    );
    // The next kill begins from a settled cluster: every node knows the new voters.
    assert!(
        eventually(Duration::from_secs(10), || all_know_voters(&cluster)),
        "not every node knows the voters after the first healing\n{}",
        logs(&cluster)
    );

    // Then the leader; this fresh process is given one member's address only.
    let leader = cluster.wait_leader(Duration::from_secs(10)).expect("a leader");
    let one_seed = cluster.nodes[(leader + 1) % 3].addr.to_string();
    let (second, took) = kill_and_restart(&mut cluster, leader, &one_seed);
    eprintln!("leader replaced by node {second} {} ms after the kill", took.as_millis());
    let after = Instant::now();
    assert!(
        eventually(GRANT_WITHIN, || load.grants_since(after) > 0),
        "grants go on after the second healing\n{}",
        logs(&cluster)
    );
    assert!(
        eventually(Duration::from_secs(10), || all_know_voters(&cluster)),
        "not every node knows the voters after the second healing\n{}",
        logs(&cluster)
    );

    let grants = load.finish().unwrap_or_else(|e| panic!("{e}\n{}", logs(&cluster)));
    eprintln!("{grants} grants, none doubled, tokens increasing");
    // The two killed processes were retired; every live node is a voter.
    for p in &cluster.nodes {
        let text = members(p.addr).unwrap_or_default();
        assert!(text.contains("member="), "node {} answers MEMBERS: {text}", p.id);
    }
    assert!(cluster.unexpected_exits().is_empty(), "{}", logs(&cluster));
    // A heal the docs call normal is said at info, once per finding; no node warned of
    // its fresh neighbour (or of itself) as of a mistake.
    let mut restarts_said = 0;
    for p in &cluster.nodes {
        let log = std::fs::read_to_string(&p.log).unwrap_or_default();
        for routine in
            ["is my own node id", "refused this node", "expected node", "not a member of this cluster"]
        {
            let warned: Vec<&str> =
                log.lines().filter(|l| l.contains(" WARN ") && l.contains(routine)).collect();
            assert!(warned.is_empty(), "node {} warned during a routine heal:\n{}", p.id, warned.join("\n"));
        }
        // The lines without their timestamps.
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" INFO ") && l.contains(" now runs at "))
            .filter_map(|l| l.split_once("] ").map(|(_, text)| text))
            .collect();
        let mut unique = said.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(said.len(), unique.len(), "node {} said a restart twice:\n{}", p.id, said.join("\n"));
        restarts_said += said.len();
    }
    assert!(restarts_said > 0, "the survivors say at info that a fresh process runs where a dead one ran");
}

/// True when the leader at `leader` lists voter `id` as heard from lately (`heard_ms=`
/// on its MEMBERS line, not `unreachable_ms=`).
fn heard_again(leader: SocketAddr, id: u64) -> bool {
    let text = members(leader).unwrap_or_default();
    text.lines().any(|l| l.starts_with(&format!("member={id} voter ")) && l.contains(" heard_ms="))
}

/// Cuts node `i` off from every other node, both ways.
fn isolate(net: &Netns, cluster: &Cluster, i: usize) {
    let n = cluster.nodes.len();
    let pairs: Vec<(usize, usize)> = (0..n).filter(|j| *j != i).flat_map(|j| [(i, j), (j, i)]).collect();
    net.set_filter(&faults::nemesis::block_rules(cluster, &pairs, "")).expect("iptables");
}

#[test]
fn a_voter_partitioned_below_the_threshold_stays_and_past_it_is_replaced_and_exits_once_healed() {
    let Some(net) = faults::netns::for_test("a_voter_partitioned_below_the_threshold") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cluster =
        Cluster::start_with_env(3, 7225, dir.path().to_path_buf(), Some(&net), ENV).expect("cluster");
    let seeds = cluster.client_addrs().join(",");
    let leader = cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
    // A standby waits beside the three voters.
    let standby = cluster.spawn_fresh(None, &seeds, Some(&net), ENV).expect("standby");
    let standby_id = standby.id;
    cluster.nodes.push(standby);
    wait_standby(&cluster, standby_id, Duration::from_secs(20));
    let founders: Vec<u64> = cluster.nodes[..3].iter().map(|p| p.id).collect();

    // Cut off for half the threshold: still a voter afterwards.
    let cut = (leader + 1) % 3;
    isolate(&net, &cluster, cut);
    // sleep: the partition lasts half the threshold (the fault being tested).
    std::thread::sleep(Duration::from_millis(DEAD_MS / 2));
    net.heal().unwrap();
    let cut_id = cluster.nodes[cut].id;
    assert!(
        eventually(Duration::from_secs(5), || heard_again(cluster.nodes[leader].addr, cut_id)),
        "the leader does not hear node {cut_id} again after the heal: {}\n{}",
        members(cluster.nodes[leader].addr).unwrap_or_default(),
        logs(&cluster)
    );
    // A threshold counted from the cut, not from the last answer, would replace it now.
    // sleep: a negative window (no replacement), begun once the leader hears it again.
    std::thread::sleep(Duration::from_millis(DEAD_MS));
    assert!(heard_again(cluster.nodes[leader].addr, cut_id), "the same leader still hears node {cut_id}");
    wait_voters(&cluster, &founders, Duration::from_secs(1)).expect("a short partition replaces nobody");
    let text = members(cluster.nodes[leader].addr).unwrap_or_default();
    assert!(text.lines().any(|l| l == format!("standbys={standby_id}")), "the standby waits still: {text}");

    // Cut off past the threshold: the standby takes its place.
    isolate(&net, &cluster, cut);
    let cut_at = Instant::now();
    let mut want: Vec<u64> = founders.iter().copied().filter(|id| *id != cluster.nodes[cut].id).collect();
    want.push(standby_id);
    let took = wait_voters(&cluster, &want, Duration::from_millis(DEAD_MS * 3)).expect("replaced");
    assert!(
        cut_at.elapsed() >= Duration::from_millis(EARLIEST_MS),
        "replaced before the threshold: {took:?}"
    );
    eprintln!("partitioned voter replaced {} ms after the cut", cut_at.elapsed().as_millis());

    // Healed: the old node learns it was removed and exits by itself.
    net.heal().unwrap();
    let code = cluster.nodes[cut].wait_exit(Duration::from_secs(10));
    let log = tail(&cluster.nodes[cut].log, 40);
    assert_eq!(code, Some(0), "the removed node did not exit by itself\n{}", logs(&cluster));
    assert!(log.contains("removed"), "it says why: {log}");
}

/// `ticketing admin found ARGS` with the operator secret: (exit code, stdout, stderr).
fn admin(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ticketing"))
        .arg("admin")
        .args(args)
        .env_clear()
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output_within(CLI);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn waiting_join_nodes_found_nothing_by_themselves_and_admin_found_makes_them_a_cluster_once() {
    let dir = tempfile::tempdir().unwrap();
    // The three at planned addresses (the seeds), again on new ports when one was taken.
    let (mut cluster, seeds) = with_fresh_ports("three waiting nodes", || {
        let port = free_port_pair();
        let mut cluster = Cluster::start_with_env(0, port, dir.path().to_path_buf(), None, ENV)?;
        let seeds: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}:{port}")).collect();
        for _ in 0..3 {
            let p = cluster.spawn_fresh(None, &seeds.join(","), None, ENV)?;
            cluster.nodes.push(p);
        }
        Ok((cluster, seeds))
    });
    assert_eq!(cluster.client_addrs(), seeds, "the harness put the nodes at the seed addresses");
    // Each says what it waits for, then for three election timeouts nobody founds anything.
    for p in &cluster.nodes {
        assert!(
            wait_log_file(&p.log, "waits to join", Duration::from_secs(10)),
            "node at {} never said it waits\n{}",
            p.addr,
            logs(&cluster)
        );
    }
    // sleep: a negative window (no founding) of three election timeouts, begun once all wait.
    std::thread::sleep(Duration::from_millis(6_000));
    for p in &cluster.nodes {
        let role = status(p.addr).map(|s| s.get("role").cloned().unwrap_or_default());
        assert!(role.is_some(), "the waiting node at {} answers STATUS", p.addr);
        assert_ne!(
            role.as_deref(),
            Some("leader"),
            "a waiting node founded a cluster by itself\n{}",
            logs(&cluster)
        );
    }
    assert_eq!(cluster.leader(), None, "a waiting node founded a cluster by itself\n{}", logs(&cluster));
    for p in &cluster.nodes {
        let log = tail(&p.log, 50);
        assert!(log.contains("waits to join") && log.contains("ticketing admin found"), "{log}");
    }

    let (code, out, err) = admin(&["found", &seeds.join(",")]);
    assert_eq!(code, 0, "admin found: {out}{err}\n{}", logs(&cluster));
    assert_eq!(out.lines().count(), 3, "one line per node: {out}");
    let leader = cluster.wait_leader(Duration::from_secs(15)).expect("a leader after founding");
    let client =
        Client::builder().addrs(seeds.clone()).auth_token(TOKEN).owner("founding-test").build().unwrap();
    let lock = client.acquire("seat:1", Duration::from_secs(5), Duration::from_secs(5)).expect("a grant");
    assert!(lock.token() > 0);
    let founders: Vec<u64> = cluster.nodes.iter().map(|p| p.id).collect();
    wait_voters(&cluster, &founders, Duration::from_secs(5)).expect("the three founders are the voters");

    // Asked again with the same nodes (a lost answer, a Job retried): nothing changes.
    let term = status(cluster.nodes[leader].addr).unwrap()["term"].clone();
    let (code, out, err) = admin(&["found", &seeds.join(",")]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(cluster.leader(), Some(leader));
    assert_eq!(status(cluster.nodes[leader].addr).unwrap()["term"], term, "no election");

    // A fourth node started the same way joins as a standby.
    // At 127.0.0.4 on the seeds' port, or on another when that was taken.
    let mut at = None;
    let fourth = with_fresh_ports("the fourth node", || {
        let fourth = cluster.spawn_fresh(at, &seeds.join(","), None, ENV);
        at = Some(format!("127.0.0.4:{}", free_port_pair()).parse().unwrap());
        fourth
    });
    let id = fourth.id;
    cluster.nodes.push(fourth);
    wait_standby(&cluster, id, Duration::from_secs(15));
    // Founding is once: a list with the standby in it names nodes of this running
    // cluster too (as the recipe's list does after restarts and heals): founded
    // already, nothing sent, and the fourth is no founder.
    let other = format!("{},{},{}", seeds[0], seeds[1], cluster.nodes[3].addr);
    let (code, out, err) = admin(&["found", &other]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("founded already: ") && !out.contains("founding="), "{out}");
    // Its line: a learner of the cluster, or joining it while its first entries come.
    assert!(out.contains(&format!("node {id}, learner")) || out.contains(&format!("(node {id})")), "{out}");
    wait_voters(&cluster, &founders, Duration::from_secs(1)).expect("the voters are unchanged");

    let (code, out, _) = admin(&["members", "--addr", &seeds[0]]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("standby  {id}@")) && out.contains("autopilot on dead_after_ms=6000"),
        "{out}"
    );
}

/// Waits until the leader's MEMBERS names `id` a standby.
fn wait_standby(cluster: &Cluster, id: u64, within: Duration) {
    let mut text = String::new();
    let listed = eventually_every(within, Duration::from_millis(100), || {
        let l = cluster.leader().unwrap_or(0);
        text = members(cluster.nodes[l].addr).unwrap_or_default();
        text.lines().any(|l| l == format!("standbys={id}")).then_some(())
    });
    assert!(listed.is_some(), "node {id} is no standby: {text}\n{}", logs(cluster));
}

#[test]
fn a_frozen_voter_is_replaced_past_the_threshold_and_exits_when_it_thaws() {
    let dir = tempfile::tempdir().unwrap();
    // The founders and the standby, again on new ports when one's was taken.
    let (mut cluster, leader, standby_id) = with_fresh_ports("a cluster of 3 and a standby", || {
        let port = free_port_pair();
        let mut cluster = Cluster::start_with_env(3, port, dir.path().to_path_buf(), None, ENV)?;
        let seeds = cluster.client_addrs().join(",");
        let leader = cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
        let standby = cluster.spawn_fresh(None, &seeds, None, ENV)?;
        let standby_id = standby.id;
        cluster.nodes.push(standby);
        Ok((cluster, leader, standby_id))
    });
    wait_standby(&cluster, standby_id, Duration::from_secs(20));

    // SIGSTOP, as a VM pause or a long GC would: the process holds its sockets open.
    let frozen = (leader + 1) % 3;
    cluster.nodes[frozen].signal("-STOP");
    let stopped = Instant::now();
    let mut want: Vec<u64> = cluster.nodes.iter().map(|p| p.id).collect();
    want.remove(frozen);
    wait_voters(&cluster, &want, Duration::from_millis(DEAD_MS * 3)).expect("the frozen voter replaced");
    assert!(stopped.elapsed() >= Duration::from_millis(EARLIEST_MS), "replaced before the threshold");
    eprintln!("frozen voter replaced {} ms after SIGSTOP", stopped.elapsed().as_millis());

    // Thawed, it learns it was removed and exits by itself; the others keep serving.
    cluster.nodes[frozen].signal("-CONT");
    let code = cluster.nodes[frozen].wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "the thawed node did not exit by itself\n{}", logs(&cluster));
    assert!(tail(&cluster.nodes[frozen].log, 40).contains("removed"), "it says why");
    let frozen = cluster.nodes.remove(frozen);
    cluster.retired.push(frozen);
    wait_voters(&cluster, &want, Duration::from_secs(5)).expect("the voters stay");
}
