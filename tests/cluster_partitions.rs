//! Partitions on real processes (default timing: heartbeat 200 ms, election timeout
//! 2000–2300 ms), in a network namespace of the test's own with iptables rules, as
//! the fault suite makes them (`tests/faults/`). They need root (CI runs as root);
//! elsewhere each test says so and passes without running.

mod common;
mod faults;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::raw::status;
use common::{eventually, eventually_every, tail};
use faults::cluster::Cluster;
use faults::netns::Netns;

const ELECTION_MS: u64 = 2000;
const HEARTBEAT_MS: u64 = 200;
/// The election timer's spread: uniform in [2000, 2300) ms.
const ELECTION_MAX_MS: u64 = 2300;

fn start(net: &Netns, size: usize) -> (Cluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(size, 7225, dir.path().to_path_buf(), Some(net)).expect("cluster start");
    (cluster, dir)
}

/// Cuts node `i` off from every other node, both ways.
fn isolate(net: &Netns, cluster: &Cluster, i: usize) {
    let n = cluster.nodes.len();
    let pairs: Vec<(usize, usize)> = (0..n).filter(|j| *j != i).flat_map(|j| [(i, j), (j, i)]).collect();
    net.set_filter(&faults::nemesis::block_rules(cluster, &pairs, "")).expect("iptables");
}

fn facts(cluster: &Cluster, i: usize) -> Option<HashMap<String, String>> {
    status(cluster.nodes[i].addr)
}

fn role(cluster: &Cluster, i: usize) -> String {
    facts(cluster, i).and_then(|s| s.get("role").cloned()).unwrap_or_default()
}

fn term(cluster: &Cluster, i: usize) -> u64 {
    facts(cluster, i).and_then(|s| s.get("term").and_then(|t| t.parse().ok())).unwrap_or(0)
}

/// True when every node other than `leader` follows it, in its term.
fn follow(cluster: &Cluster, leader: usize) -> bool {
    let Some(l) = facts(cluster, leader) else { return false };
    (0..cluster.nodes.len()).filter(|i| *i != leader).all(|i| {
        facts(cluster, i).is_some_and(|s| {
            s.get("leader_id") == Some(&cluster.nodes[leader].id.to_string())
                && s.get("term") == l.get("term")
        })
    })
}

