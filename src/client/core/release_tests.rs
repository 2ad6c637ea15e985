//! Unit tests of one release's rules (`release.rs`): each answer an attempt can get, on
//! hand-built connections, where the simulator sees most of them only as a slower
//! release or a vaguer outcome.

use std::time::{Duration, Instant};

use super::*;
use crate::client::core::ids::SlotId;
use crate::client::core::net::DialFailure;
use crate::client::core::scene_tests::{welcome, Scene, MARGIN};
use crate::proto::handshake::role::{FOLLOWER, LEADER, STANDALONE};

const TOKEN: u64 = 7;

/// One release of (k, o, 7), asked for when its scene began.
struct Bench {
    scene: Scene,
    op: ReleaseOp,
}

impl Bench {
    fn new(seeds: &[&str]) -> Bench {
        let mut scene = Scene::new(seeds);
        let job = ReleaseJob {
            key: "k".into(),
            owner: Arc::from("o"),
            token: TOKEN,
            origin: Origin::Explicit,
            until: None,
        };
        let op = ReleaseOp::begin(job, &mut scene.world, MARGIN, scene.now);
        Bench { scene, op }
    }

    fn up(&mut self, addr: &str, role: u8, leader: &str) -> SessionId {
        self.scene.up(addr, role, leader)
    }

    fn down(&mut self, addr: &str) {
        self.scene.down(addr)
    }

    fn at(&mut self, n: u64) {
        self.scene.at(n)
    }

    fn timer(&mut self) -> Next {
        self.op.on_timer(&mut self.scene.cx())
    }

    /// Routing may have changed: what `Core` does for an operation on the routing list
    /// after every input.
    fn route(&mut self) -> Next {
        self.op.route(&mut self.scene.cx())
    }

    fn reply(&mut self, attempt: (SessionId, u32), reply: Reply) -> Next {
        self.op.on_reply(attempt.0, attempt.1, reply, &mut self.scene.cx())
    }

    /// The attempt awaiting its answer.
    fn in_flight(&self) -> Option<(SessionId, u32)> {
        self.op.in_flight.map(|(s, id, _)| (s, id))
    }

    fn sent(&self) -> (SessionId, u32) {
        self.in_flight().expect("an attempt in flight")
    }

    fn pending(&self, (session, id): (SessionId, u32)) -> bool {
        self.scene.world.net.session(session).is_some_and(|s| s.is_pending(id))
    }

    /// A `Wait`'s instant, in ms after the start.
    fn wakes_after(&self, next: &Next) -> u64 {
        match next {
            Next::Wait(Some(at)) => self.scene.ms_of(*at),
            other => panic!("expected a wait with a wake-up, got {other:?}"),
        }
    }
}

fn ended(next: Next) -> Result<ReleaseOutcome, ReleaseError> {
    match next {
        Next::Done(Outcome::Release(r)) => r,
        other => panic!("expected the release to end, got {other:?}"),
    }
}

fn waits(next: &Next) -> bool {
    matches!(next, Next::Wait(_))
}

fn answer(r: Response) -> Reply {
    Reply::Answer(r)
}

/// A standalone node, up, with the release's first attempt sent to it.
fn sent_to_standalone() -> (Bench, SessionId, (SessionId, u32)) {
    let mut b = Bench::new(&["a:1"]);
    let a = b.up("a:1", STANDALONE, "");
    b.timer();
    let first = b.sent();
    (b, a, first)
}

/// The same, with the first attempt unanswered for its timeout (1 s) and sent again:
/// (bench, connection, first attempt, second attempt).
fn sent_twice_to_standalone() -> (Bench, SessionId, (SessionId, u32), (SessionId, u32)) {
    let (mut b, a, first) = sent_to_standalone();
    b.at(1000);
    b.timer();
    let second = b.sent();
    (b, a, first, second)
}

#[test]
fn an_attempt_is_sent_again_only_after_its_timeout_and_the_first_answer_still_counts() {
    let (mut b, a, first) = sent_to_standalone();
    assert_eq!(first.0, a);
    b.at(500);
    let next = b.timer();
    assert_eq!(b.in_flight(), Some(first), "not sent again while its answer may still come");
    assert_eq!(b.wakes_after(&next), 1000, "the attempt's timeout");
    b.at(1000);
    b.timer();
    let second = b.sent();
    assert_ne!(second, first, "sent again at its timeout");
    assert!(b.pending(first), "the first attempt is still listened to");
    // The first attempt's R arrives late: that is the outcome, and the second attempt
    // is no longer waited for (a late answer to it is dropped).
    b.at(1200);
    assert_eq!(ended(b.reply(first, answer(Response::Released))), Ok(ReleaseOutcome::Released));
    assert!(!b.pending(second), "the attempts were forgotten when it ended");
}

