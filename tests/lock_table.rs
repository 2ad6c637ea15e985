//! The pure lock table against docs/guarantees.md §3 (request × key state), §5 (fencing tokens) and
//! its leader/follower life cycle. One test per cell of §3's table, named after it.
//!
//! `Driver` is the standalone node: a one-node log that commits on append.

use ticketing::lock::{Command, Grant, LockState, LockTable, Origin, Output, Reply, TableConfig};
use ticketing::proto::{ErrorCode, Response};

const NODE: u64 = 1;
const INCARNATION: u64 = 7;
/// Wall clock at monotonic 0, in Unix µs.
const UNIX0: u64 = 1_700_000_000_000_000;

fn config(waiters_per_key_max: usize) -> TableConfig {
    TableConfig { node: NODE, incarnation: INCARNATION, waiters_per_key_max, keys_max: usize::MAX }
}

struct Driver {
    table: LockTable,
    now_ms: u64,
    unix_us: u64,
    /// Every command committed so far, in order.
    log: Vec<Command>,
}

impl Driver {
    fn new() -> Self {
        Self::with_max(16)
    }

    fn with_max(waiters_per_key_max: usize) -> Self {
        let mut table = LockTable::new(config(waiters_per_key_max));
        table.become_leader(0);
        Driver { table, now_ms: 0, unix_us: UNIX0, log: Vec::new() }
    }

    /// Commits every proposal in order, like a one-node log.
    fn run(&mut self, mut out: Output) -> Vec<Reply> {
        while let Some(cmd) = out.proposals.pop_front() {
            self.table.apply(&cmd, self.now_ms, &mut out);
            self.log.push(cmd);
        }
        out.replies
    }

    fn acquire(
        &mut self,
        conn: u64,
        id: u32,
        lease_s: u8,
        wait_ms: u32,
        key: &str,
        owner: &str,
    ) -> Vec<Reply> {
        let mut out = Output::default();
        self.table.acquire(conn, id, lease_s, wait_ms, key, owner, self.now_ms, self.unix_us, &mut out);
        self.run(out)
    }

    fn release(&mut self, conn: u64, id: u32, token: u64, key: &str, owner: &str) -> Vec<Reply> {
        let mut out = Output::default();
        self.table.release(conn, id, token, key, owner, self.now_ms, self.unix_us, &mut out);
        self.run(out)
    }

    /// Moves both clocks to monotonic `t` and ticks.
    fn advance_to(&mut self, t: u64) -> Vec<Reply> {
        assert!(t >= self.now_ms);
        self.unix_us += (t - self.now_ms) * 1000;
        self.now_ms = t;
        let mut out = Output::default();
        self.table.tick(self.now_ms, self.unix_us, &mut out);
        self.run(out)
    }

    fn advance(&mut self, ms: u64) -> Vec<Reply> {
        self.advance_to(self.now_ms + ms)
    }

    fn close(&mut self, conn: u64) {
        let mut out = Output::default();
        self.table.conn_closed(conn, self.now_ms, UNIX0 + self.now_ms * 1000, &mut out);
        assert!(out.proposals.is_empty() && out.replies.is_empty(), "a v1 waiter leaving grants nothing");
    }

    fn query(&self, key: &str) -> Response {
        self.table.query(key, self.now_ms)
    }

    /// Acquires a free key and returns its token.
    fn hold(&mut self, conn: u64, id: u32, lease_s: u8, key: &str, owner: &str) -> u64 {
        let replies = self.acquire(conn, id, lease_s, 0, key, owner);
        assert_eq!(replies.len(), 1, "{replies:?}");
        token_of(&replies[0], conn, id)
    }
}

fn reply(conn: u64, id: u32, response: Response) -> Reply {
    Reply { conn, id, response }
}

fn token_of(r: &Reply, conn: u64, id: u32) -> u64 {
    assert_eq!((r.conn, r.id), (conn, id), "{r:?}");
    match r.response {
        Response::Granted { token, .. } => token,
        ref other => panic!("expected G for ({conn}, {id}), got {other:?}"),
    }
}

fn origin(conn: u64, id: u32) -> Origin {
    Origin { node: NODE, incarnation: INCARNATION, conn, id }
}

fn holder(token: u64, remaining_ms: u32, waiters: u32, owner: &str) -> Response {
    Response::Holder { token, remaining_ms, waiters, owner: owner.into() }
}

// =================================================================================
// ACQUIRE wait=0

#[test]
fn acquire_wait0_on_free_key_grants() {
    let mut d = Driver::new();
    let replies = d.acquire(1, 10, 30, 0, "k", "alice");
    assert_eq!(replies, vec![reply(1, 10, Response::Granted { token: UNIX0, lease_ms: 30_000 })]);
    assert_eq!(
        d.log,
        vec![Command::Grant {
            key: "k".into(),
            grant: Grant { owner: "alice".into(), token: UNIX0, lease_ms: 30_000, origin: origin(1, 10) },
        }]
    );
    assert_eq!(d.query("k"), holder(UNIX0, 30_000, 0, "alice"));
    assert_eq!(d.table.state().keys_held(), 1);
    assert_eq!(d.table.state().last_token(), UNIX0);
}

#[test]
fn acquire_wait0_on_held_key_is_busy() {
    let mut d = Driver::new();
    d.hold(1, 1, 10, "k", "alice");
    let before = d.log.len();
    assert_eq!(d.acquire(2, 2, 10, 0, "k", "bob"), vec![reply(2, 2, Response::Busy)]);
    assert_eq!(d.log.len(), before, "B needs no log entry");
    assert_eq!(d.table.waiters(), 0);
}

#[test]
fn acquire_wait0_on_held_key_with_waiters_is_busy() {
    let mut d = Driver::new();
    d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 1000, "k", "bob").is_empty());
    assert_eq!(d.acquire(3, 3, 10, 0, "k", "carol"), vec![reply(3, 3, Response::Busy)]);
    assert_eq!(d.table.waiters(), 1);
}

// =================================================================================
// ACQUIRE wait>0

