//! ACQUIRE semantics of the client against a fake server: never resent once written,
//! retried while unwritten, `U` and lost connections are indeterminate, `M` moves the
//! next request to the leader.

mod client_support;
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client_support::*;
use common::{eventually, eventually_every};
use ticketing::client::{AcquireError, IndeterminateCause};
use ticketing::proto::frame::{ErrorCode, Request, Response};

const LEASE: Duration = Duration::from_secs(10);

fn acquires(fake: &FakeServer) -> usize {
    fake.count(|r| matches!(r, Request::Acquire { .. }))
}

#[test]
fn grant_gives_a_lock_with_token_and_local_deadline() {
    let fake = FakeServer::granting();
    let client = fake.client();
    let before = Instant::now();
    let lock = client.acquire("seat:1", LEASE, Duration::from_secs(1)).unwrap();
    let after = Instant::now();
    assert_eq!(lock.key(), "seat:1");
    assert_eq!(lock.owner(), "test-owner");
    assert!(lock.token() >= 100);
    assert!(lock.deadline() >= before + LEASE && lock.deadline() <= after + LEASE);
    assert!(!lock.is_expired());
    assert!(lock.remaining() <= LEASE);
    let sent = fake.received();
    assert!(matches!(&sent[0].2, Request::Acquire { lease_s: 10, key, owner, .. }
        if key == "seat:1" && owner == "test-owner"));
    assert_eq!(lock.release(), Ok(ticketing::client::ReleaseOutcome::Released));
}

#[test]
fn definitive_answers_are_returned_at_once_and_never_retried() {
    let answers = [
        (Response::Busy, AcquireError::Busy),
        (Response::Timeout, AcquireError::Timeout),
        (
            Response::Error { code: ErrorCode::Invalid, message: "lease".into() },
            AcquireError::Invalid("lease".into()),
        ),
        (Response::Error { code: ErrorCode::Overloaded, message: String::new() }, AcquireError::Overloaded),
    ];
    for (answer, expected) in answers {
        let reply = answer.clone();
        let fake = FakeServer::start(
            b'S',
            Box::new(move |_, _, request| match request {
                Request::Acquire { .. } => Action::Reply(reply.clone()),
                other => Action::Reply(default_answer(other)),
            }),
        );
        let client = fake.client();
        let err = client.acquire("k", LEASE, Duration::from_millis(100)).unwrap_err();
        assert_eq!(err, expected);
        assert!(err.is_definitive());
        // A later request on the same client is answered: the client went on past the answer.
        client.query("k").expect("a QUERY after the definitive answer is answered");
        // sleep: a wrong retry would be sent in the background; give it time to arrive.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(acquires(&fake), 1, "{answer:?} was retried");
    }
}

#[test]
fn a_written_acquire_is_never_resent_when_the_connection_drops() {
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::Close,
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    let err = client.acquire("k", LEASE, Duration::from_secs(2)).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ConnectionLost));
    assert!(!err.is_definitive());
    // The dropped connection comes back and a later request is answered: a resend had its
    // chance on the other connection and on the new one.
    assert!(
        eventually(Duration::from_secs(5), || fake.handshakes() == 3),
        "the dropped connection was not reopened"
    );
    client.query("k").expect("a QUERY after the lost ACQUIRE is answered");
    // sleep: a wrong resend cannot be awaited; give it time to show up.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(acquires(&fake), 1);
}

#[test]
fn an_unwritten_acquire_is_retried_on_another_connection() {
    let fake = FakeServer::granting();
    let client = fake.client();
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 2));
    // The first write fails before its first byte, as on a socket that just broke.
    client.inject_write_failures(1);
    let lock = client.acquire("k", LEASE, Duration::from_secs(2)).expect("retried on the other connection");
    assert_eq!(acquires(&fake), 1);
    lock.release().unwrap();
    // The connection whose write failed was dropped and comes back.
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 3));
}

#[test]
fn unknown_is_indeterminate() {
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::Reply(Response::Unknown),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let err = fake.client().acquire("k", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ServerUnknown));
    assert_eq!(acquires(&fake), 1);
}

#[test]
fn no_answer_within_wait_plus_margin_is_indeterminate() {
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::Ignore,
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client(); // commit margin 300 ms
    client.ping().unwrap();
    let start = Instant::now();
    let err = client.acquire("k", LEASE, Duration::from_millis(200)).unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::NoAnswer));
    // At least the wait plus the margin; the upper bound only catches a client that does
    // not give up (20 times the 500 ms): how close it keeps to it is measured, not bounded.
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(10), "{took:?}");
    assert_eq!(acquires(&fake), 1);
}

