//! The challenge-response handshake (docs/protocol.md §3): exact byte layouts, the mac and proof
//! computed by hand, and full handshakes over a socket pair, including every refusal.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use ring::hmac;
use ticketing::proto::handshake::*;

const TOKEN: &[u8] = b"0123456789abcdef-test-token";

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    (a, b)
}

fn by_hand(token: &[u8], label: &[u8], first: &[u8; 32], second: &[u8; 32]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, token);
    let mut msg = label.to_vec();
    msg.extend_from_slice(first);
    msg.extend_from_slice(second);
    hmac::sign(&key, &msg).as_ref().try_into().unwrap()
}

fn welcome() -> Welcome {
    Welcome {
        node_id: 0x0102_0304_0506_0708,
        role: role::STANDALONE,
        domain: 0xfeed_face_cafe_beef,
        leader: "10.0.0.1:5225".into(),
    }
}

fn nonce(byte: u8) -> Nonce {
    let mut n = [0u8; 32];
    for (i, b) in n.iter_mut().enumerate() {
        *b = byte.wrapping_add(i as u8);
    }
    n
}

// ---------------------------------------------------------------------------------
// Byte layouts.

#[test]
fn sizes_and_constants() {
    assert_eq!(HELLO_LEN, 40);
    assert_eq!(AUTH_LEN, 72);
    assert_eq!(NONCE_LEN, 32);
    assert_eq!(&MAGIC, b"TKT1");
    assert_eq!(VERSION, 1);
    assert_eq!(CLIENT_LABELS.port_kind, b'C');
    assert_eq!(CLIENT_LABELS.client, b"ticketing client v1");
    assert_eq!(CLIENT_LABELS.server, b"ticketing server v1");
    assert_eq!(PEER_LABELS.port_kind, b'P');
    assert_eq!(PEER_LABELS.client, b"ticketing peer v1");
    assert_eq!(PEER_LABELS.server, b"ticketing peer-server v1");
    assert_eq!([role::LEADER, role::FOLLOWER, role::CANDIDATE, role::LEARNER, role::STANDALONE], *b"LFCNS");
}

#[test]
fn hello_layout() {
    let n = nonce(0x10);
    let hello = encode_hello(&CLIENT_LABELS, &n);
    assert_eq!(hello.len(), 40);
    assert_eq!(&hello[..4], b"TKT1");
    assert_eq!(hello[4], 1);
    assert_eq!(hello[5], b'C');
    assert_eq!(&hello[6..8], &[0, 0]);
    assert_eq!(&hello[8..], &n);
    let peer = encode_hello(&PEER_LABELS, &n);
    assert_eq!(peer[5], b'P');
    assert_eq!(decode_hello(&hello, &CLIENT_LABELS).unwrap(), n);
    assert!(matches!(decode_hello(&hello, &PEER_LABELS), Err(HandshakeError::WrongPortKind(b'C'))));
    assert!(matches!(decode_hello(&peer, &CLIENT_LABELS), Err(HandshakeError::WrongPortKind(b'P'))));
    let mut bad = hello;
    bad[0] = b'X';
    assert!(matches!(decode_hello(&bad, &CLIENT_LABELS), Err(HandshakeError::BadMagic)));
    let mut bad = hello;
    bad[4] = 2;
    assert!(matches!(decode_hello(&bad, &CLIENT_LABELS), Err(HandshakeError::VersionMismatch(2))));
}

#[test]
fn auth_layout() {
    let n = nonce(0x20);
    let mac = [0xab; 32];
    let auth = encode_auth(&n, &mac);
    assert_eq!(auth.len(), 72);
    assert_eq!(&auth[..4], b"TKT1");
    assert_eq!(auth[4], 1);
    assert_eq!(&auth[5..8], &[0, 0, 0]);
    assert_eq!(&auth[8..40], &n);
    assert_eq!(&auth[40..], &mac);
    assert_eq!(decode_auth(&auth).unwrap(), (n, mac));
    let mut bad = auth;
    bad[3] = b'2';
    assert!(matches!(decode_auth(&bad), Err(HandshakeError::BadMagic)));
    let mut bad = auth;
    bad[4] = 0;
    assert!(matches!(decode_auth(&bad), Err(HandshakeError::VersionMismatch(0))));
}

