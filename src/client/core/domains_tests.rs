//! Unit tests of `domains.rs`: requests wait for the seeds to report their fencing
//! domains, and nothing is sent while the addresses report two.

use std::time::{Duration, Instant};

use super::*;
use crate::client::core::domain_record::{Domains, SEED_SETTLE_MAX};
use crate::client::core::ids::SessionId;
use crate::client::core::net::Target;
use crate::client::core::scene_tests::fail_dials;
use crate::proto::handshake::role::{FOLLOWER, LEADER};

fn client(seeds: &[&str], named: bool, now: Instant) -> Net {
    let domains = Domains::new(named, "TICKETING_ADDRS", "TICKETING_CLUSTER_NAME");
    let mut net = Net::new(seeds.iter().map(|s| s.to_string()).collect(), false, domains, now);
    net.now = now;
    net
}

fn unnamed(seeds: &[&str], now: Instant) -> Net {
    client(seeds, false, now)
}

/// A WELCOME from node `node` of fencing domain `domain` on the first free slot of `addr`.
fn up(net: &mut Net, addr: &str, node: u64, role: u8, domain: u64) -> SessionId {
    let slot = net.slots.iter().find(|s| s.addr == addr && s.session.is_none()).expect("a free slot").id;
    let now = net.now;
    net.connected(slot, node, role, domain, "", addr.to_owned(), now).expect("the slot exists")
}

fn voters(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|(id, a)| (*id, a.to_string())).collect()
}

fn retired(net: &Net, addr: &str) -> bool {
    net.slots.iter().filter(|s| s.addr == addr).all(|s| s.retired())
}

#[test]
fn requests_wait_until_every_seed_reported_its_domain_or_failed() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1", "c:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), None, "b and c have not answered yet");
    assert!(!net.hopeless(&Target::Any));
    // A view of one node does not wait.
    assert_eq!(net.choose(&Target::Addr("a:1".into()), false, None), Some(a));
    fail_dials(&mut net, "b:1", t);
    assert_eq!(net.choose(&Target::Any, false, None), None, "c has not answered yet");
    up(&mut net, "c:1", 3, FOLLOWER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a), "every seed reported or failed");
}

#[test]
fn a_named_client_waits_for_its_seeds_too() {
    // Two clusters that share a name differ only in their domains.
    let t = Instant::now();
    let mut net = client(&["a:1", "b:1"], true, t);
    up(&mut net, "a:1", 1, LEADER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    up(&mut net, "b:1", 2, LEADER, 9);
    let (why, lasting) = net.unavailable(&Target::Any);
    assert!(lasting);
    assert!(why.unwrap().contains("two clusters have the name this client was given"));
}

#[test]
fn the_wait_ends_after_its_bound_and_starts_again_when_the_seeds_are_added_again() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    assert_eq!(net.next_domains_change(), Some(t + SEED_SETTLE_MAX), "a wake-up when the wait ends");
    assert_eq!(net.next_housekeeping(), Some(t + SEED_SETTLE_MAX));
    net.now = t + SEED_SETTLE_MAX - Duration::from_millis(1);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    net.now = t + SEED_SETTLE_MAX;
    assert_eq!(net.choose(&Target::Any, false, None), Some(a), "b is silent: not waited for longer");
    // b answers later with another domain: from then on nothing is sent.
    up(&mut net, "b:1", 2, FOLLOWER, 9);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    assert!(net.hopeless(&Target::Any));
    // Seeds dialed again after everything was unreachable settle again.
    let later = t + Duration::from_secs(60);
    net.now = later;
    net.add_slot("c:1".into(), true, later);
    assert_eq!(net.settle_until(), Some(later + SEED_SETTLE_MAX));
}

