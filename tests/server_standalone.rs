//! The real binary in standalone mode, spoken to byte by byte (docs/protocol.md, docs/guarantees.md).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::children::{Within, CLI};
use common::*;
use ticketing::proto::frame::{ErrorCode, Request, Response};
use ticketing::proto::handshake::{self, HandshakeError};

#[test]
fn welcome_reports_a_standalone_node_with_a_domain() {
    let server = start_server(&[]);
    let raw = connect(server.addr);
    assert_eq!(raw.welcome.role, b'S');
    assert_eq!(raw.welcome.node_id, 1);
    assert_ne!(raw.welcome.domain, 0);
    assert_eq!(raw.welcome.leader, server.addr.to_string());
}

#[test]
fn wrong_token_is_rejected_and_logged_without_the_token() {
    let server = start_server(&[]);
    match connect_with(server.addr, "another-secret-0123456789") {
        Err(HandshakeError::Rejected(reason)) => assert_eq!(reason, "authentication failed"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let line = server.log.recv_timeout(deadline - Instant::now()).expect("a warning line");
        assert!(!line.contains("another-secret") && !line.contains(TOKEN));
        if line.contains("authentication failed") {
            assert!(line.contains("WARN") && line.contains("127.0.0.1"), "{line}");
            break;
        }
    }
    // The server still serves the right token.
    let mut raw = connect(server.addr);
    assert_eq!(raw.call(1, &Request::Ping), Response::Pong);
}

#[test]
fn wrong_version_in_auth_is_rejected() {
    let server = start_server(&[]);
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = [0u8; 40];
    std::io::Read::read_exact(&mut s, &mut hello).unwrap();
    assert_eq!(&hello[..6], b"TKT1\x01C");
    assert_eq!(&hello[6..8], &[0, 0]);
    let mut auth = [0u8; 72];
    auth[..4].copy_from_slice(b"TKT1");
    auth[4] = 2;
    s.write_all(&auth).unwrap();
    let mut x = [0u8; 2];
    std::io::Read::read_exact(&mut s, &mut x).unwrap();
    assert_eq!(x[0], b'X');
}

#[test]
fn nonces_are_fresh_per_connection() {
    let server = start_server(&[]);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        let mut hello = [0u8; 40];
        std::io::Read::read_exact(&mut s, &mut hello).unwrap();
        assert!(seen.insert(hello[8..].to_vec()), "nonce reused");
    }
}

#[test]
fn replayed_auth_fails_on_a_new_connection() {
    let server = start_server(&[]);
    let key = handshake::auth_key(TOKEN.as_bytes());
    // Record a valid AUTH for connection 1.
    let mut first = TcpStream::connect(server.addr).unwrap();
    let mut hello = [0u8; 40];
    std::io::Read::read_exact(&mut first, &mut hello).unwrap();
    let server_nonce = handshake::decode_hello(&hello, &handshake::CLIENT_LABELS).unwrap();
    let client_nonce = handshake::fresh_nonce();
    let mac = handshake::client_mac(&key, &handshake::CLIENT_LABELS, &server_nonce, &client_nonce);
    let auth = handshake::encode_auth(&client_nonce, &mac);
    // Replay it on connection 2.
    let mut second = TcpStream::connect(server.addr).unwrap();
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Read::read_exact(&mut second, &mut hello).unwrap();
    second.write_all(&auth).unwrap();
    let mut x = [0u8; 1];
    std::io::Read::read_exact(&mut second, &mut x).unwrap();
    assert_eq!(x[0], b'X');
}

#[test]
fn a_silent_client_is_closed_after_the_handshake_deadline() {
    let server = start_server(&[]);
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = Instant::now();
    let mut sink = Vec::new();
    // Closed by the server (end of stream), not the test's read timeout (an error).
    let read = std::io::Read::read_to_end(&mut s, &mut sink);
    let waited = start.elapsed();
    assert!(read.is_ok(), "not closed within the read timeout: {read:?} after {waited:?}");
    assert_eq!(sink.len(), 40, "only HELLO was sent");
    assert!(waited >= Duration::from_millis(4500), "{waited:?}");
}

