//! Unit tests of watching the connections (`watch.rs`): PING timing, when and where
//! STATUS is asked, what an answer changes, and member lists.

use super::*;
use crate::client::core::scene_tests::{self, fail_dials as down, net_of as net};
use crate::proto::handshake::role::{FOLLOWER, LEADER};

const IDLE: Duration = Duration::from_secs(1);

/// A WELCOME on `addr`'s first free slot from a node in `role`.
fn welcome(net: &mut Net, addr: &str, role: u8, now: Instant) -> SessionId {
    scene_tests::welcome(net, addr, 1, role, "", now)
}

/// The writer of `s` wrote everything queued.
fn flush(net: &mut Net, s: SessionId, now: Instant) {
    let session = net.session_mut(s).unwrap();
    let mut buf = Vec::new();
    while session.take_batch(&mut buf) {
        session.batch_written(now);
    }
}

fn pinged(net: &Net, s: SessionId) -> bool {
    net.session(s).unwrap().ping_at.is_some()
}

#[test]
fn only_a_session_idle_for_the_interval_is_pinged() {
    let t = Instant::now();
    let mut net = net(&["a:1"], t);
    let a = welcome(&mut net, "a:1", LEADER, t);
    down(&mut net, "a:1", t);
    pings(&mut net, IDLE, t + IDLE - Duration::from_millis(1));
    assert!(!pinged(&net, a), "it heard from the node within the interval");
    assert_eq!(next_ping(&net, IDLE), Some(t + IDLE));
    pings(&mut net, IDLE, t + IDLE);
    assert!(pinged(&net, a));
}

#[test]
fn a_frame_at_the_instant_of_the_ping_answers_it() {
    let t = Instant::now();
    let mut net = net(&["a:1"], t);
    let a = welcome(&mut net, "a:1", LEADER, t);
    down(&mut net, "a:1", t);
    let at = t + IDLE;
    pings(&mut net, IDLE, at);
    flush(&mut net, a, at);
    assert_eq!(next_ping(&net, IDLE), Some(at + PING_ANSWER_TIMEOUT), "nothing arrived yet");
    net.session_mut(a).unwrap().last_rx = at;
    assert_eq!(next_ping(&net, IDLE), Some(at), "answered: due at once, to clear the PING");
    pings(&mut net, IDLE, at);
    let s = net.session(a).unwrap();
    assert!(s.ping_at.is_none() && s.ping_id.is_none(), "the PING is settled");
    assert!(s.usable());
}

#[test]
fn a_dead_leader_is_closed_and_the_membership_read_again_but_not_for_a_follower() {
    let t = Instant::now();
    // A leader not hinted (the hint names another node), a follower, a hinted follower.
    for (role, hint, refresh) in
        [(LEADER, Some("b:1"), true), (FOLLOWER, None, false), (FOLLOWER, Some("a:1"), true)]
    {
        let mut net = net(&["a:1", "b:1"], t);
        let a = welcome(&mut net, "a:1", role, t);
        down(&mut net, "b:1", t);
        net.hint = hint.map(str::to_owned);
        pings(&mut net, IDLE, t + IDLE);
        flush(&mut net, a, t + IDLE);
        net.refresh_due = false;
        pings(&mut net, IDLE, t + IDLE + PING_ANSWER_TIMEOUT);
        assert!(!net.session(a).unwrap().usable(), "silent after its PING: closed");
        assert_eq!(net.refresh_due, refresh, "role {role}, hint {hint:?}");
    }
}

/// A cluster of a (follower) and b (leader), both up, b hinted.
fn cluster(t: Instant) -> (Net, SessionId, SessionId) {
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", FOLLOWER, t);
    let b = welcome(&mut net, "b:1", LEADER, t);
    (net, a, b)
}

#[test]
fn the_membership_is_read_again_after_the_refresh_interval_or_at_once_when_due() {
    let t = Instant::now();
    let (mut net, _, b) = cluster(t);
    let mut d = Discovery::default();
    d.step(&mut net, t);
    let (s, _, _) = d.in_flight.expect("a STATUS to the leader");
    assert_eq!(s, b);
    d.answered(&mut net, b, Some("role=leader\nvoters=1@a:1,2@b:1\n"), t);
    assert_eq!(d.due_at(&net, t), Some(t + MEMBERSHIP_REFRESH));
    net.refresh_due = true;
    assert_eq!(d.due_at(&net, t + Duration::from_secs(1)), Some(t + Duration::from_secs(1)));
}

