//! Unit tests of `lines.rs`: a stock of N, all-or-nothing across keys, strict FIFO,
//! capacities, places in line — and random histories checked against a plain model.

use proptest::prelude::*;

use super::*;

fn want(key: u32, count: u32, capacity: u32) -> Want<u32> {
    Want { key, count, capacity }
}

fn lines() -> Lines<u32, &'static str> {
    Lines::new(100)
}

fn granted<T>(asked: Result<Asked<T>, (Refusal, T)>) -> T {
    match asked {
        Ok(Asked::Granted(t)) => t,
        Ok(Asked::Queued { seq, .. }) => panic!("queued as {seq}"),
        Ok(Asked::Busy(_)) => panic!("busy"),
        Err((refusal, _)) => panic!("refused: {}", refusal.message()),
    }
}

fn queued<T>(asked: Result<Asked<T>, (Refusal, T)>) -> (Seq, u32) {
    match asked {
        Ok(Asked::Queued { seq, ahead }) => (seq, ahead),
        Ok(Asked::Granted(_)) => panic!("granted"),
        Ok(Asked::Busy(_)) => panic!("busy"),
        Err((refusal, _)) => panic!("refused: {}", refusal.message()),
    }
}

fn names<T: Copy>(grants: Vec<Granted<u32, T>>) -> Vec<T> {
    grants.into_iter().map(|g| g.payload).collect()
}

fn none(_: u32) -> u32 {
    0
}

#[test]
fn a_stock_of_three_lets_three_in_and_hands_each_freed_permit_to_the_next_in_line() {
    let mut l = lines();
    let stock = [want(1, 1, 3)];
    for who in ["a", "b", "c"] {
        granted(l.ask(stock.to_vec(), true, false, who, 0, none));
    }
    let (d, _) = queued(l.ask(stock.to_vec(), true, false, "d", 0, none));
    let (e, ahead) = queued(l.ask(stock.to_vec(), true, false, "e", 0, none));
    assert_eq!(ahead, 1, "d is ahead of e");
    assert!(
        matches!(l.ask(stock.to_vec(), false, false, "f", 0, none), Ok(Asked::Busy("f"))),
        "wait 0: busy"
    );
    assert_eq!(l.pool(1), Some((3, 3, 2)));
    assert_eq!(l.free(&stock, 10), vec![Granted { seq: d, wants: stock.to_vec(), payload: "d" }]);
    assert_eq!(l.free(&stock, 20), vec![Granted { seq: e, wants: stock.to_vec(), payload: "e" }]);
    assert_eq!(l.pool(1), Some((3, 3, 0)));
    l.find_broken().unwrap();
    for _ in 0..3 {
        assert!(l.free(&stock, 30).is_empty());
    }
    assert_eq!(l.pool(1), None, "a key with no holder and no waiter is forgotten");
}

#[test]
fn crossing_key_sets_never_deadlock_and_are_granted_all_or_nothing() {
    let mut l = lines();
    let ab = [want(1, 1, 1), want(2, 1, 1)];
    let ba = [want(2, 1, 1), want(1, 1, 1)];
    granted(l.ask(ab.to_vec(), true, false, "x", 0, none));
    let (y, _) = queued(l.ask(ba.to_vec(), true, false, "y", 0, none));
    // x ends (a hold ends whole): y takes both keys at once.
    assert_eq!(l.free(&ab, 1), vec![Granted { seq: y, wants: ba.to_vec(), payload: "y" }]);
    assert_eq!(l.pool(1), Some((1, 1, 0)));
    assert_eq!(l.pool(2), Some((1, 1, 0)));
    l.find_broken().unwrap();
}

