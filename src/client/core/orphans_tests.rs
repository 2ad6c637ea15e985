//! Unit tests of the orphan records (`orphans.rs`): claims, late grants, the second look,
//! a late write moving the window, the open count and pruning.

use super::*;

#[test]
fn a_look_that_finds_nothing_is_taken_again_one_commit_margin_later() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let id = record(&mut orphans, now);
    orphans.checking(id, OpId(1));
    orphans.not_found(id, now + Duration::from_secs(5));
    assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(10)));
    orphans.checking(id, OpId(2));
    orphans.not_found(id, now + Duration::from_secs(10));
    assert_eq!(orphans.outstanding(), 0, "two looks, then done");
}

fn record(orphans: &mut Orphans, now: Instant) -> OrphanId {
    orphans.open(
        "k".into(),
        "o".into(),
        Duration::from_secs(30),
        Duration::ZERO,
        now,
        now + Duration::from_secs(5),
        now,
    )
}

#[test]
fn a_late_grant_goes_to_the_resolve_that_claimed_the_record_and_else_is_released() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let id = record(&mut orphans, now);
    assert_eq!(orphans.claim(id, OpId(6), "k", "other", now), Claim::Missing, "another acquire's id");
    assert_eq!(
        orphans.claim(id, OpId(7), "k", "o", now),
        Claim::Claimed { settle_at: now + Duration::from_secs(5) }
    );
    assert_eq!(orphans.late_grant(id, now), Some(LateGrant::ToResolve(OpId(7))));
    orphans.unclaim(id, OpId(7), now);
    assert_eq!(orphans.late_grant(id, now), Some(LateGrant::Release { key: "k".into(), owner: "o".into() }));
    assert_eq!(orphans.claim(id, OpId(8), "k", "o", now), Claim::Done { released: true });
    assert_eq!(orphans.outstanding(), 0);
}

#[test]
fn a_resolve_that_gives_up_hands_the_record_back_to_the_background_check() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let id = record(&mut orphans, now);
    orphans.claim(id, OpId(1), "k", "o", now);
    assert_eq!(orphans.next_check(), None, "claimed: no background check");
    orphans.unclaim(id, OpId(1), now);
    assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(5)));
    assert_eq!(orphans.due(now + Duration::from_secs(5)), vec![(id, "k".to_owned())]);
    orphans.checking(id, OpId(2));
    orphans.check_failed(id, false, now + Duration::from_secs(6));
    assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(6) + ORPHAN_RETRY));
    orphans.checking(id, OpId(3));
    orphans.check_failed(id, false, now + Duration::from_secs(40));
    assert_eq!(orphans.outstanding(), 0, "past settle + lease it gives up");
}

#[test]
fn a_frame_written_late_moves_the_window_and_its_end_by_as_much() {
    let now = Instant::now();
    let s = Duration::from_secs;
    let mut orphans = Orphans::new(s(5));
    // Opened at `now` with a 2 s wait: settles at now + 5 s, gives up 30 s later.
    let id = orphans.open("k".into(), "o".into(), s(30), s(2), now, now + s(5), now);
    // Written at now + 1 s: a grant can come until 1 + 2 + 5 = 8 s.
    orphans.written(id, now + s(1));
    let r = orphans.get(id).unwrap();
    assert_eq!((r.settle_at, r.give_up_at), (now + s(8), now + s(38)));
    assert_eq!(orphans.next_check(), Some(now + s(8)), "its check waits for the new window");
    assert_eq!(orphans.due(now + s(7)), vec![]);
    // A write that ends inside the window changes nothing.
    orphans.written(id, now);
    let r = orphans.get(id).unwrap();
    assert_eq!((r.settle_at, r.give_up_at), (now + s(8), now + s(38)));
    // Exactly at the window's end: nothing either.
    orphans.written(id, now + s(1));
    assert_eq!(orphans.get(id).unwrap().settle_at, now + s(8));
    // A claimed record's window moves, but no background check is scheduled.
    orphans.claim(id, OpId(3), "k", "o", now);
    orphans.written(id, now + s(2));
    assert_eq!(orphans.get(id).unwrap().settle_at, now + s(9));
    assert_eq!(orphans.next_check(), None, "claimed: the resolve checks");
    assert_eq!(orphans.get(id).unwrap().state, State::Claimed(OpId(3)));
}

#[test]
fn a_record_checked_later_than_its_new_window_keeps_its_check() {
    let now = Instant::now();
    let s = Duration::from_secs;
    let mut orphans = Orphans::new(s(5));
    let id = orphans.open("k".into(), "o".into(), s(30), Duration::ZERO, now, now + s(5), now);
    orphans.checking(id, OpId(1));
    orphans.check_failed(id, false, now + s(20));
    assert_eq!(orphans.next_check(), Some(now + s(21)));
    // Written at 10 s: the window ends at 15 s, before the check already due at 21 s.
    orphans.written(id, now + s(10));
    assert_eq!(orphans.next_check(), Some(now + s(21)));
}

