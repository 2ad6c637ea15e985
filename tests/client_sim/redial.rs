//! What the core asks of the clock: a redial falls due at its backoff, and the core
//! says so through `poll_timeout` — the world wakes it only then, as the I/O does — so
//! a connection that ends is replaced within its backoff even while nothing else is
//! pending (no operation, no PING, no discovery).

use super::*;

#[test]
fn a_broken_connection_is_redialed_within_its_backoff_with_nothing_else_pending() {
    let mut w = World::new(Params { trace: true, ..Params::script(1) });
    run(&mut w, 2 * SEC);
    assert!(w.core.is_connected());
    assert_eq!(w.core.outstanding(), 0, "nothing pending: only the redial can wake the core");
    for round in 0..3 {
        let broken = w.now;
        for s in w.session_of_node(0) {
            w.break_session(s);
        }
        // The node stays up: the first redial after a session that served connects.
        let mut back = None;
        while w.now < broken + 10 * SEC {
            let next = w.now + 10 * MS;
            run(&mut w, next);
            if w.core.is_connected() {
                back = Some(w.now - broken);
                break;
            }
        }
        let back =
            back.unwrap_or_else(|| fail(&w, format!("round {round}: not connected 10 s after the break")));
        // The first backoff (100 ms, jittered) plus the dial's round trip.
        assert!(back <= 400 * MS, "round {round}: connected again {} ms after the break", back / MS);
        let calm = w.now + 2 * SEC;
        run(&mut w, calm);
    }
}
