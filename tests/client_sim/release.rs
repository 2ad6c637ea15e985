//! How a release that cannot get through ends: never written to a node that refuses
//! with a lasting mistake, it ends `Unavailable` at once; written and then cut off, it
//! may have executed, so it ends `Unconfirmed` at its deadline however hopeless the
//! connections look.

use super::*;
use ticketing::client::ReleaseError;

fn released(w: &World, op: OpId) -> (u64, Result<ticketing::client::ReleaseOutcome, ReleaseError>) {
    match outcome(w, op) {
        (t, Outcome::Release(r)) => (t, r),
        (_, other) => fail(w, format!("{op:?}: expected a release outcome, got {other:?}")),
    }
}

#[test]
fn a_release_never_sent_to_a_mistaken_node_ends_unavailable_at_once() {
    let (mut w, token) = held(30);
    // The node now refuses every connection with a wrong secret; the ones up break.
    w.mistake(0, 60 * SEC);
    for s in w.session_of_node(0) {
        w.break_session(s);
    }
    // The client has seen both connections end and its redials refused.
    let broke = w.now;
    run(&mut w, broke + 500 * MS);
    assert!(!w.core.is_connected());
    let started = w.now;
    let r = w.release(Some(SCRIPT), "k", "o-1", token).unwrap().unwrap();
    run(&mut w, started + 2 * SEC);
    let (at, result) = released(&w, r);
    assert!(matches!(result, Err(ReleaseError::Unavailable { lasting: true, .. })), "{result:?}");
    assert!(at - started < 100 * MS, "ended {} ms after it began, not at once", (at - started) / MS);
}

#[test]
fn a_release_written_to_a_connection_that_then_broke_ends_unconfirmed_at_its_deadline() {
    let (mut w, token) = held(30);
    w.mistake(0, 60 * SEC);
    // Paused: the node takes the release into its socket and answers nothing.
    w.pause(0, 10 * SEC);
    let started = w.now;
    let r = w.release(Some(SCRIPT), "k", "o-1", token).unwrap().unwrap();
    run(&mut w, started + 10 * MS);
    // Its session breaks after the release was written: it may have reached the node.
    for s in w.session_of_node(0) {
        w.break_session(s);
    }
    run(&mut w, started + 8 * SEC);
    let (at, result) = released(&w, r);
    assert_eq!(result, Err(ReleaseError::Unconfirmed), "it may have executed: not Unavailable");
    assert!(
        at - started >= 4900 * MS,
        "ended {} ms after it began, before its deadline",
        (at - started) / MS
    );
}

#[test]
fn a_release_whose_connection_broke_before_it_was_written_ends_unavailable() {
    let (mut w, token) = held(30);
    w.mistake(0, 60 * SEC);
    let started = w.now;
    let r = w.release(Some(SCRIPT), "k", "o-1", token).unwrap().unwrap();
    // The session breaks at once, before the writer put a byte of the release out.
    for s in w.session_of_node(0) {
        w.break_session(s);
    }
    run(&mut w, started + 8 * SEC);
    let (at, result) = released(&w, r);
    assert!(matches!(result, Err(ReleaseError::Unavailable { lasting: true, .. })), "{result:?}");
    assert!(
        at - started < 500 * MS,
        "ended {} ms after it began, not once the redials were refused",
        (at - started) / MS
    );
}