#[test]
fn a_node_without_a_domain_in_its_welcome_is_asked_status_and_waited_for() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    let b = up(&mut net, "b:1", 2, FOLLOWER, 0);
    assert_eq!(net.session(b).unwrap().pending_len(), 1, "a STATUS asked at once");
    assert_eq!(net.choose(&Target::Any, false, None), None, "b's domain is not known yet");
    net.reports_domain(b, 9, false);
    assert_eq!(net.choose(&Target::Any, false, None), None, "two domains");
    assert!(net.hopeless(&Target::Any));
    // A node that has no domain yet (a follower that has not applied its leader's first
    // entry) is no answer: requests wait, and it is asked again until it reports one.
    let mut net = unnamed(&["a:1", "b:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    let b = up(&mut net, "b:1", 2, FOLLOWER, 0);
    net.reports_domain(b, 0, false);
    assert_eq!(net.choose(&Target::Any, false, None), None, "b's silence is not taken as agreement");
    assert_eq!(net.next_reprobe(), Some(t + REPROBE_EVERY));
    net.now = t + REPROBE_EVERY;
    net.reprobe_due(t + REPROBE_EVERY);
    assert_eq!(net.session(b).unwrap().pending_len(), 2, "asked again (the first STATUS and this one)");
    net.reports_domain(b, 9, false);
    assert_eq!(net.choose(&Target::Any, false, None), None, "b is of another cluster: nothing is sent");
    assert!(net.hopeless(&Target::Any));
    // A node that never reports one stops being waited for at the settling bound.
    let mut net = unnamed(&["a:1", "b:1"], t);
    let a2 = up(&mut net, "a:1", 1, LEADER, 7);
    let b = up(&mut net, "b:1", 2, FOLLOWER, 0);
    net.reports_domain(b, 0, false);
    net.now = t + SEED_SETTLE_MAX;
    net.reprobe_due(t + SEED_SETTLE_MAX);
    assert_eq!(net.next_reprobe(), None, "no longer asked once the wait is over");
    assert_eq!(net.choose(&Target::Any, false, None), Some(a2));
}

#[test]
fn two_domains_stop_every_request_for_any_node_with_a_lasting_mistake_naming_both() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1", "c:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    up(&mut net, "b:1", 2, FOLLOWER, 7);
    let c = up(&mut net, "c:1", 9, LEADER, 11);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    assert!(net.hopeless(&Target::Any));
    let (why, lasting) = net.unavailable(&Target::Any);
    let why = why.unwrap();
    assert!(lasting);
    assert!(why.contains("fencing domain 7 (a:1, b:1) and fencing domain 11 (c:1)"), "{why}");
    assert!(why.contains("TICKETING_ADDRS mixes nodes of two clusters"), "{why}");
    assert!(why.contains("TICKETING_CLUSTER_NAME"), "{why}");
    // Views of one node still work (`ticketing status` shows both clusters).
    assert_eq!(net.choose(&Target::Addr("c:1".into()), false, None), Some(c));
    // One leader's voter set retires nothing while they disagree.
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "d:1")]), t);
    assert!(net.slots.iter().all(|s| !s.retired()), "nothing retired");
    assert!(!net.slots.iter().any(|s| s.addr == "d:1"), "nothing added");
    // c's connection ends (its node restarts, or missed a PING): c:1 is still of
    // domain 11 until it reports another, and stays in sight.
    net.closed(c, t);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert!(!retired(&net, "c:1"), "the odd seed is never retired");
    // It comes back as a node of the seeds' cluster: they agree.
    let c = up(&mut net, "c:1", 12, FOLLOWER, 7);
    assert!(net.choose(&Target::Any, false, None).is_some());
    let _ = c;
}

#[test]
fn a_seed_that_never_reported_a_domain_is_never_retired() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "x:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "c:1")]), t);
    assert!(!retired(&net, "x:1"), "still making its first connection");
    fail_dials(&mut net, "x:1", t);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "c:1")]), t);
    assert!(!retired(&net, "x:1"), "refused once proves nothing: it is dialed until it reports");
    // It reports the seeds' domain and the voter set leaves it out: retired as usual.
    let now = t + Duration::from_secs(1);
    net.now = now;
    let slot = net.slots.iter().find(|s| s.addr == "x:1").unwrap().id;
    net.connected(slot, 4, FOLLOWER, 7, "", "x:1".into(), now).unwrap();
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "c:1")]), now);
    assert!(retired(&net, "x:1"));
}

#[test]
fn a_learned_address_of_another_domain_is_dropped_not_a_reason_to_stop() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    up(&mut net, "b:1", 2, FOLLOWER, 7);
    // The cluster names d:1 (a voter's old address, now another cluster's node).
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "d:1")]), t);
    let d = up(&mut net, "d:1", 30, FOLLOWER, 9);
    assert!(retired(&net, "d:1"), "not ours");
    assert!(!net.session(d).is_some_and(|s| s.usable()), "its connection closes");
    assert!(net.choose(&Target::Any, false, None).is_some(), "the seeds agree: served");
}