#[test]
fn welcome_layout() {
    let proof = [0x5a; 32];
    let bytes = encode_welcome(&proof, &welcome());
    let mut want = vec![b'W'];
    want.extend_from_slice(&proof);
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    want.push(b'S');
    want.extend_from_slice(&[0xfe, 0xed, 0xfa, 0xce, 0xca, 0xfe, 0xbe, 0xef]);
    want.push(13);
    want.extend_from_slice(b"10.0.0.1:5225");
    assert_eq!(bytes, want);
    // Unknown leader: empty str8.
    let bytes = encode_welcome(&proof, &Welcome { leader: String::new(), ..welcome() });
    assert_eq!(bytes.len(), 1 + 32 + 8 + 1 + 8 + 1);
    assert_eq!(*bytes.last().unwrap(), 0);
}

#[test]
fn reject_layout() {
    assert_eq!(encode_reject("no"), b"X\x02no".to_vec());
    assert_eq!(encode_reject(""), b"X\x00".to_vec());
    let long = encode_reject(&"r".repeat(300));
    assert_eq!(long.len(), 2 + 255);
    assert_eq!(long[1], 255);
}

#[test]
fn mac_and_proof_match_hmac_by_hand() {
    let key = auth_key(TOKEN);
    let server = nonce(1);
    let client = nonce(101);
    assert_eq!(
        client_mac(&key, &CLIENT_LABELS, &server, &client),
        by_hand(TOKEN, b"ticketing client v1", &server, &client)
    );
    assert_eq!(
        server_proof(&key, &CLIENT_LABELS, &client, &server),
        by_hand(TOKEN, b"ticketing server v1", &client, &server)
    );
    assert_eq!(
        client_mac(&key, &PEER_LABELS, &server, &client),
        by_hand(TOKEN, b"ticketing peer v1", &server, &client)
    );
    assert_eq!(
        server_proof(&key, &PEER_LABELS, &client, &server),
        by_hand(TOKEN, b"ticketing peer-server v1", &client, &server)
    );
    // Order of nonces matters, and the mac is not the proof.
    assert_ne!(
        client_mac(&key, &CLIENT_LABELS, &server, &client),
        client_mac(&key, &CLIENT_LABELS, &client, &server)
    );
    assert_ne!(
        client_mac(&key, &CLIENT_LABELS, &server, &client),
        server_proof(&key, &CLIENT_LABELS, &server, &client)
    );
}

#[test]
fn fresh_nonces_differ() {
    let a = fresh_nonce();
    let b = fresh_nonce();
    assert_ne!(a, b);
    assert_ne!(a, [0u8; 32]);
}

// ---------------------------------------------------------------------------------
// Over a socket pair.

fn spawn_server(
    stream: UnixStream,
    token: &'static [u8],
    labels: Labels,
) -> thread::JoinHandle<Result<Nonce, HandshakeError>> {
    thread::spawn(move || {
        let mut stream = stream;
        server_handshake(&mut stream, &auth_key(token), &labels, welcome)
    })
}

#[test]
fn full_handshake_succeeds_with_the_same_token() {
    for labels in [CLIENT_LABELS, PEER_LABELS] {
        let (mut c, s) = pair();
        let server = spawn_server(s, TOKEN, labels);
        let got = client_handshake(&mut c, &auth_key(TOKEN), &labels).unwrap();
        assert_eq!(got, welcome());
        let client_nonce = server.join().unwrap().unwrap();
        assert_ne!(client_nonce, [0u8; 32]);
    }
}

