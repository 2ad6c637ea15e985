//! Connection management of the client against a fake server: pipelining, two
//! connections to a lone address, surviving a cut connection, reconnect backoff.

mod client_support;
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_support::*;
use common::eventually;
use ticketing::proto::frame::{Request, Response};

#[test]
fn many_threads_pipeline_on_one_client_without_mixing_answers() {
    // Answers come back out of order: each after a pause that depends on its id.
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, id, request| match request {
            Request::Query { key } => Action::ReplyAfter(
                Duration::from_millis(u64::from(id % 7)),
                Response::Holder { token: u64::from(id), remaining_ms: 1000, waiters: 0, owner: key.clone() },
            ),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    let threads: Vec<_> = (0..32)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let key = format!("key-{t}-{i}");
                    let holder = client.query(&key).unwrap().expect("held");
                    assert_eq!(holder.owner, key, "an answer went to the wrong caller");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(fake.count(|r| matches!(r, Request::Query { .. })), 32 * 50);
    // Both connections carried traffic: requests were spread, not serialised on one.
    let received = fake.received();
    assert!(received.iter().any(|(conn, _, _)| *conn == 1));
    assert!(received.iter().any(|(conn, _, _)| *conn == 2));
}

#[test]
fn a_lone_address_gets_two_connections_and_several_get_one_each() {
    let fake = FakeServer::granting();
    let _client = fake.client();
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 2));

    let (a, b) = (FakeServer::granting(), FakeServer::granting());
    let _other = client_for(&[a.addr_string(), b.addr_string()]);
    assert!(eventually(Duration::from_secs(5), || a.handshakes() == 1 && b.handshakes() == 1));
    // One window for both clients, begun once each has made its connections: a third
    // connection of the first, or a second one to either address of the second.
    // sleep: a window for a connection that must not be made.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(fake.handshakes(), 2);
    assert_eq!((a.handshakes(), b.handshakes()), (1, 1));
}

#[test]
fn service_continues_while_one_connection_is_cut() {
    let fake = FakeServer::granting();
    // A request that waited for its answer on the cut connection would take the whole
    // request timeout: 120 s, against the fraction of a second the 100 requests take.
    let client = ticketing::client::Client::builder()
        .addrs([fake.addr_string()])
        .auth_token(TOKEN)
        .owner("test-owner")
        .request_timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    client.ping().unwrap();
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 2));
    assert!(fake.cut_one());
    // Right after the cut, every request still gets served (by the other connection,
    // or by a retry: PING and QUERY are read-only), none after the timeout.
    let start = Instant::now();
    for _ in 0..50 {
        client.ping().unwrap();
        client.query("k").unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
    let lock = client.acquire("k", Duration::from_secs(5), Duration::ZERO).unwrap();
    lock.release().unwrap();
    // And the cut connection comes back (first retry after 0.1 s).
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 3));
}

#[test]
fn the_client_survives_a_server_that_disappears_and_comes_back() {
    let fake = FakeServer::granting();
    let client = fake.client();
    client.ping().unwrap();
    fake.state.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let accepted = fake.state.accepts.lock().unwrap().len();
    fake.cut_all();
    // The server is gone as the client sees it: its redials were refused.
    assert!(
        eventually(Duration::from_secs(10), || fake.state.accepts.lock().unwrap().len() >= accepted + 2),
        "the client did not redial the server it lost"
    );
    fake.state.refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    // Pings wait for a connection (within the request budget) and succeed again.
    client.ping().unwrap();
}

#[test]
fn reconnect_attempts_back_off_from_100ms_doubling() {
    // Two addresses, so one connection per address and one backoff per fake.
    let fake = FakeServer::granting();
    let other = FakeServer::granting();
    fake.state.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let _client = client_for(&[fake.addr_string(), other.addr_string()]);
    assert!(eventually(Duration::from_secs(6), || fake.state.accepts.lock().unwrap().len() >= 6));
    let accepts = fake.state.accepts.lock().unwrap().clone();
    let gaps: Vec<Duration> = accepts.windows(2).map(|w| w[1] - w[0]).collect();
    let expected_ms = [100u64, 200, 400, 800, 1600];
    for (gap, expected) in gaps.iter().zip(expected_ms) {
        let expected = Duration::from_millis(expected);
        assert!(
            *gap >= expected * 8 / 10 && *gap <= expected + Duration::from_millis(400),
            "gaps {gaps:?} do not follow 0.1 s doubling"
        );
    }
    let _ = Arc::clone(&fake.state);
}