#[test]
fn an_answer_counts_only_for_the_attempt_it_answers() {
    let mut b = Bench::new(&["a:1", "b:1"]);
    let a = b.up("a:1", LEADER, "");
    let other = b.up("b:1", FOLLOWER, "a:1");
    b.timer();
    let (session, id) = b.sent();
    assert_eq!(session, a, "the leader takes it");
    assert!(waits(&b.reply((other, id), answer(Response::Released))), "same id, another connection");
    assert!(waits(&b.reply((a, id + 1), answer(Response::Released))), "same connection, another id");
    assert_eq!(ended(b.reply((a, id), answer(Response::Released))), Ok(ReleaseOutcome::Released));
}

#[test]
fn an_m_sends_again_at_once_when_another_connection_leads() {
    let mut b = Bench::new(&["a:1", "b:1"]);
    let a = b.up("a:1", LEADER, "");
    let other = b.up("b:1", FOLLOWER, "a:1");
    b.timer();
    b.at(1000);
    b.timer();
    let (session, id) = b.sent();
    assert_eq!(session, a);
    // Leadership moved to b; a's answer says so (routing has taken in the M first).
    b.at(1100);
    b.scene.world.net.moved(a, "b:1", b.scene.now);
    b.reply((a, id), answer(Response::Moved { leader: "b:1".into() }));
    let (to, _) = b.in_flight().expect("sent again within the M's handling");
    assert_eq!(to, other, "to the leader");
}

#[test]
fn repeated_ms_with_nowhere_else_to_go_back_off_doubling_and_news_starts_over() {
    // a answers but does not lead; the leader it names (b, then c) cannot be reached.
    let mut b = Bench::new(&["a:1", "b:1", "c:1"]);
    let a = b.up("a:1", FOLLOWER, "");
    b.down("b:1");
    b.down("c:1");
    let mut t = 0;
    let mut gaps = Vec::new();
    for leader in ["b:1", "b:1", "b:1", "b:1", "b:1", "c:1", "c:1"] {
        b.at(t);
        b.timer();
        let attempt = b.sent();
        assert_eq!(attempt.0, a);
        b.scene.world.net.moved(a, leader, b.scene.now);
        let next = b.reply(attempt, answer(Response::Moved { leader: leader.into() }));
        assert_eq!(b.in_flight(), None, "nowhere else to go: not sent again at once");
        let wake = b.wakes_after(&next);
        gaps.push(wake - t);
        t = wake;
    }
    assert_eq!(gaps, [100, 200, 400, 800, 1000, 100, 200], "doubling to 1 s; a new leader starts over");
}

#[test]
fn a_lost_attempt_may_have_executed_so_a_later_n_is_released_or_expired() {
    let (mut b, a, first) = sent_to_standalone();
    b.at(10);
    b.reply(first, Reply::Lost);
    let second = b.in_flight().expect("sent again at once");
    assert_eq!(second.0, a);
    assert_eq!(ended(b.reply(second, answer(Response::NotHolder))), Ok(ReleaseOutcome::ReleasedOrExpired));
}

#[test]
fn an_unsent_attempt_did_not_execute_so_a_later_n_is_not_holder() {
    let (mut b, _, first) = sent_to_standalone();
    b.at(10);
    b.reply(first, Reply::Unsent);
    let second = b.in_flight().expect("sent again at once");
    assert_eq!(ended(b.reply(second, answer(Response::NotHolder))), Ok(ReleaseOutcome::NotHolder));
}

#[test]
fn a_u_may_have_executed_and_is_tried_again_after_a_pause() {
    let (mut b, _, first) = sent_to_standalone();
    b.at(10);
    let next = b.reply(first, answer(Response::Unknown));
    assert_eq!(b.wakes_after(&next), 110, "tried again after the retry pause");
    b.at(60);
    b.timer();
    assert_eq!(b.in_flight(), None, "not before the pause is over");
    b.at(110);
    b.timer();
    let second = b.sent();
    assert_eq!(ended(b.reply(second, answer(Response::NotHolder))), Ok(ReleaseOutcome::ReleasedOrExpired));
}

#[test]
fn an_n_with_no_earlier_attempt_out_is_not_holder_at_once() {
    let (mut b, _, first) = sent_to_standalone();
    assert_eq!(ended(b.reply(first, answer(Response::NotHolder))), Ok(ReleaseOutcome::NotHolder));
}

#[test]
fn an_n_while_an_earlier_attempt_is_out_waits_for_that_attempts_answer() {
    let (mut b, _, first, second) = sent_twice_to_standalone();
    assert!(waits(&b.reply(second, answer(Response::NotHolder))), "the first attempt may yet answer R");
    assert_eq!(ended(b.reply(first, answer(Response::Released))), Ok(ReleaseOutcome::Released));
}

