//! The lock checker objects to hand-built bad histories, one per invariant: it is not
//! vacuous.

use super::lock_checker::{Asked, LockChecker};
use ticketing::lock::{Command, Grant, LockState, Origin};
use ticketing::proto::Response;

fn origin(conn: u64, id: u32) -> Origin {
    Origin { node: 1, incarnation: 1001, conn, id }
}

fn grant(conn: u64, id: u32, owner: &str, token: u64, lease_ms: u32) -> Grant {
    Grant { owner: owner.into(), token, lease_ms, origin: origin(conn, id) }
}

fn acquire(owner: &str, key: &str, lease_ms: u64, wait_ms: u64) -> Asked {
    Asked::Acquire { key: key.into(), owner: owner.into(), lease_ms, wait_ms }
}

/// Commits `cmd` at `index`, its commit seen at `t` ms.
fn commit(c: &mut LockChecker, index: u64, cmd: Command, t: u64) -> Result<(), String> {
    c.raft_commit(index, t);
    c.committed(index, 1, Some(&cmd), t)
}

fn g(token: u64, lease_ms: u32) -> Response {
    Response::Granted { token, lease_ms }
}

fn expect(r: Result<(), String>, inv: &str) {
    let e = r.expect_err("the checker accepted a bad history");
    assert!(e.starts_with(inv), "{e}");
}

/// Client 0 (conn 1) is granted key "a" with token 10 at index 1.
fn granted_history() -> LockChecker {
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 0), 0);
    let cmd = Command::Grant { key: "a".into(), grant: grant(1, 1, "c0", 10, 1000) };
    commit(&mut c, 1, cmd, 5).unwrap();
    c.received((1, 1), &g(10, 1000), 10).unwrap();
    c
}

#[test]
fn inv1_divergent_state_and_impossible_grant() {
    let mut c = granted_history();
    expect(c.node_state(2, 1, &LockState::default()), "inv1");
    c.node_state(2, 1, &c.state_at(1).unwrap().clone()).unwrap();
    // A second grant of the held key.
    let cmd = Command::Grant { key: "a".into(), grant: grant(2, 1, "c1", 20, 1000) };
    expect(commit(&mut c, 2, cmd, 20), "inv1");
    // Two different entries at one index.
    let mut c = granted_history();
    let other = Command::SetDomain { domain: 7 };
    expect(c.committed(1, 1, Some(&other), 30), "inv1");
}

#[test]
fn inv2_overlapping_windows() {
    let mut c = granted_history();
    // Somebody else's release of client 0's hold hands the key to client 1 while
    // client 0 never released and its lease runs until 1000 ms.
    c.sent((2, 1), 1, 1, acquire("c1", "a", 1000, 500), 0);
    let cmd = Command::Release {
        key: "a".into(),
        owner: "c0".into(),
        token: 10,
        origin: origin(3, 1),
        next: Some(grant(2, 1, "c1", 20, 1000)),
    };
    commit(&mut c, 2, cmd, 20).unwrap();
    expect(c.received((2, 1), &g(20, 1000), 30), "inv2");
    // Had client 0 sent its release first, fine.
    let mut c = granted_history();
    c.sent((2, 1), 1, 1, acquire("c1", "a", 1000, 500), 0);
    let rel = Asked::Release { key: "a".into(), owner: "c0".into(), token: 10 };
    c.sent((1, 2), 0, 1, rel, 15);
    let cmd = Command::Release {
        key: "a".into(),
        owner: "c0".into(),
        token: 10,
        origin: origin(1, 2),
        next: Some(grant(2, 1, "c1", 20, 1000)),
    };
    commit(&mut c, 2, cmd, 20).unwrap();
    c.received((2, 1), &g(20, 1000), 30).unwrap();
    c.received((1, 2), &Response::Released, 31).unwrap();
}

#[test]
fn inv3_token_going_back_or_granted_twice() {
    let mut c = granted_history();
    c.sent((2, 1), 1, 1, acquire("c1", "b", 1000, 0), 0);
    let cmd = Command::Grant { key: "b".into(), grant: grant(2, 1, "c1", 9, 1000) };
    expect(commit(&mut c, 2, cmd, 20), "inv3");
    // The same token delivered to two requests.
    let mut c = granted_history();
    c.sent((2, 1), 1, 1, acquire("c1", "b", 1000, 0), 0);
    let cmd = Command::Grant { key: "b".into(), grant: grant(2, 1, "c1", 11, 1000) };
    commit(&mut c, 2, cmd, 20).unwrap();
    expect(c.received((2, 1), &g(10, 1000), 30), "inv7");
}

