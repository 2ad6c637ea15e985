//! The release queue against a fake server: bounded retries, compensation of late
//! grants, a bounded queue, background release of dropped locks.

mod client_support;
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client_support::*;
use common::eventually;
use ticketing::client::{IndeterminateCause, ReleaseError, ReleaseOutcome, RELEASE_DEADLINE};
use ticketing::proto::frame::{Request, Response};

const LEASE: Duration = Duration::from_secs(30);

fn releases(fake: &FakeServer) -> Vec<(u64, String, String)> {
    fake.received()
        .into_iter()
        .filter_map(|(_, _, r)| match r {
            Request::Release { token, key, owner } => Some((token, key, owner)),
            _ => None,
        })
        .collect()
}

/// Grants every ACQUIRE and answers RELEASE with `release`.
fn fake_with_release(release: impl Fn() -> Action + Send + Sync + 'static) -> FakeServer {
    let next = Arc::new(AtomicU64::new(500));
    FakeServer::start(
        b'S',
        Box::new(move |_, _, request| match request {
            Request::Acquire { .. } => Action::Reply(Response::Granted {
                token: next.fetch_add(1, Ordering::SeqCst),
                lease_ms: 30_000,
            }),
            Request::Release { .. } => release(),
            other => Action::Reply(default_answer(other)),
        }),
    )
}

#[test]
fn release_reports_released_and_not_holder() {
    let fake = fake_with_release(|| Action::Reply(Response::Released));
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    let token = lock.token();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(releases(&fake), vec![(token, "k".into(), "test-owner".into())]);

    let fake = fake_with_release(|| Action::Reply(Response::NotHolder));
    let client = fake.client();
    assert_eq!(client.release("k", 12345), Ok(ReleaseOutcome::NotHolder));
}

#[test]
fn release_retries_stop_at_the_five_second_deadline_without_success() {
    let fake = fake_with_release(|| Action::Reply(Response::Unknown));
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    let token = lock.token();
    let start = Instant::now();
    assert_eq!(lock.release(), Err(ReleaseError::Unconfirmed));
    let took = start.elapsed();
    // At least the deadline; above, only a release that never gives up is caught (12 times
    // it); how little it runs past the deadline is no claim of this test.
    assert!(took >= Duration::from_millis(4900) && took < 12 * RELEASE_DEADLINE, "{took:?}");
    let sent = releases(&fake);
    assert!(sent.len() >= 5, "retried only {} times", sent.len());
    assert!(sent.iter().all(|(t, k, o)| *t == token && k == "k" && o == "test-owner"));
    // And nothing more after the deadline.
    let count = sent.len();
    // sleep: a window for a further attempt that must not be sent.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(releases(&fake).len(), count);
}

#[test]
fn unanswered_release_attempts_are_sent_again_until_answered() {
    // The first two attempts get no answer; the third is answered.
    let attempts = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&attempts);
    let fake = fake_with_release(move || {
        if seen.fetch_add(1, Ordering::SeqCst) < 2 {
            Action::Ignore
        } else {
            Action::Reply(Response::Released)
        }
    });
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

#[test]
fn a_late_grant_is_released_with_its_exact_token() {
    // The grant comes 800 ms after the ACQUIRE; the caller gives up after
    // wait (0) + commit margin (300 ms).
    let fake = FakeServer::start(
        b'S',
        Box::new(|_, _, request| match request {
            Request::Acquire { .. } => Action::ReplyAfter(
                Duration::from_millis(800),
                Response::Granted { token: 777_000_123, lease_ms: 30_000 },
            ),
            other => Action::Reply(default_answer(other)),
        }),
    );
    let client = fake.client();
    let err = client.acquire("seat:9", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::NoAnswer));
    assert!(eventually(Duration::from_secs(3), || !releases(&fake).is_empty()));
    assert_eq!(releases(&fake), vec![(777_000_123, "seat:9".into(), "test-owner".into())]);
}