#[test]
fn acquire_wait_on_free_key_grants_at_once() {
    let mut d = Driver::new();
    let replies = d.acquire(1, 1, 5, 300_000, "k", "alice");
    token_of(&replies[0], 1, 1);
    assert_eq!(d.table.waiters(), 0);
    assert_eq!(d.table.next_deadline(), Some(5_000));
}

#[test]
fn acquire_wait_on_held_key_joins_queue() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 1000, "k", "bob").is_empty());
    assert_eq!(d.table.waiters(), 1);
    assert_eq!(d.query("k"), holder(t, 10_000, 1, "alice"));
    assert_eq!(d.log.len(), 1, "queueing needs no log entry");
}

#[test]
fn acquire_wait_on_held_key_with_waiters_joins_tail() {
    let mut d = Driver::new();
    let t1 = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 60_000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 10, 60_000, "k", "carol").is_empty());
    assert!(d.acquire(4, 4, 10, 60_000, "k", "dave").is_empty());
    assert_eq!(d.table.waiters(), 3);
    // Hand-offs follow arrival order.
    let r = d.release(1, 5, t1, "k", "alice");
    let t2 = token_of(&r[1], 2, 2);
    let r = d.release(2, 6, t2, "k", "bob");
    let t3 = token_of(&r[1], 3, 3);
    let r = d.release(3, 7, t3, "k", "carol");
    let t4 = token_of(&r[1], 4, 4);
    assert!(t1 < t2 && t2 < t3 && t3 < t4);
    assert_eq!(d.release(4, 8, t4, "k", "dave"), vec![reply(4, 8, Response::Released)]);
    assert_eq!(d.query("k"), Response::Free);
}

#[test]
fn queue_full_is_busy() {
    let mut d = Driver::with_max(2);
    let t = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 500, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 10, 5000, "k", "carol").is_empty());
    assert_eq!(d.acquire(4, 4, 10, 5000, "k", "dave"), vec![reply(4, 4, Response::Busy)]);
    assert_eq!(d.table.waiters(), 2);
    // The limit is per key.
    d.hold(5, 5, 10, "other", "erin");
    assert!(d.acquire(6, 6, 10, 5000, "other", "frank").is_empty());
    assert_eq!(d.table.waiters(), 3);
    // Once a waiter leaves, there is room again.
    assert_eq!(d.advance_to(500), vec![reply(2, 2, Response::Timeout)]);
    assert!(d.acquire(4, 7, 10, 5000, "k", "dave").is_empty());
    assert_eq!(d.acquire(4, 8, 10, 5000, "k", "gina"), vec![reply(4, 8, Response::Busy)]);
    // And the queue still hands off in order: carol, then dave.
    let r = d.release(1, 9, t, "k", "alice");
    assert_eq!(r[0], reply(1, 9, Response::Released));
    token_of(&r[1], 3, 3);
}

#[test]
fn the_node_key_limit_answers_overloaded_and_changes_nothing() {
    let mut table = LockTable::new(TableConfig {
        node: NODE,
        incarnation: INCARNATION,
        waiters_per_key_max: 4,
        keys_max: 2,
    });
    table.become_leader(0);
    let mut d = Driver { table, now_ms: 0, unix_us: UNIX0, log: Vec::new() };
    let a = d.hold(1, 1, 10, "a", "alice");
    let b = d.hold(1, 2, 10, "b", "bob");
    let log_len = d.log.len();
    match &d.acquire(2, 3, 10, 0, "c", "carol")[..] {
        [Reply { response: Response::Error { code: ErrorCode::Overloaded, message }, .. }] => {
            assert!(message.contains("limit of 2"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.log.len(), log_len, "nothing was proposed");
    // Keys already held or queued for are not new keys: waiting on one still works.
    assert!(d.acquire(2, 4, 10, 5000, "a", "carol").is_empty());
    // A released key makes room.
    let r = d.release(1, 5, a, "a", "alice");
    token_of(&r[1], 2, 4);
    d.release(1, 6, b, "b", "bob");
    token_of(&d.acquire(2, 7, 10, 0, "c", "carol")[0], 2, 7);
}

#[test]
fn queue_limit_zero_makes_every_wait_busy() {
    let mut d = Driver::with_max(0);
    d.hold(1, 1, 10, "k", "alice");
    assert_eq!(d.acquire(2, 2, 10, 5000, "k", "bob"), vec![reply(2, 2, Response::Busy)]);
}

// =================================================================================
// ACQUIRE by the holder's own owner: as any other, not re-entrant.

#[test]
fn acquire_by_holder_own_owner_on_free_key_grants() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    d.release(1, 2, t, "k", "alice");
    let t2 = d.hold(1, 3, 10, "k", "alice");
    assert!(t2 > t);
}

#[test]
fn acquire_by_holder_own_owner_wait0_is_busy() {
    let mut d = Driver::new();
    d.hold(1, 1, 10, "k", "alice");
    assert_eq!(d.acquire(1, 2, 10, 0, "k", "alice"), vec![reply(1, 2, Response::Busy)]);
}

#[test]
fn acquire_by_holder_own_owner_queues_behind_itself() {
    let mut d = Driver::new();
    let t1 = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(1, 2, 10, 5000, "k", "alice").is_empty());
    assert_eq!(d.table.waiters(), 1);
    let r = d.release(1, 3, t1, "k", "alice");
    assert_eq!(r.len(), 2);
    assert_eq!(r[0], reply(1, 3, Response::Released));
    let t2 = token_of(&r[1], 1, 2);
    assert!(t2 > t1);
    assert_eq!(d.query("k"), holder(t2, 10_000, 0, "alice"));
    // The old token no longer releases anything.
    assert_eq!(d.release(1, 4, t1, "k", "alice"), vec![reply(1, 4, Response::NotHolder)]);
}

#[test]
fn acquire_by_holder_own_owner_with_waiters_joins_tail() {
    let mut d = Driver::new();
    let t1 = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 60_000, "k", "bob").is_empty());
    assert!(d.acquire(1, 3, 10, 60_000, "k", "alice").is_empty());
    let r = d.release(1, 4, t1, "k", "alice");
    let t2 = token_of(&r[1], 2, 2);
    let r = d.release(2, 5, t2, "k", "bob");
    token_of(&r[1], 1, 3);
}

