//! No grant left orphaned (docs/client.md): a grant made to this client that no caller
//! holds — its `G` lost with a connection the client closed, or arriving after
//! `resolve` gave up — is found and released by the client, against real servers.

mod common;
mod proxy;

use std::time::{Duration, Instant};

use common::children::{Within, TOOL};
use common::facts_cluster::wait_stopped;
use common::{connect_with, eventually, eventually_every, Cluster, ServerProcess, TOKEN};
use proxy::{Dir, Proxy};
use ticketing::client::{AcquireError, Client, IndeterminateCause, Resolution};
use ticketing::proto::frame::{Request, Response};

/// Long, so that "freed" is unmistakably the client's release: an orphaned grant stays
/// held until its lease ends, far after the `ORPHAN_BOUND` the tests allow.
const LEASE: Duration = Duration::from_secs(120);
/// Half the lease: a release takes a second or two.
const ORPHAN_BOUND: Duration = Duration::from_secs(60);

/// Who holds `key` at `addr` (asked of that node; it must lead).
fn holder(addr: std::net::SocketAddr, key: &str) -> Option<(String, u64)> {
    let mut c = connect_with(addr, TOKEN).expect("handshake");
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match c.call(1, &Request::Query { key: key.into() }) {
        Response::Free => None,
        Response::Holder { owner, token, .. } => Some((owner, token)),
        other => panic!("QUERY answered {other:?}"),
    }
}

fn signal(pid: u32, sig: &str) {
    let ok =
        std::process::Command::new("kill").args([sig, &pid.to_string()]).output_within(TOOL).status.success();
    assert!(ok, "kill {sig} {pid}");
}

/// SIGSTOP, then waits until every thread of `pid` is stopped: the signal is delivered
/// asynchronously, and a thread still running could answer the ACQUIRE sent next.
fn stop_all_threads(pid: u32) {
    signal(pid, "-STOP");
    assert!(wait_stopped(pid, Duration::from_secs(5)), "process {pid} did not stop");
}

/// Pauses `pid` (as a VM pause or a long GC would), starts an acquire that the paused
/// node's kernel takes into its socket buffer, waits until the client's dead-session
/// detection has given up on it (Indeterminate), resumes the node `pause` after it was
/// stopped (or at once, if the client took longer), and returns the error and the
/// resume instant. The resumed node reads the ACQUIRE from the closed connection and
/// grants it: the `G` goes nowhere.
fn acquire_across_a_pause(client: &Client, pid: u32, key: &str, pause: Duration) -> (AcquireError, Instant) {
    client.ping().expect("connected");
    let stopped = Instant::now();
    stop_all_threads(pid);
    let err = client.acquire(key, LEASE, Duration::ZERO).expect_err("no answer from a paused node");
    assert_eq!(
        err.indeterminate_cause(),
        Some(IndeterminateCause::ConnectionLost),
        "dead-session detection closes the silent connection: {err}"
    );
    // sleep: the node stays paused for the pause being simulated.
    std::thread::sleep(pause.saturating_sub(stopped.elapsed()));
    signal(pid, "-CONT");
    (err, Instant::now())
}

/// Waits until `key` is free at the node `at` says leads, at most `within` after `from`.
fn freed_within(
    at: impl Fn() -> std::net::SocketAddr,
    key: &str,
    from: Instant,
    within: Duration,
) -> Duration {
    // Every 100 ms: the time taken is the result.
    eventually_every(within.saturating_sub(from.elapsed()), Duration::from_millis(100), || {
        holder(at(), key).is_none().then(|| from.elapsed())
    })
    .unwrap_or_else(|| panic!("{key:?} still held {within:?} after the resume: the grant was orphaned"))
}

#[test]
fn a_standalone_server_paused_with_an_acquire_in_flight_does_not_orphan_its_grant() {
    let server: ServerProcess = common::start_server(&[]);
    // A short idle PING so dead-session detection gives up within the 2 s pause
    // (about 0.1 + 1.5 s after the last frame).
    let client = Client::builder()
        .addrs([server.addr.to_string()])
        .auth_token(TOKEN)
        .owner("box-office-1")
        .idle_ping(Duration::from_millis(100))
        .build()
        .unwrap();
    let (_err, resumed) =
        acquire_across_a_pause(&client, server.child.id(), "seat:1", Duration::from_secs(2));
    // The resumed server granted the ACQUIRE it found in its socket buffer, to a
    // connection the client had closed: the `G` went nowhere...
    assert!(
        eventually(Duration::from_secs(2), || holder(server.addr, "seat:1").is_some()),
        "the resumed server granted the buffered ACQUIRE"
    );
    // ...and the client finds that grant and releases it.
    let took = freed_within(|| server.addr, "seat:1", resumed, ORPHAN_BOUND);
    eprintln!("free again {took:?} after the resume");
    assert!(client.close(Duration::from_secs(10)), "the client's background work finished");
}

#[test]
fn the_leader_of_a_cluster_paused_with_an_acquire_in_flight_does_not_orphan_its_grant() {
    // An election timeout well above the pause: the paused leader is still the leader
    // when it resumes, and commits the ACQUIRE it finds in its socket buffer.
    let cluster = Cluster::start(3, &[("TICKETING_ELECTION_MS", "8000")]);
    let leader = cluster.wait_leader(Duration::from_secs(20));
    let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    let client = Client::builder()
        .addrs(addrs)
        .auth_token(TOKEN)
        .owner("box-office-2")
        .idle_ping(Duration::from_millis(100))
        .build()
        .unwrap();
    let pid = cluster.nodes[leader].as_ref().unwrap().child.id();
    let (_err, resumed) = acquire_across_a_pause(&client, pid, "seat:2", Duration::from_secs(2));
    let leader_now = || cluster.addr(cluster.wait_leader(Duration::from_secs(20)));
    assert!(
        eventually(Duration::from_secs(2), || holder(leader_now(), "seat:2").is_some()),
        "the resumed leader committed the buffered ACQUIRE"
    );
    let took = freed_within(leader_now, "seat:2", resumed, ORPHAN_BOUND);
    eprintln!("free again {took:?} after the resume");
}

#[test]
fn a_late_grant_after_resolve_gave_up_is_released_not_leaked() {
    let server = common::start_server(&[]);
    let proxy = Proxy::start(server.addr);
    let client = Client::builder()
        .addrs([proxy.addr_string()])
        .auth_token(TOKEN)
        .owner("box-office-3")
        .commit_margin(Duration::from_millis(200))
        .idle_ping(Duration::from_secs(3600))
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || proxy.live() == 2));
    client.ping().unwrap();
    // Answers take 1.5 s; the caller gives up after the 200 ms commit margin.
    proxy.delay(Dir::ToClient, Duration::from_millis(1500));
    let err = client.acquire("seat:3", LEASE, Duration::ZERO).unwrap_err();
    assert_eq!(err.indeterminate_cause(), Some(IndeterminateCause::NoAnswer));
    // A resolve that cannot wait for the settle window gives up at once...
    let Resolution::Unknown = client.resolve(&err, Duration::from_millis(1)) else { panic!("resolved") };
    // ...and must not have taken the late grant's release away: when the `G` arrives
    // (1.5 s after it was sent), the client releases it.
    let start = Instant::now();
    let took = freed_within(|| server.addr, "seat:3", start, ORPHAN_BOUND);
    eprintln!("free again {took:?} after resolve gave up");
}