#[test]
fn dropping_a_lock_releases_it_in_the_background() {
    // The release is never answered: a drop that waited for it would return only when
    // the release is given up, RELEASE_DEADLINE (5 s) later.
    let fake = fake_with_release(|| Action::Ignore);
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    let token = lock.token();
    let start = Instant::now();
    drop(lock);
    assert!(start.elapsed() < RELEASE_DEADLINE, "drop blocked for {:?}", start.elapsed());
    assert!(eventually(Duration::from_secs(3), || releases(&fake).len() == 1));
    assert_eq!(releases(&fake)[0].0, token);
}

#[test]
fn a_full_release_queue_is_an_error_not_a_block() {
    let fake = fake_with_release(|| Action::Ignore);
    let client = fake.client();
    let locks: Vec<_> = (0..ticketing::client::RELEASE_QUEUE_CAPACITY + 1)
        .map(|i| client.acquire(&format!("k{i}"), LEASE, Duration::ZERO).unwrap())
        .collect();
    let mut locks = locks.into_iter();
    let last = locks.next().unwrap();
    // Fill the queue: these releases are never answered and stay queued for 5 s.
    drop(locks);
    let start = Instant::now();
    assert_eq!(last.release(), Err(ReleaseError::QueueFull));
    // Blocking would mean waiting for room: the queued releases give up after 5 s.
    assert!(start.elapsed() < RELEASE_DEADLINE, "{:?}", start.elapsed());
}

#[test]
fn releases_survive_a_broken_connection() {
    // The first release attempt breaks its connection; the retry succeeds.
    let attempts = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&attempts);
    let fake = fake_with_release(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Close
        } else {
            Action::Reply(Response::Released)
        }
    });
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[test]
fn an_n_after_a_lost_attempt_is_released_or_expired_not_not_holder() {
    // The first attempt is written and its connection breaks before any answer: it may
    // have executed. The retry finds no holder. Whether our release or the lease ended
    // the hold is unknown, so the outcome is not "the lease had ended".
    let attempts = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&attempts);
    let fake = fake_with_release(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Close
        } else {
            Action::Reply(Response::NotHolder)
        }
    });
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::ReleasedOrExpired));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    // Without a lost attempt, N is NotHolder as before.
    assert_eq!(client.release("other", 1), Ok(ReleaseOutcome::NotHolder));
}

#[test]
fn an_n_to_a_retry_waits_for_the_earlier_attempt_and_never_says_not_holder() {
    // The first attempt is never answered (sent again after 1 s); the retry gets N.
    // The first one is still out and may have released the key: the worker waits for
    // it until the 5 s deadline, then reports ReleasedOrExpired.
    let attempts = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&attempts);
    let fake = fake_with_release(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Ignore
        } else {
            Action::Reply(Response::NotHolder)
        }
    });
    let client = fake.client();
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    let start = Instant::now();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::ReleasedOrExpired));
    assert!(start.elapsed() >= Duration::from_millis(4900), "{:?}", start.elapsed());
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "nothing more is sent after the N");
}

#[test]
fn close_waits_for_the_releases_of_dropped_locks() {
    let fake = fake_with_release(|| Action::ReplyAfter(Duration::from_millis(300), Response::Released));
    let client = fake.client();
    let locks: Vec<_> =
        (0..5).map(|i| client.acquire(&format!("c{i}"), LEASE, Duration::ZERO).unwrap()).collect();
    drop(locks);
    let start = Instant::now();
    assert!(client.clone().close(Duration::from_secs(3)), "all five released");
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "it waited for the answers: {:?}",
        start.elapsed()
    );
    assert_eq!(releases(&fake).len(), 5);
    // Unanswered releases: close gives up at its timeout and says so.
    let fake = fake_with_release(|| Action::Ignore);
    let client = fake.client();
    drop(client.acquire("k", LEASE, Duration::ZERO).unwrap());
    let start = Instant::now();
    assert!(!client.close(Duration::from_millis(300)));
    // Its own 300 ms, not the release's deadline (5 s).
    assert!(start.elapsed() < RELEASE_DEADLINE, "{:?}", start.elapsed());
}