// =================================================================================
// RELEASE matching owner + token + key

#[test]
fn release_on_free_key_is_not_holder() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert_eq!(d.release(1, 2, t, "k", "alice"), vec![reply(1, 2, Response::Released)]);
    // The very same (key, owner, token) again: the key is FREE now.
    assert_eq!(d.release(1, 3, t, "k", "alice"), vec![reply(1, 3, Response::NotHolder)]);
    // Every release goes through the log, even one that answers N.
    assert_eq!(
        d.log.last(),
        Some(&Command::Release {
            key: "k".into(),
            owner: "alice".into(),
            token: t,
            origin: origin(1, 3),
            next: None,
        })
    );
    assert_eq!(d.release(1, 4, 0, "never", "x"), vec![reply(1, 4, Response::NotHolder)]);
    assert_eq!(d.log.len(), 4);
}

#[test]
fn release_matching_with_empty_queue_is_released() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    // Any connection may release with the right triple.
    assert_eq!(d.release(9, 2, t, "k", "alice"), vec![reply(9, 2, Response::Released)]);
    assert_eq!(
        d.log.last(),
        Some(&Command::Release {
            key: "k".into(),
            owner: "alice".into(),
            token: t,
            origin: origin(9, 2),
            next: None,
        })
    );
    assert_eq!(d.query("k"), Response::Free);
    assert_eq!(d.table.state().keys_held(), 0);
    assert_eq!(d.table.next_deadline(), None);
    // The old lease timer does not fire later.
    assert!(d.advance(20_000).is_empty());
    assert_eq!(d.log.len(), 2);
}

#[test]
fn release_with_waiters_hands_off_in_one_command() {
    let mut d = Driver::new();
    let t1 = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 7, 5000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 9, 5000, "k", "carol").is_empty());
    d.advance_to(100);
    let before = d.log.len();
    let r = d.release(1, 4, t1, "k", "alice");
    assert_eq!(d.log.len(), before + 1, "release + grant must be ONE entry");
    let Command::Release { key, owner, token, origin: o, next: Some(next) } = d.log.last().unwrap().clone()
    else {
        panic!("expected a Release with next, got {:?}", d.log.last());
    };
    assert_eq!((key.as_str(), owner.as_str(), token, o), ("k", "alice", t1, origin(1, 4)));
    assert_eq!(next.owner, "bob");
    assert_eq!(next.lease_ms, 7_000);
    assert_eq!(next.origin, origin(2, 2));
    assert!(next.token > t1);
    assert_eq!(
        r,
        vec![
            reply(1, 4, Response::Released),
            reply(2, 2, Response::Granted { token: next.token, lease_ms: 7_000 }),
        ]
    );
    assert_eq!(d.table.waiters(), 1);
    // The new lease runs from the hand-off.
    assert_eq!(d.query("k"), holder(next.token, 7_000, 1, "bob"));
    // Bob's wait timer is gone: nothing fires at 5000.
    assert!(d.advance_to(5_000).iter().all(|r| r.id != 2));
}

// =================================================================================
// RELEASE not matching

#[test]
fn release_not_matching_owner_is_not_holder() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert_eq!(d.release(1, 2, t, "k", "mallory"), vec![reply(1, 2, Response::NotHolder)]);
    assert_eq!(d.query("k"), holder(t, 10_000, 0, "alice"));
}

#[test]
fn release_not_matching_token_is_not_holder() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    for wrong in [0, t - 1, t + 1, u64::MAX] {
        assert_eq!(d.release(1, 2, wrong, "k", "alice"), vec![reply(1, 2, Response::NotHolder)]);
    }
    assert_eq!(d.query("k"), holder(t, 10_000, 0, "alice"));
}

#[test]
fn release_not_matching_key_is_not_holder() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    let u = d.hold(1, 2, 10, "other", "alice");
    assert_eq!(d.release(1, 3, t, "other", "alice"), vec![reply(1, 3, Response::NotHolder)]);
    assert_eq!(d.release(1, 4, u, "k", "alice"), vec![reply(1, 4, Response::NotHolder)]);
    assert_eq!(d.release(1, 5, t, "K", "alice"), vec![reply(1, 5, Response::NotHolder)]);
    assert_eq!(d.table.state().keys_held(), 2);
}

#[test]
fn release_not_matching_with_waiters_is_not_holder_and_hands_off_nothing() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 5000, "k", "bob").is_empty());
    for (token, owner) in [(t, "bob"), (t + 1, "alice"), (0, "alice")] {
        assert_eq!(d.release(2, 3, token, "k", owner), vec![reply(2, 3, Response::NotHolder)]);
        assert!(matches!(d.log.last(), Some(Command::Release { next: None, .. })));
    }
    assert_eq!(d.table.waiters(), 1);
    assert_eq!(d.query("k"), holder(t, 10_000, 1, "alice"));
}

// =================================================================================
// QUERY

#[test]
fn query_free_is_free() {
    let d = Driver::new();
    assert_eq!(d.query("k"), Response::Free);
}

#[test]
fn query_held_reports_remaining_and_waiters() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 3, "k", "alice");
    assert_eq!(d.query("k"), holder(t, 3_000, 0, "alice"));
    d.advance_to(1_250);
    assert_eq!(d.query("k"), holder(t, 1_750, 0, "alice"));
    assert!(d.acquire(2, 2, 3, 60_000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 3, 60_000, "k", "carol").is_empty());
    assert_eq!(d.query("k"), holder(t, 1_750, 2, "alice"));
    d.advance_to(2_999);
    assert_eq!(d.query("k"), holder(t, 1, 2, "alice"));
    // Another key is unaffected.
    assert_eq!(d.query("other"), Response::Free);
}

#[test]
fn query_needs_no_log_entry() {
    let mut d = Driver::new();
    d.hold(1, 1, 3, "k", "alice");
    let _ = d.query("k");
    let _ = d.query("x");
    assert_eq!(d.log.len(), 1);
}

// =================================================================================
// Lease elapses (internal)