#[test]
fn frames_can_follow_the_handshake_on_the_same_stream() {
    let (mut c, s) = pair();
    let server = thread::spawn(move || {
        let mut s = s;
        server_handshake(&mut s, &auth_key(TOKEN), &CLIENT_LABELS, welcome).unwrap();
        let mut buf = [0u8; 9];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS).unwrap();
    c.write_all(b"\x00\x00\x00\x05P\x00\x00\x00\x01").unwrap();
    // Nothing of the handshake was left unread or over-read.
    assert_eq!(&server.join().unwrap(), b"\x00\x00\x00\x05P\x00\x00\x00\x01");
}

#[test]
fn server_hello_auth_and_welcome_bytes_on_the_wire() {
    // A hand-written client checks everything the server sends.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello = [0u8; 40];
    c.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..8], b"TKT1\x01C\x00\x00");
    let server_nonce: [u8; 32] = hello[8..].try_into().unwrap();
    let client_nonce = nonce(77);
    let mac = by_hand(TOKEN, b"ticketing client v1", &server_nonce, &client_nonce);
    let mut auth = b"TKT1\x01\x00\x00\x00".to_vec();
    auth.extend_from_slice(&client_nonce);
    auth.extend_from_slice(&mac);
    c.write_all(&auth).unwrap();
    let mut w = vec![0u8; 1 + 32 + 8 + 1 + 8 + 1 + 13];
    c.read_exact(&mut w).unwrap();
    assert_eq!(w[0], b'W');
    assert_eq!(&w[1..33], &by_hand(TOKEN, b"ticketing server v1", &client_nonce, &server_nonce));
    assert_eq!(&w[33..41], &0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(w[41], b'S');
    assert_eq!(&w[42..50], &0xfeed_face_cafe_beefu64.to_be_bytes());
    assert_eq!(w[50], 13);
    assert_eq!(&w[51..], b"10.0.0.1:5225");
    assert_eq!(server.join().unwrap().unwrap(), client_nonce);
}

#[test]
fn client_auth_bytes_on_the_wire() {
    // A hand-written server checks everything the client sends.
    let (c, mut s) = pair();
    let client = thread::spawn(move || {
        let mut c = c;
        client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS)
    });
    let server_nonce = nonce(9);
    s.write_all(&encode_hello(&CLIENT_LABELS, &server_nonce)).unwrap();
    let mut auth = [0u8; 72];
    s.read_exact(&mut auth).unwrap();
    assert_eq!(&auth[..8], b"TKT1\x01\x00\x00\x00");
    let client_nonce: [u8; 32] = auth[8..40].try_into().unwrap();
    assert_eq!(&auth[40..], &by_hand(TOKEN, b"ticketing client v1", &server_nonce, &client_nonce));
    let proof = by_hand(TOKEN, b"ticketing server v1", &client_nonce, &server_nonce);
    s.write_all(&encode_welcome(&proof, &welcome())).unwrap();
    assert_eq!(client.join().unwrap().unwrap(), welcome());
}

#[test]
fn wrong_token_is_auth_failed_and_rejected() {
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let got = client_handshake(&mut c, &auth_key(b"another-token-16bytes"), &CLIENT_LABELS);
    match got {
        Err(HandshakeError::Rejected(reason)) => assert_eq!(reason, "authentication failed"),
        other => panic!("client: {other:?}"),
    }
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::AuthFailed)));
}

#[test]
fn tampered_server_proof_is_bad_proof() {
    for flip in [0usize, 17, 31] {
        let (c, mut s) = pair();
        let client = thread::spawn(move || {
            let mut c = c;
            client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS)
        });
        let server_nonce = nonce(3);
        s.write_all(&encode_hello(&CLIENT_LABELS, &server_nonce)).unwrap();
        let mut auth = [0u8; 72];
        s.read_exact(&mut auth).unwrap();
        let client_nonce: [u8; 32] = auth[8..40].try_into().unwrap();
        let mut proof = server_proof(&auth_key(TOKEN), &CLIENT_LABELS, &client_nonce, &server_nonce);
        proof[flip] ^= 0x01;
        s.write_all(&encode_welcome(&proof, &welcome())).unwrap();
        assert!(matches!(client.join().unwrap(), Err(HandshakeError::BadProof)));
    }
}

