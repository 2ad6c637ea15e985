//! The client against the real standalone server (the `ticketing server` binary).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{eventually, free_port, with_fresh_ports, Server};
use ticketing::client::{AcquireError, ReleaseOutcome};

const LEASE: Duration = Duration::from_secs(10);

#[test]
fn acquire_query_release_status_round_trip() {
    let server = Server::new().start();
    let client = server.client("alice");
    client.ping().unwrap();
    assert_eq!(client.query("seat:1").unwrap(), None);
    let lock = client.acquire("seat:1", LEASE, Duration::ZERO).unwrap();
    let holder = client.query("seat:1").unwrap().expect("held");
    assert_eq!(holder.owner, "alice");
    assert_eq!(holder.token, lock.token());
    assert!(holder.remaining <= LEASE && holder.remaining > LEASE - Duration::from_secs(2));
    assert_eq!(holder.waiters, 0);
    let status = client.status().unwrap();
    assert!(status.contains("role=standalone"), "{status}");
    assert!(status.contains("keys_held=1"), "{status}");
    assert_eq!(client.status_of(&server.addr.to_string()).unwrap().lines().next(), status.lines().next());
    let token = lock.token();
    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    assert_eq!(client.query("seat:1").unwrap(), None);
    // The same release again: no longer the holder.
    assert_eq!(client.release("seat:1", token), Ok(ReleaseOutcome::NotHolder));
}

#[test]
fn busy_timeout_and_fifo_hand_off() {
    let server = Server::new().start();
    let alice = server.client("alice");
    let bob = server.client("bob");
    let held = alice.acquire("k", LEASE, Duration::ZERO).unwrap();
    assert_eq!(bob.acquire("k", LEASE, Duration::ZERO).unwrap_err(), AcquireError::Busy);
    let start = Instant::now();
    assert_eq!(bob.acquire("k", LEASE, Duration::from_millis(200)).unwrap_err(), AcquireError::Timeout);
    assert!(start.elapsed() >= Duration::from_millis(190));
    // Bob queues; Alice's release hands the key straight to him with a larger token.
    let waiter = std::thread::spawn(move || bob.acquire("k", LEASE, Duration::from_secs(5)));
    assert!(eventually(Duration::from_secs(3), || alice.query("k").unwrap().is_some_and(|h| h.waiters == 1)));
    let first = held.token();
    assert_eq!(held.release(), Ok(ReleaseOutcome::Released));
    let bobs = waiter.join().unwrap().unwrap();
    assert!(bobs.token() > first);
    assert_eq!(bobs.owner(), "bob");
    assert_eq!(alice.query("k").unwrap().unwrap().owner, "bob");
}

#[test]
fn a_dropped_lock_is_released_in_the_background() {
    let server = Server::new().start();
    let client = server.client("dropper");
    let lock = client.acquire("k", LEASE, Duration::ZERO).unwrap();
    drop(lock);
    assert!(eventually(Duration::from_secs(3), || client.query("k").unwrap().is_none()));
}

#[test]
fn sixty_four_threads_share_one_client() {
    let server = Server::new().start();
    let client = server.client("shared");
    let threads: Vec<_> = (0..64)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                let mut tokens = Vec::new();
                for i in 0..20 {
                    // Four threads per key: real contention and hand-offs.
                    let key = format!("key-{}", (t + i) % 16);
                    let lock = client.acquire(&key, LEASE, Duration::from_secs(20)).unwrap();
                    tokens.push(lock.token());
                    assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
                }
                tokens
            })
        })
        .collect();
    let mut all = HashSet::new();
    for thread in threads {
        for token in thread.join().unwrap() {
            assert!(all.insert(token), "token {token} granted twice");
        }
    }
    assert_eq!(all.len(), 64 * 20);
}

#[test]
fn a_restarted_server_is_reconnected_to() {
    // A port below the ephemeral range (one a connection is not given meanwhile),
    // another when it was taken; the same address again for the second server.
    let (addr, server) = with_fresh_ports("a server on a picked port", || {
        let addr = format!("127.0.0.1:{}", free_port());
        Ok((addr.clone(), Server::new().listen(&addr).try_start()?))
    });
    let client = server.client("phoenix");
    client.ping().unwrap();
    drop(server);
    // Once the client has seen the connections close, nothing can be sent: a
    // definitive Unavailable. (A request written in the instant between the server's
    // exit and the client noticing it would be Indeterminate, correctly.)
    assert!(
        eventually(Duration::from_secs(10), || !client.is_connected()),
        "the client never saw the server go"
    );
    let err = client.acquire("k", LEASE, Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
    // A new server on the same address: the client finds it on its own.
    let _again = Server::new().listen(&addr).start();
    let lock = client.acquire("k", LEASE, Duration::from_secs(5)).expect("reconnected");
    lock.release().unwrap();
}
