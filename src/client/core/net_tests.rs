//! Unit tests of the connections and routing rules (`net.rs`, `routing.rs`): each
//! decision checked on a hand-built state, where the simulator only sees them as
//! slower or faster service.

use std::time::{Duration, Instant};

use super::*;
use crate::client::core::routing::LEARNED_ADDRS_MAX;
use crate::client::core::scene_tests::{self, net_of as net};
use crate::proto::handshake::role::{FOLLOWER, LEADER, STANDALONE};

/// The first slot dialing `addr` that has no session.
fn slot(net: &Net, addr: &str) -> SlotId {
    net.slots.iter().find(|s| s.addr == addr && s.session.is_none()).expect("a free slot").id
}

/// A WELCOME on `addr`'s slot from a node with `role` naming `leader`; the peer is
/// the address itself.
fn welcome(net: &mut Net, addr: &str, role: u8, leader: &str, now: Instant) -> SessionId {
    scene_tests::welcome(net, addr, 1, role, leader, now)
}

fn any() -> Target {
    Target::Any
}

fn at(addr: &str) -> Target {
    Target::Addr(addr.to_owned())
}

#[test]
fn routing_prefers_the_hinted_then_a_leader_then_any_and_a_patient_request_holds_out() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], now);
    let a = welcome(&mut net, "a:1", FOLLOWER, "", now);
    assert_eq!(net.hint(), None);
    assert!(net.coming(&any()), "b and c have not connected yet");
    assert!(!net.coming(&at("a:1")), "a has");
    assert_eq!(net.choose(&any(), true, None), None, "patient: holds out for b and c");
    assert_eq!(net.choose(&any(), false, None), Some(a), "impatient: any connected node");
    assert_eq!(net.choose(&at("b:1"), false, None), None, "only b may carry it");
    assert_eq!(net.choose(&any(), false, Some(a)), None, "a is to be avoided");

    let b = welcome(&mut net, "b:1", LEADER, "", now);
    assert_eq!(net.hint(), Some("b:1"));
    assert_eq!(net.choose(&any(), true, None), Some(b), "the leader, without holding out");
    assert_eq!(net.choose(&at("a:1"), false, None), Some(a));
    // The hint outranks a session believed to lead.
    net.hint = Some("a:1".into());
    assert_eq!(net.choose(&any(), true, None), Some(a));
    net.hint = None;
    assert_eq!(net.choose(&any(), true, None), Some(b));

    // Every slot tried: a patient request settles for any node.
    let c = slot(&net, "c:1");
    net.dial_failed(c, DialFailure::transient("refused"), now);
    assert!(!net.coming(&any()));
    net.session_mut(b).unwrap().leads = false;
    assert!(net.choose(&any(), true, None).is_some());
}

#[test]
fn the_leader_is_connecting_while_the_hinted_slot_has_not_connected_yet() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], now);
    assert!(!net.leader_connecting(), "no hint");
    welcome(&mut net, "a:1", FOLLOWER, "b:1", now);
    assert_eq!(net.hint(), Some("b:1"));
    assert!(net.leader_connecting());
    welcome(&mut net, "b:1", LEADER, "", now);
    assert!(!net.leader_connecting(), "b connected; c, still connecting, is not the leader");

    // One seed, two slots: the first up is the leader's connection, the second still
    // connecting is no reason to hold a request back.
    let mut one = scene_tests::net_of(&["a:1"], now);
    welcome(&mut one, "a:1", STANDALONE, "", now);
    assert_eq!(one.hint(), Some("a:1"));
    assert!(one.coming(&any()), "the second slot still connects");
    assert!(!one.leader_connecting());
}

#[test]
fn a_leader_elsewhere_is_another_live_session_that_leads_or_is_hinted() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], now);
    let a = welcome(&mut net, "a:1", LEADER, "", now);
    let b = welcome(&mut net, "b:1", FOLLOWER, "a:1", now);
    assert!(net.leader_elsewhere(b));
    assert!(!net.leader_elsewhere(a), "b neither leads nor is hinted");
    net.session_mut(a).unwrap().leads = false;
    assert!(net.leader_elsewhere(b), "a is still hinted");
    net.hint = None;
    assert!(!net.leader_elsewhere(b), "a neither leads nor is hinted now");
    net.session_mut(a).unwrap().leads = true;
    net.slots.iter_mut().find(|s| s.addr == "a:1").unwrap().retired_at = Some(now);
    assert!(!net.leader_elsewhere(b), "a's slot is retired");
}

#[test]
fn an_m_clears_leadership_and_an_empty_leader_leaves_the_hint_unknown() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    let a = welcome(&mut net, "a:1", LEADER, "", now);
    assert!(net.is_hinted(a));
    net.moved(a, "", now);
    assert_eq!(net.hint(), None);
    assert!(!net.session(a).unwrap().leads);
    assert!(!net.is_hinted(a));
    net.moved(a, "b:1", now);
    assert_eq!(net.hint(), Some("b:1"));
}