#[test]
fn an_earlier_attempts_n_waits_for_the_newer_attempt_but_not_for_nothing() {
    // The newer attempt still out: it may have executed first (R), so wait for it.
    let (mut b, _, first, second) = sent_twice_to_standalone();
    assert!(waits(&b.reply(first, answer(Response::NotHolder))));
    assert_eq!(ended(b.reply(second, answer(Response::Released))), Ok(ReleaseOutcome::Released));

    // Nothing else out (the newer attempt got U and waits out its pause): it ends now.
    let (mut b, _, first, second) = sent_twice_to_standalone();
    b.reply(second, answer(Response::Unknown));
    assert_eq!(ended(b.reply(first, answer(Response::NotHolder))), Ok(ReleaseOutcome::ReleasedOrExpired));
}

#[test]
fn a_release_whose_every_attempt_went_unwritten_is_unavailable_not_unconfirmed() {
    // The connection ends before a byte of the attempt left; no other comes up.
    let (mut b, a, first) = sent_to_standalone();
    b.at(10);
    b.scene.world.net.closed(a, b.scene.now);
    let next = b.reply(first, Reply::Unsent);
    assert_eq!(b.in_flight(), None, "no connection to send it on");
    assert!(waits(&next));
    b.at(5000);
    assert!(
        matches!(ended(b.timer()), Err(ReleaseError::Unavailable { lasting: false, .. })),
        "never sent: retryable, not 'may have executed'"
    );

    // The same, and the redials meet a lasting mistake: it says so at once.
    let (mut b, a, first) = sent_to_standalone();
    b.at(10);
    b.scene.world.net.closed(a, b.scene.now);
    b.reply(first, Reply::Unsent);
    let slots: Vec<SlotId> = b.scene.world.net.slots.iter().map(|s| s.id).collect();
    for slot in slots {
        b.scene.world.net.dial_failed(slot, DialFailure::lasting("wrong secret"), b.scene.now);
    }
    b.at(200);
    assert!(matches!(ended(b.timer()), Err(ReleaseError::Unavailable { lasting: true, .. })));

    // Two attempts, the first timed out unanswered (still queued behind a stuck write),
    // and the connection ends with neither written: never sent.
    let (mut b, a, first, second) = sent_twice_to_standalone();
    b.scene.world.net.closed(a, b.scene.now);
    b.reply(second, Reply::Unsent);
    b.reply(first, Reply::Unsent);
    b.at(5000);
    assert!(matches!(ended(b.timer()), Err(ReleaseError::Unavailable { .. })));

    // One attempt written (it timed out), the next unwritten: it may have executed.
    let (mut b, a, first, second) = sent_twice_to_standalone();
    b.scene.world.net.closed(a, b.scene.now);
    b.reply(second, Reply::Unsent);
    b.reply(first, Reply::Lost);
    b.at(5000);
    assert_eq!(ended(b.timer()), Err(ReleaseError::Unconfirmed));
}

/// The open orphan record's (token, give-up instant).
fn orphan(world: &World, now: Instant) -> Option<(Option<u64>, Instant)> {
    let due = world.orphans.due(now);
    assert!(due.len() <= 1, "{due:?}");
    due.first().map(|(id, _)| {
        let record = world.orphans.get(*id).unwrap();
        (record.token, record.give_up_at)
    })
}

#[test]
fn an_unconfirmed_release_leaves_a_check_until_its_lease_has_surely_ended() {
    let unconfirmed = Outcome::Release(Err(ReleaseError::Unconfirmed));
    let longest = Duration::from_secs(u64::from(LEASE_S_MAX)) + MARGIN;
    // Lease unknown: until the longest lease plus the margin from the end.
    let mut b = Bench::new(&["a:1"]);
    b.at(5000);
    b.op.ended(&unconfirmed, &mut b.scene.world, false, MARGIN, b.scene.now);
    assert_eq!(orphan(&b.scene.world, b.scene.now), Some((Some(TOKEN), b.scene.now + longest)));
    // Lease known: until it ends.
    let mut b = Bench::new(&["a:1"]);
    let until = b.scene.start + Duration::from_secs(30);
    b.op.until = Some(until);
    b.at(5000);
    b.op.ended(&unconfirmed, &mut b.scene.world, false, MARGIN, b.scene.now);
    assert_eq!(orphan(&b.scene.world, b.scene.now), Some((Some(TOKEN), until)));
    // A closing client checks nothing more.
    let mut b = Bench::new(&["a:1"]);
    b.at(5000);
    b.op.ended(&unconfirmed, &mut b.scene.world, true, MARGIN, b.scene.now);
    assert_eq!(orphan(&b.scene.world, b.scene.now), None);
}

