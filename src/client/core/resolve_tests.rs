//! Unit tests of `resolve` and of the background check (`resolve.rs`): when a resolve
//! gives up at once, the local deadline of a grant it finds or is handed, and the
//! release of one with no lease left, on hand-built connections.

use std::time::Duration;

use super::*;
use crate::client::core::ids::OpId;
use crate::client::core::orphans::State;
use crate::client::core::scene_tests::{Scene, OP};
use crate::client::error::IndeterminateCause;
use crate::proto::handshake::role::STANDALONE;

const TOKEN: u64 = 7;
const LEASE: Duration = Duration::from_secs(10);

/// A scene with a standalone node up, and an indeterminate acquire of (k, o) queued
/// 10 ms after the start whose window ends `settle_ms` after the start.
fn with_node(settle_ms: u64, with_record: bool) -> (Scene, SessionId, Indeterminate) {
    let mut scene = Scene::new(&["a:1"]);
    let a = scene.up("a:1", STANDALONE, "");
    let sent_at = scene.start + Duration::from_millis(10);
    let settle_at = scene.start + Duration::from_millis(settle_ms);
    let orphan = with_record.then(|| {
        scene.world.orphans.open(
            "k".into(),
            Arc::from("o"),
            LEASE,
            Duration::ZERO,
            sent_at,
            settle_at,
            scene.now,
        )
    });
    (scene, a, attempt(sent_at, settle_at, orphan))
}

/// The error of an indeterminate acquire of (k, o) with no wait.
fn attempt(sent_at: Instant, settle_at: Instant, orphan: Option<OrphanId>) -> Indeterminate {
    Indeterminate {
        cause: IndeterminateCause::NoAnswer,
        key: "k".into(),
        owner: Arc::from("o"),
        lease_s: LEASE.as_secs() as u8,
        wait: Duration::ZERO,
        sent_at,
        settle_at,
        orphan,
        parts: None,
    }
}

fn resolved(next: Next) -> Resolved {
    match next {
        Next::Done(Outcome::Resolve(r)) => r,
        other => panic!("expected the resolve to end, got {other:?}"),
    }
}

fn holder(remaining_ms: u32) -> Response {
    Response::Holder { token: TOKEN, remaining_ms, waiters: 0, owner: "o".into() }
}

/// A resolve with a 10 s budget, started at once, its QUERY sent at 1000 ms.
fn querying(with_record: bool) -> (Scene, SessionId, ResolveOp) {
    let (mut scene, a, attempt) = with_node(1000, with_record);
    let mut op = ResolveOp::new(&attempt, scene.start + Duration::from_secs(10));
    let next = op.start(&mut scene.cx());
    assert!(matches!(next, Next::Wait(Some(at)) if at == attempt.settle_at), "it waits out the window first");
    assert!(!op.unrouted(), "settling is not waiting for a connection");
    scene.at(1000);
    op.on_timer(&mut scene.cx());
    assert!(matches!(op.phase, Phase::Querying(..)));
    assert!(!op.unrouted(), "the QUERY is on a's connection");
    (scene, a, op)
}

#[test]
fn a_window_that_ends_no_sooner_than_the_budget_is_unknown_at_once() {
    for (settle_ms, gives_up) in [(5000, true), (5001, true), (4999, false)] {
        let (mut scene, _, attempt) = with_node(settle_ms, true);
        let mut op = ResolveOp::new(&attempt, scene.start + Duration::from_millis(5000));
        let next = op.start(&mut scene.cx());
        if gives_up {
            assert_eq!(resolved(next), Resolved::Unknown, "window end {settle_ms} ms: nothing to wait for");
            let id = attempt.orphan.unwrap();
            assert_eq!(scene.world.orphans.get(id).unwrap().state, State::Watching, "handed back");
        } else {
            assert!(matches!(next, Next::Wait(Some(at)) if at == attempt.settle_at), "{next:?}");
        }
    }
}

#[test]
fn a_grant_found_by_query_is_held_until_the_instant_before_the_query_plus_what_was_left() {
    let (mut scene, a, mut op) = querying(true);
    scene.at(1400);
    let Resolved::Held(granted) = resolved(op.on_answer(a, holder(3000), &mut scene.cx())) else {
        panic!("expected the grant to be adopted")
    };
    assert_eq!(granted.token, TOKEN);
    assert_eq!(scene.ms_of(granted.deadline), 1000 + 3000, "asked at 1000 ms, 3 s left");
    assert!(scene.world.claims.owns_token(TOKEN, scene.now), "now the caller's");
    assert!(scene.world.jobs.is_empty());
}

