//! The Rust client's counted and multi-key holds against the real standalone server
//! (docs/client.md, "Counted and multi-key holds"): a stock of N under contention, all
//! keys or none, one release for the whole hold, places in line, and bad input named in
//! the builder's words.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, raw, Server};
use ticketing::client::{AcquireError, ReleaseOutcome};
use ticketing::proto::frame::{Request, Response};

const LEASE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(30);

/// (capacity, in use, holds, waiters) of `key` as the server's POOL answer says.
fn pool(addr: std::net::SocketAddr, key: &str) -> (u32, u32, u32, u32) {
    match raw::connect(addr).call(1, &Request::Pool { key: key.into() }) {
        Response::Pool { capacity, in_use, holds, waiters, .. } => (capacity, in_use, holds, waiters),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stock_of_three_never_lets_more_than_three_callers_in() {
    let server = Server::new().start();
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..5)
        .map(|i| {
            let client = server.client(&format!("buyer-{i}"));
            let (inside, most, tokens) = (Arc::clone(&inside), Arc::clone(&most), Arc::clone(&tokens));
            std::thread::spawn(move || {
                for _ in 0..4 {
                    let lock = client.hold(LEASE, WAIT).permits("tickets", 1, 3).acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(lock.token());
                    // sleep: time inside the critical section, so that callers overlap.
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} inside at once");
    let mut tokens = tokens.lock().unwrap().clone();
    let n = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "every grant has its own token");
    assert_eq!(pool(server.addr, "tickets"), (0, 0, 0, 0), "all released");
}

#[test]
fn adjacent_seats_are_held_together_and_released_together() {
    let server = Server::new().start();
    let a = server.client("family-a");
    let b = server.client("family-b");
    let seats = ["seat:12:1", "seat:12:2", "seat:12:3", "seat:12:4"];
    let lock = seats.iter().fold(a.hold(LEASE, WAIT), |h, s| h.key(s)).acquire().unwrap();
    assert_eq!(lock.keys().len(), 4);
    assert!(seats.contains(&lock.key()));
    // The other family asks for two of them in the other order: it waits, holding none.
    let places = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&places);
    let waiter = std::thread::spawn(move || {
        b.hold(LEASE, WAIT)
            .key("seat:12:4")
            .key("seat:12:1")
            .on_place(move |p| seen.lock().unwrap().push(p.ahead))
            .acquire()
            .unwrap()
    });
    assert!(eventually(Duration::from_secs(10), || pool(server.addr, "seat:12:1").3 == 1));
    assert!(eventually(Duration::from_secs(10), || !places.lock().unwrap().is_empty()), "its place was told");
    assert_eq!(places.lock().unwrap()[0], 0, "nobody ahead of it: it waits for the holder");
    // One release ends the whole hold; the waiter takes both of its seats at once.
    let token = lock.token();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    let theirs = waiter.join().unwrap();
    assert!(theirs.token() > token);
    for seat in ["seat:12:2", "seat:12:3"] {
        assert_eq!(pool(server.addr, seat), (0, 0, 0, 0), "{seat} is free");
    }
    assert_eq!(pool(server.addr, "seat:12:1").1, 1);
    assert_eq!(a.query("seat:12:4").unwrap().map(|h| h.owner), Some("family-b".to_owned()));
}

#[test]
fn bad_holds_are_refused_before_any_io_naming_the_builder() {
    let server = Server::new().start();
    let c = server.client("me");
    let invalid = |r: Result<ticketing::client::Lock, AcquireError>| match r {
        Err(AcquireError::Invalid(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(invalid(c.hold(LEASE, WAIT).acquire()).contains("1 to 16 keys"));
    let many = (0..17).fold(c.hold(LEASE, WAIT), |h, i| h.key(&format!("k{i}")));
    assert!(invalid(many.acquire()).contains("names 17"));
    assert!(invalid(c.hold(LEASE, WAIT).key("a").key("a").acquire()).contains("named twice"));
    assert!(invalid(c.hold(LEASE, WAIT).permits("a", 3, 2).acquire()).contains("Hold::permits(\"a\", 3, 2)"));
    assert!(invalid(c.hold(LEASE, WAIT).permits("a", 1, 0).acquire()).contains("capacity"));
    assert!(invalid(c.hold(Duration::ZERO, WAIT).key("a").acquire()).contains("lease"));
    // The server's refusal of another capacity names both numbers.
    let _held = c.hold(LEASE, WAIT).permits("stock", 1, 5).acquire().unwrap();
    let why = invalid(c.hold(LEASE, Duration::ZERO).permits("stock", 1, 4).acquire());
    assert!(why.contains("says 4") && why.contains("capacity 5"), "{why}");
    assert!(matches!(
        c.hold(LEASE, Duration::ZERO).permits("stock", 5, 5).acquire(),
        Err(AcquireError::Busy)
    ));
}

#[test]
fn a_hold_without_a_waiting_thread_is_told_its_place_granted_whole_and_cancelled_holding_nothing() {
    let server = Server::new().start();
    let a = server.client("a");
    let b = server.client("b");
    let first = a.hold(LEASE, WAIT).key("row:1").key("row:2").acquire().unwrap();

    // b's hold of both seats waits behind a's, told its place, on no thread of its own.
    let (places, got) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(None)));
    let (p, g) = (Arc::clone(&places), Arc::clone(&got));
    let pending = b
        .hold(LEASE, WAIT)
        .key("row:2")
        .key("row:1")
        .on_place(move |place| p.lock().unwrap().push(place.ahead))
        .acquire_then(move |r| *g.lock().unwrap() = Some(r));
    assert!(
        eventually(Duration::from_secs(30), || !places.lock().unwrap().is_empty()),
        "b is told its place in line"
    );
    assert_eq!(places.lock().unwrap()[0], 0, "first in line: nobody waits ahead of b");
    assert!(got.lock().unwrap().is_none(), "not granted while a holds the seats");
    assert_eq!(first.release().unwrap(), ReleaseOutcome::Released);
    assert!(eventually(Duration::from_secs(30), || got.lock().unwrap().is_some()), "b is granted");
    let lock = got.lock().unwrap().take().unwrap().unwrap();
    let mut keys: Vec<_> = lock.keys().into_iter().map(|(k, _, _)| k.to_owned()).collect();
    keys.sort();
    assert_eq!(keys, ["row:1", "row:2"], "one lock of both keys");
    assert!(!pending.cancel(), "the operation had ended");

    // c waits behind b's hold and cancels: it ends at once and holds nothing.
    let c = server.client("c");
    let got = Arc::new(Mutex::new(None));
    let g = Arc::clone(&got);
    let pending =
        c.hold(LEASE, WAIT).key("row:1").key("row:3").acquire_then(move |r| *g.lock().unwrap() = Some(r));
    assert!(eventually(Duration::from_secs(30), || pool(server.addr, "row:1").3 == 1), "c waits in line");
    assert!(pending.cancel());
    let outcome = got.lock().unwrap().take().expect("a cancel ends the operation at once");
    assert!(matches!(outcome, Err(AcquireError::Cancelled | AcquireError::Indeterminate(_))), "{outcome:?}");
    assert_eq!(lock.release().unwrap(), ReleaseOutcome::Released);
    assert!(
        eventually(Duration::from_secs(30), || {
            let (r1, r3) = (pool(server.addr, "row:1"), pool(server.addr, "row:3"));
            (r1.1, r1.3, r3.1, r3.3) == (0, 0, 0, 0)
        }),
        "nobody holds or waits for row:1 and row:3: {:?} {:?}",
        pool(server.addr, "row:1"),
        pool(server.addr, "row:3")
    );

    // Refused arguments end at once, on this thread.
    let got = Arc::new(Mutex::new(None));
    let g = Arc::clone(&got);
    let _ = c.hold(LEASE, WAIT).key("x").key("x").acquire_then(move |r| *g.lock().unwrap() = Some(r));
    assert!(matches!(got.lock().unwrap().take(), Some(Err(AcquireError::Invalid(_)))));
}