#[test]
fn inv4_fifo_broken() {
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 900), 0);
    c.sent((1, 2), 0, 1, acquire("c0", "a", 1000, 900), 1);
    c.arrived((1, 1), 1, 1);
    c.arrived((1, 2), 1, 2);
    let second = Command::Grant { key: "a".into(), grant: grant(1, 2, "c0", 10, 1000) };
    commit(&mut c, 1, second, 5).unwrap();
    let first_after = Command::Release {
        key: "a".into(),
        owner: "c0".into(),
        token: 10,
        origin: origin(1, 3),
        next: Some(grant(1, 1, "c0", 11, 1000)),
    };
    expect(commit(&mut c, 2, first_after, 6), "inv4");
    // Arrival order on the leader, across connections.
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 900), 0);
    c.sent((2, 1), 1, 1, acquire("c1", "a", 1000, 900), 0);
    c.arrived((1, 1), 1, 1);
    c.arrived((2, 1), 1, 2);
    let later = Command::Grant { key: "a".into(), grant: grant(2, 1, "c1", 10, 1000) };
    commit(&mut c, 1, later, 5).unwrap();
    let earlier = Command::Expire { key: "a".into(), token: 10, next: Some(grant(1, 1, "c0", 11, 1000)) };
    expect(commit(&mut c, 2, earlier, 2000), "inv4");
}

#[test]
fn inv5_early_expiry() {
    // Committed before the client's deadline (sent 0 + lease 1000).
    let mut c = granted_history();
    let cmd = Command::Expire { key: "a".into(), token: 10, next: None };
    expect(commit(&mut c, 2, cmd.clone(), 600), "inv5");
    // Proposed by a leader less than a lease after it applied the grant.
    let mut c = granted_history();
    c.node_applied_grant(1, 10, 5);
    c.node_serving(1, 0);
    expect(c.proposed(1, &cmd, 900), "inv5");
    // ... or after it started serving (a new leader restarts every lease).
    c.node_serving(1, 400);
    expect(c.proposed(1, &cmd, 1300), "inv5");
    c.proposed(1, &cmd, 1400).unwrap();
    commit(&mut c, 2, cmd, 1500).unwrap();
}

#[test]
fn inv6_bad_answers() {
    // Two answers to one request.
    let mut c = granted_history();
    expect(c.received((1, 1), &g(10, 1000), 20), "inv6");
    // M for a request that then commits.
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 0), 0);
    let moved = Response::Moved { leader: "n2".into() };
    c.received((1, 1), &moved, 3).unwrap();
    let cmd = Command::Grant { key: "a".into(), grant: grant(1, 1, "c0", 10, 1000) };
    expect(commit(&mut c, 1, cmd, 5), "inv6");
    // U for a request never proposed; T before the wait elapsed; R not committed.
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 500), 0);
    expect(c.received((1, 1), &Response::Unknown, 3), "inv6");
    expect(c.received((1, 1), &Response::Timeout, 300), "inv6");
    c.received((1, 1), &Response::Timeout, 500).unwrap();
    let rel = Asked::Release { key: "a".into(), owner: "c0".into(), token: 1 };
    c.sent((1, 2), 0, 1, rel, 600);
    expect(c.received((1, 2), &Response::Released, 700), "inv6");
    // A stale read: F while a committed hold was current throughout.
    let mut c = granted_history();
    c.sent((2, 1), 1, 1, Asked::Query { key: "a".into() }, 20);
    expect(c.received((2, 1), &Response::Free, 40), "inv6");
}

#[test]
fn inv7_grant_without_commit() {
    let mut c = LockChecker::new();
    c.sent((1, 1), 0, 1, acquire("c0", "a", 1000, 0), 0);
    expect(c.received((1, 1), &g(10, 1000), 3), "inv7");
    // An entry applied that no Raft committed.
    let cmd = Command::SetDomain { domain: 3 };
    expect(c.committed(1, 1, Some(&cmd), 4), "inv7");
}