#[test]
fn lease_expiry_frees_key() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 2, "k", "alice");
    assert!(d.advance_to(1_999).is_empty());
    assert_eq!(d.log.len(), 1);
    assert!(d.advance_to(2_000).is_empty(), "expiry answers nobody");
    assert_eq!(d.log.last(), Some(&Command::Expire { key: "k".into(), token: t, next: None }));
    assert_eq!(d.query("k"), Response::Free);
    // The expired holder's release is N.
    assert_eq!(d.release(1, 2, t, "k", "alice"), vec![reply(1, 2, Response::NotHolder)]);
    assert_eq!(d.table.next_deadline(), None);
}

#[test]
fn lease_expiry_hands_off_to_head() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 2, "k", "alice");
    assert!(d.acquire(2, 2, 4, 10_000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 4, 10_000, "k", "carol").is_empty());
    let r = d.advance_to(2_000);
    assert_eq!(r.len(), 1);
    let t2 = token_of(&r[0], 2, 2);
    assert!(t2 > t);
    let Some(Command::Expire { key, token, next: Some(next) }) = d.log.last().cloned() else {
        panic!("expected one Expire with next: {:?}", d.log);
    };
    assert_eq!((key.as_str(), token), ("k", t));
    assert_eq!(next.owner, "bob");
    assert_eq!(next.token, t2);
    assert_eq!(next.lease_ms, 4_000);
    assert_eq!(next.origin, origin(2, 2));
    assert_eq!(d.log.len(), 2, "expiry + grant is ONE entry");
    assert_eq!(d.query("k"), holder(t2, 4_000, 1, "bob"));
    // Bob's lease then ends at 6000 and carol gets it.
    let r = d.advance_to(6_000);
    token_of(&r[0], 3, 3);
}

#[test]
fn lease_timer_starts_at_apply_not_propose() {
    let mut table = LockTable::new(config(16));
    table.become_leader(0);
    let mut out = Output::default();
    table.acquire(1, 1, 1, 0, "k", "alice", 0, UNIX0, &mut out);
    assert!(out.replies.is_empty(), "G only after commit");
    assert_eq!(table.next_deadline(), None, "no lease timer before apply");
    let cmd = out.proposals.pop_front().unwrap();
    // A proposed grant counts as HELD.
    let mut out2 = Output::default();
    table.acquire(2, 2, 1, 0, "k", "bob", 100, UNIX0, &mut out2);
    assert_eq!(out2.replies, vec![reply(2, 2, Response::Busy)]);
    // Committed and applied at 700: the lease runs 700..1700.
    table.apply(&cmd, 700, &mut out);
    assert_eq!(out.replies.len(), 1);
    assert_eq!(table.next_deadline(), Some(1_700));
    table.tick(1_699, UNIX0 + 1_699_000, &mut out);
    assert!(out.proposals.is_empty());
    table.tick(1_700, UNIX0 + 1_700_000, &mut out);
    assert!(matches!(out.proposals.pop_front(), Some(Command::Expire { next: None, .. })));
}

#[test]
fn pending_release_frees_the_key_for_the_next_acquire() {
    // Release proposed but not committed yet; a new ACQUIRE proposes its grant behind it.
    let mut table = LockTable::new(config(16));
    table.become_leader(0);
    let mut out = Output::default();
    table.acquire(1, 1, 5, 0, "k", "alice", 0, UNIX0, &mut out);
    let grant = out.proposals.pop_front().unwrap();
    table.apply(&grant, 0, &mut out);
    let t = token_of(&out.replies.pop().unwrap(), 1, 1);
    table.release(1, 2, t, "k", "alice", 0, UNIX0, &mut out);
    // A client retrying the same release while the first is in flight gets N.
    table.release(1, 3, t, "k", "alice", 0, UNIX0, &mut out);
    table.acquire(2, 4, 5, 0, "k", "bob", 0, UNIX0, &mut out);
    assert_eq!(out.proposals.len(), 3);
    assert!(out.replies.is_empty());
    while let Some(cmd) = out.proposals.pop_front() {
        table.apply(&cmd, 10, &mut out);
    }
    assert_eq!(out.replies[0], reply(1, 2, Response::Released));
    assert_eq!(out.replies[1], reply(1, 3, Response::NotHolder));
    assert!(token_of(&out.replies[2], 2, 4) > t);
}

#[test]
fn released_hold_lease_timer_does_not_expire_the_next_holder() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 2, "k", "alice");
    d.advance_to(1_000);
    d.release(1, 2, t, "k", "alice");
    let t2 = d.hold(2, 3, 2, "k", "bob");
    // Alice's lease would have ended at 2000; bob's runs to 3000.
    assert!(d.advance_to(2_000).is_empty());
    assert_eq!(d.query("k"), holder(t2, 1_000, 0, "bob"));
    d.advance_to(3_000);
    assert_eq!(d.query("k"), Response::Free);
}

#[test]
fn leases_expiring_in_one_tick_get_increasing_tokens() {
    let mut d = Driver::new();
    let ta = d.hold(1, 1, 1, "a", "x");
    let tb = d.hold(1, 2, 1, "b", "x");
    assert!(d.acquire(2, 3, 1, 5_000, "a", "y").is_empty());
    assert!(d.acquire(2, 4, 1, 5_000, "b", "y").is_empty());
    assert!(ta < tb);
    let r = d.advance_to(1_000);
    assert_eq!(r.len(), 2);
    // Timers are taken in (deadline, token) order: "a" first.
    let unix = UNIX0 + 1_000_000;
    assert_eq!(token_of(&r[0], 2, 3), unix);
    assert_eq!(token_of(&r[1], 2, 4), unix + 1);
}

// =================================================================================
// Waiter's wait elapses

#[test]
fn wait_elapses_gives_timeout_and_leaves_queue() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 500, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 10, 5_000, "k", "carol").is_empty());
    assert!(d.advance_to(499).is_empty());
    assert_eq!(d.advance_to(500), vec![reply(2, 2, Response::Timeout)]);
    assert_eq!(d.table.waiters(), 1);
    assert_eq!(d.query("k"), holder(t, 9_500, 1, "alice"));
    assert_eq!(d.log.len(), 1, "a timeout needs no log entry");
    // Bob is answered once only: the hand-off goes to carol.
    let r = d.release(1, 4, t, "k", "alice");
    assert_eq!(r.len(), 2);
    token_of(&r[1], 3, 3);
    assert!(d.advance(10_000).iter().all(|r| r.id != 2));
}