#[test]
fn acquire_release_query_round_trip() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    assert_eq!(c.call(1, &Request::Query { key: "k".into() }), Response::Free);
    let g = c.call(2, &acquire("k", "alice", 30, 0));
    let token = granted_token(&g);
    assert_eq!(g, Response::Granted { token, lease_ms: 30_000 });
    match c.call(3, &Request::Query { key: "k".into() }) {
        Response::Holder { token: t, remaining_ms, waiters, owner } => {
            assert_eq!((t, waiters, owner.as_str()), (token, 0, "alice"));
            assert!(remaining_ms > 29_000 && remaining_ms <= 30_000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.call(4, &release("k", "bob", token)), Response::NotHolder);
    assert_eq!(c.call(5, &release("k", "alice", token + 1)), Response::NotHolder);
    assert_eq!(c.call(6, &release("other", "alice", token)), Response::NotHolder);
    assert_eq!(c.call(7, &release("k", "alice", token)), Response::Released);
    assert_eq!(c.call(8, &release("k", "alice", token)), Response::NotHolder);
    assert_eq!(c.call(9, &Request::Query { key: "k".into() }), Response::Free);
}

#[test]
fn tokens_grow_and_are_near_unix_microseconds() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    let mut last = 0;
    for i in 0..50u32 {
        let token = granted_token(&c.call(2 * i + 1, &acquire(&format!("k{}", i % 3), "o", 5, 0)));
        assert!(token > last);
        last = token;
        assert_eq!(c.call(2 * i + 2, &release(&format!("k{}", i % 3), "o", token)), Response::Released);
    }
    let now_us =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    assert!(last <= now_us + 1_000_000 && last + 60_000_000 > now_us, "token {last} vs now {now_us}");
}

#[test]
fn busy_queue_hand_off_and_timeout_across_connections() {
    let server = start_server(&[]);
    let mut a = connect(server.addr);
    let mut b = connect(server.addr);
    let mut c = connect(server.addr);
    let t1 = granted_token(&a.call(1, &acquire("seat", "a", 30, 0)));
    assert_eq!(b.call(1, &acquire("seat", "b", 30, 0)), Response::Busy);
    b.send(2, &acquire("seat", "b", 30, 10_000));
    c.send(1, &acquire("seat", "c", 30, 300));
    // c's wait elapses first: T, and it leaves the queue.
    let start = Instant::now();
    assert_eq!(c.recv(), (1, Response::Timeout));
    assert!(start.elapsed() >= Duration::from_millis(250));
    // The release hands the key straight to b.
    assert_eq!(a.call(2, &release("seat", "a", t1)), Response::Released);
    let (id, g) = b.recv();
    assert_eq!(id, 2);
    assert!(granted_token(&g) > t1);
}

#[test]
fn a_queued_acquire_does_not_hold_back_later_answers() {
    let server = start_server(&[]);
    let mut a = connect(server.addr);
    let mut b = connect(server.addr);
    let t = granted_token(&a.call(1, &acquire("k", "a", 30, 0)));
    b.send(7, &acquire("k", "b", 30, 5_000));
    assert_eq!(b.call(8, &Request::Ping), Response::Pong);
    match b.call(9, &Request::Query { key: "k".into() }) {
        Response::Holder { token, waiters, owner, .. } => {
            assert_eq!((token, waiters, owner.as_str()), (t, 1, "a"))
        }
        other => panic!("{other:?}"),
    }
    a.call(2, &release("k", "a", t));
    assert_eq!(b.recv().0, 7);
}

#[test]
fn lease_expiry_hands_off_to_the_waiter() {
    let server = start_server(&[]);
    let mut a = connect(server.addr);
    let mut b = connect(server.addr);
    let t1 = granted_token(&a.call(1, &acquire("k", "a", 1, 0)));
    let start = Instant::now();
    let t2 = granted_token(&b.call(1, &acquire("k", "b", 5, 5_000)));
    let waited = start.elapsed();
    assert!(t2 > t1);
    // Granted (not timed out after its 5 s wait) once the 1 s lease ended.
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert_eq!(a.call(2, &release("k", "a", t1)), Response::NotHolder);
}