#[test]
fn a_multi_key_request_waits_until_every_key_is_free_and_holds_up_later_ones() {
    let mut l = lines();
    granted(l.ask(vec![want(1, 1, 1)], true, false, "holder-of-1", 0, none));
    // b wants {1, 2}: 2 is free, 1 is not: nothing is taken.
    let (b, _) = queued(l.ask(vec![want(1, 1, 1), want(2, 1, 1)], true, false, "b", 0, none));
    assert_eq!(l.pool(2), Some((1, 0, 1)), "no permit of 2 is taken while b waits");
    // c wants only 2, which is free: it arrived after b, which names 2 and waits.
    let (c, ahead) = queued(l.ask(vec![want(2, 1, 1)], true, false, "c", 0, none));
    assert_eq!(ahead, 1);
    let got: Vec<Seq> = l.free(&[want(1, 1, 1)], 5).into_iter().map(|g| g.seq).collect();
    assert_eq!(got, vec![b], "b gets both at once; c still waits behind it");
    let got: Vec<Seq> = l.free(&[want(1, 1, 1), want(2, 1, 1)], 6).into_iter().map(|g| g.seq).collect();
    assert_eq!(got, vec![c]);
    l.find_broken().unwrap();
}

#[test]
fn strict_fifo_a_later_request_that_would_fit_waits_behind_the_first() {
    let mut l = lines();
    granted(l.ask(vec![want(1, 2, 3)], true, false, "two", 0, none));
    let (big, _) = queued(l.ask(vec![want(1, 2, 3)], true, false, "big", 0, none));
    // One permit is free and "small" needs one, but "big" is first.
    let (small, _) = queued(l.ask(vec![want(1, 1, 3)], true, false, "small", 0, none));
    assert_eq!(l.pool(1), Some((3, 2, 2)));
    // Freed: big takes 2, small takes the third, in arrival order, in one step.
    let got: Vec<(Seq, &str)> = l.free(&[want(1, 2, 3)], 1).into_iter().map(|g| (g.seq, g.payload)).collect();
    assert_eq!(got, vec![(big, "big"), (small, "small")]);
    // The first leaving unblocks the next.
    let mut l = lines();
    granted(l.ask(vec![want(1, 2, 3)], true, false, "two", 0, none));
    let (big, _) = queued(l.ask(vec![want(1, 2, 3)], true, false, "big", 0, none));
    let (small, _) = queued(l.ask(vec![want(1, 1, 3)], true, false, "small", 0, none));
    let (who, granted) = l.leave(big, 1).unwrap();
    assert_eq!((who, names(granted)), ("big", vec!["small"]));
    assert!(l.leave(big, 1).is_none(), "gone already");
    assert!(l.leave(small, 1).is_none(), "granted already");
    l.find_broken().unwrap();
}

#[test]
fn bad_requests_are_refused_naming_the_field_and_change_nothing() {
    let mut l = lines();
    granted(l.ask(vec![want(1, 1, 5)], true, false, "a", 0, none));
    let cases: Vec<(Vec<Want<u32>>, Refusal)> = vec![
        (vec![], Refusal::KeyCount { keys: 0 }),
        ((0..17).map(|k| want(k + 10, 1, 1)).collect(), Refusal::KeyCount { keys: 17 }),
        (vec![want(2, 1, 1), want(3, 1, 1), want(2, 1, 1)], Refusal::DuplicateKey { first: 0, at: 2 }),
        (vec![want(2, 1, 0)], Refusal::Capacity { at: 0, capacity: 0 }),
        (vec![want(2, 1, CAPACITY_MAX + 1)], Refusal::Capacity { at: 0, capacity: CAPACITY_MAX + 1 }),
        (vec![want(2, 0, 4)], Refusal::Count { at: 0, count: 0, capacity: 4 }),
        (vec![want(2, 5, 4)], Refusal::Count { at: 0, count: 5, capacity: 4 }),
        (vec![want(2, 1, 1), want(1, 1, 3)], Refusal::CapacityMismatch { at: 1, asked: 3, has: 5 }),
    ];
    for (wants, refusal) in cases {
        match l.ask(wants.clone(), true, false, "bad", 0, none) {
            Err((got, "bad")) => assert_eq!(got, refusal, "{wants:?}"),
            other => panic!("{wants:?}: {other:?}"),
        }
        assert_eq!((l.keys(), l.waiters(), l.pool(1)), (1, 0, Some((5, 1, 0))), "nothing changed");
    }
    let message = Refusal::CapacityMismatch { at: 1, asked: 3, has: 5 }.message();
    assert!(message.contains("says 3") && message.contains("capacity 5"), "{message}");
    // Once the key is forgotten, a new capacity is taken.
    l.free(&[want(1, 1, 5)], 1);
    granted(l.ask(vec![want(1, 1, 3)], true, false, "new", 2, none));
    assert_eq!(l.pool(1), Some((3, 1, 0)));
}

