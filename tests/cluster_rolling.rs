//! The rolling replacement of every node of a live cluster (docs/operations.md) while clients
//! lock continuously: nothing lost, mutual exclusion intact, tokens never go back.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::facts_cluster::eventually_some;
use common::*;
use ticketing::proto::frame::{Request, Response};

/// One exclusive window seen by a client: [grant received, min(release sent, ACQUIRE
/// sent + lease)] — the definition the fault suite uses too.
#[derive(Clone, Debug)]
#[allow(dead_code)] // owner, confirmed and sent are printed when the check fails
struct Window {
    key: String,
    token: u64,
    owner: String,
    confirmed: bool,
    sent: Instant,
    start: Instant,
    end: Instant,
}

fn worker(n: usize, addrs: Arc<Mutex<Vec<SocketAddr>>>, stop: Arc<AtomicBool>, log: Arc<Mutex<Vec<Window>>>) {
    let owner = format!("w{n}");
    let mut id = 0u32;
    let mut at = n;
    let mut conn: Option<Raw> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            let list = addrs.lock().unwrap().clone();
            at = (at + 1) % list.len();
            conn = connect_with(list[at], TOKEN).ok().inspect(|c| {
                c.stream.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
            });
            if conn.is_none() {
                // sleep: pacing between reconnection attempts to a node that refused.
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        let key = format!("k{}", id % 3);
        id += 1;
        let sent = Instant::now();
        c.send(id, &acquire(&key, &owner, 3, 500));
        let Ok(payload) = c.frames.read_payload().map(|p| p.to_vec()) else {
            conn = None;
            continue;
        };
        let (_, r) = ticketing::proto::frame::decode_response(&payload).unwrap();
        match r {
            Response::Granted { token, .. } => {
                let start = Instant::now();
                // sleep: the time the holder spends in its critical section.
                std::thread::sleep(Duration::from_millis(5));
                id += 1;
                let released_at = Instant::now();
                c.send(id, &release(&key, &owner, token));
                let ok = matches!(
                    c.frames.read_payload().map(|p| ticketing::proto::frame::decode_response(p).unwrap().1),
                    Ok(Response::Released)
                );
                // The holder leaves its critical section when it sends the release,
                // confirmed or not (a release may commit and hand the key on even if
                // its answer is lost with a replaced node): the window ends there, or
                // at the lease's end counted from the ACQUIRE's send, whichever is first.
                let end = released_at.min(sent + Duration::from_secs(3));
                log.lock().unwrap().push(Window {
                    key,
                    token,
                    owner: owner.clone(),
                    confirmed: ok,
                    sent,
                    start,
                    end,
                });
                if !ok {
                    conn = None;
                }
            }
            Response::Moved { leader } => {
                conn = leader.parse().ok().and_then(|a| connect_with(a, TOKEN).ok());
                if let Some(c) = conn.as_mut() {
                    c.stream.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
                }
            }
            Response::Busy | Response::Timeout => {}
            Response::Unknown | Response::Error { .. } => conn = None,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn check_windows(windows: &[Window]) {
    let mut by_token = windows.to_vec();
    by_token.sort_by_key(|w| w.token);
    for pair in by_token.windows(2) {
        assert!(pair[0].token < pair[1].token, "token {} granted twice", pair[0].token);
    }
    for (i, a) in windows.iter().enumerate() {
        for b in &windows[i + 1..] {
            if a.key == b.key {
                let overlap = a.start < b.end && b.start < a.end;
                assert!(!overlap, "two holders of {} at once:\n{a:?}\n{b:?}", a.key);
            }
        }
    }
}

/// Grants the workload must make between two steps (a proof it runs on the current
/// configuration).
const PROGRESS: usize = 10;

/// Waits until the workers have recorded `more` windows beyond those logged now.
fn wait_windows(log: &Mutex<Vec<Window>>, more: usize, when: &str) {
    let now = log.lock().unwrap().len();
    assert!(
        eventually(Duration::from_secs(20), || log.lock().unwrap().len() >= now + more),
        "the workload made no progress {when}: {} grants in all",
        log.lock().unwrap().len()
    );
}

fn rolling(n: usize) {
    let mut cluster = Cluster::start(n, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(20));
    let mut l = connect(cluster.addr(leader));
    let kept = granted_token(&l.call(1, &acquire("kept", "keeper", 250, 0)));
    drop(l);
    let addrs: Arc<Mutex<Vec<SocketAddr>>> = Arc::new(Mutex::new((0..n).map(|i| cluster.addr(i)).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (a, s, l) = (addrs.clone(), stop.clone(), log.clone());
            std::thread::spawn(move || worker(w, a, s, l))
        })
        .collect();
    let mut durations = Vec::new();
    for old in 0..n {
        // The workload runs between replacements: a few more grants on this configuration.
        wait_windows(&log, PROGRESS, &format!("before the replacement of node {}", old + 1));
        let new_id = (n + old + 1) as u64;
        let new_addr = format!("127.0.0.{}:{}", new_id, cluster.port);
        let new_node = cluster.spawn(new_id, &new_addr, "join", &[]);
        let started = Instant::now();
        let answer = loop {
            let leader = cluster.wait_leader(Duration::from_secs(20));
            let mut c = connect_with(cluster.addr(leader), PEER_TOKEN).expect("operator handshake");
            c.stream.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
            let r = c.call(1, &Request::Replace { old: old as u64 + 1, new: new_id, addr: new_addr.clone() });
            // A leader change mid-way is answered with a refusal or M: ask again.
            match &r {
                Response::Status { .. } => break r,
                Response::Error { message, .. } if message.contains("stopped leading") => continue,
                Response::Moved { .. } => continue,
                other => panic!("replace {} by {new_id}: {other:?}", old + 1),
            }
        };
        assert!(matches!(answer, Response::Status { .. }));
        durations.push(started.elapsed());
        let node = cluster.nodes[old].as_mut().unwrap();
        node.exit_code_within(Duration::from_secs(20), &format!("node {} after removal", old + 1));
        cluster.nodes[old] = None;
        cluster.nodes.push(Some(new_node));
        addrs.lock().unwrap()[old] = new_addr.parse().unwrap();
    }
    wait_windows(&log, PROGRESS, "after the last replacement");
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    eprintln!("replacements took {durations:?}");
    // Only new NodeIds remain, and the long lock is still held with its token.
    let live: Vec<usize> = (0..cluster.nodes.len()).filter(|i| cluster.nodes[*i].is_some()).collect();
    let addr_of = |i: usize| -> SocketAddr {
        if i < n {
            cluster.addr(i)
        } else {
            format!("127.0.0.{}:{}", i + 1, cluster.port).parse().unwrap()
        }
    };
    let leader_addr = eventually_some(Duration::from_secs(20), || {
        live.iter()
            .map(|i| addr_of(*i))
            .find(|a| connect_with(*a, TOKEN).is_ok_and(|c| c.welcome.role == b'L'))
    })
    .expect("a leader among the new nodes");
    let mut c = connect(leader_addr);
    let s = status_map(&mut c, 1);
    let voters: Vec<u64> =
        s["voters"].split(',').map(|v| v.split('@').next().unwrap().parse().unwrap()).collect();
    assert_eq!(voters.len(), n);
    assert!(voters.iter().all(|id| *id > n as u64), "old ids remain: {voters:?}");
    match c.call(2, &Request::Query { key: "kept".into() }) {
        Response::Holder { token, owner, .. } => assert_eq!((token, owner.as_str()), (kept, "keeper")),
        other => panic!("{other:?}"),
    }
    let windows = log.lock().unwrap().clone();
    assert!(windows.len() > 20, "the workload made too little progress: {} grants", windows.len());
    assert!(windows.iter().all(|w| w.token > kept), "a token went back below the first one");
    check_windows(&windows);
}

#[test]
fn rolling_replacement_of_all_three_nodes() {
    rolling(3);
}

#[test]
fn rolling_replacement_of_all_five_nodes() {
    rolling(5);
}