#[test]
fn holder_disconnect_keeps_the_hold_waiter_disconnect_leaves_the_queue() {
    let server = start_server(&[]);
    let mut a = connect(server.addr);
    let t = granted_token(&a.call(1, &acquire("k", "a", 30, 0)));
    drop(a);
    let mut b = connect(server.addr);
    b.send(1, &acquire("k", "b", 30, 20_000));
    let query = |id| match connect(server.addr).call(id, &Request::Query { key: "k".into() }) {
        Response::Holder { token, waiters, .. } => Some((token, waiters)),
        _ => None,
    };
    // The holder's hold outlives its connection; b waits behind it.
    assert!(eventually(Duration::from_secs(10), || query(1) == Some((t, 1))), "{:?}", query(1));
    drop(b);
    // b's wait leaves the queue with its connection; a's hold stays.
    assert!(eventually(Duration::from_secs(10), || query(2) == Some((t, 0))), "{:?}", query(2));
    let mut q = connect(server.addr);
    assert_eq!(q.call(3, &release("k", "a", t)), Response::Released);
}

#[test]
fn not_reentrant_the_holder_queues_behind_itself() {
    let server = start_server(&[]);
    let mut a = connect(server.addr);
    let t = granted_token(&a.call(1, &acquire("k", "a", 30, 0)));
    assert_eq!(a.call(2, &acquire("k", "a", 30, 0)), Response::Busy);
    a.send(3, &acquire("k", "a", 30, 200));
    assert_eq!(a.recv(), (3, Response::Timeout));
    a.send(4, &acquire("k", "a", 30, 5000));
    assert_eq!(a.call(5, &release("k", "a", t)), Response::Released);
    let (id, g) = a.recv();
    assert_eq!(id, 4);
    assert!(granted_token(&g) > t);
}

#[test]
fn queue_limit_answers_busy() {
    let server = start_server(&[("TICKETING_MAX_WAITERS", "2")]);
    let mut a = connect(server.addr);
    granted_token(&a.call(1, &acquire("k", "a", 30, 0)));
    a.send(2, &acquire("k", "b", 30, 10_000));
    a.send(3, &acquire("k", "c", 30, 10_000));
    assert_eq!(a.call(4, &acquire("k", "d", 30, 10_000)), Response::Busy);
}

#[test]
fn invalid_fields_get_e1_and_the_connection_stays_open() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    for (id, req) in [
        (1, acquire("k", "o", 0, 0)),
        (2, acquire("k", "o", 251, 0)),
        (3, acquire("k", "o", 1, 300_001)),
        (4, acquire("", "o", 1, 0)),
        (5, acquire("k", "", 1, 0)),
        (6, Request::Query { key: String::new() }),
    ] {
        match c.call(id, &req) {
            Response::Error { code: ErrorCode::Invalid, .. } => {}
            other => panic!("{req:?} gave {other:?}"),
        }
    }
    // Bad UTF-8 in a key: A · id 7 · lease 1 · wait 0 · key [0xff] · owner "o".
    c.send_raw(&[0, 0, 0, 14, b'A', 0, 0, 0, 7, 1, 0, 0, 0, 0, 1, 0xff, 1, b'o']);
    assert!(matches!(c.recv(), (7, Response::Error { code: ErrorCode::Invalid, .. })));
    assert_eq!(c.call(8, &Request::Ping), Response::Pong);
    // Nothing changed: the key is free.
    assert_eq!(c.call(9, &Request::Query { key: "k".into() }), Response::Free);
}

fn expect_connection_error(c: &mut Raw, code: ErrorCode) {
    let (id, response) = c.recv();
    assert_eq!(id, 0);
    match response {
        Response::Error { code: got, .. } => assert_eq!(got, code),
        other => panic!("expected E {code:?}, got {other:?}"),
    }
    assert!(c.is_closed(), "connection stays open after a connection-level error");
}

#[test]
fn unknown_op_gets_e2_with_id_0_and_close() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    c.send_raw(&[0, 0, 0, 5, b'Z', 0, 0, 0, 1]);
    expect_connection_error(&mut c, ErrorCode::UnknownOp);
}

#[test]
fn malformed_frames_get_e3_with_id_0_and_close() {
    let server = start_server(&[]);
    let cases: Vec<Vec<u8>> = vec![
        vec![0, 0, 0, 4, b'P', 0, 0, 0],       // len below 5
        vec![0, 0, 32, 1],                     // len 8193: above every op's limit
        vec![0, 0, 4, 1, b'P'],                // len 1025 of an op other than HOLD
        vec![0, 0, 0, 6, b'P', 0, 0, 0, 1, 0], // PING with a body
        vec![0, 0, 0, 6, b'Q', 0, 0, 0, 1, 5], // QUERY key longer than the frame
        vec![0, 0, 0, 5, b'P', 0, 0, 0, 0],    // reserved id 0
    ];
    for bytes in cases {
        let mut c = connect(server.addr);
        c.send_raw(&bytes);
        expect_connection_error(&mut c, ErrorCode::Malformed);
    }
}

