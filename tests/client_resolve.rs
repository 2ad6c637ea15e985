//! `Client::resolve` (docs/client.md, "Resolving an indeterminate acquire") against
//! the real server behind the fault proxy: what happened to an ACQUIRE whose answer
//! was lost is found out with a QUERY, never by sending it again.

mod common;
mod proxy;

use std::time::{Duration, Instant};

use common::{connect, eventually, ServerProcess, TOKEN};
use proxy::{Dir, Proxy};
use ticketing::client::{AcquireError, Client, IndeterminateCause, ReleaseOutcome, Resolution};
use ticketing::proto::frame::{Request, Response};

const LEASE: Duration = Duration::from_secs(30);

fn setup(owner: &str, margin: Duration) -> (ServerProcess, Proxy, Client) {
    let server = common::start_server(&[]);
    let proxy = Proxy::start(server.addr);
    let client = Client::builder()
        .addrs([proxy.addr_string()])
        .auth_token(TOKEN)
        .owner(owner)
        .commit_margin(margin)
        .idle_ping(Duration::from_secs(3600))
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || proxy.live() == 2));
    client.ping().unwrap();
    // Both handshakes done: HELLO (40) + WELCOME (at least 51) reached the client twice.
    assert!(eventually(Duration::from_secs(5), || proxy.forwarded(Dir::ToClient) >= 2 * (40 + 51)));
    (server, proxy, client)
}

fn holder(server: &ServerProcess, key: &str) -> Option<(String, u64)> {
    match connect(server.addr).call(1, &Request::Query { key: key.into() }) {
        Response::Free => None,
        Response::Holder { owner, token, .. } => Some((owner, token)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_grant_whose_answer_was_lost_is_resolved_as_held_and_can_be_released() {
    let (server, proxy, client) = setup("resolver", Duration::from_secs(1));
    proxy.cut_after(Dir::ToClient, 0); // the G is lost with its connection
    let err = client.acquire("seat:1", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ConnectionLost));
    let (_, token) = holder(&server, "seat:1").expect("the grant happened");
    let start = Instant::now();
    let Resolution::Held(lock) = client.resolve(&err, Duration::from_secs(120)) else {
        panic!("not resolved as held")
    };
    // Resolved by the answer (a second or two), not by waiting out the 120 s given.
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
    assert_eq!((lock.key(), lock.owner(), lock.token()), ("seat:1", "resolver", token));
    assert!(
        lock.remaining() > Duration::from_secs(20) && lock.remaining() <= LEASE,
        "{:?}",
        lock.remaining()
    );
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(holder(&server, "seat:1"), None);
}

#[test]
fn an_acquire_that_never_executed_is_resolved_as_not_held() {
    let (server, proxy, client) = setup("resolver", Duration::from_secs(1));
    proxy.cut_after(Dir::ToServer, 5); // five bytes reach the server: nothing executes
    let err = client.acquire("seat:2", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ConnectionLost));
    assert!(matches!(client.resolve(&err, Duration::from_secs(10)), Resolution::NotHeld));
    assert_eq!(holder(&server, "seat:2"), None);
    // A definitive error needs no resolving; a window that cannot pass in time is Unknown.
    assert!(matches!(client.resolve(&AcquireError::Busy, Duration::ZERO), Resolution::NotHeld));
    proxy.cut_after(Dir::ToClient, 0);
    let err = client.acquire("seat:3", LEASE, Duration::ZERO).unwrap_err();
    assert!(matches!(client.resolve(&err, Duration::from_millis(10)), Resolution::Unknown));
}

#[test]
fn a_late_grant_is_kept_for_the_caller_that_resolves_it() {
    // Answers take 1.5 s; the caller gives up after the 200 ms commit margin.
    let (server, proxy, client) = setup("late-resolver", Duration::from_millis(200));
    proxy.delay(Dir::ToClient, Duration::from_millis(1500));
    let err = client.acquire("seat:4", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::NoAnswer));
    let Resolution::Held(lock) = client.resolve(&err, Duration::from_secs(10)) else { panic!("not held") };
    // The late G arrives meanwhile (answers take 1.5 s); without resolve the client
    // would release it.
    // sleep: a window past the late G's arrival in which no release may be sent.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(holder(&server, "seat:4"), Some(("late-resolver".to_owned(), lock.token())), "kept");
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(holder(&server, "seat:4"), None);
}

#[test]
fn a_hold_whose_answer_was_lost_is_resolved_as_the_whole_hold() {
    let (server, proxy, client) = setup("hold-resolver", Duration::from_secs(1));
    proxy.cut_after(Dir::ToClient, 0); // the G is lost with its connection
    let err =
        client.hold(LEASE, Duration::ZERO).key("seat:7").permits("stock:7", 2, 5).acquire().unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ConnectionLost));
    let (_, token) = holder(&server, "seat:7").expect("the grant happened");
    let Resolution::Held(lock) = client.resolve(&err, Duration::from_secs(120)) else {
        panic!("not resolved as held")
    };
    assert_eq!(lock.token(), token);
    assert_eq!(lock.keys(), [("seat:7", 1, 1), ("stock:7", 2, 5)], "the whole hold, as asked");
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(holder(&server, "seat:7"), None);
    let pool = client.pool("stock:7").unwrap();
    assert_eq!(pool.in_use, 0, "one release ended every key");
}