#[test]
fn the_count_of_open_records_follows_every_move_in_and_out_of_done() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let id = record(&mut orphans, now);
    assert_eq!(orphans.outstanding(), 1);
    orphans.finish(id, false, now);
    assert_eq!(orphans.outstanding(), 0);
    orphans.finish(id, true, now);
    assert_eq!(orphans.outstanding(), 0, "done twice counts once");
    orphans.set(id, State::Watching, Some(now));
    assert_eq!(orphans.outstanding(), 1, "open again");
    orphans.set(id, State::Checking(OpId(2)), None);
    assert_eq!(orphans.outstanding(), 1, "still open");
    orphans.finish(id, false, now);
    assert_eq!(orphans.outstanding(), 0);
}

#[test]
fn a_check_is_only_the_check_of_its_own_record_in_its_own_state() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let id = record(&mut orphans, now);
    assert!(!orphans.is_checking(id, OpId(1)), "watching");
    orphans.checking(id, OpId(1));
    assert!(orphans.is_checking(id, OpId(1)));
    assert!(!orphans.is_checking(id, OpId(2)), "another op");
    assert!(!orphans.is_checking(OrphanId(99), OpId(1)), "no such record");
    orphans.claim(id, OpId(3), "k", "o", now);
    assert!(!orphans.is_checking(id, OpId(1)), "a resolve took it over");
}

#[test]
fn finished_records_are_kept_for_a_late_resolve_then_dropped() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let ids: Vec<OrphanId> = (0..RECORDS_MAX / 4).map(|_| record(&mut orphans, now)).collect();
    let (old, young) = ids.split_at(ids.len() / 2);
    for &id in old {
        orphans.finish(id, false, now);
    }
    let later = now + Duration::from_secs(60);
    for &id in young {
        orphans.finish(id, true, later);
    }
    // Just within DONE_KEPT of the old ones: every record kept.
    record(&mut orphans, now + DONE_KEPT - Duration::from_millis(1));
    assert_eq!(orphans.records.len(), RECORDS_MAX / 4 + 1);
    assert_eq!(orphans.claim(old[0], OpId(1), "k", "o", now), Claim::Done { released: false });
    // DONE_KEPT after the old ones finished: those go, the younger and open ones stay.
    record(&mut orphans, now + DONE_KEPT);
    assert_eq!(orphans.records.len(), young.len() + 2);
    assert_eq!(orphans.claim(old[0], OpId(1), "k", "o", now), Claim::Missing);
    assert_eq!(orphans.claim(young[0], OpId(1), "k", "o", now), Claim::Done { released: true });
    assert_eq!(orphans.outstanding(), 2);
}

#[test]
fn below_a_quarter_of_the_cap_nothing_is_pruned() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let n = RECORDS_MAX / 4 - 1;
    for _ in 0..n {
        let id = record(&mut orphans, now);
        orphans.finish(id, false, now);
    }
    record(&mut orphans, now + DONE_KEPT * 2);
    assert_eq!(orphans.records.len(), n + 1, "too few records to be worth a sweep");
    // A quarter of the cap: the sweep runs.
    record(&mut orphans, now + DONE_KEPT * 2);
    assert_eq!(orphans.records.len(), 2, "only the open records are left");
}

#[test]
fn at_the_cap_the_finished_records_opened_first_go_first_and_open_ones_never() {
    let now = Instant::now();
    let mut orphans = Orphans::new(Duration::from_secs(5));
    let first = record(&mut orphans, now);
    let ids: Vec<OrphanId> = (1..RECORDS_MAX).map(|_| record(&mut orphans, now)).collect();
    // Finished in reverse order: the first opened goes first, not the first finished.
    for (n, &id) in ids[..10].iter().enumerate().rev() {
        orphans.finish(id, false, now + Duration::from_millis(n as u64));
    }
    assert_eq!(orphans.records.len(), RECORDS_MAX);
    record(&mut orphans, now);
    assert_eq!(orphans.records.len(), RECORDS_MAX, "one finished record made room");
    assert!(orphans.get(ids[0]).is_none(), "the finished record opened first");
    assert!(orphans.get(ids[1]).is_some());
    assert!(orphans.get(first).is_some(), "open: never dropped");
    // With nothing finished left beyond the cap, open records are all kept.
    for _ in 0..20 {
        record(&mut orphans, now);
    }
    assert_eq!(orphans.records.len(), RECORDS_MAX + 11, "nine finished went, then none could");
    assert_eq!(orphans.outstanding(), RECORDS_MAX + 11);
}