#[test]
fn too_many_pending_requests_on_one_connection_is_overloaded() {
    let server = start_server(&[("TICKETING_MAX_WAITERS", "100000")]);
    let mut a = connect(server.addr);
    let mut id = 1;
    granted_token(&a.call(id, &acquire("k", "a", 60, 0)));
    let mut b = connect(server.addr);
    let mut batch = Vec::new();
    for _ in 0..ticketing::server::PENDING_PER_CONN_MAX {
        id += 1;
        ticketing::proto::frame::encode_request(&mut batch, id, &acquire("k", "b", 60, 60_000));
    }
    b.send_raw(&batch);
    let queued = || match connect(server.addr).call(1, &Request::Query { key: "k".into() }) {
        Response::Holder { waiters, .. } => waiters as usize,
        _ => 0,
    };
    assert!(
        eventually(Duration::from_secs(30), || queued() == ticketing::server::PENDING_PER_CONN_MAX),
        "{} of the connection's {} requests queued",
        queued(),
        ticketing::server::PENDING_PER_CONN_MAX
    );
    match b.call(id + 1, &acquire("k", "b", 60, 60_000)) {
        Response::Error { code: ErrorCode::Overloaded, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(b.call(id + 2, &Request::Ping), Response::Pong);
}

#[test]
fn status_lists_the_required_fields() {
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    granted_token(&c.call(1, &acquire("k", "a", 30, 0)));
    let Response::Status { text } = c.call(2, &Request::Status) else { panic!() };
    let fields: std::collections::HashMap<&str, &str> =
        text.lines().filter_map(|l| l.split_once('=')).collect();
    for name in [
        "node_id",
        "role",
        "term",
        "leader",
        "leader_id",
        "commit_index",
        "applied_index",
        "voters",
        "learners",
        "domain",
        "last_token",
        "keys_held",
        "waiters",
        "uptime_s",
        "version",
    ] {
        assert!(fields.contains_key(name), "STATUS lacks {name}: {text}");
    }
    assert_eq!(fields["role"], "standalone");
    assert_eq!(fields["keys_held"], "1");
    assert_eq!(fields["domain"], c.welcome.domain.to_string());
}

#[test]
fn sigterm_stops_gracefully_with_status_0() {
    let mut server = start_server(&[]);
    let _c = connect(server.addr);
    assert!(server.signal("-TERM"));
    assert_eq!(server.exit_code_within(Duration::from_secs(10), "the server"), Some(0));
}

/// A valid cluster node's environment (node 1 of three) with `extra` added or replacing.
fn cluster_env(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("TICKETING_AUTH_TOKEN", TOKEN),
        ("TICKETING_LISTEN", "127.0.0.1:5225"),
        ("TICKETING_NODE_ID", "1"),
        ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225"),
        ("TICKETING_CLUSTER_PEERS", "1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225"),
    ];
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push((k, v));
    }
    env
}