#[test]
fn learned_addresses_are_dialed_and_counted_up_to_the_cap() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], now);
    assert_eq!(net.learned(), 0, "seeds are not learned");
    net.events.clear();
    welcome(&mut net, "a:1", FOLLOWER, "d:1", now);
    assert_eq!(net.learned(), 1);
    assert!(net.events.iter().any(|e| matches!(e, NetEvent::Dial { addr, .. } if addr == "d:1")));
    net.learn("e:1", now);
    assert_eq!(net.learned(), 2);
    net.slots.iter_mut().find(|s| s.addr == "d:1").unwrap().retired_at = Some(now);
    assert_eq!(net.learned(), 1, "a retired slot no longer counts");
    net.learn("not an address", now);
    assert_eq!(net.learned(), 1);
    for i in 0..40 {
        net.learn(&format!("n{i}:1"), now);
    }
    assert_eq!(net.learned(), LEARNED_ADDRS_MAX);
}

#[test]
fn a_retired_slot_carries_nothing_and_is_forgotten_once_its_session_ends() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    let a = welcome(&mut net, "a:1", LEADER, "", now);
    let slot_a = net.slot_of(a).unwrap().id;
    net.slots.iter_mut().find(|s| s.id == slot_a).unwrap().retired_at = Some(now);
    assert_eq!(net.choose(&any(), false, None), None);
    assert_eq!(net.live_sessions().count(), 0);
    net.events.clear();
    net.closed(a, now);
    assert!(net.slots.iter().all(|s| s.id != slot_a), "forgotten");
    assert_eq!(net.events, vec![NetEvent::Forget { slot: slot_a }]);
}

#[test]
fn a_due_dial_starts_once_and_a_failed_one_again_after_its_backoff() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    assert_eq!(net.events.iter().filter(|e| matches!(e, NetEvent::Dial { .. })).count(), 2);
    net.events.clear();
    net.dial_due(now);
    assert!(net.events.is_empty(), "both are dialing already: {:?}", net.events);
    let a = slot(&net, "a:1");
    net.dial_failed(a, DialFailure::transient("refused"), now);
    assert_eq!(net.next_dial(), Some(now + Duration::from_millis(100)));
    net.dial_due(now + Duration::from_millis(99));
    assert!(net.events.is_empty());
    net.dial_due(now + Duration::from_millis(100));
    assert_eq!(net.events, vec![NetEvent::Dial { slot: a, addr: "a:1".into() }]);
    // A retired slot is not dialed, even when its redial fell due.
    net.dial_failed(a, DialFailure::transient("refused"), now);
    net.events.clear();
    net.slots.iter_mut().find(|s| s.id == a).unwrap().retired_at = Some(now);
    net.dial_due(now + Duration::from_secs(10));
    assert!(net.events.is_empty(), "{:?}", net.events);
    net.slots.iter_mut().find(|s| s.id == a).unwrap().retired_at = None;
    net.dial_due(now + Duration::from_secs(10));
    assert_eq!(net.events, vec![NetEvent::Dial { slot: a, addr: "a:1".into() }]);
    let b = welcome(&mut net, "b:1", LEADER, "", now);
    net.events.clear();
    net.dial_due(now + Duration::from_secs(10));
    assert!(net.events.is_empty(), "a is dialing, b connected: {:?}", net.events);
    assert_eq!(net.next_dial(), None);
    net.closed(b, now);
    assert!(net.next_dial().is_some());
}

#[test]
fn sessions_are_named_by_their_address_and_the_nodes_socket() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    let a = net.connected(slot(&net, "a:1"), 1, FOLLOWER, 7, "", "10.0.0.1:5225".into(), now).unwrap();
    let b = welcome(&mut net, "b:1", FOLLOWER, "", now);
    assert_eq!(net.name(a), "a:1 (10.0.0.1:5225)");
    assert_eq!(net.name(b), "b:1");
    assert_eq!(net.addr_of(a).as_deref(), Some("a:1"));
    assert_eq!(net.name(SessionId(99)), "SessionId(99)");
    // A hint naming the node's socket names the slot too.
    net.hint = Some("10.0.0.1:5225".into());
    assert!(net.is_hinted(a) && !net.is_hinted(b));
}

#[test]
fn unavailable_names_the_addresses_own_error_and_a_lasting_mistake_needs_every_slot() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    net.dial_failed(slot(&net, "a:1"), DialFailure::lasting("wrong secret at a"), now);
    net.dial_failed(slot(&net, "b:1"), DialFailure::transient("refused at b"), now);
    assert_eq!(net.unavailable(&at("a:1")), (Some("wrong secret at a".into()), true));
    assert_eq!(net.unavailable(&any()), (Some("refused at b".into()), false));
    welcome(&mut net, "b:1", LEADER, "", now);
    assert!(net.hopeless(&at("a:1")), "b being up does not serve a request for a");
    assert!(!net.hopeless(&any()));
}