#[test]
fn a_domain_whose_locks_may_still_be_held_makes_requests_wait_until_their_lease_ends() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    fail_dials(&mut net, "a:1", t);
    net.granted_on(a, Duration::from_secs(10), Duration::from_secs(5), t);
    net.closed(a, t);
    // The node comes back in another domain (its cluster founded anew).
    let a2 = up(&mut net, "a:1", 4, LEADER, 9);
    let (why, lasting) = net.unavailable(&Target::Any);
    assert!(!lasting, "it passes by itself: requests wait");
    assert!(!net.hopeless(&Target::Any));
    let why = why.unwrap();
    assert!(
        why.contains("fencing domain 9 (a:1), and this client may still hold locks of fencing domain 7"),
        "{why}"
    );
    assert_eq!(net.choose(&Target::Any, false, None), None);
    let until = t + Duration::from_secs(15);
    assert_eq!(net.next_domains_change(), Some(until), "woken when the last lease ends");
    net.now = until;
    net.housekeeping(until);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a2));
}

#[test]
fn an_adopted_lock_counts_as_one_of_the_domain_the_nodes_agree_on() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    fail_dials(&mut net, "a:1", t);
    net.holding_until(t + Duration::from_secs(30));
    net.closed(a, t);
    up(&mut net, "a:1", 4, LEADER, 9);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    assert_eq!(net.next_domains_change(), Some(t + Duration::from_secs(30)));
}

#[test]
fn a_disagreement_is_said_once_however_many_requests_meet_it() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    up(&mut net, "b:1", 2, LEADER, 9);
    assert!(!net.domains_allow(&Target::Any));
    assert_eq!(net.domains.said, vec![7, 9]);
    net.now = t + Duration::from_secs(3);
    assert!(!net.domains_allow(&Target::Any));
    assert_eq!(net.domains.said, vec![7, 9], "the same disagreement: not said again");
}

#[test]
fn the_domain_is_the_addresses_so_a_restarted_single_node_is_one_domain_not_two() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1"], t);
    let first = up(&mut net, "a:1", 1, LEADER, 7);
    let second = up(&mut net, "a:1", 1, LEADER, 7);
    // The node restarts in a new domain; one of the two connections is back.
    net.closed(first, t);
    net.closed(second, t);
    let again = up(&mut net, "a:1", 2, LEADER, 9);
    assert!(net.domain_conflict().is_none(), "the address reports 9 now");
    assert_eq!(net.choose(&Target::Any, false, None), Some(again));
}

/// A WELCOME without a domain that names `leader`.
fn up_naming(net: &mut Net, addr: &str, node: u64, leader: &str) -> SessionId {
    let slot = net.slots.iter().find(|s| s.addr == addr && s.session.is_none()).expect("a free slot").id;
    let now = net.now;
    net.connected(slot, node, FOLLOWER, 0, leader, addr.to_owned(), now).expect("the slot exists")
}

#[test]
fn a_node_without_a_domain_is_of_the_leader_it_names() {
    let t = Instant::now();
    // One seed, joining or catching up: the leader it names vouches for it.
    let mut net = unnamed(&["b:1"], t);
    up_naming(&mut net, "b:1", 2, "a:1");
    assert_eq!(net.choose(&Target::Any, false, None), None, "nobody reported a domain yet");
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a), "b is of a's cluster");
    // Two followers of one cluster that have not applied their leader's first entry
    // and a seed of another: the followers take their leader's domain, and the two
    // domains stop everything.
    let mut net = unnamed(&["a0:1", "a1:1", "b0:1"], t);
    up_naming(&mut net, "a0:1", 2, "al:1");
    up_naming(&mut net, "a1:1", 3, "al:1");
    up(&mut net, "b0:1", 9, LEADER, 11);
    assert_eq!(net.choose(&Target::Any, false, None), None);
    up(&mut net, "al:1", 1, LEADER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), None, "two domains: nothing is sent");
    assert!(net.hopeless(&Target::Any));
}

#[test]
fn a_node_in_no_cluster_yet_is_not_waited_for() {
    // A waiting or joining node has no domain to report and serves nothing.
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "j:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    let j = up(&mut net, "j:1", 4, FOLLOWER, 0);
    net.reports_domain(j, 0, true);
    assert_eq!(net.next_reprobe(), None, "not asked again");
    assert_eq!(net.choose(&Target::Any, false, None), Some(a), "nothing waits for it");
    // A follower without a domain is waited for: it may be another cluster's.
    let mut net = unnamed(&["a:1", "f:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    let f = up(&mut net, "f:1", 4, FOLLOWER, 0);
    net.reports_domain(f, 0, false);
    assert_eq!(net.choose(&Target::Any, false, None), None);
}