#[test]
fn bad_configuration_exits_2_naming_the_variable() {
    for (env, var) in [
        (vec![("TICKETING_AUTH_TOKEN", "short")], "TICKETING_AUTH_TOKEN"),
        (vec![("TICKETING_AUTH_TOKEN", TOKEN), ("TICKETING_LISTEN", "x")], "TICKETING_LISTEN"),
        (vec![("TICKETING_AUTH_TOKEN", TOKEN), ("TICKETING_MAX_WAITERS", "-3")], "TICKETING_MAX_WAITERS"),
        (
            vec![
                ("TICKETING_AUTH_TOKEN", TOKEN),
                ("TICKETING_NODE_ID", "1"),
                ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225"),
                ("TICKETING_CLUSTER_PEERS", "1@127.0.0.1:5225,2@127.0.0.2:5225"),
            ],
            "TICKETING_CLUSTER_PEERS",
        ),
        (vec![], "TICKETING_AUTH_TOKEN"),
        // A cluster node without a peer secret, or with the client secret as its peer
        // secret: any lock client could act as a node.
        (cluster_env(&[]), "TICKETING_PEER_AUTH_TOKEN"),
        (cluster_env(&[("TICKETING_PEER_AUTH_TOKEN", TOKEN)]), "TICKETING_PEER_AUTH_TOKEN"),
        // `join` with nothing to join would found a fencing domain of its own.
        (
            vec![("TICKETING_AUTH_TOKEN", TOKEN), ("TICKETING_CLUSTER_STATE", "join")],
            "TICKETING_CLUSTER_PEERS",
        ),
        // A CA alone would leave TLS off.
        (vec![("TICKETING_AUTH_TOKEN", TOKEN), ("TICKETING_TLS_CA", "/etc/hostname")], "TICKETING_TLS_CA"),
        // The peer port would be above 65535.
        (
            cluster_env(&[
                ("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN),
                ("TICKETING_LISTEN", "127.0.0.1:65000"),
            ]),
            "TICKETING_LISTEN",
        ),
        // Peers dial SELF's port + 1000, the node listens on LISTEN's.
        (
            cluster_env(&[("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN), ("TICKETING_LISTEN", "127.0.0.1:5300")]),
            "TICKETING_CLUSTER_SELF",
        ),
    ] {
        let out =
            std::process::Command::new(bin()).arg("server").env_clear().envs(env.clone()).output_within(CLI);
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(var), "{stderr} should name {var}");
    }
}

#[test]
fn admin_ops_need_the_operator_secret_and_refusal_keeps_the_connection() {
    let server = start_server(&[("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)]);
    let replace = Request::Replace { old: 1, new: 2, addr: "127.0.0.9:5225".into() };
    // The client secret: refused with E 5, and the connection goes on.
    let mut client = connect(server.addr);
    match client.call(1, &replace) {
        Response::Error { code: ErrorCode::Refused, message } => {
            assert!(message.contains("operator"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.call(2, &Request::Ping), Response::Pong);
    // The operator secret on the client port: WELCOME's proof is made with it, and the
    // admin op is carried out (a standalone node has no members to change: E 1).
    let mut operator = connect_with(server.addr, PEER_TOKEN).expect("the operator secret is accepted");
    match operator.call(1, &replace) {
        Response::Error { code: ErrorCode::Invalid, message } => {
            assert!(message.contains("standalone"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    granted_token(&operator.call(2, &acquire("k", "o", 5, 0)));
    // Any other secret is refused at the handshake.
    assert!(connect_with(server.addr, "neither-of-the-two-secrets").is_err());
}

#[test]
fn a_request_read_whole_is_answered_while_the_next_frame_is_still_arriving() {
    // One segment brings an ACQUIRE and the first bytes of the next frame (a lost
    // segment or a TLS record boundary can leave the rest on the way for a while).
    let server = start_server(&[]);
    let mut c = connect(server.addr);
    c.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut bytes = Vec::new();
    ticketing::proto::frame::encode_request(&mut bytes, 1, &acquire("partial", "me", 10, 0));
    let mut next = Vec::new();
    ticketing::proto::frame::encode_request(&mut next, 2, &Request::Query { key: "partial".into() });
    bytes.extend_from_slice(&next[..6]);
    c.send_raw(&bytes);
    // The ACQUIRE is answered without waiting for the rest of the QUERY.
    let (id, response) = c.recv();
    assert_eq!(id, 1);
    let token = granted_token(&response);
    c.send_raw(&next[6..]);
    let (id, response) = c.recv();
    assert_eq!(id, 2);
    assert!(matches!(response, Response::Holder { token: t, .. } if t == token), "{response:?}");
}

#[test]
fn an_unknown_variable_is_warned_about_once_naming_the_closest_one() {
    // A typo would otherwise be silently ignored: the node would run with the default.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("node.log");
    let server = Server::new()
        .env("TICKETING_MAX_WAITER", "10")
        .env("TICKETING_ADDRS", "127.0.0.1:5225") // the client's: no typo
        .log_to(&log)
        .start();
    let text = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("TICKETING_MAX_WAITER is not a variable Ticketing reads")
            && warnings[0].contains("did you mean TICKETING_MAX_WAITERS?"),
        "{text}"
    );
    drop(server);
}