#[test]
fn a_confirmed_release_leaves_no_check_and_gives_its_token_up() {
    let mut b = Bench::new(&["a:1"]);
    assert!(b.scene.world.claims.owns_token(TOKEN, b.scene.now), "claimed while it is being released");
    b.at(100);
    b.op.ended(
        &Outcome::Release(Ok(ReleaseOutcome::Released)),
        &mut b.scene.world,
        false,
        MARGIN,
        b.scene.now,
    );
    assert_eq!(orphan(&b.scene.world, b.scene.now), None);
    assert!(!b.scene.world.claims.owns_token(TOKEN, b.scene.now));
}

/// A release whose lease is unknown (`Client::release` with a bare token) claims
/// the token for the longest lease plus the commit margin: a holder a QUERY finds
/// with it meanwhile is this release's, never taken for a lost grant.
#[test]
fn a_release_of_unknown_lease_claims_its_token_for_the_longest_lease() {
    let b = Bench::new(&["a:1"]);
    let (claims, now) = (&b.scene.world.claims, b.scene.now);
    let longest = Duration::from_secs(u64::from(LEASE_S_MAX)) + MARGIN;
    assert!(claims.owns_token(TOKEN, now + longest - Duration::from_millis(1)));
    assert!(!claims.owns_token(TOKEN, now + longest));
    // A known lease end is kept as given.
    let mut scene = Scene::new(&["a:1"]);
    let until = scene.now + Duration::from_secs(3);
    let job = ReleaseJob {
        key: "k".into(),
        owner: Arc::from("o"),
        token: 8,
        origin: Origin::Explicit,
        until: Some(until),
    };
    ReleaseOp::begin(job, &mut scene.world, MARGIN, scene.now);
    let claims = &scene.world.claims;
    assert!(claims.owns_token(8, until - Duration::from_millis(1)) && !claims.owns_token(8, until));
}

#[test]
fn a_release_asked_before_any_connection_is_up_goes_the_moment_the_first_one_comes_up() {
    // A one-shot client (the CLI's `release`): both connections to its one address are
    // still being made when the release is asked for.
    let mut b = Bench::new(&["a:1"]);
    let next = b.timer();
    assert_eq!(b.in_flight(), None, "no connection to send it on yet");
    assert!(b.op.unrouted(), "it waits on the routing list");
    assert!(b.wakes_after(&next) <= 1000, "it looks again within LEADER_WAIT at the latest");
    // 3 ms later the first connection is up: the release goes at once, on it.
    b.at(3);
    let a = welcome(&mut b.scene.world.net, "a:1", 1, STANDALONE, "", b.scene.now);
    b.route();
    assert_eq!(b.sent().0, a, "sent the moment a connection came up, not a retry pause later");
    assert!(!b.op.unrouted());
    assert_eq!(ended(b.reply(b.sent(), answer(Response::Released))), Ok(ReleaseOutcome::Released));

    // Nothing comes up for a while: it is still sent as soon as something does.
    let mut b = Bench::new(&["a:1"]);
    b.timer();
    b.down("a:1");
    b.at(50);
    b.timer();
    assert_eq!(b.in_flight(), None);
    b.at(170);
    let a = welcome(&mut b.scene.world.net, "a:1", 1, STANDALONE, "", b.scene.now);
    b.route();
    assert_eq!(b.sent().0, a);
}

#[test]
fn a_release_holds_out_for_the_leaders_first_connection_then_settles_for_any() {
    // A follower that knows no leader is up first while the other seed still connects:
    // the release waits for that one (it may lead) rather than earn an `M`.
    let mut b = Bench::new(&["a:1", "b:1"]);
    b.at(2);
    b.up("b:1", FOLLOWER, "");
    b.timer();
    assert_eq!(b.in_flight(), None, "held out while a:1 is still making its first connection");
    b.at(5);
    let leader = welcome(&mut b.scene.world.net, "a:1", 2, LEADER, "", b.scene.now);
    b.route();
    assert_eq!(b.sent().0, leader, "the leader's connection takes it");

    // The other seed never answers: after LEADER_WAIT it goes to the follower.
    let mut b = Bench::new(&["a:1", "b:1"]);
    let follower_only = b.up("b:1", FOLLOWER, "");
    let next = b.timer();
    assert_eq!(b.in_flight(), None);
    assert_eq!(b.wakes_after(&next), 1000, "LEADER_WAIT");
    b.at(1000);
    b.timer();
    assert_eq!(b.sent().0, follower_only);
}
