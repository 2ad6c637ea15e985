//! Counted and multi-key holds in scripted worlds: one grant of every key or none, one
//! release of the whole hold, places in line before the answer, an indeterminate hold
//! resolved as one, and the background check that must not take a hold under way for
//! a lost grant of a key it names (docs/client.md, "Counted and multi-key holds").

use super::*;
use crate::world::T;
use ticketing::client::Place;
use ticketing::proto::frame::HoldPart;

fn part(key: &str, count: u32, capacity: u32) -> HoldPart {
    HoldPart { key: key.to_owned(), count, capacity }
}

/// Runs until `op` has ended (at most `by`).
fn until_done(w: &mut World, op: OpId, by: T) {
    while !w.outcomes.contains_key(&op) && w.now < by {
        let next = w.now + MS;
        run(w, next);
    }
}

#[test]
fn a_multi_key_hold_is_granted_whole_and_released_whole() {
    let mut w = script(3);
    // "a" is held: the hold of a, b and 2 of stock s waits in line, told its place.
    let first = w.acquire(SCRIPT, "a", "o-1", 30, ms(0)).unwrap();
    run(&mut w, SEC);
    let t1 = granted(&w, first);
    let parts = vec![part("a", 1, 1), part("b", 1, 1), part("s", 2, 3)];
    let hold = w.hold(SCRIPT, parts, "o-2", 30, ms(5000), true).unwrap();
    run(&mut w, 2 * SEC);
    assert!(!w.outcomes.contains_key(&hold), "it waits while a is held");
    assert_eq!(w.places_told(hold), vec![Place::new(0, 0)], "told its place when it queued");
    // Nothing of it is held while it waits: b and s are free.
    assert_eq!(w.holders(), vec![("a".to_string(), "o-1".to_string(), t1)]);
    w.release(Some(SCRIPT), "a", "o-1", t1).unwrap();
    run(&mut w, 3 * SEC);
    let t2 = granted(&w, hold);
    let all: Vec<(String, String, u64)> =
        ["a", "b", "s"].iter().map(|k| (k.to_string(), "o-2".to_string(), t2)).collect();
    assert_eq!(w.holders(), all, "every key under the one token");
    assert!(w.stats().places >= 1);
    // One RELEASE, by the key its lock goes by, ends every key.
    w.release(Some(SCRIPT), "a", "o-2", t2).unwrap();
    run(&mut w, 5 * SEC);
    all_released(&w);
}

#[test]
fn a_capacity_other_than_the_keys_is_refused_and_counted_holds_share_the_stock() {
    let mut w = script(1);
    let one = w.hold(SCRIPT, vec![part("s", 2, 3)], "o-1", 30, ms(0), false).unwrap();
    let two = w.hold(SCRIPT, vec![part("s", 1, 3)], "o-2", 30, ms(0), false).unwrap();
    run(&mut w, SEC);
    let (t1, t2) = (granted(&w, one), granted(&w, two));
    // Full: a third waits 0 → Busy; one stating another capacity → Invalid (E 1).
    let busy = w.hold(SCRIPT, vec![part("s", 1, 3)], "o-3", 30, ms(0), false).unwrap();
    let wrong = w.hold(SCRIPT, vec![part("s", 1, 4)], "o-4", 30, ms(0), false).unwrap();
    run(&mut w, 2 * SEC);
    assert!(matches!(outcome(&w, busy).1, Outcome::Acquire(Err(AcquireError::Busy))));
    match outcome(&w, wrong).1 {
        Outcome::Acquire(Err(AcquireError::Invalid(m))) => {
            assert!(m.contains("capacity 4") && m.contains("3"), "{m}")
        }
        other => fail(&w, format!("expected E 1, got {other:?}")),
    }
    w.release(Some(SCRIPT), "s", "o-1", t1).unwrap();
    w.release(Some(SCRIPT), "s", "o-2", t2).unwrap();
    run(&mut w, 5 * SEC);
    all_released(&w);
}

