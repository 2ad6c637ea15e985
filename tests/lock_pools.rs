//! Counted and multi-key holds through the lock table (docs/architecture.md, "Lines"):
//! a stock of N, all-or-nothing across keys, strict FIFO, capacities, hand-off of freed
//! permits in one command, leases, places in line, leadership and snapshots — driven
//! like a standalone node, with the table's invariants walked after every step.

use ticketing::lock::codec::{decode_snapshot, encode_snapshot};
use ticketing::lock::{Command, LockTable, Output, Part, Reply, TableConfig};
use ticketing::proto::{ErrorCode, Response};

const UNIX0: u64 = 1_700_000_000_000_000;

struct D {
    t: LockTable,
    now: u64,
    /// Every command proposed, in order.
    log: Vec<Command>,
}

fn parts(list: &[(&str, u32, u32)]) -> Vec<Part> {
    list.iter().map(|&(key, count, capacity)| Part { key: key.to_owned(), count, capacity }).collect()
}

impl D {
    fn new() -> D {
        D::with(100, 1_000)
    }

    fn with(waiters_per_key_max: usize, keys_max: usize) -> D {
        let mut t = LockTable::new(TableConfig { node: 1, incarnation: 1, waiters_per_key_max, keys_max });
        t.become_leader(0);
        D { t, now: 0, log: Vec::new() }
    }

    fn unix(&self) -> u64 {
        UNIX0 + self.now * 1000
    }

    /// Applies every proposal at once (a standalone node), walking the invariants.
    fn run(&mut self, mut out: Output) -> Vec<Reply> {
        while let Some(c) = out.proposals.pop_front() {
            self.t.apply(&c, self.now, &mut out);
            self.log.push(c);
        }
        self.t.check_invariants();
        out.replies
    }

    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        conn: u64,
        id: u32,
        wait_ms: u32,
        owner: &str,
        list: &[(&str, u32, u32)],
        place: bool,
    ) -> Vec<Reply> {
        let mut out = Output::default();
        let (now, unix) = (self.now, self.unix());
        self.t.hold(conn, id, 10, wait_ms, owner, parts(list), place, now, unix, &mut out);
        self.run(out)
    }

    fn acquire(&mut self, conn: u64, id: u32, wait_ms: u32, key: &str, owner: &str) -> Vec<Reply> {
        let mut out = Output::default();
        let (now, unix) = (self.now, self.unix());
        self.t.acquire(conn, id, 10, wait_ms, key, owner, now, unix, &mut out);
        self.run(out)
    }

    fn release(&mut self, conn: u64, id: u32, token: u64, key: &str, owner: &str) -> Vec<Reply> {
        let mut out = Output::default();
        let (now, unix) = (self.now, self.unix());
        self.t.release(conn, id, token, key, owner, now, unix, &mut out);
        self.run(out)
    }

    fn advance(&mut self, ms: u64) -> Vec<Reply> {
        self.now += ms;
        let mut out = Output::default();
        let (now, unix) = (self.now, self.unix());
        self.t.tick(now, unix, &mut out);
        self.run(out)
    }

    fn close(&mut self, conn: u64) -> Vec<Reply> {
        let mut out = Output::default();
        let (now, unix) = (self.now, self.unix());
        self.t.conn_closed(conn, now, unix, &mut out);
        self.run(out)
    }

    /// (capacity, in use, waiters) of `key` as the applied state and the lines say it.
    fn in_use(&self, key: &str) -> u32 {
        let s = self.t.state();
        let own = u32::from(s.holder(key).is_some());
        let pooled = s.slot_of(key).and_then(|slot| s.pool_key(slot)).map_or(0, |p| p.in_use);
        own + pooled
    }
}

fn token(replies: &[Reply], conn: u64, id: u32) -> u64 {
    match replies.iter().find(|r| r.conn == conn && r.id == id).map(|r| &r.response) {
        Some(Response::Granted { token, .. }) => *token,
        other => panic!("no grant for ({conn}, {id}) in {replies:?}: {other:?}"),
    }
}