#[test]
fn waits_ending_in_the_same_millisecond_time_out_in_the_order_they_were_queued() {
    // Ties between waits are broken by arrival, not by the timer heap's shape or the
    // waiter's reused slot: the answers on a connection come in a predictable order.
    let mut d = Driver::new();
    for k in 0..12u32 {
        d.hold(1, 100 + k, 10, &format!("k{k}"), "alice");
    }
    // Queued in an order unlike the keys' and the slots'; all end at 700.
    let order = [5u32, 11, 0, 7, 3, 9, 1, 10, 2, 8, 4, 6];
    for (i, k) in order.iter().enumerate() {
        assert!(d.acquire(2, i as u32, 10, 700, &format!("k{k}"), "bob").is_empty());
    }
    let ids: Vec<u32> = d.advance_to(700).iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..12).collect::<Vec<u32>>());
}

#[test]
fn lease_and_wait_ending_together_give_the_key_to_the_waiter() {
    // documented tie rule of `tick`: leases go first.
    let mut d = Driver::new();
    d.hold(1, 1, 1, "k", "alice");
    assert!(d.acquire(2, 2, 1, 1_000, "k", "bob").is_empty());
    let r = d.advance_to(1_000);
    assert_eq!(r.len(), 1);
    token_of(&r[0], 2, 2);
    assert_eq!(d.table.waiters(), 0);
}

#[test]
fn late_tick_times_out_a_waiter_whose_wait_ended_before_the_lease() {
    // The driver ticks late (at 5000). Bob's wait ended at 500, before alice's lease
    // ended at 1000: bob must get T, and carol (wait until 3000) the key.
    let mut d = Driver::new();
    d.hold(1, 1, 1, "k", "alice");
    assert!(d.acquire(2, 2, 1, 500, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 1, 3_000, "k", "carol").is_empty());
    let mut r = d.advance_to(5_000);
    r.sort_by_key(|r| r.id);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(r[0], reply(2, 2, Response::Timeout));
    token_of(&r[1], 3, 3);
}

#[test]
fn late_tick_times_out_waiters_that_elapsed_before_their_turn() {
    // Lease ends at 1000 and hands to bob (wait till 3000); carol's wait ended at 2000
    // — after the hand-off, so she just times out, and bob holds.
    let mut d = Driver::new();
    d.hold(1, 1, 1, "k", "alice");
    assert!(d.acquire(2, 2, 5, 3_000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 5, 2_000, "k", "carol").is_empty());
    let mut r = d.advance_to(2_500);
    r.sort_by_key(|r| r.id);
    assert_eq!(r.len(), 2, "{r:?}");
    token_of(&r[0], 2, 2);
    assert_eq!(r[1], reply(3, 3, Response::Timeout));
}

// =================================================================================
// Waiter's connection closes

#[test]
fn closed_connection_leaves_queue_silently() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 10, 500, "k", "bob").is_empty());
    assert!(d.acquire(3, 4, 10, 5_000, "k", "carol").is_empty());
    d.close(2);
    assert_eq!(d.table.waiters(), 1);
    assert_eq!(d.query("k"), holder(t, 10_000, 1, "alice"));
    // Nothing is said to bob, ever; his wait timer is gone.
    assert!(d.advance_to(600).is_empty());
    let r = d.release(1, 5, t, "k", "alice");
    assert_eq!(r.len(), 2);
    token_of(&r[1], 3, 4);
    // Closing again, or closing an unknown connection, is harmless.
    d.close(2);
    d.close(99);
    assert_eq!(d.table.waiters(), 0);
}

#[test]
fn closed_connection_leaves_every_queue_it_was_in() {
    let mut d = Driver::new();
    d.hold(1, 1, 10, "a", "x");
    d.hold(1, 2, 10, "b", "x");
    assert!(d.acquire(2, 3, 10, 5_000, "a", "y").is_empty());
    assert!(d.acquire(2, 4, 10, 5_000, "b", "y").is_empty());
    assert!(d.acquire(2, 5, 10, 5_000, "a", "y").is_empty());
    assert!(d.acquire(3, 6, 10, 9_000, "a", "z").is_empty());
    assert_eq!(d.table.waiters(), 4);
    assert_eq!(d.table.next_deadline(), Some(5_000));
    d.close(2);
    assert_eq!(d.table.waiters(), 1);
    assert_eq!(d.table.next_deadline(), Some(9_000));
    assert_eq!(d.query("b"), holder(d.table.state().holder("b").unwrap().token, 10_000, 0, "x"));
}

// =================================================================================
// Holder's connection closes

#[test]
fn holder_connection_close_keeps_hold() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 2, "k", "alice");
    assert!(d.acquire(2, 2, 2, 10_000, "k", "bob").is_empty());
    d.close(1);
    assert_eq!(d.query("k"), holder(t, 2_000, 1, "alice"));
    assert!(d.advance_to(1_999).is_empty());
    // Only the lease ends it (or a release with the triple, from any connection).
    let r = d.advance_to(2_000);
    token_of(&r[0], 2, 2);
}

#[test]
fn holder_connection_close_without_waiters_keeps_hold_until_release() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 20, "k", "alice");
    d.close(1);
    assert_eq!(d.query("k"), holder(t, 20_000, 0, "alice"));
    assert_eq!(d.release(2, 2, t, "k", "alice"), vec![reply(2, 2, Response::Released)]);
}

// =================================================================================
// Fencing tokens (docs/fencing.md)

#[test]
fn token_is_unix_time_in_microseconds() {
    let mut d = Driver::new();
    d.unix_us = 1_234_567_890;
    assert_eq!(d.hold(1, 1, 1, "k", "o"), 1_234_567_890);
}