#[test]
fn with_no_leader_known_status_is_asked_every_retry_interval_in_turn() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", FOLLOWER, t);
    let b = welcome(&mut net, "b:1", FOLLOWER, t);
    net.hint = None;
    let mut d = Discovery::default();
    d.step(&mut net, t);
    let (first, _, _) = d.in_flight.unwrap();
    d.answered(&mut net, first, Some("role=follower\nleader=\n"), t);
    assert_eq!(d.in_flight, None);
    assert_eq!(d.due_at(&net, t), Some(t + LEADER_UNKNOWN_RETRY));
    d.step(&mut net, t + LEADER_UNKNOWN_RETRY);
    let (second, _, _) = d.in_flight.unwrap();
    assert_ne!(first, second, "the nodes in turn");
    assert!([a, b].contains(&second));
}

#[test]
fn a_hinted_node_that_knows_no_leader_loses_the_hint_and_the_others_are_asked() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1"], t);
    let a = welcome(&mut net, "a:1", FOLLOWER, t);
    let b = welcome(&mut net, "b:1", FOLLOWER, t);
    // a was the leader; cut off from its peers it is a candidate now.
    net.hint = Some("a:1".into());
    let mut d = Discovery::default();
    d.step(&mut net, t);
    assert_eq!(d.in_flight.map(|f| f.0), Some(a), "the hinted node");
    d.answered(&mut net, a, Some("role=candidate\nleader=\n"), t);
    assert_eq!(net.hint(), None, "it knows no leader: the hint goes");
    assert_eq!(d.due_at(&net, t), Some(t + STATUS_SPACING), "at once, spaced: not in 30 s");
    d.step(&mut net, t + STATUS_SPACING);
    assert_eq!(d.in_flight.map(|f| f.0), Some(b), "the next node in turn");
    // A hint that names another node is not cleared by a node that knows no leader.
    net.hint = Some("b:1".into());
    d.answered(&mut net, b, None, t);
    d.answered(&mut net, a, Some("role=candidate\nleader=\n"), t);
    assert_eq!(net.hint(), Some("b:1"));
}

#[test]
fn a_follower_naming_a_new_leader_sends_the_next_status_there_and_its_voters_are_followed() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], t);
    let a = welcome(&mut net, "a:1", FOLLOWER, t);
    // b's WELCOME came before it was elected.
    let b = welcome(&mut net, "b:1", FOLLOWER, t);
    welcome(&mut net, "c:1", FOLLOWER, t);
    net.hint = Some("a:1".into());
    let mut d = Discovery::default();
    d.step(&mut net, t);
    assert_eq!(d.in_flight.map(|f| f.0), Some(a));
    d.answered(&mut net, a, Some("role=follower\nleader=b:1\n"), t);
    assert_eq!(net.hint(), Some("b:1"));
    let next = d.due_at(&net, t).unwrap();
    assert_eq!(next, t + STATUS_SPACING, "at once, spaced from the last");
    d.step(&mut net, next);
    assert_eq!(d.in_flight.map(|f| f.0), Some(b), "the leader named");
    // c was replaced by d.
    d.answered(&mut net, b, Some("role=leader\nvoters=1@a:1,2@b:1,4@d:1\n"), next);
    assert!(net.session(b).unwrap().leads);
    assert_eq!(net.dialed(), ["a:1", "b:1", "d:1"], "c retired, d dialed");
}

#[test]
fn status_goes_to_the_hinted_leader_then_to_the_hinted_node_then_to_each_in_turn() {
    let t = Instant::now();
    let mut net = net(&["a:1", "b:1", "c:1"], t);
    let a = welcome(&mut net, "a:1", FOLLOWER, t);
    let b = welcome(&mut net, "b:1", FOLLOWER, t);
    let c = welcome(&mut net, "c:1", FOLLOWER, t);
    let mut d = Discovery::default();
    net.hint = None;
    let turns: Vec<_> = (0..3).map(|_| d.target(&net).unwrap()).collect();
    assert!([a, b, c].iter().all(|s| turns.contains(s)), "no hint: each in turn, {turns:?}");
    // A follower's STATUS named b: b is asked, though its WELCOME said follower.
    net.hint = Some("b:1".into());
    assert!((0..3).all(|_| d.target(&net) == Some(b)));
    // a believed to lead (an old `G`) is not preferred over the hinted b.
    net.session_mut(a).unwrap().leads = true;
    assert!((0..3).all(|_| d.target(&net) == Some(b)));
    // c leads and is hinted: c, not a, which leads unhinted.
    net.session_mut(c).unwrap().leads = true;
    net.hint = Some("c:1".into());
    assert!((0..3).all(|_| d.target(&net) == Some(c)));
}

