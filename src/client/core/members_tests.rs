//! Unit tests of following the membership (`members.rs`): which slots a leader's voter
//! set keeps, retires and adds, when a retired slot's session closes, the seed
//! fallback and when housekeeping is next due, on hand-built connections.

use std::time::{Duration, Instant};

use super::*;
use crate::client::core::ids::OpId;
use crate::client::core::net::NetEvent;
use crate::client::core::scene_tests::{self, fail_dials as fail_all, net_of as net};
use crate::client::core::session::Waiting;
use crate::proto::handshake::role::{FOLLOWER, LEADER};

/// A WELCOME from node `node` (node 1 leads) on the first free slot dialing `addr`.
fn welcome(net: &mut Net, addr: &str, node: u64, now: Instant) -> SessionId {
    let role = if node == 1 { LEADER } else { FOLLOWER };
    scene_tests::welcome(net, addr, node, role, "", now)
}

fn voters(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|(id, a)| (*id, a.to_string())).collect()
}

/// The addresses of the slots not retired, sorted (one entry per slot).
fn kept(net: &Net) -> Vec<String> {
    let mut out: Vec<String> = net.slots.iter().filter(|s| !s.retired()).map(|s| s.addr.clone()).collect();
    out.sort();
    out
}

fn usable(net: &Net, s: SessionId) -> bool {
    net.session(s).is_some_and(|s| s.usable())
}

/// A request left pending on `s`.
fn pending_on(net: &mut Net, s: SessionId, now: Instant) -> u32 {
    net.send(s, Waiting::Op(OpId(1)), now, |out, _| out.push(0))
}

#[test]
fn a_voter_set_keeps_one_slot_per_voter_retires_the_rest_and_dials_the_missing() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1", "x:1"], t);
    welcome(&mut net, "a:1", 1, t);
    let x = welcome(&mut net, "x:1", 9, t);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "c:1")]), t);
    assert_eq!(kept(&net), ["a:1", "b:1", "c:1"], "x left, c is dialed");
    assert!(!usable(&net, x), "x's session, idle, is closed at once");
    let x_slot = net.slots.iter().find(|s| s.addr == "x:1").expect("kept until its session ends");
    assert!(x_slot.left && x_slot.next_dial.is_none(), "left, and never dialed again");
    assert!(net.events.iter().any(|e| matches!(e, NetEvent::Dial { addr, .. } if addr == "c:1")));
    // The same set again changes nothing.
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1"), (3, "c:1")]), t);
    assert_eq!(kept(&net), ["a:1", "b:1", "c:1"]);
}

#[test]
fn a_single_voter_gets_two_slots_and_each_of_several_one() {
    let t = Instant::now();
    let mut net = net(&["a:1"], t);
    assert_eq!(kept(&net), ["a:1", "a:1"], "a single seed is dialed twice");
    let first = welcome(&mut net, "a:1", 1, t);
    let second = welcome(&mut net, "a:1", 1, t);
    net.reconcile(&voters(&[(1, "a:1")]), t);
    assert_eq!(kept(&net), ["a:1", "a:1"], "a single voter keeps both");
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert_eq!(kept(&net), ["a:1", "b:1"], "two voters: one slot each");
    let retired = net.slots.iter().find(|s| s.addr == "a:1" && s.retired()).expect("the second a:1 slot");
    assert!(!retired.left, "a second slot to a node still a voter did not leave");
    assert!(usable(&net, first) != usable(&net, second), "one of the two closed, idle");
    net.reconcile(&voters(&[(2, "b:1")]), t);
    assert_eq!(kept(&net), ["b:1", "b:1"], "down to one voter: two slots to it");
}