#[test]
fn tokens_are_last_plus_one_within_one_microsecond() {
    let mut d = Driver::new();
    let a = d.hold(1, 1, 1, "a", "o");
    let b = d.hold(1, 2, 1, "b", "o");
    let c = d.hold(1, 3, 1, "c", "o");
    assert_eq!((a, b, c), (UNIX0, UNIX0 + 1, UNIX0 + 2));
}

#[test]
fn clock_going_backwards_still_increases_tokens() {
    let mut d = Driver::new();
    let a = d.hold(1, 1, 1, "a", "o");
    d.unix_us = UNIX0 - 3_600_000_000;
    let b = d.hold(1, 2, 1, "b", "o");
    d.unix_us = 1;
    let c = d.hold(1, 3, 1, "c", "o");
    d.unix_us = 0;
    let e = d.hold(1, 4, 1, "e", "o");
    assert_eq!((b, c, e), (a + 1, a + 2, a + 3));
    assert_eq!(d.table.state().last_token(), a + 3);
}

#[test]
fn clock_far_ahead_jumps_tokens() {
    let mut d = Driver::new();
    let a = d.hold(1, 1, 1, "a", "o");
    d.unix_us = UNIX0 * 2;
    let b = d.hold(1, 2, 1, "b", "o");
    assert_eq!(b, UNIX0 * 2);
    d.unix_us = UNIX0;
    let c = d.hold(1, 3, 1, "c", "o");
    assert_eq!(c, UNIX0 * 2 + 1);
    assert!(a < b);
}

#[test]
fn first_token_with_zero_clock_is_one() {
    let mut d = Driver::new();
    d.unix_us = 0;
    assert_eq!(d.hold(1, 1, 1, "k", "o"), 1);
    assert_eq!(d.hold(1, 2, 1, "j", "o"), 2);
}

#[test]
fn hand_off_tokens_follow_the_same_rule() {
    let mut d = Driver::new();
    let t = d.hold(1, 1, 1, "k", "o");
    assert!(d.acquire(2, 2, 1, 5_000, "k", "p").is_empty());
    d.unix_us = 5; // clock went far back
    let r = d.release(1, 3, t, "k", "o");
    assert_eq!(token_of(&r[1], 2, 2), t + 1);
    assert!(d.acquire(3, 4, 1, 5_000, "k", "q").is_empty());
    d.now_ms = 100;
    d.unix_us = UNIX0 + 10_000_000;
    let r = d.advance_to(1_100); // lease of p ends at 1000 (applied at 0)
    assert_eq!(token_of(&r[0], 3, 4), UNIX0 + 11_000_000);
}

// =================================================================================
// Leadership

#[test]
fn not_leading_answers_moved() {
    let mut table = LockTable::new(config(16));
    assert!(!table.is_leading());
    let mut out = Output::default();
    table.acquire(1, 1, 1, 0, "k", "o", 0, UNIX0, &mut out);
    table.release(1, 2, 5, "k", "o", 0, UNIX0, &mut out);
    assert!(out.proposals.is_empty(), "a non-leader proposes nothing");
    assert_eq!(
        out.replies,
        vec![
            reply(1, 1, Response::Moved { leader: String::new() }),
            reply(1, 2, Response::Moved { leader: String::new() }),
        ]
    );
    table.set_leader_hint("10.0.0.2:5225");
    let mut out = Output::default();
    table.acquire(1, 3, 1, 100, "k", "o", 0, UNIX0, &mut out);
    assert_eq!(out.replies, vec![reply(1, 3, Response::Moved { leader: "10.0.0.2:5225".into() })]);
    // tick does nothing on a follower.
    table.tick(1_000_000, UNIX0, &mut out);
    assert!(out.proposals.is_empty());
    assert_eq!(table.next_deadline(), None);
}

#[test]
fn a_table_that_stopped_leading_does_not_claim_to_know_a_lease_end() {
    // Lease timers live only on the leader: once it steps down, a query of the applied
    // state says the hold's remaining time is 0 rather than inventing one.
    let mut d = Driver::new();
    let t = d.hold(1, 1, 10, "k", "alice");
    d.advance_to(2_000);
    assert_eq!(d.query("k"), holder(t, 8_000, 0, "alice"));
    let mut out = Output::default();
    d.table.lose_leadership("10.0.0.3:5225", &mut out);
    assert_eq!(d.query("k"), holder(t, 0, 0, "alice"));
}

#[test]
fn top_keys_lists_the_most_waited_for_keys_with_their_holders() {
    let mut d = Driver::new();
    let mut tokens = Vec::new();
    for k in ["a", "b", "c", "d"] {
        tokens.push(d.hold(1, 1, 10, k, &format!("{k}-holder")));
    }
    // b: 3 waiters; a and c: 2 each, a's first one waiting longer; d: 1.
    let mut id = 10;
    for (at, key) in
        [(0, "a"), (100, "c"), (200, "b"), (200, "b"), (300, "c"), (300, "a"), (400, "b"), (500, "d")]
    {
        d.advance_to(at);
        id += 1;
        assert!(d.acquire(2, id, 10, 60_000, key, "w").is_empty());
    }
    d.advance_to(1_000);
    let top = |d: &Driver, n: usize| d.table.top_keys(n, d.now_ms);
    let listed: Vec<(String, u32, u32)> =
        top(&d, 10).into_iter().map(|k| (k.key, k.waiters, k.oldest_wait_ms)).collect();
    let want = [("b", 3, 800), ("a", 2, 1_000), ("c", 2, 900), ("d", 1, 500)];
    assert_eq!(listed, want.map(|(k, w, o)| (k.to_string(), w, o)).to_vec());
    // Exactly as many keys as asked for, fewer, and more.
    assert_eq!(top(&d, 4).len(), 4);
    assert_eq!(top(&d, 5).len(), 4);
    let two: Vec<String> = top(&d, 2).into_iter().map(|k| k.key).collect();
    assert_eq!(two, ["b", "a"]);
    assert!(top(&d, 0).is_empty());
    // Each with its holder as the applied state has it.
    let b = &top(&d, 1)[0];
    assert_eq!((b.token, b.owner.as_str(), b.remaining_ms), (tokens[1], "b-holder", 9_000));
}