#[test]
fn a_session_believed_to_lead_or_hinted_counts_as_a_leader_known() {
    let t = Instant::now();
    let r = Duration::from_secs(3);
    for (leads, hint) in [(true, None), (false, Some("a:1"))] {
        let mut net = net(&["a:1", "b:1"], t);
        let a = welcome(&mut net, "a:1", FOLLOWER, t);
        welcome(&mut net, "b:1", FOLLOWER, t);
        net.session_mut(a).unwrap().leads = leads;
        net.hint = hint.map(str::to_owned);
        net.refresh_due = false;
        let mut d = Discovery { last_sent: Some(t), last_refresh: Some(t + r), ..Discovery::default() };
        assert_eq!(
            d.due_at(&net, t),
            Some(t + r + MEMBERSHIP_REFRESH),
            "leads {leads}, hint {hint:?}: the refresh, not the retry"
        );
        d.last_refresh = None;
        assert_eq!(d.due_at(&net, t), Some(t + STATUS_SPACING), "due now, spaced from the last");
    }
}

#[test]
fn a_status_in_flight_on_a_closed_session_is_given_up_and_asked_elsewhere() {
    let t = Instant::now();
    let (mut net, a, b) = cluster(t);
    let mut d = Discovery::default();
    d.step(&mut net, t);
    assert_eq!(d.in_flight.map(|f| f.0), Some(b));
    // Still up: it waits for its answer.
    d.step(&mut net, t + STATUS_SPACING);
    assert_eq!(d.in_flight.map(|f| f.0), Some(b));
    net.kill(b);
    d.step(&mut net, t + STATUS_SPACING);
    assert_eq!(d.in_flight.map(|f| f.0), Some(a), "the other node is asked");
}

#[test]
fn an_answer_on_another_session_leaves_the_status_in_flight() {
    let t = Instant::now();
    let (mut net, a, b) = cluster(t);
    let mut d = Discovery::default();
    d.step(&mut net, t);
    d.answered(&mut net, a, Some("role=follower\nleader=b:1\n"), t);
    assert_eq!(d.in_flight.map(|f| f.0), Some(b));
    d.answered(&mut net, b, None, t);
    assert_eq!(d.in_flight, None);
}

#[test]
fn a_leader_status_is_followed_and_its_voters_dialed_and_no_role_changes_nothing() {
    let t = Instant::now();
    let (mut net, a, b) = cluster(t);
    let mut d = Discovery::default();
    net.hint = None;
    net.session_mut(a).unwrap().leads = false;
    net.session_mut(b).unwrap().leads = false;
    d.answered(&mut net, a, Some("role=leader\nvoters=1@a:1,2@b:1,3@c:1\n"), t);
    assert!(net.session(a).unwrap().leads);
    assert_eq!(net.hint(), Some("a:1"));
    assert!(net.dialed().contains(&"c:1".to_owned()), "{:?}", net.dialed());
    // A STATUS without a role (or a standalone's) leaves what the session believed.
    d.answered(&mut net, a, Some("node_id=1\n"), t);
    assert!(net.session(a).unwrap().leads);
    d.answered(&mut net, a, Some("role=standalone\n"), t);
    assert!(net.session(a).unwrap().leads);
    d.answered(&mut net, a, Some("role=follower\nleader=b:1\n"), t);
    assert!(!net.session(a).unwrap().leads);
    assert_eq!(net.hint(), Some("b:1"));
}

#[test]
fn member_lists_parse_and_skip_garbage() {
    assert_eq!(
        parse_members("1@127.0.0.1:5225,2@h:1"),
        vec![(1, "127.0.0.1:5225".to_owned()), (2, "h:1".to_owned())]
    );
    assert_eq!(parse_members(""), vec![]);
    assert_eq!(parse_members("x@h:1,0@h:2,3@nohost,4@h:5"), vec![(4, "h:5".to_owned())]);
}