fn answered(replies: &[Reply], conn: u64, id: u32) -> Option<&Response> {
    replies.iter().find(|r| r.conn == conn && r.id == id).map(|r| &r.response)
}

#[test]
fn a_stock_of_three_never_has_more_than_three_inside_and_hands_each_permit_on_in_arrival_order() {
    let mut d = D::new();
    let stock = [("tickets", 1, 3)];
    let mut tokens = Vec::new();
    for conn in 1..=3 {
        tokens.push(token(&d.hold(conn, 1, 5_000, &format!("buyer-{conn}"), &stock, false), conn, 1));
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens grow: {tokens:?}");
    assert_eq!(d.in_use("tickets"), 3);
    assert!(d.hold(4, 1, 5_000, "buyer-4", &stock, false).is_empty(), "the fourth waits");
    assert!(d.hold(5, 1, 5_000, "buyer-5", &stock, false).is_empty(), "the fifth waits");
    assert_eq!(d.in_use("tickets"), 3, "never more than three inside");
    let before = d.log.len();
    let r = d.release(2, 2, tokens[1], "tickets", "buyer-2");
    assert_eq!(answered(&r, 2, 2), Some(&Response::Released));
    let t4 = token(&r, 4, 1);
    assert!(answered(&r, 5, 1).is_none(), "one permit freed: one waiter in");
    assert_eq!(d.log.len(), before + 1, "the release and the hand-off are one command");
    assert!(matches!(&d.log[before], Command::End { next, .. } if next.len() == 1));
    assert!(t4 > tokens[2]);
    let r = d.release(1, 2, tokens[0], "tickets", "buyer-1");
    assert!(token(&r, 5, 1) > t4);
    assert_eq!(d.in_use("tickets"), 3);
}

#[test]
fn crossing_key_sets_are_granted_all_or_nothing_without_deadlock() {
    let mut d = D::new();
    let ab = [("seat:1", 1, 1), ("seat:2", 1, 1)];
    let ba = [("seat:2", 1, 1), ("seat:1", 1, 1)];
    let t1 = token(&d.hold(1, 1, 5_000, "family-a", &ab, false), 1, 1);
    assert_eq!(d.t.state().holder("seat:1"), None, "a multi-key hold is pooled, not a key's own holder");
    assert!(d.hold(2, 1, 5_000, "family-b", &ba, false).is_empty());
    // A v1 QUERY of either key names the one hold.
    for key in ["seat:1", "seat:2"] {
        match d.t.query(key, d.now) {
            Response::Holder { token, owner, waiters, .. } => {
                assert_eq!((token, owner.as_str(), waiters), (t1, "family-a", 1), "{key}");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    // A release names any one key and ends the whole hold; b gets both at once.
    let r = d.release(1, 2, t1, "seat:2", "family-a");
    assert_eq!(answered(&r, 1, 2), Some(&Response::Released));
    let t2 = token(&r, 2, 1);
    for key in ["seat:1", "seat:2"] {
        assert!(matches!(d.t.query(key, d.now), Response::Holder { token, .. } if token == t2), "{key}");
    }
}

#[test]
fn strict_fifo_across_keys_a_later_request_that_would_fit_waits() {
    let mut d = D::new();
    let t1 = token(&d.acquire(1, 1, 0, "a", "alice"), 1, 1);
    // Bob wants {a, b}: a is held, so he waits and takes nothing of b.
    assert!(d.hold(2, 1, 5_000, "bob", &[("a", 1, 1), ("b", 1, 1)], false).is_empty());
    // Carol wants only b, which is free, but Bob arrived first and names it.
    assert!(d.acquire(3, 1, 5_000, "b", "carol").is_empty(), "carol waits behind bob");
    assert_eq!(d.in_use("b"), 0, "b stays free meanwhile: the price of strict FIFO");
    let r = d.release(1, 2, t1, "a", "alice");
    let tb = token(&r, 2, 1);
    assert!(answered(&r, 3, 1).is_none());
    let r = d.release(2, 2, tb, "a", "bob");
    token(&r, 3, 1);
}

#[test]
fn a_freed_permit_goes_to_every_request_that_now_fits_in_one_command() {
    let mut d = D::new();
    let t = token(&d.hold(1, 1, 0, "big", &[("pool", 3, 4)], false), 1, 1);
    assert!(d.hold(2, 1, 5_000, "two", &[("pool", 2, 4)], false).is_empty());
    assert!(d.hold(3, 1, 5_000, "one", &[("pool", 1, 4)], false).is_empty());
    assert!(d.hold(4, 1, 5_000, "one-more", &[("pool", 1, 4)], false).is_empty());
    let before = d.log.len();
    let r = d.release(1, 2, t, "pool", "big");
    let granted: Vec<u64> = [2, 3, 4].iter().filter_map(|&c| answered(&r, c, 1).map(|_| c)).collect();
    assert_eq!(granted, vec![2, 3, 4], "2 + 1 + 1 permits of 4: all three, in arrival order");
    assert_eq!(d.log.len(), before + 1, "one command");
    match &d.log[before] {
        Command::End { next, .. } => {
            let owners: Vec<&str> = next.iter().map(|g| g.grant.owner.as_str()).collect();
            assert_eq!(owners, vec!["two", "one", "one-more"]);
            assert!(next.windows(2).all(|w| w[0].grant.token < w[1].grant.token));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.in_use("pool"), 4);
}

#[test]
fn a_capacity_that_differs_from_the_keys_is_refused_naming_both_and_changes_nothing() {
    let mut d = D::new();
    token(&d.hold(1, 1, 0, "a", &[("stock", 1, 5)], false), 1, 1);
    let log = d.log.len();
    let r = d.hold(2, 1, 5_000, "b", &[("stock", 1, 7)], false);
    match answered(&r, 2, 1) {
        Some(Response::Error { code: ErrorCode::Invalid, message }) => {
            assert!(message.contains("says 7") && message.contains("capacity 5"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A v1 ACQUIRE is a request of capacity 1.
    match answered(&d.acquire(3, 1, 5_000, "stock", "c"), 3, 1) {
        Some(Response::Error { code: ErrorCode::Invalid, message }) => {
            assert!(message.contains("says 1") && message.contains("capacity 5"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // And a pool request on a key held by a v1 holder states capacity 1 or is refused.
    token(&d.acquire(4, 1, 0, "door", "d"), 4, 1);
    assert!(matches!(
        answered(&d.hold(5, 1, 5_000, "e", &[("door", 1, 2)], false), 5, 1),
        Some(Response::Error { code: ErrorCode::Invalid, .. })
    ));
    assert_eq!(d.log.len(), log + 1, "only d's grant went to the log");
    assert_eq!((d.t.waiters(), d.in_use("stock")), (0, 1));
}

#[test]
fn a_v1_holder_hands_its_key_to_a_waiting_multi_key_request_in_its_release() {
    let mut d = D::new();
    let t = token(&d.acquire(1, 1, 0, "a", "alice"), 1, 1);
    assert!(d.hold(2, 1, 5_000, "bob", &[("a", 1, 1), ("b", 1, 1)], false).is_empty());
    let before = d.log.len();
    let r = d.release(1, 2, t, "a", "alice");
    assert_eq!(answered(&r, 1, 2), Some(&Response::Released));
    token(&r, 2, 1);
    assert!(matches!(&d.log[before], Command::End { owner: Some(_), next, .. } if next.len() == 1));
    // A plain hand-off on the same key is still today's command.
    let mut d = D::new();
    let t = token(&d.acquire(1, 1, 0, "a", "alice"), 1, 1);
    assert!(d.acquire(2, 1, 5_000, "a", "bob").is_empty());
    let r = d.release(1, 2, t, "a", "alice");
    token(&r, 2, 1);
    assert!(matches!(d.log.last(), Some(Command::Release { next: Some(_), .. })));
}

#[test]
fn a_pooled_lease_runs_out_whole_and_hands_its_permits_on() {
    let mut d = D::new();
    let t = token(&d.hold(1, 1, 0, "slow", &[("x", 1, 1), ("y", 2, 2)], false), 1, 1);
    assert!(d.hold(2, 1, 20_000, "next", &[("y", 1, 2)], false).is_empty());
    assert!(d.advance(9_999).is_empty(), "not before its lease");
    let r = d.advance(1);
    let t2 = token(&r, 2, 1);
    assert!(t2 > t);
    assert!(
        matches!(&d.log[d.log.len() - 1], Command::End { owner: None, origin: None, next, .. } if next.len() == 1)
    );
    assert_eq!((d.in_use("x"), d.in_use("y")), (0, 1));
    assert_eq!(d.t.stats_mut().lease_expiries, 1);
}

#[test]
fn a_blocked_first_waiter_that_leaves_lets_the_next_through() {
    let mut d = D::new();
    token(&d.hold(1, 1, 0, "holder", &[("p", 2, 3)], false), 1, 1);
    assert!(d.hold(2, 1, 1_000, "needs-two", &[("p", 2, 3)], false).is_empty());
    assert!(d.hold(3, 1, 60_000, "needs-one", &[("p", 1, 3)], false).is_empty(), "behind needs-two");
    let r = d.advance(1_000);
    assert_eq!(answered(&r, 2, 1), Some(&Response::Timeout));
    token(&r, 3, 1);
    // The same when the first waiter's connection closes.
    let mut d = D::new();
    token(&d.hold(1, 1, 0, "holder", &[("p", 2, 3)], false), 1, 1);
    assert!(d.hold(2, 1, 60_000, "needs-two", &[("p", 2, 3)], false).is_empty());
    assert!(d.hold(3, 1, 60_000, "needs-one", &[("p", 1, 3)], false).is_empty());
    token(&d.close(2), 3, 1);
}

#[test]
fn places_in_line_are_told_when_queued_then_at_most_once_a_second() {
    let mut d = D::new();
    let t = token(&d.acquire(1, 1, 0, "k", "holder"), 1, 1);
    for conn in 2..=5 {
        let r = d.hold(conn, 1, 60_000, &format!("w{conn}"), &[("k", 1, 1)], true);
        assert_eq!(
            r,
            vec![Reply {
                conn,
                id: 1,
                response: Response::InLine { ahead: conn as u32 - 2, grants_per_ks: 0 }
            }]
        );
    }
    assert!(d.advance(1_000).is_empty(), "nobody moved");
    let r = d.release(1, 2, t, "k", "holder");
    let t2 = token(&r, 2, 1);
    assert_eq!(r.len(), 2, "the release and the grant, no news in between: {r:?}");
    assert!(d.advance(999).is_empty(), "not before a second since the last look");
    let r = d.advance(1);
    let ahead: Vec<(u64, u32)> = r
        .iter()
        .map(|x| match x.response {
            Response::InLine { ahead, .. } => (x.conn, ahead),
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ahead, vec![(3, 0), (4, 1), (5, 2)]);
    let _ = t2;
}

/// The first place in line a HOLD hears when it queues carries the key's measured
/// grant rate, not 0: the client can estimate its wait from the first frame on.
#[test]
fn the_first_place_in_line_carries_the_key_s_grant_rate() {
    let mut d = D::new();
    token(&d.hold(1, 1, 0, "a", &[("stock", 1, 2)], false), 1, 1);
    d.advance(500);
    token(&d.hold(2, 1, 0, "b", &[("stock", 1, 2)], false), 2, 1);
    d.advance(1_500);
    // Two grants in the 2 s of the key's window: one a second.
    assert_eq!(
        d.hold(3, 1, 60_000, "c", &[("stock", 1, 2)], true),
        vec![Reply { conn: 3, id: 1, response: Response::InLine { ahead: 0, grants_per_ks: 1_000 } }]
    );
}

/// The node's limit counts a pooled hold and a waiting request once per key it names:
/// a flood of holds of many keys each stops at the limit, not at 16 times it.
#[test]
fn the_nodes_limit_counts_every_key_a_hold_or_a_waiter_names() {
    let mut d = D::with(1_000, 56);
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let each = |range: std::ops::Range<usize>, count: u32| -> Vec<(&str, u32, u32)> {
        keys[range].iter().map(|k| (k.as_str(), count, 1_000_000)).collect()
    };
    let overloaded =
        |r: Option<&Response>| matches!(r, Some(Response::Error { code: ErrorCode::Overloaded, .. }));
    let mut granted = 0;
    for i in 0..10u32 {
        match answered(&d.hold(1, i, 0, "flood", &each(0..16, 1), false), 1, i) {
            Some(Response::Granted { .. }) => granted += 1,
            r => assert!(overloaded(r), "{r:?}"),
        }
    }
    assert_eq!((granted, d.t.load()), (3, 48), "3 holds of 16 keys, and a fourth would pass 56");
    // A waiter of 8 keys (their permits are taken) fills the rest.
    assert!(d.hold(2, 1, 60_000, "big", &each(0..8, 1_000_000), false).is_empty());
    assert_eq!((d.t.waiters(), d.t.load()), (1, 56));
    assert!(overloaded(answered(&d.hold(3, 1, 0, "one", &each(15..16, 1), false), 3, 1)));
    assert!(overloaded(answered(&d.acquire(3, 2, 0, "new", "plain"), 3, 2)), "a plain ACQUIRE too");
    // The waiter leaves: its keys make room again.
    assert!(d.close(2).is_empty());
    assert_eq!(d.t.load(), 48);
    token(&d.hold(3, 3, 0, "eight", &each(8..16, 1), false), 3, 3);
    assert_eq!(d.t.load(), 56);
}

#[test]
fn losing_leadership_answers_every_waiter_moved_and_a_new_leader_restarts_pooled_leases() {
    let mut d = D::new();
    let t = token(&d.hold(1, 1, 0, "a", &[("x", 2, 5), ("y", 1, 1)], false), 1, 1);
    assert!(d.hold(2, 1, 60_000, "b", &[("x", 4, 5)], false).is_empty());
    let mut out = Output::default();
    d.t.lose_leadership("elsewhere:1", &mut out);
    assert_eq!(
        out.replies,
        vec![Reply { conn: 2, id: 1, response: Response::Moved { leader: "elsewhere:1".into() } }]
    );
    d.t.check_invariants();
    // The applied pooled hold stays; a snapshot carries it.
    let bytes = encode_snapshot(d.t.state());
    let restored = decode_snapshot(&bytes).expect("a snapshot with pooled holds");
    assert!(restored == *d.t.state(), "the snapshot is the state");
    assert_eq!(encode_snapshot(&restored), bytes, "canonical");
    let held = restored.pooled_holder(t).expect("the pooled hold");
    assert_eq!(held.parts, parts(&[("x", 2, 5), ("y", 1, 1)]));
    // A new leader (from the snapshot) restarts its lease at full length.
    let mut t2 =
        LockTable::new(TableConfig { node: 2, incarnation: 1, waiters_per_key_max: 10, keys_max: 100 });
    t2.restore(restored);
    t2.become_leader(50_000);
    t2.check_invariants();
    let mut out = Output::default();
    t2.tick(59_999, UNIX0 + 59_999_000, &mut out);
    assert!(out.proposals.is_empty(), "not before a full lease from the new leadership");
    t2.tick(60_000, UNIX0 + 60_000_000, &mut out);
    assert!(matches!(out.proposals.front(), Some(Command::End { token, owner: None, .. }) if *token == t));
    // Its lines know the permits in use: 2 of x taken, a request for 4 waits.
    let mut d2 = D {
        t: LockTable::new(TableConfig { node: 3, incarnation: 1, waiters_per_key_max: 10, keys_max: 100 }),
        now: 0,
        log: vec![],
    };
    d2.t.restore(decode_snapshot(&bytes).unwrap());
    d2.t.become_leader(0);
    assert!(d2.hold(9, 1, 5_000, "c", &[("x", 4, 5)], false).is_empty(), "2 of 5 in use: 4 wait");
    assert!(d2.hold(9, 2, 5_000, "c", &[("x", 3, 5)], false).is_empty(), "3 would fit, but waits behind");
    assert_eq!(d2.t.waiters(), 2);
}

#[test]
fn a_flood_of_pooled_holds_is_refused_at_the_nodes_limit() {
    let mut d = D::with(100, 50);
    let mut refused = 0;
    for i in 0..200u32 {
        let key = format!("stock:{i}");
        let r = d.hold(1, i, 0, "flood", &[(&key, 1, 1_000_000)], false);
        match answered(&r, 1, i) {
            Some(Response::Granted { .. }) => {}
            Some(Response::Error { code: ErrorCode::Overloaded, message }) => {
                assert!(message.contains("limit of 50"), "{message}");
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(refused >= 150, "{refused} refused");
    assert!(d.t.pooled_holds() <= 50, "{} pooled holds", d.t.pooled_holds());
}

#[test]
fn a_closed_connections_waiters_all_leave_and_none_of_them_is_granted() {
    let mut d = D::new();
    token(&d.hold(1, 1, 0, "holder", &[("p", 2, 3)], false), 1, 1);
    // Connection 2's first request holds up its second, which would fit once the
    // first is gone: closing must not grant the second to a connection that is gone.
    assert!(d.hold(2, 1, 60_000, "two", &[("p", 2, 3)], false).is_empty());
    assert!(d.hold(2, 2, 60_000, "one", &[("p", 1, 3)], false).is_empty());
    assert!(d.hold(3, 1, 60_000, "other", &[("p", 1, 3)], false).is_empty());
    let r = d.close(2);
    assert_eq!(r.len(), 1, "{r:?}");
    token(&r, 3, 1);
    assert_eq!(d.t.waiters(), 0);
}

/// A pooled hold ends by a release naming one of its keys (docs/protocol.md §5.7); a
/// release by its owner and token naming another key is `N` and ends nothing (the
/// lock-level simulator found it ending the hold: a client's bad release of one key
/// under a token one above its own matched its other hold's).
#[test]
fn a_release_naming_a_key_the_pooled_hold_does_not_hold_is_not_holder() {
    let mut d = D::new();
    let t = token(&d.hold(1, 1, 0, "x", &[("s", 2, 3)], false), 1, 1);
    let other = token(&d.hold(2, 1, 0, "x", &[("a", 1, 1), ("b", 1, 1)], false), 2, 1);
    let r = d.release(1, 2, t, "a", "x");
    assert_eq!(answered(&r, 1, 2), Some(&Response::NotHolder));
    assert_eq!(d.in_use("s"), 2, "the hold of s is still held");
    let r = d.release(1, 3, other, "s", "x");
    assert_eq!(answered(&r, 1, 3), Some(&Response::NotHolder));
    assert_eq!(d.in_use("a") + d.in_use("b"), 2);
    let r = d.release(1, 4, t, "s", "x");
    assert_eq!(answered(&r, 1, 4), Some(&Response::Released));
    assert_eq!(d.in_use("s"), 0);
    let r = d.release(2, 2, other, "b", "x");
    assert_eq!(answered(&r, 2, 2), Some(&Response::Released));
    assert_eq!(d.in_use("a") + d.in_use("b"), 0);
}
