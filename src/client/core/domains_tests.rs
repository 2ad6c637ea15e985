//! Unit tests of `domains.rs`: a client without a cluster name waits for its seeds'
//! first connections, and serves nothing while its nodes report two fencing domains.

use std::time::{Duration, Instant};

use super::*;
use crate::client::core::ids::SessionId;
use crate::client::core::net::Target;
use crate::client::core::scene_tests::fail_dials;
use crate::proto::handshake::role::{FOLLOWER, LEADER};

fn unnamed(seeds: &[&str], now: Instant) -> Net {
    let domains = Domains::new(false, "TICKETING_ADDRS", "TICKETING_CLUSTER_NAME");
    let mut net = Net::new(seeds.iter().map(|s| s.to_string()).collect(), false, domains, now);
    net.now = now;
    net
}

/// A WELCOME from node `node` of fencing domain `domain` on the first free slot of `addr`.
fn up(net: &mut Net, addr: &str, node: u64, role: u8, domain: u64) -> SessionId {
    let slot = net.slots.iter().find(|s| s.addr == addr && s.session.is_none()).expect("a free slot").id;
    let now = net.now;
    net.connected(slot, node, role, domain, "", addr.to_owned(), now).expect("the slot exists")
}

#[test]
fn an_unnamed_client_sends_nothing_while_a_seed_makes_its_first_connection() {
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
    assert_eq!(net.choose(&Target::Any, false, None), Some(a), "every seed answered or failed");
}

#[test]
fn the_wait_for_the_seeds_ends_after_its_bound_and_wakes_the_waiting_requests() {
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
}

#[test]
fn a_named_client_never_waits_for_the_other_seeds() {
    let t = Instant::now();
    let domains = Domains::new(true, "TICKETING_ADDRS", "TICKETING_CLUSTER_NAME");
    let mut net = Net::new(vec!["a:1".into(), "b:1".into()], false, domains, t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a));
    assert_eq!(net.next_domains_change(), None, "nothing to wait for");
}

#[test]
fn two_domains_stop_every_request_for_any_node_with_a_lasting_mistake_naming_both() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1", "c:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
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
    net.reconcile(&[(1, "a:1".into()), (2, "b:1".into()), (3, "d:1".into())], t);
    assert!(net.slots.iter().all(|s| !s.retired()), "nothing retired");
    assert!(!net.slots.iter().any(|s| s.addr == "d:1"), "nothing added");
    // They agree once c's node is gone (the operator stopped it, or fixed the list).
    net.closed(c, t);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a));
    let (why, _) = net.unavailable(&Target::Any);
    assert!(why.as_ref().is_none_or(|w| !w.contains("fencing domain")), "{why:?}");
}

#[test]
fn a_domain_whose_locks_may_still_be_held_counts_until_their_lease_ends() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1"], t);
    let a = up(&mut net, "a:1", 1, LEADER, 7);
    fail_dials(&mut net, "a:1", t);
    net.granted_on(a, Duration::from_secs(10), Duration::from_secs(5), t);
    net.closed(a, t);
    // The node comes back in another domain (its cluster founded anew).
    let a2 = up(&mut net, "a:1", 4, LEADER, 9);
    let (why, lasting) = net.unavailable(&Target::Any);
    assert!(lasting);
    assert!(why
        .unwrap()
        .contains("fencing domain 9 (a:1) and fencing domain 7 (locks this client may still hold"));
    assert_eq!(net.choose(&Target::Any, false, None), None);
    let until = t + Duration::from_secs(15);
    assert_eq!(net.next_domains_change(), Some(until), "woken when the last lease ends");
    assert!(net.next_housekeeping() <= Some(until));
    net.now = until;
    net.housekeeping(until);
    assert_eq!(net.choose(&Target::Any, false, None), Some(a2));
}

#[test]
fn a_status_reports_the_domain_of_a_node_that_had_none_at_its_welcome() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "b:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    let b = up(&mut net, "b:1", 2, FOLLOWER, 0);
    assert!(net.choose(&Target::Any, false, None).is_some(), "domain 0 is no domain");
    net.reports_domain(b, 8);
    assert_eq!(net.choose(&Target::Any, false, None), None);
}

#[test]
fn a_seed_still_connecting_is_not_retired_by_a_voter_set_that_leaves_it_out() {
    let t = Instant::now();
    let mut net = unnamed(&["a:1", "x:1"], t);
    up(&mut net, "a:1", 1, LEADER, 7);
    net.reconcile(&[(1, "a:1".into()), (2, "b:1".into()), (3, "c:1".into())], t);
    let x = net.slots.iter().find(|s| s.addr == "x:1").expect("x kept");
    assert!(!x.retired(), "its domain must be compared first");
    fail_dials(&mut net, "x:1", t);
    net.reconcile(&[(1, "a:1".into()), (2, "b:1".into()), (3, "c:1".into())], t);
    assert!(net.slots.iter().filter(|s| s.addr == "x:1").all(|s| s.retired()), "retired once it answered");
}