#[test]
fn lose_leadership_answers_waiters_moved() {
    let mut d = Driver::new();
    d.hold(1, 1, 10, "a", "x");
    d.hold(1, 2, 10, "b", "x");
    assert!(d.acquire(2, 3, 10, 5_000, "a", "y").is_empty());
    assert!(d.acquire(3, 4, 10, 5_000, "a", "z").is_empty());
    assert!(d.acquire(3, 5, 10, 5_000, "b", "z").is_empty());
    assert_eq!(d.table.overrides(), 2, "the keys with waiters have the leader's overrides");
    let mut out = Output::default();
    d.table.lose_leadership("10.0.0.3:5225", &mut out);
    assert_eq!(d.table.overrides(), 0);
    assert!(out.proposals.is_empty());
    let mut got = out.replies.clone();
    got.sort_by_key(|r| r.id);
    let moved = Response::Moved { leader: "10.0.0.3:5225".into() };
    assert_eq!(
        got,
        vec![reply(2, 3, moved.clone()), reply(3, 4, moved.clone()), reply(3, 5, moved.clone()),]
    );
    assert!(!d.table.is_leading());
    assert_eq!(d.table.waiters(), 0);
    assert_eq!(d.table.next_deadline(), None);
    // The applied state is kept (it is the replicated state).
    assert_eq!(d.table.state().keys_held(), 2);
    // New requests get M with the hint.
    assert_eq!(d.acquire(4, 6, 1, 0, "c", "w"), vec![reply(4, 6, moved)]);
    // Nothing happens on tick, not even the old waits.
    assert!(d.advance(60_000).is_empty());
    // Closing a connection after that is harmless.
    d.close(2);
}

#[test]
fn become_leader_restarts_every_lease_full_length() {
    let mut d = Driver::new();
    let ta = d.hold(1, 1, 10, "a", "x");
    d.advance_to(4_000);
    let tb = d.hold(1, 2, 3, "b", "x");
    d.advance_to(6_500);
    assert_eq!(d.query("a"), holder(ta, 3_500, 0, "x"));
    let mut out = Output::default();
    d.table.lose_leadership("", &mut out);
    assert!(out.replies.is_empty());
    // Leadership comes back later (or another node takes over with the same state).
    d.now_ms = 9_000;
    d.unix_us = 1; // a new leader with a very wrong clock still continues the tokens
    d.table.become_leader(9_000);
    assert!(d.table.is_leading());
    assert_eq!(d.query("a"), holder(ta, 10_000, 0, "x"));
    assert_eq!(d.query("b"), holder(tb, 3_000, 0, "x"));
    assert_eq!(d.table.next_deadline(), Some(12_000));
    assert!(d.advance_to(11_999).is_empty());
    d.advance_to(12_000);
    assert_eq!(d.query("b"), Response::Free);
    assert_eq!(d.query("a"), holder(ta, 7_000, 0, "x"));
    let tc = d.hold(2, 3, 1, "c", "y");
    assert_eq!(tc, tb + 1);
    d.advance_to(19_000);
    assert_eq!(d.query("a"), Response::Free);
}

#[test]
fn follower_applies_the_log_but_answers_only_its_own_requests() {
    let mut leader = Driver::new();
    let mut follower = LockTable::new(TableConfig {
        node: 2,
        incarnation: 1,
        waiters_per_key_max: 16,
        keys_max: usize::MAX,
    });
    let t = leader.hold(1, 1, 2, "k", "alice");
    assert!(leader.acquire(2, 2, 2, 10_000, "k", "bob").is_empty());
    leader.release(1, 3, t, "k", "alice");
    let mut out = Output::default();
    for cmd in &leader.log {
        follower.apply(cmd, 0, &mut out);
    }
    assert!(out.replies.is_empty(), "origins are node 1's: {:?}", out.replies);
    assert!(out.proposals.is_empty());
    assert_eq!(follower.state(), leader.table.state());
    assert_eq!(follower.next_deadline(), None, "no lease timers on a follower");
    // The follower takes over: bob's lease restarts in full there.
    follower.become_leader(50_000);
    assert_eq!(follower.query("k", 50_000), holder(t + 1, 2_000, 0, "bob"));
    assert_eq!(follower.next_deadline(), Some(52_000));
}

#[test]
fn apply_answers_only_this_incarnation() {
    // A restarted process (new incarnation) must not answer its predecessor's requests.
    let mut table = LockTable::new(config(16));
    table.become_leader(0);
    let cmd: Command = Command::Grant {
        key: "k".into(),
        grant: Grant {
            owner: "o".into(),
            token: 5,
            lease_ms: 1000,
            origin: Origin { node: NODE, incarnation: INCARNATION + 1, conn: 1, id: 1 },
        },
    };
    let mut out = Output::default();
    table.apply(&cmd, 0, &mut out);
    assert!(out.replies.is_empty());
    assert_eq!(table.state().holder("k").unwrap().token, 5);
}

// =================================================================================
// next_deadline and waiter counts

#[test]
fn next_deadline_tracks_the_earliest_lease_or_wait() {
    let mut d = Driver::new();
    assert_eq!(d.table.next_deadline(), None);
    let t = d.hold(1, 1, 5, "k", "alice");
    assert_eq!(d.table.next_deadline(), Some(5_000));
    assert!(d.acquire(2, 2, 5, 8_000, "k", "bob").is_empty());
    assert_eq!(d.table.next_deadline(), Some(5_000));
    assert!(d.acquire(3, 3, 5, 1_500, "k", "carol").is_empty());
    assert_eq!(d.table.next_deadline(), Some(1_500));
    d.hold(4, 4, 1, "j", "dave");
    assert_eq!(d.table.next_deadline(), Some(1_000));
    d.advance_to(1_000);
    assert_eq!(d.table.next_deadline(), Some(1_500));
    d.advance_to(1_500);
    assert_eq!(d.table.next_deadline(), Some(5_000));
    d.advance_to(2_000);
    let r = d.release(1, 5, t, "k", "alice");
    token_of(&r[1], 2, 2);
    // Bob's lease runs 2000..7000 and his wait timer is gone.
    assert_eq!(d.table.next_deadline(), Some(7_000));
    d.advance_to(7_000);
    assert_eq!(d.table.next_deadline(), None);
}