#[test]
fn an_address_is_down_when_its_last_attempt_failed_and_none_is_under_way() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    assert!(!net.addr_down(&at("a:1")), "its first dial is under way");
    let a = slot(&net, "a:1");
    net.dial_failed(a, DialFailure::transient("refused"), now);
    welcome(&mut net, "b:1", LEADER, "", now);
    assert!(net.addr_down(&at("a:1")));
    assert!(!net.addr_down(&any()), "any node will do");
    assert!(!net.addr_down(&at("b:1")), "b is up");
    net.dial_due(now + Duration::from_millis(100));
    assert!(!net.addr_down(&at("a:1")), "a redial is under way");
    let s = welcome(&mut net, "a:1", FOLLOWER, "b:1", now);
    net.closed(s, now);
    assert!(!net.addr_down(&at("a:1")), "its last attempt worked");
}

#[test]
fn a_followers_welcome_is_believed_unless_the_hinted_leader_is_up() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], now);
    welcome(&mut net, "a:1", FOLLOWER, "", now);
    assert_eq!(net.hint(), None, "an empty leader names none");
    welcome(&mut net, "b:1", FOLLOWER, "c:1", now);
    assert_eq!(net.hint(), Some("c:1"));
    welcome(&mut net, "c:1", FOLLOWER, "x:1", now);
    assert_eq!(net.hint(), Some("x:1"), "c was not up: the newer word counts");
    welcome(&mut net, "x:1", LEADER, "", now);
    net.learn("z:1", now);
    net.refresh_due = false;
    welcome(&mut net, "z:1", FOLLOWER, "y:1", now);
    assert_eq!(net.hint(), Some("x:1"), "x is up and leads");
    assert!(net.slots.iter().all(|s| s.addr != "y:1"), "y is not dialed");
    assert!(net.refresh_due, "a cluster node: the membership is read");
}

#[test]
fn a_standalone_nodes_second_connection_asks_for_no_membership() {
    let now = Instant::now();
    let mut net = net(&["s:1"], now);
    welcome(&mut net, "s:1", STANDALONE, "", now);
    net.refresh_due = false;
    welcome(&mut net, "s:1", STANDALONE, "", now);
    assert!(!net.refresh_due);
}

#[test]
fn a_connection_made_after_stop_is_closed_at_once() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    net.stopped = true;
    net.events.clear();
    let a = welcome(&mut net, "a:1", LEADER, "", now);
    assert_eq!(net.events, vec![NetEvent::Close { session: a }]);
    assert_eq!(net.hint(), None);
}

#[test]
fn the_reconnect_schedule_starts_over_only_after_a_session_that_served() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = slot(&net, "a:1");
    let next_dial = |net: &Net| net.slots.iter().find(|s| s.id == a).unwrap().next_dial;
    for _ in 0..3 {
        net.dial_failed(a, DialFailure::transient("refused"), t); // 100, 200, 400 ms
    }
    // Welcomed, then dropped at once without an answer: the schedule goes on.
    let s = net.connected(a, 1, FOLLOWER, 7, "", "a:1".into(), t).unwrap();
    let end = t + Duration::from_millis(10);
    net.closed(s, end);
    assert_eq!(next_dial(&net), Some(end + Duration::from_millis(800)));
    // One that carried an answer served: back to 0.1 s.
    let s = net.connected(a, 1, FOLLOWER, 7, "", "a:1".into(), t).unwrap();
    net.session_mut(s).unwrap().last_rx = t + Duration::from_millis(5);
    net.closed(s, end);
    assert_eq!(next_dial(&net), Some(end + Duration::from_millis(100)));
    // So did one that lasted 2 s, silent; not one of 1.999 s.
    let s = net.connected(a, 1, FOLLOWER, 7, "", "a:1".into(), t).unwrap();
    net.closed(s, t + Duration::from_millis(1999));
    assert_eq!(next_dial(&net), Some(t + Duration::from_millis(1999 + 200)));
    let s = net.connected(a, 1, FOLLOWER, 7, "", "a:1".into(), t).unwrap();
    net.closed(s, t + Duration::from_secs(2));
    assert_eq!(next_dial(&net), Some(t + Duration::from_millis(2000 + 100)));
}

#[test]
fn a_cluster_session_that_ends_asks_for_the_membership_again() {
    let now = Instant::now();
    let mut net = net(&["a:1", "b:1"], now);
    welcome(&mut net, "a:1", LEADER, "", now);
    let b = welcome(&mut net, "b:1", FOLLOWER, "a:1", now);
    net.refresh_due = false;
    net.closed(b, now);
    assert!(net.refresh_due);
}

#[test]
fn request_ids_are_never_zero() {
    let now = Instant::now();
    let mut net = net(&["a:1"], now);
    let a = welcome(&mut net, "a:1", STANDALONE, "", now);
    net.set_next_id(u32::MAX);
    assert_eq!(net.fresh_id(a), u32::MAX);
    assert_eq!(net.fresh_id(a), 1, "0 is skipped");
    net.set_next_id(0);
    assert_eq!(net.fresh_id(a), 1);
}