#[test]
fn a_full_queue_is_busy() {
    let mut l: Lines<u32, u32> = Lines::new(2);
    granted(l.ask(vec![want(1, 1, 1)], true, false, 0, 0, none));
    queued(l.ask(vec![want(1, 1, 1)], true, false, 1, 0, none));
    queued(l.ask(vec![want(2, 1, 1), want(1, 1, 1)], true, false, 2, 0, none));
    assert!(matches!(l.ask(vec![want(1, 1, 1)], true, false, 3, 0, none), Ok(Asked::Busy(3))));
    assert_eq!(l.pool(2), Some((1, 0, 1)), "key 2 has its waiter and no holder");
    l.find_broken().unwrap();
}

#[test]
fn places_are_told_at_once_then_at_most_once_a_second_and_only_when_they_change() {
    let mut l: Lines<u32, u32> = Lines::new(100);
    let key = [want(1, 1, 1)];
    granted(l.ask(key.to_vec(), true, false, 0, 0, none));
    let mut seqs = Vec::new();
    for who in 1..=10u32 {
        let (seq, ahead) = queued(l.ask(key.to_vec(), true, who % 2 == 0, who, 0, none));
        assert_eq!(ahead, who - 1);
        seqs.push(seq);
    }
    assert_eq!(l.next_place_due(), Some(POSITION_EVERY_MS));
    assert!(l.places_due(POSITION_EVERY_MS - 1).is_empty(), "not before a second");
    assert!(l.places_due(POSITION_EVERY_MS).is_empty(), "nobody moved: nothing told");
    // Three hand-offs within the second: each watcher hears once, with its new place.
    for t in [1_100, 1_200, 1_300] {
        assert_eq!(l.free(&key, t).len(), 1);
    }
    assert!(l.places_due(1_999).is_empty());
    let told: Vec<(u32, u32)> = l.places_due(2_000).into_iter().map(|(p, who)| (*who, p.ahead)).collect();
    assert_eq!(told, vec![(4, 0), (6, 2), (8, 4), (10, 6)]);
    let rate = l.places_due(3_000);
    assert!(rate.is_empty(), "unchanged since");
    // A waiter that leaves is never told again.
    l.leave(seqs[9], 3_100).unwrap();
    l.free(&key, 3_200);
    let told: Vec<(u32, u32, u32)> =
        l.places_due(4_000).into_iter().map(|(p, who)| (*who, p.ahead, p.grants_per_ks)).collect();
    assert_eq!(told.iter().map(|t| (t.0, t.1)).collect::<Vec<_>>(), vec![(6, 1), (8, 3)]);
    assert!(told.iter().all(|t| t.2 > 0), "a grant rate goes with each place: {told:?}");
    l.find_broken().unwrap();
}

/// The first place a waiter hears carries the key's measured grant rate, as later ones
/// do: a client can estimate its wait from the first frame on. The places count the
/// keys every waiter names.
#[test]
fn the_first_place_carries_the_key_s_grant_rate() {
    let mut l = lines();
    let t0 = 100_000;
    let stock = [want(1, 1, 2)];
    granted(l.ask(stock.to_vec(), true, true, "a", t0, none));
    granted(l.ask(stock.to_vec(), true, true, "b", t0 + 500, none));
    let (c, _) = queued(l.ask(stock.to_vec(), true, true, "c", t0 + 2_000, none));
    // Two grants in the 2 s since the key's window began: one a second.
    assert_eq!(l.grants_per_ks(c, t0 + 2_000), 1_000);
    // A key nobody was granted yet has no rate; the longest queue's key is the one.
    let (d, _) = queued(l.ask(vec![want(2, 1, 1), want(1, 1, 2)], true, true, "d", t0 + 2_000, none));
    assert_eq!(l.grants_per_ks(d, t0 + 2_000), 1_000, "key 1, where one waits ahead");
    assert_eq!(l.places(), 3);
    assert_eq!(l.grants_per_ks(99, t0), 0, "not waiting");
    l.leave(d, t0 + 2_100);
    assert_eq!(l.places(), 1);
    l.find_broken().unwrap();
}