#[test]
fn next_deadline_never_lies_in_the_past_after_tick() {
    let mut d = Driver::new();
    d.hold(1, 1, 1, "a", "x");
    assert!(d.acquire(2, 2, 1, 300, "a", "y").is_empty());
    assert!(d.acquire(3, 3, 1, 2_500, "a", "z").is_empty());
    for t in (0..5_000).step_by(250) {
        d.advance_to(t);
        if let Some(next) = d.table.next_deadline() {
            assert!(next > t, "deadline {next} at {t}");
        }
    }
}

#[test]
fn waiters_counts_across_keys() {
    let mut d = Driver::with_max(3);
    d.hold(1, 1, 10, "a", "x");
    d.hold(1, 2, 10, "b", "x");
    let mut id = 10;
    for key in ["a", "a", "b", "a", "b"] {
        id += 1;
        assert!(d.acquire(2, id, 10, 1_000 + id, key, "y").is_empty());
    }
    assert_eq!(d.table.waiters(), 5);
    assert_eq!(d.acquire(2, 99, 10, 1_000, "a", "y"), vec![reply(2, 99, Response::Busy)]);
    assert_eq!(d.table.waiters(), 5);
    d.advance_to(1_012); // ids 11 and 12 time out
    assert_eq!(d.table.waiters(), 3);
    d.close(2);
    assert_eq!(d.table.waiters(), 0);
    assert!(matches!(d.query("a"), Response::Holder { waiters: 0, .. }));
}

// =================================================================================
// The applied state on its own

#[test]
fn state_apply_is_deterministic_and_tracks_last_token() {
    let cmds: [Command; 4] = [
        Command::Grant {
            key: "k".into(),
            grant: Grant { owner: "a".into(), token: 10, lease_ms: 1000, origin: origin(1, 1) },
        },
        Command::Expire {
            key: "k".into(),
            token: 9, // stale: not the current hold, does nothing
            next: None,
        },
        Command::Release {
            key: "k".into(),
            owner: "a".into(),
            token: 10,
            origin: origin(1, 2),
            next: Some(Grant { owner: "b".into(), token: 11, lease_ms: 2000, origin: origin(2, 3) }),
        },
        Command::Expire { key: "k".into(), token: 11, next: None },
    ];
    let mut a = LockState::default();
    let mut b = LockState::default();
    let mut ea = Vec::new();
    let mut eb = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        a.apply(cmd, &mut ea);
        b.apply(cmd, &mut eb);
        if i == 1 {
            assert_eq!(a.holder("k").unwrap().token, 10, "stale expiry ignored");
        }
        if i == 2 {
            assert_eq!(a.holder("k").unwrap().owner, "b");
        }
    }
    assert_eq!(a, b);
    assert_eq!(ea, eb);
    assert_eq!(a.keys_held(), 0);
    assert_eq!(a.last_token(), 11);
    assert_eq!(a.holders().count(), 0);
}

/// What the table counts for the metrics: grants by kind, expiries, waits and holds,
/// and the keys with waiters; a follower counts nothing.
#[test]
fn stats_count_grants_by_kind_expiries_waits_and_holds() {
    let mut d = Driver::new();
    let t1 = d.hold(1, 1, 10, "k", "alice");
    assert!(d.acquire(2, 2, 1, 60_000, "k", "bob").is_empty());
    assert!(d.acquire(3, 3, 1, 500, "k", "carol").is_empty());
    assert!(d.acquire(4, 4, 1, 60_000, "other", "dave").len() == 1);
    assert_eq!(d.table.keys_with_waiters(), 1);
    d.advance(200);
    assert_eq!(d.release(1, 5, t1, "k", "alice")[1].conn, 2, "bob is handed the key");
    assert_eq!(d.table.keys_with_waiters(), 1, "carol still waits");
    assert_eq!(d.advance(300), vec![reply(3, 3, Response::Timeout)]);
    assert_eq!(d.table.keys_with_waiters(), 0);
    // At 1200 ms bob's lease (granted at 200) runs out, and dave's (granted at 0, due
    // at 1000) is found run out.
    d.advance(700);
    d.table.check_invariants();
    let stats = std::mem::take(d.table.stats_mut());
    assert_eq!((stats.grants_immediate, stats.grants_handoff, stats.lease_expiries), (2, 1, 2));
    assert_eq!(stats.waits_ms, vec![200, 500], "bob waited 200 ms, carol's 500 ms ran out");
    let mut holds = stats.holds_us.clone();
    holds.sort_unstable();
    // Dave's token is the clock + 1 µs (alice's took the same microsecond).
    assert_eq!(holds, vec![200_000, 1_000_000, 1_199_999], "alice 0.2 s, bob 1 s, dave 1.2 s");
    assert_eq!(*d.table.stats_mut(), Default::default(), "taken");
    // A follower applies the same commands and counts nothing.
    let mut follower = LockTable::new(config(16));
    let mut out = Output::default();
    for cmd in &d.log {
        follower.apply(cmd, 0, &mut out);
    }
    assert_eq!(*follower.stats_mut(), Default::default());
}

/// A committed log that grants a held key (which no leader's projection proposes)
/// stops the node instead of giving the key a second holder: the violated invariant
/// is named in the panic, and the server's panic hook ends the process (exit 70).
#[test]
#[should_panic(expected = "invariant violated: at most one holder per key")]
fn a_committed_grant_of_a_held_key_violates_an_invariant() {
    let mut table = LockTable::new(config(4));
    let mut out = Output::default();
    let origin = Origin { node: NODE, incarnation: INCARNATION, conn: 1, id: 1 };
    for (owner, token) in [("a", 10), ("b", 11)] {
        let grant = Grant { owner: owner.to_string(), token, lease_ms: 1000, origin };
        table.apply(&Command::Grant { key: "k".to_string(), grant }, 0, &mut out);
        table.check_invariants();
    }
}