#[test]
fn proof_for_other_labels_or_swapped_nonces_is_bad_proof() {
    type Forge = fn(&hmac::Key, &Nonce, &Nonce) -> Mac;
    let forgeries: [Forge; 3] = [
        // The client's own mac echoed back.
        |k, c, s| client_mac(k, &CLIENT_LABELS, s, c),
        // The peer port's proof.
        |k, c, s| server_proof(k, &PEER_LABELS, c, s),
        // Nonces in the wrong order.
        |k, c, s| server_proof(k, &CLIENT_LABELS, s, c),
    ];
    for forge in forgeries {
        let (c, mut s) = pair();
        let client = thread::spawn(move || {
            let mut c = c;
            client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS)
        });
        let server_nonce = nonce(4);
        s.write_all(&encode_hello(&CLIENT_LABELS, &server_nonce)).unwrap();
        let mut auth = [0u8; 72];
        s.read_exact(&mut auth).unwrap();
        let client_nonce: [u8; 32] = auth[8..40].try_into().unwrap();
        let proof = forge(&auth_key(TOKEN), &client_nonce, &server_nonce);
        s.write_all(&encode_welcome(&proof, &welcome())).unwrap();
        assert!(matches!(client.join().unwrap(), Err(HandshakeError::BadProof)));
    }
}

#[test]
fn version_mismatch_in_auth_gets_x() {
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello = [0u8; 40];
    c.read_exact(&mut hello).unwrap();
    let server_nonce: [u8; 32] = hello[8..].try_into().unwrap();
    let client_nonce = nonce(5);
    let mac = client_mac(&auth_key(TOKEN), &CLIENT_LABELS, &server_nonce, &client_nonce);
    let mut auth = encode_auth(&client_nonce, &mac);
    auth[4] = 2;
    c.write_all(&auth).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    assert_eq!(answer[0], b'X');
    assert_eq!(answer[1] as usize, answer.len() - 2);
    assert_eq!(&answer[2..], b"unsupported protocol version");
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::VersionMismatch(2))));
}

#[test]
fn bad_magic_in_auth_gets_x() {
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello = [0u8; 40];
    c.read_exact(&mut hello).unwrap();
    c.write_all(&[b'G'; 72]).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    assert_eq!(answer[0], b'X');
    assert_eq!(&answer[2..], b"not a TKT1 AUTH message");
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::BadMagic)));
}

#[test]
fn server_version_mismatch_in_hello_is_refused_by_client() {
    let (c, mut s) = pair();
    let client = thread::spawn(move || {
        let mut c = c;
        client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS)
    });
    let mut hello = encode_hello(&CLIENT_LABELS, &nonce(1));
    hello[4] = 9;
    s.write_all(&hello).unwrap();
    assert!(matches!(client.join().unwrap(), Err(HandshakeError::VersionMismatch(9))));
}

#[test]
fn wrong_port_kind_is_an_error_on_both_sides() {
    // A client dialing a peer port.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, PEER_LABELS);
    assert!(matches!(
        client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS),
        Err(HandshakeError::WrongPortKind(b'P'))
    ));
    drop(c);
    assert!(server.join().unwrap().is_err());
    // A peer dialing a client port.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    assert!(matches!(
        client_handshake(&mut c, &auth_key(TOKEN), &PEER_LABELS),
        Err(HandshakeError::WrongPortKind(b'C'))
    ));
    drop(c);
    assert!(server.join().unwrap().is_err());
}

#[test]
fn peer_labels_under_a_client_port_kind_do_not_authenticate() {
    // Same token, right port letter, wrong message labels: the mac must not verify.
    const MIXED: Labels =
        Labels { port_kind: b'C', client: b"ticketing peer v1", server: b"ticketing peer-server v1" };
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    assert!(matches!(client_handshake(&mut c, &auth_key(TOKEN), &MIXED), Err(HandshakeError::Rejected(_))));
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::AuthFailed)));
}

#[test]
fn answer_that_is_neither_w_nor_x_is_malformed() {
    let (c, mut s) = pair();
    let client = thread::spawn(move || {
        let mut c = c;
        client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS)
    });
    s.write_all(&encode_hello(&CLIENT_LABELS, &nonce(1))).unwrap();
    let mut auth = [0u8; 72];
    s.read_exact(&mut auth).unwrap();
    s.write_all(b"Q").unwrap();
    assert!(matches!(client.join().unwrap(), Err(HandshakeError::Malformed(_))));
}

#[test]
fn connection_closed_mid_handshake_is_io() {
    // Server closes after half a HELLO.
    let (mut c, mut s) = pair();
    s.write_all(&encode_hello(&CLIENT_LABELS, &nonce(1))[..20]).unwrap();
    drop(s);
    assert!(matches!(client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS), Err(HandshakeError::Io(_))));
    // Client closes after half an AUTH.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello = [0u8; 40];
    c.read_exact(&mut hello).unwrap();
    c.write_all(&[0u8; 30]).unwrap();
    drop(c);
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::Io(_))));
}

