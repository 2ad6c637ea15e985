//! Unit tests of one acquire's rules (`acquire.rs`): the answer deadline, the grant's
//! local deadline, the redial of a silent node and the hold-out after an unwritten
//! attempt, on hand-built connections, where the simulator sees most of them only as a
//! slower acquire or a vaguer outcome.

use std::time::Duration;

use super::*;
use crate::client::core::scene_tests::{Scene, MARGIN};
use crate::client::core::session::Ended;
use crate::proto::handshake::role::{LEADER, STANDALONE};

const LEASE_S: u8 = 10;
const WAIT_MS: u64 = 5000;
const TOKEN: u64 = 7;

/// An ACQUIRE of (k, o) with a 10 s lease and a 5 s wait, asked for when its scene began.
struct Bench {
    scene: Scene,
    op: AcquireOp,
}

impl Bench {
    fn new(seeds: &[&str]) -> Bench {
        let scene = Scene::new(seeds);
        let op = AcquireOp::new(
            "k".into(),
            Arc::from("o"),
            LEASE_S,
            Duration::from_millis(WAIT_MS),
            None,
            scene.now,
        );
        Bench { scene, op }
    }

    fn route(&mut self) -> Next {
        self.op.route(&mut self.scene.cx())
    }

    fn timer(&mut self) -> Next {
        self.op.on_timer(&mut self.scene.cx())
    }

    /// Where the request waits for its answer.
    fn sent(&self) -> Option<(SessionId, u32)> {
        self.op.sent.as_ref().map(|s| (s.session, s.id))
    }

    /// The answer `response` to the request, taken off its connection as the core does.
    fn answer(&mut self, response: Response) -> Next {
        let (session, id) = self.sent().expect("the request was sent");
        let pending =
            self.scene.world.net.session_mut(session).and_then(|s| s.answered(id)).expect("pending");
        self.op.on_answer(response, &pending, &mut self.scene.cx())
    }