#[test]
fn a_seed_that_reached_a_voter_under_another_name_keeps_serving_it() {
    let t = Instant::now();
    let mut net = net(&["lb:1", "b:1"], t);
    // lb:1 (a name the operator gave) welcomed as node 1; b:1 not connected now (it
    // reported the cluster's domain before: a seed that never did is never retired).
    welcome(&mut net, "lb:1", 1, t);
    reported(&mut net, "b:1");
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert_eq!(kept(&net), ["b:1", "lb:1"], "lb:1 serves node 1: a:1 is not dialed as well");
    // A slot never welcomed (node 0) names no voter.
    net.reconcile(&voters(&[(1, "a:1"), (2, "c:1")]), t);
    assert_eq!(kept(&net), ["c:1", "lb:1"], "b:1 left, whatever its slot's unknown node");
    // The alias is matched to its own voter, not to another.
    net.reconcile(&voters(&[(2, "c:1"), (3, "d:1")]), t);
    assert_eq!(kept(&net), ["c:1", "d:1"], "node 1 left: lb:1 with it");
}

#[test]
fn the_voter_own_address_wins_over_an_alias() {
    let t = Instant::now();
    let mut net = net(&["lb:1", "a:1", "b:1"], t);
    welcome(&mut net, "lb:1", 1, t);
    let a = welcome(&mut net, "a:1", 1, t);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert_eq!(kept(&net), ["a:1", "b:1"], "the alias is the second slot to node 1");
    assert!(usable(&net, a));
}

#[test]
fn a_retired_slot_busy_with_a_request_is_closed_when_it_drains_or_its_grace_ends() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1", "x:1"], t);
    welcome(&mut net, "a:1", 1, t);
    welcome(&mut net, "b:1", 2, t);
    let x = welcome(&mut net, "x:1", 9, t);
    pending_on(&mut net, x, t);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert!(usable(&net, x), "its request may still be answered");
    assert_eq!(net.next_housekeeping(), Some(t + RETIRE_GRACE), "the grace of a node that left");
    net.housekeeping(t + RETIRE_GRACE - Duration::from_millis(1));
    assert!(usable(&net, x), "within the grace");
    net.housekeeping(t + RETIRE_GRACE);
    assert!(!usable(&net, x), "the grace ran out");
}

#[test]
fn a_second_slot_to_a_voter_is_closed_only_once_nothing_is_pending_on_it() {
    let t = Instant::now();
    let mut net = net(&["a:1", "lb:1", "b:1"], t);
    welcome(&mut net, "a:1", 1, t);
    welcome(&mut net, "b:1", 2, t);
    let lb = welcome(&mut net, "lb:1", 1, t);
    let id = pending_on(&mut net, lb, t);
    net.reconcile(&voters(&[(1, "a:1"), (2, "b:1")]), t);
    assert_eq!(net.next_housekeeping(), None, "no grace: its node did not leave, nothing to dial");
    net.housekeeping(t + RETIRE_GRACE * 3);
    assert!(usable(&net, lb), "answered in time, however long");
    net.session_mut(lb).unwrap().answered(id);
    net.housekeeping(t + RETIRE_GRACE * 3);
    assert!(!usable(&net, lb), "drained: closed");
}

#[test]
fn with_nothing_reachable_for_the_fallback_time_the_seeds_are_dialed_again() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", 1, t);
    reported(&mut net, "b:1");
    // The leader moved everyone elsewhere: the seeds' slots are retired.
    net.reconcile(&voters(&[(3, "c:1"), (4, "d:1")]), t);
    assert!(!usable(&net, a));
    net.closed(a, t);
    assert_eq!(kept(&net), ["c:1", "d:1"]);
    fail_all(&mut net, "c:1", t);
    fail_all(&mut net, "d:1", t);
    let fallback = t + SEED_FALLBACK_AFTER;
    assert!(net.next_housekeeping().is_some_and(|at| at <= fallback));
    net.housekeeping(fallback - Duration::from_millis(1));
    assert_eq!(kept(&net), ["c:1", "d:1"], "not yet");
    net.housekeeping(fallback);
    assert_eq!(kept(&net), ["a:1", "b:1", "c:1", "d:1"], "the seeds again, beside the learned");
    assert!(net.slots.iter().filter(|s| s.addr == "a:1" || s.addr == "b:1").all(|s| s.seed));
    // Once more after the next fallback time: a seed already dialed is not added twice.
    net.housekeeping(fallback + SEED_FALLBACK_AFTER);
    assert_eq!(kept(&net), ["a:1", "b:1", "c:1", "d:1"]);
}