#[test]
fn nonces_differ_between_handshakes() {
    let mut server_nonces = Vec::new();
    let mut client_nonces = Vec::new();
    for _ in 0..3 {
        let (mut c, s) = pair();
        let server = spawn_server(s, TOKEN, CLIENT_LABELS);
        let mut hello = [0u8; 40];
        c.read_exact(&mut hello).unwrap();
        server_nonces.push(hello[8..].to_vec());
        let sn: Nonce = hello[8..].try_into().unwrap();
        let cn = fresh_nonce();
        let mac = client_mac(&auth_key(TOKEN), &CLIENT_LABELS, &sn, &cn);
        c.write_all(&encode_auth(&cn, &mac)).unwrap();
        let welcome = read_welcome(&mut c, &auth_key(TOKEN), &CLIENT_LABELS, &cn, &sn).unwrap();
        assert_eq!(welcome.node_id, 0x0102_0304_0506_0708);
        client_nonces.push(server.join().unwrap().unwrap().to_vec());
    }
    // And the client side draws a fresh nonce per handshake, too.
    for _ in 0..3 {
        let (c, mut s) = pair();
        let client = thread::spawn(move || {
            let mut c = c;
            let _ = client_handshake(&mut c, &auth_key(TOKEN), &CLIENT_LABELS);
        });
        s.write_all(&encode_hello(&CLIENT_LABELS, &nonce(1))).unwrap();
        let mut auth = [0u8; 72];
        s.read_exact(&mut auth).unwrap();
        client_nonces.push(auth[8..40].to_vec());
        drop(s);
        client.join().unwrap();
    }
    for list in [&server_nonces, &client_nonces] {
        for i in 0..list.len() {
            for j in i + 1..list.len() {
                assert_ne!(list[i], list[j]);
            }
        }
    }
}

#[test]
fn replayed_auth_fails_on_a_new_connection() {
    // Session 1: record the AUTH a genuine client sends; it succeeds.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello = [0u8; 40];
    c.read_exact(&mut hello).unwrap();
    let sn: Nonce = hello[8..].try_into().unwrap();
    let cn = fresh_nonce();
    let recorded = encode_auth(&cn, &client_mac(&auth_key(TOKEN), &CLIENT_LABELS, &sn, &cn));
    c.write_all(&recorded).unwrap();
    read_welcome(&mut c, &auth_key(TOKEN), &CLIENT_LABELS, &cn, &sn).unwrap();
    server.join().unwrap().unwrap();

    // Session 2: an attacker without the token replays it.
    let (mut c, s) = pair();
    let server = spawn_server(s, TOKEN, CLIENT_LABELS);
    let mut hello2 = [0u8; 40];
    c.read_exact(&mut hello2).unwrap();
    assert_ne!(hello[8..], hello2[8..]);
    c.write_all(&recorded).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    assert_eq!(answer, encode_reject("authentication failed"));
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::AuthFailed)));
}

#[test]
fn welcome_is_asked_only_after_authentication() {
    let (mut c, s) = pair();
    let server = thread::spawn(move || {
        let mut s = s;
        server_handshake(&mut s, &auth_key(TOKEN), &CLIENT_LABELS, || {
            panic!("welcome asked for an unauthenticated client")
        })
    });
    let _ = client_handshake(&mut c, &auth_key(b"wrong-token-0123456"), &CLIENT_LABELS);
    assert!(matches!(server.join().unwrap(), Err(HandshakeError::AuthFailed)));
}

#[test]
fn errors_display_something_useful() {
    let cases: Vec<HandshakeError> = vec![
        HandshakeError::BadMagic,
        HandshakeError::VersionMismatch(2),
        HandshakeError::WrongPortKind(b'P'),
        HandshakeError::AuthFailed,
        HandshakeError::BadProof,
        HandshakeError::Rejected("why".into()),
        HandshakeError::Malformed("what"),
        HandshakeError::Io(std::io::ErrorKind::UnexpectedEof.into()),
    ];
    for e in cases {
        assert!(!e.to_string().is_empty());
    }
}