#[test]
fn the_place_of_a_multi_key_request_is_that_in_its_longest_queue() {
    let mut l: Lines<u32, u32> = Lines::new(100);
    granted(l.ask(vec![want(1, 1, 1), want(2, 1, 1)], true, false, 0, 0, none));
    queued(l.ask(vec![want(2, 1, 1)], true, false, 1, 0, none));
    queued(l.ask(vec![want(2, 1, 1)], true, false, 2, 0, none));
    queued(l.ask(vec![want(1, 1, 1)], true, false, 3, 0, none));
    let (_, ahead) = queued(l.ask(vec![want(1, 1, 1), want(2, 1, 1)], true, true, 4, 0, none));
    assert_eq!(ahead, 2, "two ahead on key 2, one on key 1");
    assert_eq!(l.queued_keys(), 2);
    l.find_broken().unwrap();
}

#[test]
fn permits_held_outside_the_lines_count_once_a_line_is_made() {
    let mut l: Lines<u32, u32> = Lines::new(100);
    // Key 1 has a holder of its own (capacity 1): a request for it waits, one of
    // another capacity is refused naming both numbers.
    let held = |k: u32| u32::from(k == 1);
    match l.ask(vec![want(1, 1, 4)], true, false, 9, 0, held) {
        Err((Refusal::CapacityMismatch { at: 0, asked: 4, has: 1 }, 9)) => {}
        other => panic!("{other:?}"),
    }
    let (seq, _) = queued(l.ask(vec![want(2, 1, 1), want(1, 1, 1)], true, false, 1, 0, held));
    assert_eq!(l.pool(1), Some((1, 1, 1)), "the holder of its own counts");
    assert_eq!(l.pool(2), Some((1, 0, 1)));
    assert_eq!(names(l.free(&[want(1, 1, 1)], 1)), vec![1], "its end hands both keys on");
    assert_eq!(l.wants(seq), None);
    // A new leader's lines start from the pooled holds it applied.
    let mut l: Lines<u32, u32> = Lines::new(100);
    l.seed(7, 3, 2);
    queued(l.ask(vec![want(7, 2, 3)], true, false, 1, 0, none));
    assert_eq!(names(l.free(&[want(7, 1, 3)], 1)), vec![1]);
    let drained = l.drain();
    assert!(drained.is_empty() && l.keys() == 0);
}

// ---------------------------------------------------------------------------------
// Random histories against a plain model: linear scans over a list of waiters.

const CAPACITIES: [u32; 4] = [1, 1, 2, 3];

#[derive(Clone, Debug)]
enum Op {
    /// Keys (indexes into CAPACITIES) and a count draw for each; may wait.
    Ask(Vec<(u32, u32)>, bool),
    /// End the hold with this index among the current ones.
    Free(usize),
    /// The waiter with this index among the current ones leaves.
    Leave(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::collection::vec((0u32..4, 0u32..8), 1..=3), any::<bool>())
            .prop_map(|(mut keys, wait)| {
                keys.sort_by_key(|k| k.0);
                keys.dedup_by_key(|k| k.0);
                Op::Ask(keys, wait)
            }),
        3 => (0usize..8).prop_map(Op::Free),
        1 => (0usize..8).prop_map(Op::Leave),
    ]
}

#[derive(Default)]
struct Model {
    holds: Vec<(u32, Vec<Want<u32>>)>,
    waiting: Vec<(Seq, u32, Vec<Want<u32>>)>,
}

impl Model {
    fn in_use(&self, key: u32) -> u32 {
        self.holds.iter().flat_map(|(_, w)| w).filter(|w| w.key == key).map(|w| w.count).sum()
    }

