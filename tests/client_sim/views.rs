//! What the core tells the I/O and the API about itself — connected or not, why an
//! address is not, which addresses it knows and dials, what work is outstanding, when
//! an operation next needs the time — checked in scripted worlds: the simulator's
//! callers never read these, so only these tests guard them (docs/safety.md, the
//! client group's survivors).

use super::*;

fn addr(n: usize) -> String {
    format!("10.0.0.{}:5225", n + 1)
}

#[test]
fn a_connected_client_says_so_and_names_the_leader_first() {
    let w = script(3);
    assert!(w.core.is_connected());
    assert!(w.core.connection_errors().is_empty(), "{:?}", w.core.connection_errors());
    let leader = w.leader().unwrap();
    let known = w.core.known_addrs();
    assert_eq!(known.first(), Some(&addr(leader)), "the leader first: {known:?}");
    for n in 0..3 {
        assert!(known.contains(&addr(n)), "{known:?}");
        assert!(w.core.dials(&addr(n)), "dials {}", addr(n));
    }
    assert!(!w.core.dials("10.9.9.9:5225"), "an address it was never given");
    assert!(!w.core.is_shut_down());
    assert_eq!(w.core.outstanding(), 0);
}

#[test]
fn a_client_that_cannot_connect_names_each_address_and_why() {
    let mut w = World::new(Params { trace: true, ..Params::script(2) });
    // Both nodes mistaken (a wrong secret): every dial fails with a lasting mistake.
    w.mistake(0, 60 * SEC);
    w.mistake(1, 60 * SEC);
    run(&mut w, 2 * SEC);
    assert!(!w.core.is_connected());
    let errors = w.core.connection_errors();
    for n in 0..2 {
        let (_, why) = errors
            .iter()
            .find(|(a, _)| *a == addr(n))
            .unwrap_or_else(|| fail(&w, format!("no error for {}: {errors:?}", addr(n))));
        assert!(why.contains("certificate"), "the cause is named: {why}");
    }
}

#[test]
fn outstanding_work_counts_releases_and_open_records_until_they_end() {
    let (mut w, token) = held(30);
    // A release that gets no answer (the node is paused) stays outstanding.
    w.pause(0, 3 * SEC);
    let r = w.release(Some(SCRIPT), "k", "o-1", token).unwrap().unwrap();
    assert_eq!(w.core.outstanding(), 1, "the release under way");
    let second = w.acquire(SCRIPT, "k2", "o-2", 30, ms(0)).unwrap();
    run(&mut w, 2 * SEC);
    assert!(w.core.outstanding() >= 1, "still releasing");
    run(&mut w, 20 * SEC);
    assert!(w.outcomes.contains_key(&r) && w.outcomes.contains_key(&second));
    all_released(&w);
    // Each kind counts once: a release and an open record together are two.
    assert_eq!(w.core.outstanding(), 0);
}

#[test]
fn close_shuts_down_only_once_the_background_work_is_done() {
    let (mut w, token) = held(30);
    w.pause(0, 2 * SEC);
    // A dropped lock's release, in the background, with the node paused.
    w.release(None, "k", "o-1", token).unwrap();
    w.core.close(w.instant(w.now));
    assert!(!w.core.is_shut_down(), "a release is still under way");
    run(&mut w, 10 * SEC);
    assert!(w.core.is_shut_down(), "the release ended, then the client shut down");
    assert!(w.holders().is_empty());
}

#[test]
fn an_operation_reports_its_next_deadline_while_it_runs_and_none_once_it_ended() {
    let mut w = script(1);
    let holder = w.acquire(SCRIPT, "k", "holder", 30, ms(0)).unwrap();
    run(&mut w, SEC);
    granted(&w, holder);
    let op = w.acquire(SCRIPT, "k", "waiter", 30, ms(2000)).unwrap();
    let deadline =
        w.core.op_deadline(op).unwrap_or_else(|| fail(&w, "a waiting acquire has a deadline".into()));
    // The answer's budget: the wait plus the commit margin, from about now.
    let budget = w.t(deadline).saturating_sub(w.now);
    assert!((2 * SEC..=8 * SEC).contains(&budget), "deadline {budget} µs away");
    run(&mut w, 10 * SEC);
    assert!(w.outcomes.contains_key(&op));
    assert_eq!(w.core.op_deadline(op), None, "an ended operation has no deadline");
}