#[test]
fn a_live_connection_holds_off_the_seed_fallback() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    welcome(&mut net, "a:1", 1, t);
    fail_all(&mut net, "b:1", t);
    reported(&mut net, "b:1");
    net.reconcile(&voters(&[(1, "a:1")]), t);
    // b:1 left; a:1's second slot is dialing: nothing due, no fallback while a:1 is up.
    assert_eq!(kept(&net), ["a:1", "a:1"]);
    assert_eq!(net.next_housekeeping(), None);
    net.housekeeping(t + SEED_FALLBACK_AFTER * 2);
    assert_eq!(kept(&net), ["a:1", "a:1"], "b:1 is not dialed again");
}

#[test]
fn housekeeping_is_next_due_at_the_earliest_of_a_grace_the_fallback_and_a_redial() {
    let t = Instant::now();
    let mut net = net(&["a:1"], t);
    // Both slots dialing: no redial, nothing up since t.
    assert_eq!(net.next_housekeeping(), Some(t + SEED_FALLBACK_AFTER), "the fallback");
    let a = welcome(&mut net, "a:1", 1, t);
    let next = net.next_housekeeping();
    assert_eq!(next, None, "one up, one dialing: nothing due");
    fail_all(&mut net, "a:1", t);
    let redial = net.next_dial().expect("the failed slot redials");
    assert_eq!(net.next_housekeeping(), Some(redial));
    net.stop(t);
    assert!(!usable(&net, a));
    assert_eq!(net.next_housekeeping(), None, "stopped: nothing is due");
}

#[test]
fn stop_closes_every_session_and_dials_nothing_again() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", 1, t);
    net.stop(t);
    assert!(!usable(&net, a));
    assert!(net.slots.iter().all(|s| s.retired() && s.next_dial.is_none()));
    assert_eq!(kept(&net), Vec::<String>::new());
    net.events.clear();
    net.housekeeping(t + SEED_FALLBACK_AFTER * 2);
    net.reconcile(&voters(&[(1, "a:1"), (3, "c:1")]), t);
    assert!(net.slots.iter().all(|s| s.retired()), "nothing added after the stop");
    assert!(!net.events.iter().any(|e| matches!(e, NetEvent::Dial { .. })), "{:?}", net.events);
}

#[test]
fn an_empty_voter_set_changes_nothing() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", 1, t);
    net.reconcile(&[], t);
    assert_eq!(kept(&net), ["a:1", "b:1"]);
    assert!(usable(&net, a));
}

#[test]
fn connection_errors_name_each_address_not_up_once() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    fail_all(&mut net, "a:1", t);
    fail_all(&mut net, "b:1", t);
    // A second slot to b:1 that failed too.
    net.reconcile(&voters(&[(2, "b:1")]), t);
    fail_all(&mut net, "b:1", t);
    let errors = net.connection_errors();
    assert_eq!(errors.iter().filter(|(a, _)| a == "b:1").count(), 1, "{errors:?}");
    assert!(errors.iter().all(|(_, why)| why == "refused"), "{errors:?}");
    // An address up is not an error, even with a failed second slot.
    let slot = net.slots.iter().find(|s| s.addr == "b:1" && s.session.is_none()).unwrap().id;
    net.connected(slot, 2, LEADER, 7, "", "b:1".into(), t);
    assert!(!net.connection_errors().iter().any(|(a, _)| a == "b:1"), "{:?}", net.connection_errors());
}

/// The seed `addr` reported the scene's fencing domain on an earlier connection (a seed
/// that never did is never retired: `domains.rs`).
fn reported(net: &mut Net, addr: &str) {
    for slot in net.slots.iter_mut().filter(|s| s.addr == addr) {
        slot.domain = crate::client::core::scene_tests::SCENE_DOMAIN;
    }
}
