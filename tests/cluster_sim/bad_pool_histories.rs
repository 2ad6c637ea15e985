//! The lock checker objects to hand-built bad histories of counted and multi-key holds,
//! one per invariant they add (inv8–inv12) and the old ones they extend: it is not
//! vacuous there either.

use super::lock_checker::{Asked, LockChecker};
use ticketing::lock::{Command, Grant, HoldGrant, Origin, Part};
use ticketing::proto::{PoolHolder, Response};

fn origin(conn: u64, id: u32) -> Origin {
    Origin { node: 1, incarnation: 1001, conn, id }
}

fn part(key: &str, count: u32, capacity: u32) -> Part {
    Part { key: key.into(), count, capacity }
}

fn hold(conn: u64, id: u32, owner: &str, token: u64, parts: Vec<Part>) -> HoldGrant {
    HoldGrant { grant: Grant { owner: owner.into(), token, lease_ms: 1000, origin: origin(conn, id) }, parts }
}

fn asked(owner: &str, parts: Vec<Part>, wait_ms: u64) -> Asked {
    Asked::Hold { parts, owner: owner.into(), lease_ms: 1000, wait_ms, place: false }
}

/// Commits `cmd` at `index`, its commit seen at `t` ms.
fn commit(c: &mut LockChecker, index: u64, cmd: Command, t: u64) -> Result<(), String> {
    c.raft_commit(index, t);
    c.committed(index, 1, Some(&cmd), t)
}

fn expect(r: Result<(), String>, inv: &str) {
    let e = r.expect_err("the checker accepted a bad history");
    assert!(e.starts_with(inv), "{e}");
}

/// Client 0 (conn 1) holds 2 of the 3 permits of "s" under token 10, committed at
/// index 1 (5 ms), G received at 10 ms.
fn counted_history() -> LockChecker {
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, asked("c0", vec![part("s", 2, 3)], 0), 0);
    commit(&mut c, 1, Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("s", 2, 3)]) }, 5).unwrap();
    c.received((1, 1), &Response::Granted { token: 10, lease_ms: 1000 }, 10).unwrap();
    c
}

#[test]
fn inv8_permits_over_capacity() {
    // A second hold of 2 of 3 while 2 are in use: 4 of capacity 3.
    let mut c = counted_history();
    let over = Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("s", 2, 3)]) };
    expect(commit(&mut c, 2, over, 20), "inv8");
    // One of 3 fits.
    let mut c = counted_history();
    commit(&mut c, 2, Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("s", 1, 3)]) }, 20).unwrap();
    // The end of the hold hands on more than it freed, in the same entry.
    let mut c = counted_history();
    let end = Command::End {
        key: "s".into(),
        token: 10,
        owner: None,
        origin: None,
        next: vec![hold(2, 1, "c1", 11, vec![part("s", 2, 3)]), hold(3, 1, "c2", 12, vec![part("s", 2, 3)])],
    };
    expect(commit(&mut c, 2, end, 1500), "inv8");
    // A count above the capacity it states.
    let mut c = LockChecker::new();
    expect(commit(&mut c, 1, Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("s", 4, 3)]) }, 5), "inv8");
}

#[test]
fn inv9_a_grant_split_or_not_what_was_asked() {
    // Asked "a" and "b" together; granted "a" alone in one entry…
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, asked("c0", vec![part("a", 1, 1), part("b", 1, 1)], 500), 0);
    let first = Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("a", 1, 1)]) };
    expect(commit(&mut c, 1, first.clone(), 5), "inv9");
    // … and, whatever was asked, one request granted in two entries.
    let mut c = LockChecker::new();
    commit(&mut c, 1, first, 5).unwrap();
    let second = Command::Hold { hold: hold(1, 1, "c0", 11, vec![part("b", 1, 1)]) };
    expect(commit(&mut c, 2, second, 6), "inv9");
    // Granted whole, under one token, in one entry: fine.
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, asked("c0", vec![part("a", 1, 1), part("b", 1, 1)], 500), 0);
    let whole = Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("b", 1, 1), part("a", 1, 1)]) };
    commit(&mut c, 1, whole, 5).unwrap();
    // A grant naming a key twice.
    let mut c = LockChecker::new();
    let twice = Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("s", 1, 3), part("s", 1, 3)]) };
    expect(commit(&mut c, 1, twice, 5), "inv9");
}

