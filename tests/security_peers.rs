//! The trust boundary between lock clients and cluster nodes, tried from outside
//! against real processes (docs/security.md): with the client secret only, or with the
//! peer secret but not a member's identity, nothing changes the cluster's term, leader,
//! membership or lock state.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use ticketing::cluster::peer::{self, refusal, PeerError, PeerHello};
use ticketing::proto::frame::{ErrorCode, Request, Response};
use ticketing::proto::handshake::{self, auth_key, HandshakeError, PEER_LABELS};

fn peer_port(client: SocketAddr) -> SocketAddr {
    SocketAddr::new(client.ip(), client.port() + 1000)
}

/// (term, leader_id, voters) of every live node, from STATUS.
fn cluster_facts(cluster: &Cluster) -> Vec<(String, String, String)> {
    (0..cluster.nodes.len())
        .filter(|i| cluster.nodes[*i].is_some())
        .map(|i| {
            let s = status_map(&mut connect(cluster.addr(i)), 1);
            (s["term"].clone(), s["leader_id"].clone(), s["voters"].clone())
        })
        .collect()
}

/// MEMBERS through an operator connection, as a map from node id to its line.
fn members(addr: SocketAddr) -> HashMap<u64, String> {
    let mut c = connect_with(addr, PEER_TOKEN).expect("operator handshake");
    match c.call(1, &Request::Members) {
        Response::Status { text } => text
            .lines()
            .filter_map(|l| l.strip_prefix("member="))
            .map(|l| (l.split(' ').next().unwrap().parse().unwrap(), l.to_string()))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// … without what changes from one moment to the next (`heard_ms`, `unreachable_ms`).
fn members_stable(addr: SocketAddr) -> HashMap<u64, String> {
    members(addr)
        .into_iter()
        .map(|(id, line)| {
            (
                id,
                line.split(' ')
                    .filter(|f| !f.starts_with("unreachable_ms=") && !f.starts_with("heard_ms="))
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect()
}

/// Waits until the leader has recorded every member's process in the log.
fn wait_records(addr: SocketAddr, count: usize) {
    let mut m = HashMap::new();
    let recorded = eventually_every(Duration::from_secs(15), Duration::from_millis(100), || {
        m = members(addr);
        (m.len() == count && m.values().all(|l| !l.ends_with("incarnation=unrecorded"))).then_some(())
    });
    assert!(recorded.is_some(), "members never all recorded: {m:?}");
}

/// Dials `node`'s peer port as a node claiming `hello`, with `secret`.
fn rogue_dial(node: SocketAddr, secret: &str, hello: &PeerHello) -> Result<peer::Established, PeerError> {
    peer::dial(&node.to_string(), hello, &auth_key(secret.as_bytes()), None)
}

fn refusal_code(result: Result<peer::Established, PeerError>) -> u8 {
    match result {
        Err(PeerError::Refused { code, .. }) => code,
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(e) => panic!("admitted as node {}", e.peer.node_id),
    }
}

#[test]
fn the_client_secret_opens_nothing_on_the_peer_port_nor_admin_on_the_client_port() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let before = cluster_facts(&cluster);
    for i in 0..3 {
        let hello = PeerHello {
            node_id: 1,
            incarnation: 7,
            domain: 0,
            addr: "127.0.0.9:5225".into(),
            name: String::new(),
        };
        match rogue_dial(cluster.addr(i), TOKEN, &hello) {
            Err(PeerError::Handshake(HandshakeError::Rejected(_) | HandshakeError::BadProof)) => {}
            Err(e) => panic!("node {i}: expected an authentication failure, got {e}"),
            Ok(_) => panic!("node {i}: the client secret passed the peer handshake"),
        }
    }
    // Admin ops on the client port need the operator secret: E 5, and the connection
    // goes on serving locks.
    let mut c = connect(cluster.addr(leader));
    let replace = Request::Replace { old: 2, new: 9, addr: format!("127.0.0.9:{}", cluster.port) };
    let transfer = Request::TransferLeader { target: None };
    for (id, request) in [(1, replace), (2, Request::Members), (4, transfer)] {
        match c.call(id, &request) {
            Response::Error { code: ErrorCode::Refused, .. } => {}
            other => panic!("{request:?}: {other:?}"),
        }
    }
    granted_token(&c.call(3, &acquire("k", "o", 5, 0)));
    // The grant above shows the cluster live and past the refused requests; a term
    // change would show in the window below.
    // sleep: a window for a change that must not happen.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cluster_facts(&cluster), before, "term, leader and voters unchanged");
}

#[test]
fn a_non_member_with_the_peer_secret_is_refused_and_changes_nothing() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut c = connect(cluster.addr(leader));
    let token = granted_token(&c.call(1, &acquire("held", "o", 60, 0)));
    let before = cluster_facts(&cluster);
    let domain = status_map(&mut c, 2)["domain"].parse::<u64>().unwrap();
    // A member's id from another fencing domain is refused before anything else.
    let other = (leader + 1) % 3;
    let hello = PeerHello {
        node_id: other as u64 + 1,
        incarnation: 1,
        domain: domain ^ 1,
        addr: cluster.addr(other).to_string(),
        name: String::new(),
    };
    assert_eq!(refusal_code(rogue_dial(cluster.addr(leader), PEER_TOKEN, &hello)), refusal::OTHER_DOMAIN);
    for i in 0..3 {
        // A node id that is no member, with the right domain, and then with none.
        for d in [domain, 0] {
            let hello = PeerHello {
                node_id: 99,
                incarnation: 1,
                domain: d,
                addr: cluster.addr(i).to_string(),
                name: String::new(),
            };
            assert_eq!(refusal_code(rogue_dial(cluster.addr(i), PEER_TOKEN, &hello)), refusal::NOT_MEMBER);
        }
    }
    // The refused dialer cannot slip Raft frames in either: a Vote with the transfer
    // flag for a much higher term, written straight after a refused handshake.
    let mut raw = TcpStream::connect(peer_port(cluster.addr(leader))).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    handshake::client_handshake(&mut raw, &auth_key(PEER_TOKEN.as_bytes()), &PEER_LABELS).unwrap();
    let hello =
        PeerHello { node_id: 99, incarnation: 1, domain, addr: "127.0.0.9:5225".into(), name: String::new() };
    let mut bytes = peer::encode_hello(&hello);
    let vote =
        ticketing::raft::Message::Vote { term: 1000, last_index: 1 << 40, last_term: 999, transfer: true };
    ticketing::raft::wire::encode(&vote, &mut bytes).unwrap();
    let _ = raw.write_all(&bytes);
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert_eq!(answer.get(4), Some(&b'X'), "a refusal: {answer:?}");
    // The refusal above was read back, so the frames after it reached the node; an
    // election would show in the window below.
    // sleep: a window for a change that must not happen.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(cluster_facts(&cluster), before, "term, leader and voters unchanged");
    match c.call(3, &Request::Query { key: "held".into() }) {
        Response::Holder { token: t, .. } => assert_eq!(t, token),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_member_id_from_another_process_is_refused_by_every_member_including_one_that_joined_later() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    wait_records(cluster.addr(leader), 3);
    let domain = status_map(&mut connect(cluster.addr(leader)), 1)["domain"].parse::<u64>().unwrap();
    // `paused` stays a member but is frozen while node 4 joins, so node 4 never
    // completes a handshake with it: only the log tells node 4 which process runs it.
    let paused = (leader + 1) % 3;
    let old = (leader + 2) % 3;
    cluster.signal(paused, "-STOP");
    let (new_node, new_addr) = cluster.spawn_on(4, 4, "join", &[]);
    let mut op = connect_with(cluster.addr(leader), PEER_TOKEN).unwrap();
    op.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let replace = Request::Replace { old: old as u64 + 1, new: 4, addr: new_addr.clone() };
    match op.call(1, &replace) {
        Response::Status { text } => assert!(text.contains("replaced"), "{text}"),
        other => panic!("{other:?}"),
    }
    cluster.nodes.push(Some(new_node));
    let node4: SocketAddr = new_addr.parse().unwrap();
    wait_records(node4, 3);
    // Another process claims the paused member's NodeId.
    let claimed = paused as u64 + 1;
    for target in [cluster.addr(leader), node4] {
        let hello = PeerHello {
            node_id: claimed,
            incarnation: 12345,
            domain,
            addr: cluster.addr(paused).to_string(),
            name: String::new(),
        };
        assert_eq!(
            refusal_code(rogue_dial(target, PEER_TOKEN, &hello)),
            refusal::NODE_ID_REUSED,
            "{target} admitted a second process as node {claimed}"
        );
    }
    cluster.signal(paused, "-CONT");
    // The real node is still welcome: it catches up and the cluster has three voters.
    let mut s = HashMap::new();
    let caught_up = eventually_every(Duration::from_secs(15), Duration::from_millis(100), || {
        s = status_map(&mut connect(cluster.addr(paused)), 1);
        (s["voters"].split(',').count() == 3 && s["voters"].contains(&format!("4@{new_addr}"))).then_some(())
    });
    assert!(caught_up.is_some(), "the paused node never caught up: {s:?}");
}

#[test]
fn garbage_hello_addresses_are_refused_never_stored_and_the_node_keeps_serving() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    // Every member's process recorded first: a record landing later is no stored address.
    wait_records(cluster.addr(leader), 3);
    let before = members_stable(cluster.addr(leader));
    for addr in [vec![0xffu8; 255], b"no-port-here".to_vec(), b"a b:5225".to_vec()] {
        let mut raw = TcpStream::connect(peer_port(cluster.addr(leader))).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        handshake::client_handshake(&mut raw, &auth_key(PEER_TOKEN.as_bytes()), &PEER_LABELS).unwrap();
        // PEER HELLO by hand: len · 'H' · node_id · incarnation · domain · addr str8.
        let mut hello = Vec::new();
        hello.extend_from_slice(&((26 + addr.len()) as u32).to_be_bytes());
        hello.push(b'H');
        hello.extend_from_slice(&2u64.to_be_bytes());
        hello.extend_from_slice(&1u64.to_be_bytes());
        hello.extend_from_slice(&0u64.to_be_bytes());
        hello.push(addr.len() as u8);
        hello.extend_from_slice(&addr);
        raw.write_all(&hello).unwrap();
        let mut answer = Vec::new();
        let _ = raw.read_to_end(&mut answer);
        assert_eq!(answer.get(4..6), Some(&[b'X', refusal::BAD_HELLO][..]), "{addr:?}: {answer:?}");
    }
    let mut c = connect(cluster.addr(leader));
    granted_token(&c.call(1, &acquire("k", "o", 5, 0)));
    assert_eq!(members_stable(cluster.addr(leader)), before, "no address was stored");
}

#[test]
fn a_removed_node_that_was_frozen_during_its_removal_learns_it_and_stops() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let old = (leader + 1) % 3;
    cluster.signal(old, "-STOP");
    let (new_node, new_addr) = cluster.spawn_on(4, 4, "join", &[]);
    let mut op = connect_with(cluster.addr(leader), PEER_TOKEN).unwrap();
    op.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    match op.call(1, &Request::Replace { old: old as u64 + 1, new: 4, addr: new_addr.clone() }) {
        Response::Status { text } => assert!(text.contains("replaced"), "{text}"),
        other => panic!("{other:?}"),
    }
    cluster.nodes.push(Some(new_node));
    // Every member now refuses that NodeId at the handshake with a removal notice
    // (the node, when it dials, takes the notice as definitive and stops).
    let domain = status_map(&mut connect(cluster.addr(leader)), 2)["domain"].parse::<u64>().unwrap();
    for target in [cluster.addr(leader), new_addr.parse().unwrap()] {
        // Once that node has applied the committed change (the leader answered when it
        // had; node 4 may learn the commit a heartbeat later).
        let mut text = String::new();
        let retired = eventually_every(Duration::from_secs(10), Duration::from_millis(50), || {
            let mut c = connect_with(target, PEER_TOKEN).unwrap();
            text = match c.call(1, &Request::Members) {
                Response::Status { text } => text,
                other => panic!("{other:?}"),
            };
            let retired = text.lines().find_map(|l| l.strip_prefix("retired=")).unwrap_or("");
            retired.split(',').any(|id| id == (old + 1).to_string()).then_some(())
        });
        assert!(retired.is_some(), "{target} never retired node {}: {text}", old + 1);
        let hello = PeerHello {
            node_id: old as u64 + 1,
            incarnation: 1,
            domain,
            addr: cluster.addr(old).to_string(),
            name: String::new(),
        };
        assert_eq!(refusal_code(rogue_dial(target, PEER_TOKEN, &hello)), refusal::REMOVED, "{target}");
    }
    cluster.signal(old, "-CONT");
    // It stops with status 0, without disturbing the others.
    let node = cluster.nodes[old].as_mut().unwrap();
    assert_eq!(node.exit_code_within(Duration::from_secs(10), "the removed node"), Some(0));
    cluster.nodes[old] = None;
    let leader_now = cluster.wait_leader(Duration::from_secs(10));
    granted_token(&connect(cluster.addr(leader_now)).call(1, &acquire("after", "o", 5, 0)));
}

/// A joining node knows no configuration yet: it admits only its configured peers and
/// the leader (that node id at that address) a configured peer named — not anyone who
/// claims the leader's address.
#[test]
fn a_joining_node_admits_only_the_leader_its_configured_peer_named() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    wait_records(cluster.addr(leader), 3);
    let follower = (leader + 1) % 3;
    let old = (leader + 2) % 3;
    // Its only configured peer is a follower: that follower names the leader.
    let only_follower = format!("{}@{}", follower + 1, cluster.addr(follower));
    let (new_node, new_addr) = cluster.spawn_on(4, 4, "join", &[("TICKETING_CLUSTER_PEERS", &only_follower)]);
    let node4: SocketAddr = new_addr.parse().unwrap();
    let leader_addr = cluster.addr(leader).to_string();
    // The follower has named the leader to it (its MEMBERS says whom it joins through):
    // from now on the leader is the one node besides its peers it may admit.
    let joining = format!("joining={}@{leader_addr}", leader + 1);
    assert!(
        eventually(Duration::from_secs(15), || {
            match common::raw::call(node4, &Request::Members, Duration::from_secs(2)) {
                Some(Response::Status { text }) => text.lines().any(|l| l == joining),
                _ => false,
            }
        }),
        "node 4 never named the leader it joins through ({joining})"
    );
    for (who, id, addr) in [
        ("a non-member claiming the leader's address", 99, leader_addr.clone()),
        ("the leader's id at another address", leader as u64 + 1, "127.0.0.9:5225".to_string()),
        ("a voter that is not the leader", old as u64 + 1, cluster.addr(old).to_string()),
    ] {
        let hello = PeerHello { node_id: id, incarnation: 77, domain: 0, addr, name: String::new() };
        assert_eq!(refusal_code(rogue_dial(node4, PEER_TOKEN, &hello)), refusal::NOT_MEMBER, "{who}");
    }
    // The real leader is admitted: the replacement goes through.
    let mut op = connect_with(cluster.addr(leader), PEER_TOKEN).unwrap();
    op.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    match op.call(1, &Request::Replace { old: old as u64 + 1, new: 4, addr: new_addr.clone() }) {
        Response::Status { text } => assert!(text.contains("replaced"), "{text}"),
        other => panic!("{other:?}"),
    }
    cluster.nodes.push(Some(new_node));
    wait_records(node4, 3);
}

/// Reads Raft frames from a rogue's established connection until `want` matches one
/// (or `within` passes); returns the messages read.
fn read_messages(
    est: &mut peer::Established,
    within: Duration,
    want: impl Fn(&ticketing::raft::Message) -> bool,
) -> Vec<ticketing::raft::Message> {
    let mut buf = std::mem::take(&mut est.leftover);
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    est.tcp.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    loop {
        while let Ok(Some((msg, used))) = ticketing::raft::wire::decode(&buf) {
            buf.drain(..used);
            let done = want(&msg);
            got.push(msg);
            if done {
                return got;
            }
        }
        if Instant::now() > deadline {
            return got;
        }
        let mut chunk = [0u8; 4096];
        match est.tcp.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
}

fn send_messages(est: &mut peer::Established, msgs: &[ticketing::raft::Message]) {
    let mut bytes = Vec::new();
    for m in msgs {
        ticketing::raft::wire::encode(m, &mut bytes).unwrap();
    }
    est.tcp.write_all(&bytes).unwrap();
}

/// A stranger (a NodeId no configuration names) is heard only by a node that has had
/// no leader for an election timeout, only its vote requests without the transfer
/// flag, answers go back on the connection it opened, and the address in its HELLO is
/// never dialed (docs/protocol-cluster.md §2).
#[test]
fn a_stranger_is_heard_only_by_a_node_without_a_live_leader() {
    use ticketing::raft::Message;
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let lone = (leader + 1) % 3;
    // The address the stranger claims: a listener of ours on its peer port (its client
    // port + 1000, on a port the kernel picks), which must never see a connection.
    let trap = std::net::TcpListener::bind(("127.0.0.9", 0)).unwrap();
    let claimed_port = trap.local_addr().unwrap().port() - 1000;
    trap.set_nonblocking(true).unwrap();
    let hello = PeerHello {
        node_id: 99,
        incarnation: 7,
        domain: 0,
        addr: format!("127.0.0.9:{claimed_port}"),
        name: String::new(),
    };
    // With a live leader, every node refuses it.
    for i in 0..3 {
        assert_eq!(refusal_code(rogue_dial(cluster.addr(i), PEER_TOKEN, &hello)), refusal::NOT_MEMBER);
    }
    // `lone` loses its leader and the other voter: after an election timeout it hears
    // no leader.
    cluster.kill(leader);
    cluster.kill((leader + 2) % 3);
    let facts = |c: &mut Raw| {
        let s = status_map(c, 1);
        (s["term"].parse::<u64>().unwrap(), s["leader_id"].clone(), s["voters"].clone())
    };
    let lone_addr = cluster.addr(lone);
    assert!(
        eventually(Duration::from_secs(10), || facts(&mut connect(lone_addr)).1.is_empty()),
        "{lone_addr} still names a leader after its leader and the other voter were killed"
    );
    let mut c = connect(cluster.addr(lone));
    let (term, _, voters) = facts(&mut c);
    let mut est = rogue_dial(cluster.addr(lone), PEER_TOKEN, &hello).expect("a stranger is heard now");
    // What it may not do: a transfer-flagged vote, TimeoutNow.
    send_messages(
        &mut est,
        &[
            Message::Vote { term: term + 100, last_index: 1 << 40, last_term: 1 << 30, transfer: true },
            Message::TimeoutNow { term: term + 100 },
        ],
    );
    // The pre-vote answered below on the same connection shows the node read these frames.
    // sleep: a window for a change that must not happen.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(facts(&mut c), (term, String::new(), voters.clone()), "nothing changed");
    // What it may: ask for a pre-vote; the answer comes back on its own connection.
    send_messages(&mut est, &[Message::PreVote { term: term + 1, last_index: 1 << 40, last_term: 1 << 30 }]);
    let got = read_messages(&mut est, Duration::from_secs(3), |m| matches!(m, Message::PreVoteResp { .. }));
    assert!(
        got.iter().any(|m| matches!(m, Message::PreVoteResp { granted: true, .. })),
        "no pre-vote granted on the stranger's connection: {got:?}"
    );
    assert_eq!(facts(&mut c).0, term, "a pre-vote changes no term");
    // And a vote: it takes the node's vote for its term (the power a stranger has over
    // a node without a live leader, documented in docs/security.md §3).
    send_messages(
        &mut est,
        &[Message::Vote { term: term + 1, last_index: 1 << 40, last_term: 1 << 30, transfer: false }],
    );
    let got = read_messages(&mut est, Duration::from_secs(3), |m| matches!(m, Message::VoteResp { .. }));
    assert!(got.iter().any(|m| matches!(m, Message::VoteResp { granted: true, .. })), "{got:?}");
    // (STATUS is published right after the answer leaves.)
    assert!(eventually(Duration::from_secs(5), || facts(&mut connect(lone_addr)).0 == term + 1), "{got:?}");
    // And, claiming to lead that term, have the node follow it.
    send_messages(&mut est, &[Message::Heartbeat { term: term + 1, commit: 0, read_seq: 1 }]);
    let got = read_messages(&mut est, Duration::from_secs(3), |m| matches!(m, Message::HeartbeatResp { .. }));
    assert!(got.iter().any(|m| matches!(m, Message::HeartbeatResp { .. })), "{got:?}");
    let following = (term + 1, "99".to_string(), voters);
    assert!(
        eventually(Duration::from_secs(5), || facts(&mut connect(lone_addr)) == following),
        "it follows the stranger: {:?}",
        facts(&mut c)
    );
    assert!(trap.accept().is_err(), "the node dialed the address a stranger claimed");
}
