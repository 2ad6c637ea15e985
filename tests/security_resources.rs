//! Resource bounds a hostile or broken client cannot get around (docs/security.md),
//! tried against a real 3-node cluster: thousands of silent connections on both ports,
//! thousands of authenticated idle ones, a frame dripped a byte at a time, and clients
//! that pipeline without reading — while a legitimate client keeps getting grants (each
//! acquire granted, none of them sitting out its 20 s wait) and the cluster keeps its
//! leader. How long the legitimate acquires and fresh connections take during the flood
//! (milliseconds) is measured, not bounded: `scripts/measure.sh flood` prints it
//! (docs/safety.md, "Measured by benchmarks, not bounded in tests").

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ticketing::client::Client;
use ticketing::proto::frame::{encode_request, Request};
use ticketing::proto::handshake::{auth_key, client_handshake, CLIENT_LABELS};

/// The leader's resident memory may not exceed this during the attack (docs/security.md).
const LEADER_RSS_BOUND_MIB: u64 = 256;
/// The legitimate client's wait: every acquire of a free key must be granted before it
/// runs out (a grant takes milliseconds, 23 ms at the slowest on a busy 2-core machine;
/// a starved client would sit it out and end Timeout or Unavailable).
const GRANT_WAIT: Duration = Duration::from_secs(20);

/// Connects to `to` from the loopback address `from`.
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(from, 0).into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(socket.into())
}

fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// This process's open-files limit (the attack is scaled to it).
fn open_files_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn a_legitimate_client_is_served_through_a_connection_flood() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let target = cluster.addr(leader);
    let term_before = status_map(&mut connect(target), 1)["term"].clone();
    let rss_before = rss_mib(cluster.nodes[leader].as_ref().unwrap().child.id());
    let budget = open_files_limit().saturating_sub(400) as usize;
    // Silent client-port connections from 8 addresses, silent peer-port connections
    // from 8 more, authenticated idle ones from one: as many as this process may open.
    let silent = (budget / 3).min(2000);
    let silent_peer = (budget / 6).min(1000);
    let idle = (budget / 3).min(1500);
    assert!(silent >= 200 && idle >= 200, "this process may open too few files ({budget})");

    // The legitimate client, on its own address (127.0.0.1), all through the attack.
    let stop = Arc::new(AtomicBool::new(false));
    let worst_us = Arc::new(AtomicU64::new(0));
    let grants = Arc::new(AtomicU64::new(0));
    let refused: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let legit = {
        let addrs: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
        let client = Client::builder().addrs(addrs).auth_token(TOKEN).owner("legit").build().unwrap();
        let (stop, worst_us, grants, refused) =
            (stop.clone(), worst_us.clone(), grants.clone(), refused.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let started = Instant::now();
                let lock = client.acquire(&format!("legit-{}", n % 16), Duration::from_secs(10), GRANT_WAIT);
                let took = started.elapsed().as_micros() as u64;
                worst_us.fetch_max(took, Ordering::SeqCst);
                match lock {
                    Ok(lock) => {
                        grants.fetch_add(1, Ordering::SeqCst);
                        let _ = lock.release();
                    }
                    Err(e) => refused.lock().unwrap().push(format!("acquire {n}: {e:?}")),
                }
                // sleep: the legitimate client's pace, a request every 20 ms.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(15), || grants.load(Ordering::SeqCst) >= 3),
        "the legitimate client got no grants before the attack"
    );

    let mut held: Vec<TcpStream> = Vec::new();
    // 1 and 2. Silent connections — no AUTH, ever — on the client port from 24
    // addresses (more than enough to fill every handshake place: 24 × 64 > 1 024) and
    // on the peer port from 24 more, renewed all the time so that they never age out.
    let peer_port = SocketAddr::new(target.ip(), target.port() + 1000);
    let flooded: Vec<Arc<AtomicUsize>> = (0..2).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let flooders: Vec<_> = [(target, 100, silent), (peer_port, 140, silent_peer)]
        .into_iter()
        .zip(flooded.clone())
        .map(|((to, base, keep), flooded)| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut open = std::collections::VecDeque::new();
                let mut made = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let from: IpAddr = format!("127.0.0.{}", base + made % 24).parse().unwrap();
                    if let Ok(s) = connect_from(from, to) {
                        open.push_back(s);
                        made += 1;
                        flooded.store(made, Ordering::SeqCst);
                    }
                    if open.len() > keep {
                        open.pop_front();
                    }
                    if made.is_multiple_of(64) {
                        // sleep: the flood's pace, 64 connections at a time.
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                made
            })
        })
        .collect();
    // The flood at full strength: each flooder has made as many silent connections as
    // it keeps open.
    assert!(
        eventually(Duration::from_secs(60), || {
            flooded[0].load(Ordering::SeqCst) >= silent && flooded[1].load(Ordering::SeqCst) >= silent_peer
        }),
        "the flood did not reach full strength: {} and {} connections made",
        flooded[0].load(Ordering::SeqCst),
        flooded[1].load(Ordering::SeqCst)
    );
    // 3. Authenticated connections that then say nothing.
    let key = auth_key(TOKEN.as_bytes());
    let mut idle_open = 0;
    for _ in 0..idle {
        let Ok(mut s) = connect_from("127.0.0.60".parse().unwrap(), target) else { continue };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if client_handshake(&mut s, &key, &CLIENT_LABELS).is_ok() {
            idle_open += 1;
            held.push(s);
        }
    }
    assert!(idle_open >= idle * 9 / 10, "only {idle_open} of {idle} idle connections were admitted");
    // New legitimate connections still get through the flood of silent ones: each is
    // admitted and granted (its time is printed; a SYN dropped while the listen queue is
    // full for a moment costs TCP's 1 s retransmission, the kernel's, not the server's).
    let mut slowest_fresh = Duration::ZERO;
    for n in 0..10 {
        let started = Instant::now();
        let mut c = connect_with(target, TOKEN).expect("a new connection is admitted during the flood");
        granted_token(&c.call(
            1,
            &ticketing::proto::frame::Request::Acquire {
                lease_s: 5,
                wait_ms: 0,
                key: format!("fresh-{n}"),
                owner: "fresh".into(),
            },
        ));
        slowest_fresh = slowest_fresh.max(started.elapsed());
        // sleep: new connections spread over the flood's renewals, one each 200 ms.
        std::thread::sleep(Duration::from_millis(200));
    }
    // 4. Clients that pipeline STATUS or PING requests without ever reading an answer.
    let pipeliners: Vec<_> = (0..4)
        .map(|i| {
            let from: IpAddr = format!("127.0.0.{}", 61 + i).parse().unwrap();
            let mut s = connect_from(from, target).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            client_handshake(&mut s, &key, &CLIENT_LABELS).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
                // Large answers (STATUS) on two, the smallest (PONG) on the other two.
                let request = if i % 2 == 0 { Request::Status } else { Request::Ping };
                let mut frames = Vec::new();
                for id in 1..=64 {
                    encode_request(&mut frames, id, &request);
                }
                let mut sent = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    match s.write(&frames) {
                        Ok(n) => sent += n,
                        // The server applies back-pressure: the write waited (up to its
                        // timeout) for room in the socket; it tries again.
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        // The server closed the connection: nothing more can be sent on it.
                        Err(_) => break,
                    }
                }
                sent
            })
        })
        .collect();
    // 5. A frame dripped a byte at a time: closed FRAME_DEADLINE after its first byte.
    let mut drip = connect_from("127.0.0.62".parse().unwrap(), target).unwrap();
    drip.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    client_handshake(&mut drip, &key, &CLIENT_LABELS).unwrap();
    let mut frame = Vec::new();
    encode_request(&mut frame, 1, &Request::Ping);
    let first_byte = Instant::now();
    let mut closed_after = None;
    // One byte every 1.5 s (the whole 9-byte frame would take 13.5 s), watching for
    // the server to close the connection.
    let mut bytes = frame[..frame.len() - 1].iter();
    while first_byte.elapsed() < Duration::from_secs(20) {
        if let Some(byte) = bytes.next() {
            if drip.write_all(&[*byte]).is_err() {
                closed_after = Some(first_byte.elapsed());
                break;
            }
        }
        drip.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
        let mut buf = [0u8; 64];
        match drip.read(&mut buf) {
            Ok(_) => {
                // EOF (nothing is ever sent on this connection otherwise).
                closed_after = Some(first_byte.elapsed());
                break;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => {
                closed_after = Some(first_byte.elapsed());
                break;
            }
        }
    }
    let closed_after = closed_after.expect("the dripping connection was never closed");
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after <= Duration::from_secs(16),
        "a dripped frame is closed 10 s after its first byte, not after {closed_after:?}"
    );

    let leader_pid = cluster.nodes[leader].as_ref().unwrap().child.id();
    let rss = rss_mib(leader_pid);
    stop.store(true, Ordering::SeqCst);
    legit.join().unwrap();
    let pipelined: usize = pipeliners.into_iter().map(|p| p.join().unwrap()).sum();
    let flood: Vec<usize> = flooders.into_iter().map(|f| f.join().unwrap()).collect();
    let worst = Duration::from_micros(worst_us.load(Ordering::SeqCst));
    let term_after = status_map(&mut connect(target), 2)["term"].clone();
    println!(
        "{} silent connections made on the client port and {} on the peer port, {silent} and {silent_peer} \
         kept open at a time; {} others held ({idle_open} idle); \
         {pipelined} bytes pipelined unread; legit client: {} grants, slowest acquire {worst:?}; \
         slowest fresh connection and grant {slowest_fresh:?}; leader RSS {rss} MiB ({rss_before} MiB before)",
        flood[0],
        flood[1],
        held.len(),
        grants.load(Ordering::SeqCst)
    );
    assert!(grants.load(Ordering::SeqCst) >= 50, "the legitimate client was starved");
    let refused = refused.lock().unwrap();
    assert!(refused.is_empty(), "legitimate acquires not granted: {refused:?}");
    assert_eq!(term_after, term_before, "the cluster kept its leader (no election)");
    assert!(rss <= LEADER_RSS_BOUND_MIB, "leader RSS {rss} MiB above {LEADER_RSS_BOUND_MIB}");
    drop(held);
}