#[test]
fn moved_is_not_leader_and_the_next_request_goes_to_the_hinted_leader() {
    // The real leader welcomed as a follower (it was elected after we connected).
    let leader = FakeServer::granting_as(b'F');
    let leader_addr = leader.addr_string();
    let hint = leader_addr.clone();
    // The stale node still says it leads in WELCOME, so it is picked first.
    let stale = FakeServer::start(
        b'L',
        Box::new(move |_, _, request| match request {
            Request::Acquire { .. } => Action::Reply(Response::Moved { leader: hint.clone() }),
            // STATUS and PING as any node answers them (the client asks STATUS to learn
            // the membership; that must not be what moves it here).
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = client_for(&[stale.addr_string(), leader_addr.clone()]);
    assert!(eventually(Duration::from_secs(5), || stale.handshakes() == 1 && leader.handshakes() == 1));
    let err = client.acquire("k", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err, AcquireError::NotLeader { leader: Some(leader_addr.clone()) });
    assert!(err.is_definitive());
    assert_eq!(acquires(&stale), 1);
    assert_eq!(acquires(&leader), 0, "M must not be retried internally");
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(acquires(&leader), 1);
    assert_eq!(acquires(&stale), 1);
    lock.release().unwrap();
}

#[test]
fn nothing_reachable_is_unavailable_and_nothing_is_sent() {
    // A port that was just free: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let client = client_for(&[addr]);
    let start = Instant::now();
    let err = client.acquire("k", LEASE, Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
    assert!(err.is_definitive());
    let took = start.elapsed();
    // At least CONNECT_WAIT_MIN; the upper bound (20 times it) only catches a hang.
    let min = ticketing::client::CONNECT_WAIT_MIN;
    assert!(took >= min && took < 20 * min, "{took:?}");
}

#[test]
fn pipelined_acquires_each_get_their_own_token() {
    let next = Arc::new(AtomicU64::new(1));
    let fake = FakeServer::start(
        b'S',
        Box::new(move |_, id, request| match request {
            Request::Acquire { .. } => Action::ReplyAfter(
                Duration::from_millis(u64::from(id % 5)),
                Response::Granted { token: next.fetch_add(1, Ordering::SeqCst), lease_ms: 10_000 },
            ),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                (0..20)
                    .map(|i| {
                        let lock = client.acquire(&format!("k{t}-{i}"), LEASE, Duration::ZERO).unwrap();
                        let token = lock.token();
                        lock.release().unwrap();
                        token
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut tokens: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 16 * 20);
}

#[test]
fn a_fresh_client_sends_its_first_request_to_the_leader() {
    for _ in 0..5 {
        let leader = FakeServer::granting_as(b'L');
        let hint = leader.addr_string();
        let follower = FakeServer::start(
            b'F',
            Box::new(move |_, _, _| Action::Reply(Response::Moved { leader: hint.clone() })),
        );
        follower.set_leader(&leader.addr_string());
        // No warm-up: the first request races the connections being made.
        let client = client_for(&[follower.addr_string(), leader.addr_string()]);
        let lock = client
            .acquire("k", LEASE, Duration::ZERO)
            .expect("sent to the leader, not to the follower that connected first");
        lock.release().unwrap();
        assert_eq!(acquires(&follower), 0);
    }
}

#[test]
fn a_grant_arriving_after_its_lease_ran_out_is_released_not_returned() {
    // Lease 1 s; the G comes 1.3 s after the ACQUIRE (within wait + margin).
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::ReplyAfter(
                Duration::from_millis(1300),
                Response::Granted { token: 4242, lease_ms: 1000 },
            ),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    let err = client.acquire("k", Duration::from_secs(1), Duration::from_secs(2)).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ExpiredOnArrival));
    assert!(!err.is_definitive());
    let released = || {
        fake.received()
            .iter()
            .any(|(_, _, r)| matches!(r, Request::Release { token: 4242, key, .. } if key == "k"))
    };
    assert!(eventually(Duration::from_secs(3), released), "the expired grant was released");
}

#[test]
fn query_follows_m_to_the_leader_it_names() {
    let leader = FakeServer::start(
        b'F',
        Box::new(|_, _, request| match request {
            Request::Query { .. } => {
                Action::Reply(Response::Holder { token: 9, remaining_ms: 500, waiters: 0, owner: "x".into() })
            }
            other => Action::Reply(default_answer(other)),
        }),
    );
    let hint = leader.addr_string();
    // The stale node says it leads in WELCOME and answers QUERY with M.
    let stale = FakeServer::start(
        b'L',
        Box::new(move |_, _, request| match request {
            Request::Query { .. } => Action::Reply(Response::Moved { leader: hint.clone() }),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = client_for(&[stale.addr_string(), leader.addr_string()]);
    assert!(eventually(Duration::from_secs(5), || stale.handshakes() == 1 && leader.handshakes() == 1));
    let holder = client.query("k").expect("answered by the leader after the M").expect("held");
    assert_eq!(holder.token, 9);
    let queries = |f: &FakeServer| f.count(|r| matches!(r, Request::Query { .. }));
    assert_eq!((queries(&stale), queries(&leader)), (1, 1));
}

#[test]
fn request_ids_never_reuse_one_still_pending() {
    // An ACQUIRE stays unanswered (queued) while the id counter comes round to its id.
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::Ignore,
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    client.ping().unwrap();
    let waiting = {
        let client = client.clone();
        std::thread::spawn(move || client.acquire("k", LEASE, Duration::from_secs(2)))
    };
    assert!(eventually(Duration::from_secs(3), || acquires(&fake) == 1));
    let (conn, pending_id, _) =
        fake.received().into_iter().find(|(_, _, r)| matches!(r, Request::Acquire { .. })).unwrap();
    // Queries alternate between the two connections; each starts from the pending id.
    for _ in 0..4 {
        client.set_next_request_id(pending_id);
        assert_eq!(client.query("q").unwrap(), None);
    }
    let reused: Vec<u32> = fake
        .received()
        .iter()
        .filter(|(c, id, r)| *c == conn && *id == pending_id && !matches!(r, Request::Acquire { .. }))
        .map(|(_, id, _)| *id)
        .collect();
    assert!(reused.is_empty(), "id {pending_id} sent again while pending: {reused:?}");
    let on_that_conn =
        fake.received().iter().filter(|(c, _, r)| *c == conn && matches!(r, Request::Query { .. })).count();
    assert!(on_that_conn >= 1, "no query shared the pending ACQUIRE's connection");
    assert!(!waiting.join().unwrap().unwrap_err().is_definitive());
}

#[test]
fn owner_views_and_lock_parts_round_trip() {
    let fake = FakeServer::granting();
    let client = fake.client();
    let caller = client.with_owner("test-owner-7").unwrap();
    assert!(client.with_owner("").is_err(), "owners are checked like the builder's");
    let lock = caller.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(lock.owner(), "test-owner-7");
    let (token, deadline) = (lock.token(), lock.deadline());
    let parts = lock.into_parts();
    assert_eq!((parts.token, parts.deadline, parts.owner.as_str()), (token, deadline, "test-owner-7"));
    // A later request is answered: a RELEASE sent by into_parts would have gone out before it.
    client.query("k").expect("a QUERY after into_parts is answered");
    // sleep: a background RELEASE cannot be awaited; give it time to show up.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fake.count(|r| matches!(r, Request::Release { .. })), 0, "into_parts does not release");
    // Any handle of the client adopts it; the release keeps the lock's owner.
    let lock = client.adopt(parts);
    assert_eq!(lock.release(), Ok(ticketing::client::ReleaseOutcome::Released));
    let released = fake.received().into_iter().find_map(|(_, _, r)| match r {
        Request::Release { token, owner, .. } => Some((token, owner)),
        _ => None,
    });
    assert_eq!(released, Some((token, "test-owner-7".to_owned())));
}

#[test]
fn a_failed_write_after_an_acquire_went_out_never_sends_that_acquire_again() {
    // The first ACQUIRE is written and left unanswered; later writes on its connection
    // fail before their first byte. The ACQUIRE was sent: it must end Indeterminate,
    // never be sent again on the other connection.
    let seen = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&seen);
    let fake = FakeServer::start(
        b'S',
        Box::new(move |_, _, request| match request {
            Request::Acquire { .. } if count.fetch_add(1, Ordering::SeqCst) == 0 => Action::Ignore,
            Request::Acquire { lease_s, .. } => {
                Action::Reply(Response::Granted { token: 5, lease_ms: u32::from(*lease_s) * 1000 })
            }
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    assert!(eventually(Duration::from_secs(5), || fake.handshakes() == 2));
    let waiting = {
        let client = client.clone();
        std::thread::spawn(move || client.acquire("k", LEASE, Duration::from_secs(3)))
    };
    assert!(eventually(Duration::from_secs(3), || acquires(&fake) == 1));
    // Zero-byte write failures, one each 50 ms, until one lands on the ACQUIRE's
    // connection and the ACQUIRE ends.
    eventually_every(Duration::from_secs(5), Duration::from_millis(50), || {
        if waiting.is_finished() {
            return Some(());
        }
        client.inject_write_failures(1);
        let _ = client.query("q");
        None
    });
    let err = waiting.join().unwrap().unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::ConnectionLost), "{err}");
    // Both connections are up again and a later request is answered: a resend had its chance.
    assert!(
        eventually(Duration::from_secs(5), || client.query("q").is_ok()),
        "no QUERY answered after the lost ACQUIRE"
    );
    // sleep: a wrong resend cannot be awaited; give it time to show up.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(acquires(&fake), 1, "the written ACQUIRE was sent again");
}