    /// The connection carrying the request ends; its end is told to the request.
    fn cut(&mut self) -> Next {
        let (session, id) = self.sent().expect("the request was sent");
        let ended: Vec<Ended> = self.scene.world.net.closed(session, self.scene.now);
        let e = ended.into_iter().find(|e| e.id == id).expect("the request was pending there");
        self.op.on_ended(e.maybe_written, &e.pending, &mut self.scene.cx())
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

fn result(next: Next) -> Result<Granted, AcquireError> {
    match next {
        Next::Done(Outcome::Acquire(r)) => r,
        other => panic!("expected the acquire to end, got {other:?}"),
    }
}

fn indeterminate(next: Next) -> Indeterminate {
    match result(next) {
        Err(AcquireError::Indeterminate(i)) => i,
        other => panic!("expected an indeterminate outcome, got {other:?}"),
    }
}

/// When an answer sent at once is due: the wait's end (5 s after the start, whenever it
/// was sent) plus the commit margin.
fn answer_by() -> u64 {
    WAIT_MS + MARGIN.as_millis() as u64
}

/// A standalone node, up, with the ACQUIRE sent to it 10 ms after the start.
fn sent_to_standalone() -> (Bench, SessionId) {
    let mut b = Bench::new(&["a:1"]);
    let a = b.scene.up("a:1", STANDALONE, "");
    b.scene.at(10);
    let next = b.route();
    assert_eq!(b.sent().map(|s| s.0), Some(a));
    assert_eq!(b.wakes_at(&next), answer_by(), "what is left of its wait, plus the commit margin");
    (b, a)
}

#[test]
fn a_grant_runs_from_the_instant_the_request_was_queued_for_the_lease_the_server_gave() {
    let (mut b, _) = sent_to_standalone();
    b.scene.at(3000);
    let granted = result(b.answer(Response::Granted { token: TOKEN, lease_ms: 4000 })).expect("granted");
    assert_eq!(granted.token, TOKEN);
    assert_eq!(granted.lease, Duration::from_secs(4), "the server's shorter lease");
    assert_eq!(b.scene.ms_of(granted.deadline), 10 + 4000, "queued at 10 ms, plus the lease");

    // A longer lease than asked for is cut to the one asked for.
    let (mut b, _) = sent_to_standalone();
    b.scene.at(3000);
    let granted = result(b.answer(Response::Granted { token: TOKEN, lease_ms: 60_000 })).expect("granted");
    assert_eq!(granted.lease, Duration::from_secs(u64::from(LEASE_S)));
    assert_eq!(b.scene.ms_of(granted.deadline), 10 + 10_000);
    assert!(b.scene.world.jobs.is_empty(), "nothing to release");
}

#[test]
fn a_grant_that_arrives_after_its_lease_is_released_and_is_not_handed_out() {
    let (mut b, _) = sent_to_standalone();
    b.scene.at(10 + 4000);
    let i = indeterminate(b.answer(Response::Granted { token: TOKEN, lease_ms: 4000 }));
    assert_eq!(i.cause, IndeterminateCause::ExpiredOnArrival);
    assert!(i.orphan.is_none(), "its release is already under way: no orphan record");
    let job = b.scene.world.jobs.pop().expect("a release of the grant");
    assert_eq!((job.key.as_str(), &*job.owner, job.token), ("k", "o", TOKEN));
    assert_eq!(job.origin, Origin::Compensation);
    assert_eq!(job.until.map(|u| b.scene.ms_of(u)), Some(10 + 4000 + 4000), "now plus the lease");
    assert!(!b.scene.world.claims.owns_token(TOKEN, b.scene.now), "no caller holds it");
}

#[test]
fn a_timer_before_the_answer_deadline_changes_nothing_and_one_at_it_ends_the_acquire() {
    let (mut b, a) = sent_to_standalone();
    let deadline = answer_by();
    b.scene.at(deadline - 1);
    let next = b.timer();
    assert_eq!(b.wakes_at(&next), deadline);
    assert_eq!(b.sent().map(|s| s.0), Some(a), "still waiting for its answer");
    b.scene.at(deadline);
    let i = indeterminate(b.timer());
    assert_eq!(i.cause, IndeterminateCause::NoAnswer);
    assert!(i.orphan.is_some(), "an orphan record takes care of a grant that happened");
}

#[test]
fn a_node_silent_for_the_whole_wait_is_redialled_and_one_that_spoke_is_kept() {
    // Nothing came back since the request was queued: the connection is closed.
    let (mut b, a) = sent_to_standalone();
    b.scene.at(answer_by());
    b.timer();
    assert!(!b.usable(a), "a silent node is redialled");

    // Something arrived after it was queued: only slow, kept.
    let (mut b, a) = sent_to_standalone();
    b.scene.world.net.session_mut(a).unwrap().last_rx = b.scene.start + Duration::from_millis(100);
    b.scene.at(answer_by());
    b.timer();
    assert!(b.usable(a), "a node that spoke since is kept");
}

#[test]
fn a_request_out_for_less_than_the_ping_allowance_does_not_close_its_connection() {
    let mut b = Bench::new(&["a:1"]);
    b.scene.config.commit_margin = Duration::from_millis(500);
    b.op = AcquireOp::new("k".into(), Arc::from("o"), LEASE_S, Duration::ZERO, None, b.scene.now);
    let a = b.scene.up("a:1", STANDALONE, "");
    b.scene.at(10);
    let next = b.route();
    assert_eq!(b.wakes_at(&next), 510, "no wait, plus the commit margin");
    b.scene.at(510);
    assert_eq!(indeterminate(b.timer()).cause, IndeterminateCause::NoAnswer);
    assert!(b.usable(a), "500 ms of silence is within PING_ANSWER_TIMEOUT");
}

#[test]
fn an_attempt_cut_before_its_write_holds_out_for_a_node_still_connecting() {
    let mut b = Bench::new(&["a:1", "b:1"]);
    b.scene.up("a:1", LEADER, "a:1");
    b.scene.at(10);
    b.route();
    // Its connection ends at 1500 ms with the frame still queued: it may go elsewhere,
    // and b:1 is still making its first connection (it may be the leader).
    b.scene.at(1500);
    let next = b.cut();
    assert!(b.sent().is_none(), "not one byte left: free to go elsewhere");
    assert_eq!(
        b.wakes_at(&next),
        1500 + LEADER_WAIT.as_millis() as u64,
        "holds out LEADER_WAIT from the cut"
    );
    // A node up in time takes it.
    let bb = b.scene.up("b:1", LEADER, "b:1");
    b.scene.at(1600);
    b.route();
    assert_eq!(b.sent().map(|s| s.0), Some(bb));
}

#[test]
fn an_attempt_cut_after_its_write_is_indeterminate_with_its_window_from_the_write() {
    let (mut b, a) = sent_to_standalone();
    // The send made this client the writer: the batch is taken and written whole.
    let mut buf = Vec::new();
    assert!(b.scene.world.net.session_mut(a).unwrap().take_batch(&mut buf));
    let mut late = Vec::new();
    // Held up behind a slow write: it left at 300 ms.
    b.scene.at(300);
    b.scene.world.net.written(a, Ok(()), b.scene.now, &mut late);
    b.scene.at(1000);
    let i = indeterminate(b.cut());
    assert_eq!(i.cause, IndeterminateCause::ConnectionLost);
    assert!(i.orphan.is_some());
    assert_eq!(b.scene.ms_of(i.sent_at), 10, "queued at 10 ms");
    let wait = WAIT_MS - 10;
    assert_eq!(
        b.scene.ms_of(i.settle_at),
        300 + wait + MARGIN.as_millis() as u64,
        "from the write, not the queueing"
    );
}

/// Two nodes of two fencing domains: neither an ACQUIRE nor a HOLD is written to
/// either; both end at once as a lasting mistake naming both domains.
#[test]
fn neither_an_acquire_nor_a_hold_is_written_while_two_domains_answer() {
    use crate::proto::frame::HoldPart;
    let parts = vec![
        HoldPart { key: "seat:1".into(), count: 1, capacity: 1 },
        HoldPart { key: "stock".into(), count: 2, capacity: 5 },
    ];
    let wait = Duration::from_millis(WAIT_MS);
    for hold in [false, true] {
        let mut scene = Scene::new(&["a:1", "b:1"]);
        scene.up("a:1", LEADER, "a:1");
        let net = &mut scene.world.net;
        let slot = net.slots.iter().find(|s| s.addr == "b:1" && s.session.is_none()).expect("b's slot").id;
        net.connected(slot, 2, LEADER, 11, "b:1", "b:1".into(), scene.now).expect("b is up");
        scene.down("b:1");
        let mut op = if hold {
            AcquireOp::hold(parts.clone(), None, Arc::from("o"), LEASE_S, wait, scene.now)
        } else {
            AcquireOp::new("seat:1".into(), Arc::from("o"), LEASE_S, wait, None, scene.now)
        };
        let next = op.route(&mut scene.cx());
        assert!(op.sent.is_none(), "hold {hold}: nothing written");
        match result(next) {
            Err(AcquireError::Unavailable { lasting: true, last_error: Some(why) }) => {
                assert!(why.contains("fencing domain 7") && why.contains("fencing domain 11"), "{why}")
            }
            other => panic!("hold {hold}: {other:?}"),
        }
    }
}