#[test]
fn inv10_capacity_changed_while_held() {
    // "s" has capacity 3 while token 10 holds it; a grant stating 2.
    let mut c = counted_history();
    let other = Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("s", 1, 2)]) };
    expect(commit(&mut c, 2, other, 20), "inv10");
    // An exclusive key held on its own, then granted as one of capacity 2.
    let mut c = LockChecker::new();
    let grant = Grant { owner: "c0".into(), token: 10, lease_ms: 1000, origin: origin(1, 1) };
    commit(&mut c, 1, Command::Grant { key: "a".into(), grant }, 5).unwrap();
    let pooled = Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("a", 1, 2), part("b", 1, 1)]) };
    expect(commit(&mut c, 2, pooled, 20), "inv10");
    // Once the key is forgotten, another capacity is fine.
    let mut c = counted_history();
    let end = Command::End { key: "s".into(), token: 10, owner: None, origin: None, next: vec![] };
    commit(&mut c, 2, end, 1500).unwrap();
    commit(&mut c, 3, Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("s", 2, 2)]) }, 1600).unwrap();
}

#[test]
fn inv11_a_later_request_granted_ahead_of_an_earlier_one() {
    // Request 1 (keys "a", "b") reached node 1 first and waits; request 2 names "b".
    let history = || {
        let mut c = LockChecker::new();
        c.sent((1, 1), 0, 1, asked("c0", vec![part("a", 1, 1), part("b", 1, 1)], 5000), 0);
        c.sent(
            (2, 1),
            1,
            1,
            Asked::Acquire { key: "b".into(), owner: "c1".into(), lease_ms: 1000, wait_ms: 0 },
            0,
        );
        c.arrived((1, 1), 1, 1);
        c.arrived((2, 1), 1, 2);
        c
    };
    let later = Command::Hold { hold: hold(2, 1, "c1", 10, vec![part("b", 1, 1)]) };
    let mut c = history();
    expect(c.proposed(1, &later, 10), "inv11");
    // Once request 1 is answered (its wait ran out) or its connection closed, request 2
    // may go; a place in line is not an answer.
    let mut c = history();
    c.node_answered(1, (1, 1), &Response::InLine { ahead: 0, grants_per_ks: 0 });
    expect(c.proposed(1, &later, 10), "inv11");
    c.node_answered(1, (1, 1), &Response::Timeout);
    c.proposed(1, &later, 10).unwrap();
    let mut c = history();
    c.node_conn_closed(1, 1);
    c.proposed(1, &later, 10).unwrap();
    // A node that is gone takes its waiters with it.
    let mut c = history();
    c.node_gone(1);
    c.proposed(1, &later, 10).unwrap();
    // The earlier request granted first is fine.
    let mut c = history();
    let earlier = Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("a", 1, 1), part("b", 1, 1)]) };
    c.proposed(1, &earlier, 10).unwrap();
}