#[test]
fn the_next_request_id_can_be_set_and_pending_ids_are_skipped() {
    let mut w = script(1);
    w.core.set_next_request_id(4000);
    let op = w.acquire(SCRIPT, "k", "o-1", 30, ms(0)).unwrap();
    run(&mut w, SEC);
    granted(&w, op);
    let ids = w.checker.request_ids();
    assert!(ids.iter().any(|id| (4000..4004).contains(id)), "ids sent: {ids:?}");
}

#[test]
fn an_indeterminate_acquire_is_outstanding_work_until_its_record_closes() {
    let mut w = script(1);
    w.pause(0, 12 * SEC);
    let op = w.acquire(SCRIPT, "k", "o-1", 30, ms(0)).unwrap();
    run(&mut w, 11 * SEC);
    indeterminate(&w, op);
    // No release under way, one orphan record open.
    assert_eq!(w.core.outstanding(), 1);
    run(&mut w, 40 * SEC);
    all_released(&w);
}

#[test]
fn a_dial_that_got_somewhere_says_how_far_while_it_lasts() {
    let mut w = World::new(Params { trace: true, ..Params::script(1) });
    // The node does not answer: the first dial stays under way.
    w.partition(0, 60 * SEC);
    run(&mut w, 100 * MS);
    w.core.on_dial_note(ticketing::client::core::SlotId(1), "a TCP connection, no greeting yet".into());
    let errors = w.core.connection_errors();
    assert!(
        errors.iter().any(|(a, why)| *a == addr(0) && why == "a TCP connection, no greeting yet"),
        "{errors:?}"
    );
}

#[test]
fn an_unconfirmed_release_is_checked_until_the_lease_can_have_ended_and_no_sooner() {
    let mut w = script(1);
    let op = w.acquire(SCRIPT, "k", "o-1", 30, ms(0)).unwrap();
    run(&mut w, 200 * MS);
    let token = granted(&w, op);
    let granted_at = w.now;
    // The node freezes: the release is unconfirmed, and the client keeps a record of the
    // token until the server's lease can have ended: the local deadline (30 s after the
    // ACQUIRE went out) plus the commit margin.
    w.pause(0, 60 * SEC);
    w.release(Some(SCRIPT), "k", "o-1", token).unwrap();
    run(&mut w, granted_at + 33 * SEC);
    assert_eq!(w.core.outstanding(), 1, "still checking 3 s after the local deadline");
    run(&mut w, granted_at + 45 * SEC);
    assert_eq!(w.core.outstanding(), 0, "the record closed once the lease surely ended");
}

#[test]
fn the_first_status_read_after_an_election_names_the_leader_whoever_answers_it() {
    // The client asks STATUS of the nodes in turn while no leader is known; each
    // leader in turn, so that one of the runs asks the leader itself first.
    for leader in 0..3 {
        let mut w = World::new(Params { trace: true, ..Params::script(3) });
        w.set_leader(None);
        run(&mut w, 2 * SEC);
        assert!(w.core.known_addrs().len() == 3);
        w.set_leader(Some(leader));
        let elected = w.now;
        // The next read — of the leader itself ("role=leader") or of a follower
        // ("leader=ADDR") — makes the leader the first address the client knows.
        while w.core.known_addrs().first() != Some(&addr(leader)) {
            if w.now > elected + 700 * MS {
                fail(&w, format!("leader {leader}: not known 700 ms after the election"));
            }
            let next = w.now + 10 * MS;
            run(&mut w, next);
        }
        // Known: the reads while none was known (every 500 ms) stop.
        let asked = w.statuses;
        let until = w.now + 5 * SEC;
        run(&mut w, until);
        // At most the read that follows a leader change (of the leader, for its voter
        // set), and one more if the change was learned from a follower.
        let more = w.statuses - asked;
        assert!(more <= 2, "leader {leader}: {more} STATUS reads in the 5 s after the leader was known");
    }
}