#[test]
fn a_grant_found_with_no_lease_left_is_released_not_handed_out() {
    let (mut scene, a, mut op) = querying(true);
    scene.at(4000);
    assert_eq!(resolved(op.on_answer(a, holder(3000), &mut scene.cx())), Resolved::NotHeld);
    let job = scene.world.jobs.pop().expect("a release of the grant");
    assert_eq!((job.token, job.origin), (TOKEN, Origin::Compensation));
    assert_eq!(
        job.until.map(|u| scene.ms_of(u)),
        Some(4000 + 3000),
        "now plus what the leader said was left"
    );
    assert!(!scene.world.claims.owns_token(TOKEN, scene.now));
}

#[test]
fn a_late_grant_runs_from_the_acquire_queueing_and_after_its_lease_is_released() {
    let (mut scene, _, mut op) = querying(true);
    scene.at(2000);
    let Resolved::Held(granted) = resolved(op.on_late_grant(TOKEN, 4000, &mut scene.cx())) else {
        panic!("expected the late grant to be adopted")
    };
    assert_eq!(granted.lease, Duration::from_secs(4), "the server's shorter lease");
    assert_eq!(scene.ms_of(granted.deadline), 10 + 4000, "queued at 10 ms");

    let (mut scene, _, mut op) = querying(true);
    scene.at(10 + 4000);
    assert_eq!(resolved(op.on_late_grant(TOKEN, 4000, &mut scene.cx())), Resolved::NotHeld);
    let job = scene.world.jobs.pop().expect("a release of the late grant");
    assert_eq!(job.until.map(|u| scene.ms_of(u)), Some(4010 + 4000), "now plus the lease");
}

#[test]
fn a_query_waiting_for_a_connection_is_unrouted() {
    let mut scene = Scene::new(&["a:1"]);
    let attempt = attempt(scene.now, scene.now, None);
    let mut op = ResolveOp::new(&attempt, scene.start + Duration::from_secs(10));
    assert!(matches!(op.start(&mut scene.cx()), Next::Wait(_)), "a:1 is still connecting");
    assert!(op.unrouted(), "its QUERY waits for a connection");
}

#[test]
fn the_background_check_releases_a_grant_it_finds_unless_a_resolve_took_the_record() {
    let (mut scene, a, attempt) = with_node(0, true);
    let id = attempt.orphan.unwrap();
    scene.at(100);
    scene.world.orphans.checking(id, OP);
    let mut check = OrphanCheck::new(id, "k".into(), scene.now);
    check.read.route(&mut scene.cx());
    scene.at(300);
    let next = check.read.on_answer(a, holder(3000), &mut scene.cx());
    assert_eq!(resolved(check.after_read(next, &mut scene.cx())), Resolved::NotHeld);
    let job = scene.world.jobs.pop().expect("the lost grant is released");
    assert_eq!((job.token, job.origin), (TOKEN, Origin::Compensation));
    assert_eq!(job.until.map(|u| scene.ms_of(u)), Some(300 + 3000));
    assert!(matches!(scene.world.orphans.get(id).unwrap().state, State::Done { released: true, .. }));

    // A resolve claimed the record while the check's QUERY was out: the check's result is
    // not acted on.
    let (mut scene, a, attempt) = with_node(0, true);
    let id = attempt.orphan.unwrap();
    scene.world.orphans.checking(id, OP);
    let mut check = OrphanCheck::new(id, "k".into(), scene.now);
    check.read.route(&mut scene.cx());
    scene.world.orphans.claim(id, OpId(99), "k", "o", attempt.sent_at);
    let next = check.read.on_answer(a, holder(3000), &mut scene.cx());
    assert_eq!(resolved(check.after_read(next, &mut scene.cx())), Resolved::Unknown);
    assert!(scene.world.jobs.is_empty(), "the resolve decides");
    assert_eq!(scene.world.orphans.get(id).unwrap().state, State::Claimed(OpId(99)));
}
