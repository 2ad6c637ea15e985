//! Unit tests of one read-only request's rules (`read.rs`): when it is sent again, when
//! it holds back, how it ends, on hand-built connections.

use std::time::Duration;

use super::*;
use crate::client::core::scene_tests::Scene;
use crate::proto::handshake::role::{FOLLOWER, LEADER, STANDALONE};

const BUDGET_MS: u64 = 5000;

/// A QUERY with a 5 s budget, asked for when its scene began.
struct Bench {
    scene: Scene,
    op: ReadOp,
}

impl Bench {
    fn new(seeds: &[&str]) -> Bench {
        let scene = Scene::new(seeds);
        let deadline = scene.now + Duration::from_millis(BUDGET_MS);
        let op = ReadOp::new(Request::Query { key: "k".into() }, Target::Any, deadline, scene.now);
        Bench { scene, op }
    }

    fn route(&mut self) -> Next {
        self.op.route(&mut self.scene.cx())
    }

    fn timer(&mut self) -> Next {
        self.op.on_timer(&mut self.scene.cx())
    }

    fn answer(&mut self, session: SessionId, response: Response) -> Next {
        self.op.on_answer(session, response, &mut self.scene.cx())
    }

    fn ended(&mut self) -> Next {
        self.op.on_ended(&mut self.scene.cx())
    }

    /// Where the request waits for its answer.
    fn sent(&self) -> Option<(SessionId, u32)> {
        self.op.sent.map(|(s, id, _)| (s, id))
    }

    fn wakes_at(&self, next: &Next) -> u64 {
        match next {
            Next::Wait(Some(at)) => self.scene.ms_of(*at),
            other => panic!("expected a wait with a wake-up, got {other:?}"),
        }
    }

    fn usable(&self, session: SessionId) -> bool {
        self.scene.world.net.session(session).is_some_and(|s| s.usable())
    }
}

fn failed(next: Next) -> ClientError {
    match next {
        Next::Done(Outcome::Read(Err(e))) => e,
        other => panic!("expected the read to fail, got {other:?}"),
    }
}

/// A standalone node, up, with the QUERY sent to it.
fn sent_to_standalone() -> (Bench, SessionId) {
    let mut b = Bench::new(&["a:1"]);
    let a = b.scene.up("a:1", STANDALONE, "");
    // Sent a little after the connection's WELCOME, the last thing it received.
    b.scene.at(10);
    b.route();
    assert_eq!(b.sent().map(|s| s.0), Some(a));
    (b, a)
}

#[test]
fn a_read_waits_out_its_budget_and_a_timer_before_it_changes_nothing() {
    let (mut b, _) = sent_to_standalone();
    let sent = b.sent();
    b.scene.at(BUDGET_MS / 2);
    let next = b.timer();
    assert_eq!(b.wakes_at(&next), BUDGET_MS);
    assert_eq!(b.sent(), sent, "still waiting for its answer");
    b.scene.at(BUDGET_MS);
    assert_eq!(failed(b.timer()), ClientError::NoAnswer);
}

#[test]
fn a_silent_connection_is_closed_when_a_read_got_nothing_for_the_ping_allowance() {
    // Nothing arrived on the connection since the request, for the whole 5 s budget.
    let (mut b, a) = sent_to_standalone();
    b.scene.at(BUDGET_MS);
    b.timer();
    assert!(!b.usable(a), "closed and redialed");

    // Something arrived meanwhile: the connection lives, only this request went unanswered.
    let (mut b, a) = sent_to_standalone();
    b.scene.world.net.session_mut(a).unwrap().last_rx = b.scene.start + Duration::from_millis(100);
    b.scene.at(BUDGET_MS);
    b.timer();
    assert!(b.usable(a));

    // A budget shorter than the PING allowance proves nothing about the connection.
    let mut scene = Scene::new(&["a:1"]);
    let a = scene.up("a:1", STANDALONE, "");
    let short = PING_ANSWER_TIMEOUT - Duration::from_millis(1);
    let op = ReadOp::new(
        Request::Query { key: "k".into() },
        Target::Any,
        scene.now + short + Duration::from_millis(1),
        scene.now,
    );
    let mut b = Bench { scene, op };
    b.scene.now += Duration::from_millis(1);
    b.route();
    b.scene.now += short;
    assert_eq!(failed(b.timer()), ClientError::NoAnswer);
    assert!(b.usable(a));
}

#[test]
fn a_read_that_was_sent_and_cut_off_is_no_answer_not_unavailable() {
    let (mut b, a) = sent_to_standalone();
    b.scene.at(100);
    b.scene.world.net.closed(a, b.scene.now);
    let next = b.ended();
    assert_eq!(b.sent(), None, "no connection to send it again on");
    b.scene.at(b.wakes_at(&next).max(BUDGET_MS));
    let mut next = b.timer();
    while !matches!(next, Next::Done(_)) {
        b.scene.at(b.wakes_at(&next).max(BUDGET_MS));
        next = b.timer();
    }
    assert_eq!(failed(next), ClientError::NoAnswer, "it may have reached the node");
}