/// A multi-key HOLD whose connection breaks after the server took it: `Indeterminate`,
/// and `resolve` (by a QUERY of its key of capacity 1) hands back the whole hold.
#[test]
fn an_indeterminate_multi_key_hold_resolves_as_one() {
    let mut w = script(3);
    let leader = w.leader().unwrap();
    let parts = vec![part("s", 1, 2), part("b", 1, 1), part("c", 1, 1)];
    let op = w.hold(SCRIPT, parts, "o-1", 30, ms(0), false).unwrap();
    run(&mut w, 100 * MS + 1000);
    for s in w.session_of_node(leader) {
        w.break_session(s);
    }
    run(&mut w, 200 * MS);
    let i = indeterminate(&w, op);
    assert_eq!(i.key(), "b", "the record goes by its key of capacity 1");
    let r = w.resolve(SCRIPT, op, &i, w.now + 10 * SEC).unwrap();
    run(&mut w, 8 * SEC);
    let token = match outcome(&w, r).1 {
        Outcome::Resolve(Resolved::Held(g)) => g.token,
        other => fail(&w, format!("resolve: {other:?}")),
    };
    assert_eq!(w.holders().len(), 3, "all three keys under {token}: {:?}", w.holders());
    w.release(Some(SCRIPT), "b", "o-1", token).unwrap();
    run(&mut w, 12 * SEC);
    all_released(&w);
}

/// A lost grant of a hold of stock keys alone is found by the background check when it
/// is the key's oldest hold (a QUERY shows that one) and released.
#[test]
fn a_lost_grant_of_a_stock_hold_that_is_the_oldest_is_released() {
    let mut w = script(1);
    w.pause(0, 12 * SEC);
    let op = w.hold(SCRIPT, vec![part("s", 2, 5), part("t", 1, 2)], "o-1", 30, ms(0), false).unwrap();
    run(&mut w, 11 * SEC);
    indeterminate(&w, op);
    run(&mut w, 13 * SEC);
    assert_eq!(w.checker.grants.len(), 1, "granted on resume");
    run(&mut w, 30 * SEC);
    all_released(&w);
}

/// An indeterminate ACQUIRE of `b` by owner `o` (cut inside its frame: the server never
/// got it); while the record's look at `b` runs, a HOLD of `a` and `b` by the same owner
/// is granted and its `G` is slow. The holder the look finds is that hold's grant,
/// whose `G` has not arrived: the hold is under way on `b` too, so the look must not
/// take it for the lost grant (before the fix the client registered a hold under way
/// by its first key alone, released the grant, and then handed the same token to the
/// hold's caller: a lock nobody held).
#[test]
fn a_hold_under_way_is_never_taken_for_a_lost_grant_of_another_of_its_keys() {
    let mut w = script(1);
    w.write_plans.push_back(WritePlan::FailAfter(8));
    let x = w.acquire(SCRIPT, "b", "o", 30, ms(0)).unwrap();
    run(&mut w, 500 * MS);
    let i = indeterminate(&w, x);
    assert_eq!(i.cause(), IndeterminateCause::ConnectionLost);
    let settle = w.t(i.settle_at());
    run(&mut w, settle - 300 * MS);
    // The hold's `G` (and all after it on its connection) takes 800 ms: it comes
    // after the look's answer.
    w.slow_grants = 800 * MS;
    let hold = w.hold(SCRIPT, vec![part("a", 1, 1), part("b", 1, 1)], "o", 30, ms(0), false).unwrap();
    until_done(&mut w, hold, settle + 5 * SEC);
    w.slow_grants = 0;
    let token = granted(&w, hold);
    run(&mut w, settle + 15 * SEC);
    let mut both = vec![("a".to_string(), "o".to_string(), token), ("b".to_string(), "o".to_string(), token)];
    both.sort();
    assert_eq!(w.holders(), both, "the hold's caller holds it");
    w.release(Some(SCRIPT), "a", "o", token).unwrap();
    run(&mut w, settle + 25 * SEC);
    all_released(&w);
}