#[test]
fn inv12_the_oldest_waiter_left_waiting_with_its_keys_free() {
    // Request 1 wants 1 of "s" (nothing held) and waits on node 1 at quiescence.
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, asked("c0", vec![part("s", 1, 3)], 10_000), 0);
    c.arrived((1, 1), 1, 1);
    c.waiters_served(Some(1), 100, 1000).unwrap();
    c.waiters_served(Some(1), 1100, 1000).unwrap();
    expect(c.waiters_served(Some(1), 1101, 1000), "inv12");
    // Behind an earlier waiter on its key that does not fit (3 of 3 while 2 are in
    // use), it is not due: strict FIFO.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, asked("c1", vec![part("s", 3, 3)], 10_000), 20);
    c.sent((3, 1), 2, 1, asked("c2", vec![part("s", 1, 3)], 10_000), 20);
    c.arrived((2, 1), 1, 1);
    c.arrived((3, 1), 1, 2);
    c.waiters_served(Some(1), 100, 1000).unwrap();
    c.waiters_served(Some(1), 5000, 1000).unwrap();
    // Once the hold ends, the oldest is due.
    let end = Command::End { key: "s".into(), token: 10, owner: None, origin: None, next: vec![] };
    commit(&mut c, 2, end, 6000).unwrap();
    c.waiters_served(Some(1), 6000, 1000).unwrap();
    expect(c.waiters_served(Some(1), 7001, 1000), "inv12");
}

#[test]
fn inv2_more_permits_believed_held_than_capacity() {
    // Somebody else's end of client 0's hold (2 of 3 of "s", no release sent, lease to
    // 1000 ms) hands 2 more to client 1.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, asked("c1", vec![part("s", 2, 3)], 5000), 0);
    let end = Command::End {
        key: "s".into(),
        token: 10,
        owner: Some("c0".into()),
        origin: Some(origin(3, 1)),
        next: vec![hold(2, 1, "c1", 11, vec![part("s", 2, 3)])],
    };
    commit(&mut c, 2, end, 20).unwrap();
    expect(c.received((2, 1), &Response::Granted { token: 11, lease_ms: 1000 }, 30), "inv2");
    // One more permit fits beside client 0's two.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, asked("c1", vec![part("s", 1, 3)], 5000), 0);
    commit(&mut c, 2, Command::Hold { hold: hold(2, 1, "c1", 11, vec![part("s", 1, 3)]) }, 20).unwrap();
    c.received((2, 1), &Response::Granted { token: 11, lease_ms: 1000 }, 30).unwrap();
}

#[test]
fn inv6_a_pool_read_no_committed_state_gives() {
    let pool = |in_use: u32, holders: Vec<PoolHolder>| Response::Pool {
        capacity: 3,
        in_use,
        holds: holders.len() as u32,
        waiters: 0,
        oldest_wait_ms: 0,
        holders,
    };
    let holder = |count: u32| PoolHolder { token: 10, count, remaining_ms: 900, owner: "c0".into() };
    // Asked after token 10 (2 of 3) committed: an answer of 1 in use is stale.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, Asked::Pool { key: "s".into() }, 20);
    expect(c.received((2, 1), &pool(1, vec![holder(1)]), 30), "inv6");
    // So is an empty pool, and a lease left longer than the hold's.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, Asked::Pool { key: "s".into() }, 20);
    let empty =
        Response::Pool { capacity: 0, in_use: 0, holds: 0, waiters: 0, oldest_wait_ms: 0, holders: vec![] };
    expect(c.received((2, 1), &empty, 30), "inv6");
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, Asked::Pool { key: "s".into() }, 20);
    let long = PoolHolder { remaining_ms: 1001, ..holder(2) };
    expect(c.received((2, 1), &pool(2, vec![long]), 30), "inv6");
    // The true one passes; asked before the grant committed, the empty one too.
    let mut c = counted_history();
    c.sent((2, 1), 1, 1, Asked::Pool { key: "s".into() }, 20);
    c.received((2, 1), &pool(2, vec![holder(2)]), 30).unwrap();
    let mut c = LockChecker::new();
    c.sent((2, 1), 1, 1, Asked::Pool { key: "s".into() }, 0);
    commit(&mut c, 1, Command::Hold { hold: hold(1, 1, "c0", 10, vec![part("s", 2, 3)]) }, 5).unwrap();
    c.received((2, 1), &empty, 30).unwrap();
}