#[test]
fn an_m_naming_no_leader_or_the_node_itself_pauses_before_asking_again() {
    for named in ["", "a:1"] {
        let mut b = Bench::new(&["a:1", "b:1"]);
        let a = b.scene.up("a:1", LEADER, "");
        b.scene.up("b:1", FOLLOWER, "a:1");
        b.route();
        assert_eq!(b.sent().map(|s| s.0), Some(a));
        b.scene.at(10);
        b.scene.world.net.moved(a, named, b.scene.now);
        let next = b.answer(a, Response::Moved { leader: named.into() });
        assert_eq!(b.sent(), None, "M naming {named:?}: not asked again at once");
        assert_eq!(b.wakes_at(&next), 10 + MOVED_PAUSE.as_millis() as u64);
        b.scene.at(60);
        b.timer();
        assert_eq!(b.sent(), None, "M naming {named:?}: not before the pause is over");
        b.scene.at(10 + MOVED_PAUSE.as_millis() as u64);
        b.timer();
        assert!(b.sent().is_some(), "M naming {named:?}: asked again after the pause");
    }
}

#[test]
fn an_m_naming_a_leader_that_is_up_asks_it_at_once() {
    let mut b = Bench::new(&["a:1", "b:1"]);
    let a = b.scene.up("a:1", LEADER, "");
    let other = b.scene.up("b:1", FOLLOWER, "a:1");
    b.route();
    b.scene.at(10);
    b.scene.world.net.moved(a, "b:1", b.scene.now);
    b.answer(a, Response::Moved { leader: "b:1".into() });
    assert_eq!(b.sent().map(|s| s.0), Some(other));
}

/// a leads, c follows, b is still making its first connection (it may be the leader
/// next): the read was sent to a.
fn sent_to_a_with_b_coming() -> (Bench, SessionId) {
    let mut b = Bench::new(&["a:1", "b:1", "c:1"]);
    let a = b.scene.up("a:1", LEADER, "");
    b.scene.up("c:1", FOLLOWER, "");
    b.route();
    assert_eq!(b.sent().map(|s| s.0), Some(a));
    (b, a)
}

#[test]
fn after_its_leader_goes_a_read_holds_out_for_a_node_still_connecting() {
    // The connection to the leader ends: for LEADER_WAIT, c (a follower) is not asked.
    let (mut b, a) = sent_to_a_with_b_coming();
    b.scene.at(100);
    b.scene.world.net.closed(a, b.scene.now);
    let next = b.ended();
    assert_eq!(b.sent(), None, "holds out for b");
    assert_eq!(b.wakes_at(&next), 100 + LEADER_WAIT.as_millis() as u64);

    // a says it no longer leads, naming nobody: after the pause, still holding out.
    let (mut b, a) = sent_to_a_with_b_coming();
    b.scene.at(100);
    b.scene.world.net.moved(a, "", b.scene.now);
    b.answer(a, Response::Moved { leader: String::new() });
    b.scene.at(100 + MOVED_PAUSE.as_millis() as u64);
    let next = b.timer();
    assert_eq!(b.sent(), None, "holds out for b");
    assert_eq!(b.wakes_at(&next), 100 + LEADER_WAIT.as_millis() as u64);
}

#[test]
fn a_dropped_read_stops_listening() {
    let (mut b, a) = sent_to_standalone();
    let (_, id) = b.sent().unwrap();
    b.op.forget(&mut b.scene.cx());
    assert!(!b.scene.world.net.session(a).unwrap().is_pending(id));
}

#[test]
fn an_m_names_its_leader_or_none() {
    assert_eq!(
        check_answer(Response::Moved { leader: "b:1".into() }),
        Err(ClientError::NotLeader { leader: Some("b:1".into()) })
    );
    assert_eq!(
        check_answer(Response::Moved { leader: String::new() }),
        Err(ClientError::NotLeader { leader: None })
    );
    assert_eq!(check_answer(Response::Free), Ok(Response::Free));
}

/// A read for one address whose slot the client retired — its node is no voter (a
/// standby among the addresses given): the leader's voter set left it out — ends at
/// once, since nothing dials it any more (`Client::status_of` then asks it on a
/// connection of its own). It used to wait out its whole budget.
#[test]
fn a_read_for_an_address_no_longer_dialed_ends_at_once() {
    let mut scene = Scene::new(&["a:1", "d:1"]);
    let deadline = scene.now + Duration::from_millis(BUDGET_MS);
    let mut op = ReadOp::new(Request::Status, Target::Addr("d:1".into()), deadline, scene.now);
    scene.up("a:1", LEADER, "a:1");
    assert!(
        matches!(op.route(&mut scene.cx()), Next::Wait(_)),
        "d:1 is still dialing: its answer is awaited"
    );
    // d:1 reported the cluster's domain on an earlier connection (a seed that never did
    // is never retired: `domains.rs`), and the leader's voter set leaves it out.
    for slot in scene.world.net.slots.iter_mut().filter(|s| s.addr == "d:1") {
        slot.domain = crate::client::core::scene_tests::SCENE_DOMAIN;
    }
    scene.world.net.reconcile(&[(1, "a:1".into()), (2, "b:1".into()), (3, "c:1".into())], scene.now);
    scene.at(5);
    let e = failed(op.route(&mut scene.cx()));
    assert!(matches!(e, ClientError::Unavailable { lasting: false, .. }), "{e:?}");
}