fn logs(cluster: &Cluster) -> String {
    cluster
        .nodes
        .iter()
        .map(|p| format!("--- node {}:\n{}", p.id, tail(&p.log, 30)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_minority_leader_steps_down_within_an_election_timeout_and_a_heartbeat() {
    let Some(net) = faults::netns::for_test("a_minority_leader_steps_down") else { return };
    let (cluster, _dir) = start(&net, 3);
    let leader = cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
    // Settled: both followers follow it in its term (it heard them a heartbeat ago).
    assert!(
        eventually(Duration::from_secs(10), || follow(&cluster, leader)),
        "the followers do not follow node {}\n{}",
        cluster.nodes[leader].id,
        logs(&cluster)
    );
    isolate(&net, &cluster, leader);
    let cut = Instant::now();
    assert!(
        // Against a leader that never steps down: 20 times the bound below.
        eventually(Duration::from_secs(50), || role(&cluster, leader) != "leader"),
        "the cut-off leader still leads\n{}",
        logs(&cluster)
    );
    let took = cut.elapsed();
    // The bound itself, an election timeout and a heartbeat, is proved in virtual time
    // (tests/raft_scenarios.rs, minority_leader_steps_down_within_election_timeout_plus_one_heartbeat);
    // here a busy machine would add its scheduling to it.
    eprintln!(
        "minority leader stepped down {} ms after the cut (bound {} ms)",
        took.as_millis(),
        ELECTION_MS + HEARTBEAT_MS
    );
}

#[test]
fn a_removed_voter_partitioned_during_its_removal_stops_within_two_election_timeouts_of_the_heal() {
    let Some(net) = faults::netns::for_test("a_removed_voter_partitioned_during_its_removal") else { return };
    let (mut cluster, _dir) = start(&net, 3);
    let leader = cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
    let cut_off = (leader + 1) % 3;
    isolate(&net, &cluster, cut_off);
    let peers = cluster.peers();
    let new = cluster.spawn("join", &peers, Some(&net)).expect("new node");
    let (old_id, new_id, new_addr) = (cluster.nodes[cut_off].id, new.id, new.addr);
    cluster.nodes.push(new);
    isolate(&net, &cluster, cut_off);
    cluster.replace(old_id, new_id, new_addr, Duration::from_secs(30)).expect("replace");
    // The removed node pre-campaigns, unheard.
    assert!(
        eventually(Duration::from_secs(10), || role(&cluster, cut_off) == "candidate"),
        "the cut-off node does not campaign: {:?}\n{}",
        facts(&cluster, cut_off),
        logs(&cluster)
    );
    let leader_term = term(&cluster, leader);
    net.heal().unwrap();
    let healed = Instant::now();
    let code = cluster.nodes[cut_off].wait_exit(Duration::from_millis(2 * ELECTION_MAX_MS));
    let took = healed.elapsed();
    assert_eq!(
        code,
        Some(0),
        "the removed node did not stop within two election timeouts\n{}",
        logs(&cluster)
    );
    eprintln!("removed node stopped {} ms after the heal", took.as_millis());
    assert_eq!(role(&cluster, leader), "leader", "the rest keep their leader");
    assert_eq!(term(&cluster, leader), leader_term, "and its term");
}

/// Three voters; `lagging` is cut off while the leader replaces another voter by node 4,
/// so its log never names node 4. Then the leader dies and the partition heals: of the
/// configuration {leader, lagging, 4}, node 4 needs `lagging`'s vote, and `lagging`
/// must hear a node its configuration does not name (docs/protocol-cluster.md §2).
#[test]
fn a_lagging_voter_elects_a_new_voter_its_log_does_not_name() {
    let Some(net) = faults::netns::for_test("a_lagging_voter_elects_a_new_voter") else { return };
    let (mut cluster, _dir) = start(&net, 3);
    let leader = cluster.wait_leader(Duration::from_secs(30)).expect("a leader");
    let lagging = (leader + 1) % 3;
    let replaced = (leader + 2) % 3;
    isolate(&net, &cluster, lagging);
    let peers = cluster.peers();
    let new = cluster.spawn("join", &peers, Some(&net)).expect("new node");
    let (old_id, new_id, new_addr) = (cluster.nodes[replaced].id, new.id, new.addr);
    cluster.nodes.push(new);
    // The newcomer is cut off from the lagging voter too.
    isolate(&net, &cluster, lagging);
    cluster.replace(old_id, new_id, new_addr, Duration::from_secs(30)).expect("replace");
    let voters = facts(&cluster, lagging).unwrap()["voters"].clone();
    assert!(!voters.contains(&format!("{new_id}@")), "the lagging voter knows node {new_id}: {voters}");
    assert_eq!(
        cluster.nodes[replaced].wait_exit(Duration::from_secs(10)),
        Some(0),
        "the replaced node stops"
    );
    cluster.nodes[leader].kill9();
    // Heal, except between the dead leader and the lagging voter: the dead process's
    // kernel would still deliver the appends it had queued (a closed socket's data is
    // sent on), and the lagging voter would learn the configuration from them.
    let dead_link = [(leader, lagging), (lagging, leader)];
    net.set_filter(&faults::nemesis::block_rules(&cluster, &dead_link, "")).unwrap();
    let healed = Instant::now();
    let new_index = cluster.nodes.len() - 1;
    // Either may lead (the lagging voter, once it caught up from the newcomer it voted
    // for, may win the next term); what matters is that one does, with both following.
    let deadline = healed + Duration::from_millis(4 * ELECTION_MAX_MS);
    let leads = |i: usize| role(&cluster, i) == "leader";
    assert!(
        eventually(deadline.saturating_duration_since(Instant::now()), || leads(new_index) || leads(lagging)),
        "no leader within four election timeouts\n{}",
        logs(&cluster)
    );
    eprintln!("a leader serves {} ms after the heal", healed.elapsed().as_millis());
    // The lagging voter caught up: its log names node 4, and both follow one leader.
    let names_new =
        |s: &HashMap<String, String>| s.get("voters").is_some_and(|v| v.contains(&format!("{new_id}@")));
    let (mut a, mut b) = (HashMap::new(), HashMap::new());
    let caught_up = eventually_every(Duration::from_secs(5), Duration::from_millis(50), || {
        a = facts(&cluster, lagging).unwrap_or_default();
        b = facts(&cluster, new_index).unwrap_or_default();
        (names_new(&a)
            && names_new(&b)
            && a.get("leader_id") == b.get("leader_id")
            && a.get("term") == b.get("term"))
        .then_some(())
    });
    assert!(caught_up.is_some(), "the lagging voter did not catch up: {a:?} {b:?}\n{}", logs(&cluster));
    eprintln!("lagging voter: {a:?}\nnew voter: {b:?}");
}