    fn fits(&self, wants: &[Want<u32>], before: Option<Seq>) -> bool {
        wants.iter().all(|w| {
            let earlier = self
                .waiting
                .iter()
                .any(|(s, _, ws)| before.is_none_or(|b| *s < b) && ws.iter().any(|x| x.key == w.key));
            !earlier && self.in_use(w.key) + w.count <= CAPACITIES[w.key as usize]
        })
    }

    /// Grants every waiter that meets the rule, oldest first, until none does.
    fn settle(&mut self) -> Vec<u32> {
        let mut granted = Vec::new();
        while let Some(i) = (0..self.waiting.len()).find(|&i| {
            let (seq, _, wants) = &self.waiting[i];
            self.fits(wants, Some(*seq))
        }) {
            let (_, who, wants) = self.waiting.remove(i);
            self.holds.push((who, wants));
            granted.push(who);
        }
        granted
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_match_the_model_and_keep_every_rule(ops in proptest::collection::vec(op(), 1..80)) {
        let mut l: Lines<u32, u32> = Lines::new(3);
        let mut m = Model::default();
        let mut who = 0u32;
        for (t, op) in ops.into_iter().enumerate() {
            let now = t as u64 * 100;
            match op {
                Op::Ask(keys, wait) => {
                    who += 1;
                    let wants: Vec<Want<u32>> = keys
                        .iter()
                        .map(|&(k, c)| want(k, 1 + c % CAPACITIES[k as usize], CAPACITIES[k as usize]))
                        .collect();
                    let fits = m.fits(&wants, None);
                    let full = wants.iter().any(|w| {
                        m.waiting.iter().filter(|(_, _, ws)| ws.iter().any(|x| x.key == w.key)).count() >= 3
                    });
                    match l.ask(wants.clone(), wait, true, who, now, none) {
                        Ok(Asked::Granted(x)) => {
                            prop_assert!(fits, "granted {x} against the rule");
                            m.holds.push((x, wants));
                        }
                        Ok(Asked::Queued { seq, ahead }) => {
                            prop_assert!(!fits && wait && !full);
                            let most = wants
                                .iter()
                                .map(|w| m.waiting.iter().filter(|(_, _, ws)| ws.iter().any(|x| x.key == w.key)).count())
                                .max()
                                .unwrap();
                            prop_assert_eq!(ahead as usize, most);
                            m.waiting.push((seq, who, wants));
                        }
                        Ok(Asked::Busy(_)) => prop_assert!(!fits && (!wait || full)),
                        Err((refusal, _)) => prop_assert!(false, "refused: {}", refusal.message()),
                    }
                }
                Op::Free(i) => {
                    if m.holds.is_empty() {
                        continue;
                    }
                    let (_, wants) = m.holds.remove(i % m.holds.len());
                    let got: Vec<u32> = names(l.free(&wants, now));
                    prop_assert_eq!(got, m.settle());
                }
                Op::Leave(i) => {
                    if m.waiting.is_empty() {
                        continue;
                    }
                    let (seq, w, _) = m.waiting.remove(i % m.waiting.len());
                    let (left, granted) = l.leave(seq, now).expect("waiting");
                    prop_assert_eq!(left, w);
                    prop_assert_eq!(names(granted), m.settle());
                }
            }
            if let Err(broken) = l.find_broken() {
                prop_assert!(false, "{}", broken);
            }
            for k in 0..4u32 {
                prop_assert!(m.in_use(k) <= CAPACITIES[k as usize]);
                let waiters = m.waiting.iter().filter(|(_, _, ws)| ws.iter().any(|x| x.key == k)).count();
                let expect = (m.in_use(k) > 0 || waiters > 0).then_some((CAPACITIES[k as usize], m.in_use(k), waiters));
                prop_assert_eq!(l.pool(k), expect);
            }
            // Liveness: the oldest waiter is granted once its keys have the permits.
            if let Some((_, _, wants)) = m.waiting.first() {
                prop_assert!(!wants.iter().all(|w| m.in_use(w.key) + w.count <= CAPACITIES[w.key as usize]));
            }
        }
    }
}
