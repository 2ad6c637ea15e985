//! Frames of the client protocol (docs/protocol.md §4–§9): exact bytes both ways, every
//! malformed and invalid form, the valid boundaries, `FrameReader`, and property tests.

use std::io::{self, Read};

use proptest::prelude::*;
use ticketing::proto::frame::{check_frame_len, encoded_response_len};
use ticketing::proto::io::{FrameReader, ReadError};
use ticketing::proto::limits::*;
use ticketing::proto::{
    decode_request, decode_response, encode_request, encode_response, DecodeError, ErrorCode, Request,
    Response, TopKey,
};

/// Bytes from hex, ignoring whitespace and `·`.
fn h(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits in {text:?}");
    digits.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap()).collect()
}

fn enc_req(id: u32, request: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(&mut out, id, request);
    out
}

fn enc_resp(id: u32, response: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    encode_response(&mut out, id, response);
    out
}

/// The payload (op · id · body) of a whole frame, after checking its `len`.
fn payload(frame: &[u8]) -> &[u8] {
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4, "len field must count op + id + body");
    &frame[4..]
}

fn acquire(lease_s: u8, wait_ms: u32, key: &str, owner: &str) -> Request {
    Request::Acquire { lease_s, wait_ms, key: key.into(), owner: owner.into() }
}

fn malformed(result: Result<(u32, impl std::fmt::Debug), DecodeError>) {
    match result {
        Err(DecodeError::Malformed(_)) => {}
        other => panic!("expected Malformed, got {other:?}"),
    }
}

fn invalid(result: Result<(u32, Request), DecodeError>, want_id: u32) {
    match result {
        Err(DecodeError::Invalid { id, .. }) => assert_eq!(id, want_id),
        other => panic!("expected Invalid with id {want_id}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// Requests: exact bytes both ways.

/// (request, id, exact frame bytes) for every request op.
fn request_cases() -> Vec<(Request, u32, Vec<u8>)> {
    vec![
        (
            acquire(30, 5000, "k1", "o"),
            7,
            // len 15 · 'A' · id 7 · lease 30 · wait 5000 · str8 "k1" · str8 "o"
            h("0000000f 41 00000007 1e 00001388 02 6b31 01 6f"),
        ),
        (acquire(250, 300_000, "x", "me"), 0xdead_beef, h("0000000f 41 deadbeef fa 000493e0 01 78 02 6d65")),
        (
            Request::Release { token: 0x0102_0304_0506_0708, key: "k".into(), owner: "ab".into() },
            2,
            // len 18 · 'R' · id 2 · token u64 · str8 "k" · str8 "ab"
            h("00000012 52 00000002 0102030405060708 01 6b 02 6162"),
        ),
        (Request::Query { key: "seat".into() }, 0x0100_0000, h("0000000a 51 01000000 04 73656174")),
        (Request::Status, 1, h("00000005 53 00000001")),
        (Request::Ping, 0xffff_ffff, h("00000005 50 ffffffff")),
    ]
}

/// The examples of docs/protocol.md §5.7, §5.8 and §6, byte for byte, both ways.
#[test]
fn hold_pool_and_in_line_encode_to_the_documented_bytes() {
    use ticketing::proto::frame::{HoldPart, PoolHolder};
    let part = |key: &str, count, capacity| HoldPart { key: key.into(), count, capacity };
    let hold = Request::Hold {
        lease_s: 60,
        wait_ms: 5000,
        place: true,
        owner: "svc-7".into(),
        parts: vec![part("seat:1", 1, 1), part("stock", 2, 100)],
    };
    let bytes = h("0000002f 48 00000008 3c 00001388 01 05 7376632d37 02
                   00000001 00000001 06 736561743a31
                   00000002 00000064 05 73746f636b");
    assert_eq!(enc_req(8, &hold), bytes);
    assert_eq!(decode_request(payload(&bytes)), Ok((8, hold)));
    let pool = Request::Pool { key: "stock".into() };
    let bytes = h("0000000b 4f 00000009 05 73746f636b");
    assert_eq!(enc_req(9, &pool), bytes);
    assert_eq!(decode_request(payload(&bytes)), Ok((9, pool)));
    let answer = Response::Pool {
        capacity: 100,
        in_use: 2,
        holds: 1,
        waiters: 0,
        oldest_wait_ms: 0,
        holders: vec![PoolHolder { token: 9, count: 2, remaining_ms: 59_000, owner: "svc-7".into() }],
    };
    let bytes = h("00000030 4f 00000009 00000064 00000002 00000001 00000000 00000000 01
                   0000000000000009 00000002 0000e678 05 7376632d37");
    assert_eq!(enc_resp(9, &answer), bytes);
    assert_eq!(decode_response(payload(&bytes)), Ok((9, answer)));
    let in_line = Response::InLine { ahead: 3, grants_per_ks: 2500 };
    let bytes = h("0000000d 49 00000008 00000003 000009c4");
    assert_eq!(enc_resp(8, &in_line), bytes);
    assert_eq!(decode_response(payload(&bytes)), Ok((8, in_line)));
    // Each field out of its range is `E 1` with the request's id, naming the field.
    let bad = |lease_s, flags: u8, parts: &[(&str, u32, u32)]| {
        let mut b = vec![b'H', 0, 0, 0, 5, lease_s, 0, 0, 0, 0, flags, 1, b'o', parts.len() as u8];
        for (key, count, capacity) in parts {
            b.extend_from_slice(&count.to_be_bytes());
            b.extend_from_slice(&capacity.to_be_bytes());
            b.push(key.len() as u8);
            b.extend_from_slice(key.as_bytes());
        }
        match decode_request(&b) {
            Err(DecodeError::Invalid { id: 5, reason }) => reason,
            other => panic!("{other:?}"),
        }
    };
    assert!(bad(0, 0, &[("a", 1, 1)]).starts_with("lease_s"));
    assert!(bad(5, 2, &[("a", 1, 1)]).starts_with("flags"));
    assert!(bad(5, 0, &[]).starts_with("keys"));
    assert!(bad(5, 0, &[("a", 1, 0)]).starts_with("capacity"));
    assert!(bad(5, 0, &[("a", 2, 1)]).starts_with("count"));
    assert!(bad(5, 0, &[("a", 1, 2), ("a", 1, 2)]).contains("twice"));
    assert!(bad(5, 0, &[("", 1, 2)]).starts_with("key"));
}

#[test]
fn request_ops_encode_to_exact_bytes() {
    for (request, id, bytes) in request_cases() {
        assert_eq!(enc_req(id, &request), bytes, "encoding {request:?}");
    }
}

#[test]
fn request_ops_decode_from_exact_bytes() {
    for (request, id, bytes) in request_cases() {
        assert_eq!(decode_request(payload(&bytes)), Ok((id, request.clone())), "decoding {request:?}");
    }
}

#[test]
fn encode_request_appends_to_existing_buffer() {
    let mut out = vec![0xaa];
    encode_request(&mut out, 1, &Request::Ping);
    encode_request(&mut out, 2, &Request::Status);
    assert_eq!(out, h("aa 00000005 50 00000001 00000005 53 00000002"));
}

#[test]
fn utf8_key_and_owner_round_trip_by_bytes() {
    // "é" is 2 bytes, "€" 3 bytes: str8 counts bytes, not chars.
    let request = acquire(1, 0, "é", "€");
    let bytes = enc_req(9, &request);
    assert_eq!(bytes, h("00000011 41 00000009 01 00000000 02 c3a9 03 e282ac"));
    assert_eq!(decode_request(payload(&bytes)), Ok((9, request)));
}

// ---------------------------------------------------------------------------------
// Responses: exact bytes both ways.

fn response_cases() -> Vec<(Response, u32, Vec<u8>)> {
    vec![
        (
            Response::Granted { token: 0x0011_2233_4455_6677, lease_ms: 30_000 },
            7,
            h("00000011 47 00000007 0011223344556677 00007530"),
        ),
        (Response::Busy, 1, h("00000005 42 00000001")),
        (Response::Timeout, 2, h("00000005 54 00000002")),
        (Response::Released, 3, h("00000005 52 00000003")),
        (Response::NotHolder, 4, h("00000005 4e 00000004")),
        (Response::Moved { leader: "h:1".into() }, 5, h("00000009 4d 00000005 03 683a31")),
        (Response::Moved { leader: String::new() }, 5, h("00000006 4d 00000005 00")),
        (Response::Unknown, 6, h("00000005 55 00000006")),
        (
            Response::Holder { token: 5, remaining_ms: 1000, waiters: 2, owner: "ow".into() },
            8,
            h("00000018 48 00000008 0000000000000005 000003e8 00000002 02 6f77"),
        ),
        (Response::Free, 9, h("00000005 46 00000009")),
        (Response::Status { text: "a=1\n".into() }, 10, h("0000000b 53 0000000a 0004 613d310a")),
        (Response::Pong, 11, h("00000005 50 0000000b")),
        (
            Response::Error { code: ErrorCode::Malformed, message: "bad".into() },
            0,
            h("0000000a 45 00000000 03 03 626164"),
        ),
        (
            Response::Error { code: ErrorCode::Invalid, message: String::new() },
            12,
            h("00000007 45 0000000c 01 00"),
        ),
        (
            Response::Error { code: ErrorCode::UnknownOp, message: "x".into() },
            0,
            h("00000008 45 00000000 02 01 78"),
        ),
        (
            Response::Error { code: ErrorCode::Overloaded, message: "x".into() },
            13,
            h("00000008 45 0000000d 04 01 78"),
        ),
        (
            Response::Error { code: ErrorCode::Other(200), message: "x".into() },
            14,
            h("00000008 45 0000000e c8 01 78"),
        ),
    ]
}

#[test]
fn response_ops_encode_to_exact_bytes() {
    for (response, id, bytes) in response_cases() {
        assert_eq!(enc_resp(id, &response), bytes, "encoding {response:?}");
    }
}

#[test]
fn response_ops_decode_from_exact_bytes() {
    for (response, id, bytes) in response_cases() {
        assert_eq!(decode_response(payload(&bytes)), Ok((id, response.clone())), "decoding {response:?}");
    }
}

#[test]
fn every_response_op_is_covered() {
    let ops: std::collections::BTreeSet<u8> = response_cases().iter().map(|c| c.2[4]).collect();
    assert_eq!(ops, b"GBTRNMUHFSPE".iter().copied().collect());
}

#[test]
fn error_codes_map_both_ways() {
    for code in 0..=255u8 {
        assert_eq!(ErrorCode::from_u8(code).to_u8(), code);
    }
    assert_eq!(ErrorCode::from_u8(1), ErrorCode::Invalid);
    assert_eq!(ErrorCode::from_u8(2), ErrorCode::UnknownOp);
    assert_eq!(ErrorCode::from_u8(3), ErrorCode::Malformed);
    assert_eq!(ErrorCode::from_u8(4), ErrorCode::Overloaded);
    assert_eq!(ErrorCode::from_u8(5), ErrorCode::Refused);
    assert_eq!(ErrorCode::from_u8(0), ErrorCode::Other(0));
    assert_eq!(ErrorCode::from_u8(6), ErrorCode::Other(6));
}

#[test]
fn response_decode_accepts_id_zero_for_connection_errors() {
    let bytes = h("00000007 45 00000000 03 00");
    assert_eq!(
        decode_response(payload(&bytes)),
        Ok((0, Response::Error { code: ErrorCode::Malformed, message: String::new() }))
    );
}

#[test]
fn response_strings_are_decoded_lossily() {
    // A client never fails on odd text from a server.
    let bytes = h("00000007 4d 00000001 01 ff");
    assert_eq!(decode_response(payload(&bytes)), Ok((1, Response::Moved { leader: "\u{fffd}".into() })));
}

#[test]
fn long_response_strings_are_cut_at_a_char_boundary() {
    // 127 × "é" = 254 bytes, then "€" (3 bytes) would pass 255: cut before it.
    let leader = "é".repeat(127) + "€";
    let bytes = enc_resp(1, &Response::Moved { leader });
    let (_, decoded) = decode_response(payload(&bytes)).unwrap();
    assert_eq!(decoded, Response::Moved { leader: "é".repeat(127) });
    let message = "x".repeat(300);
    let bytes = enc_resp(1, &Response::Error { code: ErrorCode::Invalid, message });
    assert_eq!(bytes.len(), 4 + 5 + 1 + 1 + 255);
    let owner = "o".repeat(256);
    let bytes = enc_resp(1, &Response::Holder { token: 1, remaining_ms: 1, waiters: 0, owner });
    match decode_response(payload(&bytes)).unwrap().1 {
        Response::Holder { owner, .. } => assert_eq!(owner.len(), 255),
        other => panic!("{other:?}"),
    }
}

#[test]
fn status_text_fills_the_client_frame_limit_exactly() {
    let text = "s".repeat(STATUS_TEXT_LEN_MAX);
    let bytes = enc_resp(3, &Response::Status { text: text.clone() });
    assert_eq!(bytes.len() - 4, RESPONSE_FRAME_LEN_MAX as usize);
    assert_eq!(decode_response(payload(&bytes)), Ok((3, Response::Status { text })));
    // One more byte is cut, and a multi-byte char at the edge is not split.
    let bytes = enc_resp(3, &Response::Status { text: "s".repeat(STATUS_TEXT_LEN_MAX - 1) + "é" });
    assert_eq!(bytes.len() - 4, RESPONSE_FRAME_LEN_MAX as usize - 1);
    let (_, decoded) = decode_response(payload(&bytes)).unwrap();
    assert_eq!(decoded, Response::Status { text: "s".repeat(STATUS_TEXT_LEN_MAX - 1) });
    let mut reader = FrameReader::new(io::Cursor::new(bytes), RESPONSE_FRAME_LEN_MAX);
    assert!(reader.read_payload().is_ok());
}

// ---------------------------------------------------------------------------------
// Malformed frames (E 3, connection closed).

#[test]
fn check_frame_len_bounds() {
    for len in [0, 1, 4] {
        assert!(matches!(check_frame_len(len, REQUEST_FRAME_LEN_MAX), Err(DecodeError::Malformed(_))));
    }
    assert_eq!(check_frame_len(5, REQUEST_FRAME_LEN_MAX), Ok(5));
    assert_eq!(check_frame_len(1024, REQUEST_FRAME_LEN_MAX), Ok(1024));
    for len in [1025, 65_535, u32::MAX] {
        assert!(matches!(check_frame_len(len, REQUEST_FRAME_LEN_MAX), Err(DecodeError::Malformed(_))));
    }
    assert_eq!(check_frame_len(65_535, RESPONSE_FRAME_LEN_MAX), Ok(65_535));
    assert!(matches!(check_frame_len(65_536, RESPONSE_FRAME_LEN_MAX), Err(DecodeError::Malformed(_))));
    assert!(matches!(check_frame_len(4, RESPONSE_FRAME_LEN_MAX), Err(DecodeError::Malformed(_))));
}

#[test]
fn request_body_short_by_one_byte_is_malformed_for_every_op() {
    for (request, _, bytes) in request_cases() {
        let p = payload(&bytes);
        malformed(decode_request(&p[..p.len() - 1]));
        let _ = request;
    }
}

#[test]
fn request_body_long_by_one_byte_is_malformed_for_every_op() {
    for (_, _, bytes) in request_cases() {
        for extra in [0x00, 0x01, 0xff] {
            let mut p = payload(&bytes).to_vec();
            p.push(extra);
            malformed(decode_request(&p));
        }
    }
}

#[test]
fn request_trailing_bytes_are_malformed() {
    for (_, _, bytes) in request_cases() {
        let mut p = payload(&bytes).to_vec();
        p.extend_from_slice(b"trailing garbage");
        malformed(decode_request(&p));
    }
}

#[test]
fn response_body_short_or_long_by_one_byte_is_malformed_for_every_op() {
    for (_, _, bytes) in response_cases() {
        let p = payload(&bytes);
        malformed(decode_response(&p[..p.len() - 1]));
        let mut long = p.to_vec();
        long.push(0);
        malformed(decode_response(&long));
        long.extend_from_slice(b"more");
        malformed(decode_response(&long));
    }
}

#[test]
fn str8_length_past_the_end_is_malformed() {
    // QUERY whose key claims 5 bytes but has 2.
    malformed(decode_request(&h("51 00000001 05 6b31")));
    // QUERY whose key claims 255 bytes but has none.
    malformed(decode_request(&h("51 00000001 ff")));
    // ACQUIRE whose owner length points past the end.
    malformed(decode_request(&h("41 00000001 01 00000000 01 6b 03 6f")));
    // ACQUIRE whose key length swallows the owner.
    malformed(decode_request(&h("41 00000001 01 00000000 04 6b 01 6f")));
    // RELEASE with the owner missing altogether.
    malformed(decode_request(&h("52 00000001 0000000000000001 01 6b")));
    // Responses: MOVED, HOLDER, ERROR and STATUS (str16).
    malformed(decode_response(&h("4d 00000001 02 61")));
    malformed(decode_response(&h("48 00000001 0000000000000001 00000001 00000000 09 6f")));
    malformed(decode_response(&h("45 00000001 01 05 6f")));
    malformed(decode_response(&h("53 00000001 0005 61")));
    malformed(decode_response(&h("53 00000001 00")));
}

#[test]
fn payload_shorter_than_op_and_id_is_malformed() {
    for len in 0..5 {
        let p = &h("50 00000001")[..len];
        malformed(decode_request(p));
        malformed(decode_response(p));
    }
}

#[test]
fn request_id_zero_is_malformed() {
    for (request, _, bytes) in request_cases() {
        let mut p = payload(&bytes).to_vec();
        p[1..5].copy_from_slice(&[0; 4]);
        match decode_request(&p) {
            Err(DecodeError::Malformed(_)) => {}
            other => panic!("{request:?} with id 0: expected Malformed, got {other:?}"),
        }
    }
}

#[test]
fn unknown_request_op_is_unknown_op() {
    for op in [b'Z', b'a', b'p', b'G', b'X', 0u8, 0xff] {
        assert_eq!(decode_request(&[op, 0, 0, 0, 1]), Err(DecodeError::UnknownOp(op)), "op {op:#x}");
        // The body does not matter once the op is unknown.
        assert_eq!(decode_request(&[op, 0, 0, 0, 1, 1, 2, 3]), Err(DecodeError::UnknownOp(op)));
    }
    // Every letter that is not a request op is unknown.
    for op in 0..=255u8 {
        if !b"ARQSPCLKTJFHO".contains(&op) {
            assert_eq!(decode_request(&[op, 0, 0, 0, 9]), Err(DecodeError::UnknownOp(op)));
        }
    }
}

#[test]
fn replace_round_trips_and_checks_its_fields() {
    let request = Request::Replace { old: 3, new: 7, addr: "10.0.0.7:5225".into() };
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 9, &request);
    assert_eq!(&bytes[..5], &[0, 0, 0, 35, b'C']);
    assert_eq!(decode_request(payload(&bytes)), Ok((9, request)));
    let zero = Request::Replace { old: 0, new: 7, addr: "a:1".into() };
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 9, &zero);
    assert!(matches!(decode_request(payload(&bytes)), Err(DecodeError::Invalid { id: 9, .. })));
    // An address that is not host:port is invalid (answerable, the connection stays).
    for addr in ["no-port", "a b:5225", "h:65000", "h:0"] {
        let bad = Request::Replace { old: 3, new: 7, addr: addr.into() };
        let mut bytes = Vec::new();
        encode_request(&mut bytes, 9, &bad);
        assert!(matches!(decode_request(payload(&bytes)), Err(DecodeError::Invalid { id: 9, .. })), "{addr}");
    }
}

#[test]
fn join_round_trips_and_checks_its_fields() {
    let request = Request::Join { node: 0x1234_5678_9abc_def0, addr: "10.0.0.7:5225".into() };
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 9, &request);
    // len = 4 + op 1 + id 4 + node 8 + str8 (1 + 13)
    assert_eq!(&bytes[..5], &[0, 0, 0, 27, b'J']);
    assert_eq!(decode_request(payload(&bytes)), Ok((9, request.clone())));
    assert!(request.is_admin());
    for bad in
        [Request::Join { node: 0, addr: "a:1".into() }, Request::Join { node: 5, addr: "no-port".into() }]
    {
        let mut bytes = Vec::new();
        encode_request(&mut bytes, 9, &bad);
        assert!(
            matches!(decode_request(payload(&bytes)), Err(DecodeError::Invalid { id: 9, .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn found_round_trips_with_three_or_five_distinct_voters() {
    let voters: Vec<(u64, String)> = (1..=3).map(|i| (i * 1000, format!("10.0.0.{i}:5225"))).collect();
    let request = Request::Found { voters: voters.clone() };
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 9, &request);
    assert_eq!(bytes[4], b'F');
    assert_eq!(bytes[9], 3, "the voter count");
    assert_eq!(decode_request(payload(&bytes)), Ok((9, request.clone())));
    assert!(request.is_admin());
    let mut twice = voters.clone();
    twice[2].0 = twice[0].0;
    let four: Vec<(u64, String)> = (1..=4).map(|i| (i, format!("h{i}:5225"))).collect();
    let mut zero = voters.clone();
    zero[1].0 = 0;
    let mut bad_addr = voters;
    bad_addr[0].1 = "h:0".into();
    for bad in [twice, four, zero, bad_addr] {
        let mut bytes = Vec::new();
        encode_request(&mut bytes, 9, &Request::Found { voters: bad.clone() });
        assert!(
            matches!(decode_request(payload(&bytes)), Err(DecodeError::Invalid { id: 9, .. })),
            "{bad:?}"
        );
    }
    // A count larger than the body is malformed, not a panic.
    assert!(matches!(decode_request(&[b'F', 0, 0, 0, 9, 5, 0, 0]), Err(DecodeError::Malformed(_))));
}

#[test]
fn members_is_an_empty_admin_request() {
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 4, &Request::Members);
    assert_eq!(bytes, [0, 0, 0, 5, b'L', 0, 0, 0, 4]);
    assert_eq!(decode_request(payload(&bytes)), Ok((4, Request::Members)));
    assert!(Request::Members.is_admin() && !Request::Status.is_admin());
    assert_eq!(
        decode_request(&[b'L', 0, 0, 0, 4, 0]),
        Err(DecodeError::Malformed("body longer than its op needs"))
    );
}

#[test]
fn top_keys_round_trips_and_checks_n() {
    // The bytes of docs/protocol.md §5.6.
    let request = enc_req(6, &Request::TopKeys { n: 10 });
    assert_eq!(request, h("00 00 00 06 4b 00 00 00 06 0a"));
    assert_eq!(decode_request(payload(&request)), Ok((6, Request::TopKeys { n: 10 })));
    assert!(!Request::TopKeys { n: 1 }.is_admin(), "any client may ask");
    for n in [0u8, 101, 255] {
        assert_eq!(
            decode_request(&[b'K', 0, 0, 0, 6, n]),
            Err(DecodeError::Invalid { id: 6, reason: "n must be 1..=100" }),
            "n {n}"
        );
    }
    assert_eq!(
        decode_request(&[b'K', 0, 0, 0, 6]),
        Err(DecodeError::Malformed("body shorter than its op needs"))
    );
    let one = Response::TopKeys {
        keys: vec![TopKey {
            key: "seat:42".into(),
            waiters: 3,
            oldest_wait_ms: 1500,
            token: 9,
            owner: "svc-7".into(),
            remaining_ms: 28_000,
        }],
    };
    let bytes = enc_resp(6, &one);
    assert_eq!(
        bytes,
        h("00 00 00 28 4b 00 00 00 06 01
           00 00 00 03 00 00 05 dc 00 00 00 00 00 00 00 09 00 00 6d 60
           07 73 65 61 74 3a 34 32 05 73 76 63 2d 37")
    );
    assert_eq!(decode_response(payload(&bytes)), Ok((6, one)));
    let none = enc_resp(6, &Response::TopKeys { keys: vec![] });
    assert_eq!(none, h("00 00 00 06 4b 00 00 00 06 00"));
    // A count above 100 is malformed, whatever follows.
    assert!(matches!(decode_response(&[b'K', 0, 0, 0, 6, 101]), Err(DecodeError::Malformed(_))));
    // The largest answer (100 keys and owners of 255 bytes) fits a response frame.
    let key = "k".repeat(255);
    let big = Response::TopKeys {
        keys: (0..150)
            .map(|i| TopKey {
                key: key.clone(),
                waiters: i,
                oldest_wait_ms: 0,
                token: 1,
                owner: key.clone(),
                remaining_ms: 0,
            })
            .collect(),
    };
    let bytes = enc_resp(7, &big);
    assert!(bytes.len() - 4 <= RESPONSE_FRAME_LEN_MAX as usize, "{}", bytes.len());
    match decode_response(payload(&bytes)) {
        Ok((7, Response::TopKeys { keys })) => assert_eq!(keys.len(), 100, "cut to 100 keys"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn transfer_leader_carries_its_target_and_0_means_any_voter() {
    let mut bytes = Vec::new();
    encode_request(&mut bytes, 6, &Request::TransferLeader { target: Some(3) });
    assert_eq!(bytes, [0, 0, 0, 13, b'T', 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 3]);
    assert_eq!(decode_request(payload(&bytes)), Ok((6, Request::TransferLeader { target: Some(3) })));
    let mut any = Vec::new();
    encode_request(&mut any, 6, &Request::TransferLeader { target: None });
    assert_eq!(any, [0, 0, 0, 13, b'T', 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(decode_request(payload(&any)), Ok((6, Request::TransferLeader { target: None })));
    assert!(Request::TransferLeader { target: None }.is_admin());
    assert_eq!(
        decode_request(&[b'T', 0, 0, 0, 6, 0, 0, 0]),
        Err(DecodeError::Malformed("body shorter than its op needs"))
    );
}

proptest! {
    /// The server's byte accounting relies on this being exact.
    #[test]
    fn encoded_response_len_is_exact(response in valid_response(), long in text(600), id in any::<u32>()) {
        // Also with text longer than its length prefix says (encoding cuts it).
        for r in [response, Response::Moved { leader: long.clone() }, Response::Error { code: ErrorCode::Refused, message: long }] {
            let mut bytes = Vec::new();
            encode_response(&mut bytes, id, &r);
            prop_assert_eq!(encoded_response_len(&r), bytes.len());
        }
    }
}

#[test]
fn unknown_response_op_is_unknown_op() {
    for op in 0..=255u8 {
        if !b"GBTRNMUHFSPEKIO".contains(&op) {
            assert_eq!(decode_response(&[op, 0, 0, 0, 9]), Err(DecodeError::UnknownOp(op)), "op {op:#x}");
        }
    }
}

// ---------------------------------------------------------------------------------
// Invalid fields (E 1 with the request's id, connection stays open).

fn acquire_payload(id: u32, lease_s: u8, wait_ms: u32, key: &[u8], owner: &[u8]) -> Vec<u8> {
    let mut p = vec![b'A'];
    p.extend_from_slice(&id.to_be_bytes());
    p.push(lease_s);
    p.extend_from_slice(&wait_ms.to_be_bytes());
    p.push(key.len() as u8);
    p.extend_from_slice(key);
    p.push(owner.len() as u8);
    p.extend_from_slice(owner);
    p
}

fn release_payload(id: u32, token: u64, key: &[u8], owner: &[u8]) -> Vec<u8> {
    let mut p = vec![b'R'];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&token.to_be_bytes());
    p.push(key.len() as u8);
    p.extend_from_slice(key);
    p.push(owner.len() as u8);
    p.extend_from_slice(owner);
    p
}

fn query_payload(id: u32, key: &[u8]) -> Vec<u8> {
    let mut p = vec![b'Q'];
    p.extend_from_slice(&id.to_be_bytes());
    p.push(key.len() as u8);
    p.extend_from_slice(key);
    p
}

#[test]
fn lease_zero_is_invalid() {
    invalid(decode_request(&acquire_payload(41, 0, 0, b"k", b"o")), 41);
}

#[test]
fn lease_251_and_above_is_invalid() {
    for lease in [251, 252, 255] {
        invalid(decode_request(&acquire_payload(42, lease, 0, b"k", b"o")), 42);
    }
}

#[test]
fn wait_above_300000_is_invalid() {
    for wait in [300_001, 1_000_000, u32::MAX] {
        invalid(decode_request(&acquire_payload(43, 1, wait, b"k", b"o")), 43);
    }
}

#[test]
fn empty_key_is_invalid() {
    invalid(decode_request(&acquire_payload(44, 1, 0, b"", b"o")), 44);
    invalid(decode_request(&release_payload(45, 1, b"", b"o")), 45);
    invalid(decode_request(&query_payload(46, b"")), 46);
}

#[test]
fn empty_owner_is_invalid() {
    invalid(decode_request(&acquire_payload(47, 1, 0, b"k", b"")), 47);
    invalid(decode_request(&release_payload(48, 1, b"k", b"")), 48);
}

#[test]
fn non_utf8_key_or_owner_is_invalid() {
    for bad in [&b"\xff"[..], b"\xc3", b"a\x80b", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"] {
        invalid(decode_request(&acquire_payload(49, 1, 0, bad, b"o")), 49);
        invalid(decode_request(&acquire_payload(50, 1, 0, b"k", bad)), 50);
        invalid(decode_request(&release_payload(51, 1, bad, b"o")), 51);
        invalid(decode_request(&release_payload(52, 1, b"k", bad)), 52);
        invalid(decode_request(&query_payload(53, bad)), 53);
    }
}

#[test]
fn structure_is_checked_before_fields() {
    // Lease 0 AND a trailing byte: the frame is malformed first.
    let mut p = acquire_payload(54, 0, 0, b"k", b"o");
    p.push(0);
    malformed(decode_request(&p));
    // Empty key AND a missing owner.
    malformed(decode_request(&h("41 00000036 01 00000000 00")));
}

#[test]
fn boundaries_that_are_valid() {
    for lease in [1u8, 2, 249, 250] {
        assert_eq!(
            decode_request(&acquire_payload(1, lease, 0, b"k", b"o")),
            Ok((1, acquire(lease, 0, "k", "o")))
        );
    }
    for wait in [0u32, 1, 299_999, 300_000] {
        assert_eq!(
            decode_request(&acquire_payload(2, 1, wait, b"k", b"o")),
            Ok((2, acquire(1, wait, "k", "o")))
        );
    }
    let k255 = "k".repeat(255);
    let o255 = "o".repeat(255);
    // 255 bytes made of multi-byte chars (85 × 3 bytes).
    let euro255 = "€".repeat(85);
    assert_eq!(euro255.len(), 255);
    for (key, owner) in [
        ("k", "o"),
        (k255.as_str(), "o"),
        ("k", o255.as_str()),
        (k255.as_str(), o255.as_str()),
        (euro255.as_str(), euro255.as_str()),
    ] {
        let request = acquire(250, 300_000, key, owner);
        let frame = enc_req(3, &request);
        assert!(frame.len() - 4 <= REQUEST_FRAME_LEN_MAX as usize);
        assert_eq!(decode_request(payload(&frame)), Ok((3, request)));
        let request = Request::Release { token: u64::MAX, key: key.into(), owner: owner.into() };
        assert_eq!(decode_request(payload(&enc_req(4, &request))), Ok((4, request)));
        let request = Request::Query { key: key.into() };
        assert_eq!(decode_request(payload(&enc_req(5, &request))), Ok((5, request)));
    }
    // Release tokens 0 and unknown values are not field errors (they get N).
    assert_eq!(
        decode_request(&release_payload(6, 0, b"k", b"o")),
        Ok((6, Request::Release { token: 0, key: "k".into(), owner: "o".into() }))
    );
}

#[test]
fn largest_request_fits_the_server_frame_limit() {
    let frame = enc_req(1, &acquire(1, 0, &"k".repeat(255), &"o".repeat(255)));
    let mut reader = FrameReader::new(io::Cursor::new(frame.clone()), REQUEST_FRAME_LEN_MAX);
    assert_eq!(reader.read_payload().unwrap(), &frame[4..]);
}

// ---------------------------------------------------------------------------------
// FrameReader.

/// A reader that hands out at most one byte per call, to exercise partial reads.
struct Trickle<R>(R);

impl<R: Read> Read for Trickle<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.0.read(&mut buf[..1])
    }
}

/// A reader that fails with `Interrupted` before every byte.
struct Interrupting<R> {
    inner: R,
    flip: bool,
}

impl<R: Read> Read for Interrupting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.flip = !self.flip;
        if self.flip {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = buf.len().min(1);
        self.inner.read(&mut buf[..n])
    }
}

#[test]
fn frame_reader_reads_frames_in_sequence_then_closed() {
    let mut stream = enc_req(1, &Request::Ping);
    encode_request(&mut stream, 2, &acquire(1, 0, "k", "o"));
    encode_request(&mut stream, 3, &Request::Status);
    let mut reader = FrameReader::new(Trickle(io::Cursor::new(stream)), REQUEST_FRAME_LEN_MAX);
    assert_eq!(decode_request(reader.read_payload().unwrap()), Ok((1, Request::Ping)));
    assert_eq!(decode_request(reader.read_payload().unwrap()), Ok((2, acquire(1, 0, "k", "o"))));
    assert_eq!(decode_request(reader.read_payload().unwrap()), Ok((3, Request::Status)));
    assert!(matches!(reader.read_payload(), Err(ReadError::Closed)));
    assert!(matches!(reader.read_payload(), Err(ReadError::Closed)));
}

#[test]
fn frame_reader_retries_interrupted_reads() {
    let stream = enc_req(5, &Request::Query { key: "q".into() });
    let mut reader =
        FrameReader::new(Interrupting { inner: io::Cursor::new(stream), flip: false }, REQUEST_FRAME_LEN_MAX);
    // `read_full` retries Interrupted; the body uses read_exact, which does too.
    assert_eq!(decode_request(reader.read_payload().unwrap()), Ok((5, Request::Query { key: "q".into() })));
    assert!(matches!(reader.read_payload(), Err(ReadError::Closed)));
}

#[test]
fn frame_reader_empty_stream_is_closed() {
    let mut reader = FrameReader::new(io::empty(), REQUEST_FRAME_LEN_MAX);
    assert!(matches!(reader.read_payload(), Err(ReadError::Closed)));
}

#[test]
fn frame_reader_eof_inside_length_is_io() {
    for cut in 1..4 {
        let frame = enc_req(1, &Request::Ping);
        let mut reader = FrameReader::new(io::Cursor::new(frame[..cut].to_vec()), 1024);
        match reader.read_payload() {
            Err(ReadError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("cut at {cut}: {:?}", other.map(|p| p.to_vec())),
        }
    }
}

#[test]
fn frame_reader_eof_inside_body_is_io() {
    let frame = enc_req(1, &acquire(1, 0, "key", "owner"));
    for cut in 4..frame.len() {
        let mut reader = FrameReader::new(Trickle(io::Cursor::new(frame[..cut].to_vec())), 1024);
        match reader.read_payload() {
            Err(ReadError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("cut at {cut}: {:?}", other.map(|p| p.to_vec())),
        }
    }
}

#[test]
fn frame_reader_rejects_lengths_outside_server_limits() {
    for len in [0u32, 1, 4, 1025, 65_535, u32::MAX] {
        let mut stream = len.to_be_bytes().to_vec();
        stream.extend_from_slice(&[b'P', 0, 0, 0, 1]);
        let mut reader = FrameReader::new(io::Cursor::new(stream), REQUEST_FRAME_LEN_MAX);
        match reader.read_payload() {
            Err(ReadError::BadLength(DecodeError::Malformed(_))) => {}
            other => panic!("len {len}: {:?}", other.map(|p| p.to_vec())),
        }
    }
}

#[test]
fn frame_reader_accepts_server_boundaries() {
    for len in [5u32, 1024] {
        let mut stream = len.to_be_bytes().to_vec();
        stream.extend(std::iter::repeat_n(7u8, len as usize));
        let mut reader = FrameReader::new(io::Cursor::new(stream), REQUEST_FRAME_LEN_MAX);
        assert_eq!(reader.read_payload().unwrap().len(), len as usize);
        assert!(matches!(reader.read_payload(), Err(ReadError::Closed)));
    }
}

#[test]
fn frame_reader_client_side_accepts_up_to_65535() {
    let mut stream = Vec::new();
    for len in [1025u32, 65_535] {
        stream.extend_from_slice(&len.to_be_bytes());
        stream.extend(std::iter::repeat_n(1u8, len as usize));
    }
    stream.extend_from_slice(&65_536u32.to_be_bytes());
    stream.extend(std::iter::repeat_n(1u8, 65_536));
    let mut reader = FrameReader::new(io::Cursor::new(stream), RESPONSE_FRAME_LEN_MAX);
    assert_eq!(reader.read_payload().unwrap().len(), 1025);
    assert_eq!(reader.read_payload().unwrap().len(), 65_535);
    assert!(matches!(reader.read_payload(), Err(ReadError::BadLength(DecodeError::Malformed(_)))));
}

#[test]
fn frame_reader_reuses_its_buffer_without_leaking_old_bytes() {
    let mut stream = enc_req(1, &acquire(1, 0, &"k".repeat(200), "o"));
    encode_request(&mut stream, 2, &Request::Ping);
    let mut reader = FrameReader::new(io::Cursor::new(stream), REQUEST_FRAME_LEN_MAX);
    assert_eq!(reader.read_payload().unwrap().len(), 5 + 1 + 4 + 201 + 2);
    assert_eq!(reader.read_payload().unwrap(), &h("50 00000002")[..]);
    assert!(reader.get_mut().position() > 0);
}

// ---------------------------------------------------------------------------------
// Property tests.

/// A string of 1..=255 BYTES of UTF-8 (multi-byte chars count by their bytes).
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9:/._-]{1,255}",
        proptest::collection::vec(any::<char>(), 1..130).prop_map(|chars| {
            let mut s = String::new();
            for c in chars {
                if s.len() + c.len_utf8() > 255 {
                    break;
                }
                s.push(c);
            }
            s
        }),
        Just("x".repeat(255)),
        Just("€".repeat(85)),
    ]
}

/// Any UTF-8 string of at most `max` bytes.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..(max / 2).max(1)).prop_map(move |chars| {
        let mut s = String::new();
        for c in chars {
            if s.len() + c.len_utf8() > max {
                break;
            }
            s.push(c);
        }
        s
    })
}

fn valid_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (1u8..=250, 0u32..=300_000, field(), field())
            .prop_map(|(lease_s, wait_ms, key, owner)| { Request::Acquire { lease_s, wait_ms, key, owner } }),
        (any::<u64>(), field(), field()).prop_map(|(token, key, owner)| Request::Release {
            token,
            key,
            owner
        }),
        field().prop_map(|key| Request::Query { key }),
        Just(Request::Status),
        Just(Request::Ping),
        (1u8..=100).prop_map(|n| Request::TopKeys { n }),
    ]
}

fn valid_response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (any::<u64>(), any::<u32>()).prop_map(|(token, lease_ms)| Response::Granted { token, lease_ms }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(ahead, grants_per_ks)| Response::InLine { ahead, grants_per_ks }),
        Just(Response::Busy),
        Just(Response::Timeout),
        Just(Response::Released),
        Just(Response::NotHolder),
        text(255).prop_map(|leader| Response::Moved { leader }),
        Just(Response::Unknown),
        (any::<u64>(), any::<u32>(), any::<u32>(), text(255)).prop_map(
            |(token, remaining_ms, waiters, owner)| Response::Holder { token, remaining_ms, waiters, owner }
        ),
        Just(Response::Free),
        text(2000).prop_map(|text| Response::Status { text }),
        Just(Response::Pong),
        (any::<u8>(), text(255))
            .prop_map(|(code, message)| Response::Error { code: ErrorCode::from_u8(code), message }),
        proptest::collection::vec(
            (text(255), text(255), any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()),
            0..=100
        )
        .prop_map(|entries| Response::TopKeys {
            keys: entries
                .into_iter()
                .map(|(key, owner, token, waiters, oldest_wait_ms, remaining_ms)| TopKey {
                    key,
                    waiters,
                    oldest_wait_ms,
                    token,
                    owner,
                    remaining_ms
                })
                .collect()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decode_request_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let _ = decode_request(&bytes);
    }

    #[test]
    fn decode_request_never_panics_on_plausible_frames(
        op in prop_oneof![Just(b'A'), Just(b'R'), Just(b'Q'), Just(b'S'), Just(b'P'), Just(b'K'), Just(b'T'), Just(b'H'), Just(b'O')],
        id in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..1200),
    ) {
        let mut p = vec![op];
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&body);
        match decode_request(&p) {
            Ok((got, _)) => prop_assert_eq!(got, id),
            Err(DecodeError::Invalid { id: got, .. }) => prop_assert_eq!(got, id),
            Err(DecodeError::Malformed(_)) => {}
            Err(DecodeError::UnknownOp(_)) => prop_assert!(false, "known op reported unknown"),
        }
    }

    #[test]
    fn decode_response_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let _ = decode_response(&bytes);
    }

    #[test]
    fn decode_response_never_panics_on_plausible_frames(
        op in proptest::sample::select(b"GBTRNMUHFSPEKIO".to_vec()),
        body in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut p = vec![op, 0, 0, 0, 1];
        p.extend_from_slice(&body);
        let _ = decode_response(&p);
    }

    #[test]
    fn request_round_trips(id in 1u32.., request in valid_request()) {
        let frame = enc_req(id, &request);
        prop_assert!(frame.len() - 4 <= REQUEST_FRAME_LEN_MAX as usize);
        let mut reader = FrameReader::new(io::Cursor::new(frame), REQUEST_FRAME_LEN_MAX);
        let p = reader.read_payload().unwrap();
        prop_assert_eq!(decode_request(p), Ok((id, request)));
    }

    #[test]
    fn response_round_trips(id in any::<u32>(), response in valid_response()) {
        let frame = enc_resp(id, &response);
        let mut reader = FrameReader::new(io::Cursor::new(frame), RESPONSE_FRAME_LEN_MAX);
        let p = reader.read_payload().unwrap();
        prop_assert_eq!(decode_response(p), Ok((id, response)));
    }

    #[test]
    fn every_strict_prefix_of_a_request_is_malformed(id in 1u32.., request in valid_request()) {
        let frame = enc_req(id, &request);
        let p = &frame[4..];
        for cut in 0..p.len() {
            match decode_request(&p[..cut]) {
                Err(DecodeError::Malformed(_)) => {}
                other => prop_assert!(false, "prefix {} of {:?}: {:?}", cut, request, other),
            }
        }
    }

    #[test]
    fn every_strict_prefix_of_a_response_is_malformed(id in any::<u32>(), response in valid_response()) {
        let frame = enc_resp(id, &response);
        let p = &frame[4..];
        for cut in 0..p.len() {
            match decode_response(&p[..cut]) {
                Err(DecodeError::Malformed(_)) => {}
                other => prop_assert!(false, "prefix {} of {:?}: {:?}", cut, response, other),
            }
        }
    }
}

#[test]
fn borrowed_encoders_write_the_same_bytes_as_encode_request() {
    use ticketing::proto::frame::{encode_acquire, encode_release};
    let (mut a, mut b) = (vec![7u8], vec![7u8]);
    encode_request(
        &mut a,
        9,
        &Request::Acquire { lease_s: 30, wait_ms: 5000, key: "seat:1".into(), owner: "o".into() },
    );
    encode_acquire(&mut b, 9, 30, 5000, "seat:1", "o");
    assert_eq!(a, b);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    encode_request(&mut a, 3, &Request::Release { token: u64::MAX - 1, key: "k".into(), owner: "ow".into() });
    encode_release(&mut b, 3, u64::MAX - 1, "k", "ow");
    assert_eq!(a, b);
}

/// A HOLD frame built field by field from arbitrary values (boundary values likely):
/// lease, wait, flags, owner, and 0–20 parts of (count, capacity, key) drawn from a
/// small alphabet so keys repeat; cut short at `cut` bytes when `cut` is below its
/// length.
#[allow(clippy::type_complexity)]
fn hold_frame(
    id: u32,
    lease: u8,
    wait: u32,
    flags: u8,
    owner: &[u8],
    parts: &[(u32, u32, Vec<u8>)],
    cut: usize,
) -> Vec<u8> {
    let mut p = vec![b'H'];
    p.extend_from_slice(&id.to_be_bytes());
    p.push(lease);
    p.extend_from_slice(&wait.to_be_bytes());
    p.push(flags);
    p.push(owner.len() as u8);
    p.extend_from_slice(owner);
    p.push(parts.len() as u8);
    for (count, capacity, key) in parts {
        p.extend_from_slice(&count.to_be_bytes());
        p.extend_from_slice(&capacity.to_be_bytes());
        p.push(key.len() as u8);
        p.extend_from_slice(key);
    }
    p.truncate(cut.max(1));
    p
}

fn edgy_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(2),
        Just(3),
        Just(CAPACITY_MAX),
        Just(CAPACITY_MAX + 1),
        Just(u32::MAX),
        any::<u32>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever a peer puts in a HOLD's fields, decoding never panics, names the
    /// request it refuses, and accepts only what §5.7 allows — which then encodes back
    /// to the same bytes.
    #[test]
    fn decode_hold_accepts_only_what_the_protocol_allows(
        id in any::<u32>(),
        lease in prop_oneof![Just(0u8), Just(1), Just(250), Just(251), any::<u8>()],
        wait in prop_oneof![Just(0u32), Just(WAIT_MS_MAX), Just(WAIT_MS_MAX + 1), any::<u32>()],
        flags in prop_oneof![Just(0u8), Just(1), any::<u8>()],
        owner in proptest::collection::vec(prop_oneof![Just(b'o'), any::<u8>()], 0..5),
        parts in proptest::collection::vec(
            (edgy_u32(), edgy_u32(), proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..3)),
            0..20,
        ),
        cut in prop_oneof![Just(usize::MAX), any::<usize>().prop_map(|c| c % 400)],
    ) {
        let frame = hold_frame(id, lease, wait, flags, &owner, &parts, cut);
        match decode_request(&frame) {
            Ok((got, Request::Hold { lease_s, wait_ms, place, owner: o, parts: ps })) => {
                prop_assert_eq!(got, id);
                prop_assert!((1..=250).contains(&lease_s));
                prop_assert!(wait_ms <= WAIT_MS_MAX);
                prop_assert!(!ps.is_empty() && ps.len() <= HOLD_KEYS_MAX);
                for (i, part) in ps.iter().enumerate() {
                    prop_assert!(part.capacity >= 1 && part.capacity <= CAPACITY_MAX, "{:?}", part);
                    prop_assert!(part.count >= 1 && part.count <= part.capacity, "{:?}", part);
                    prop_assert!(!ps[..i].iter().any(|q| q.key == part.key), "key twice: {:?}", ps);
                }
                let mut again = Vec::new();
                encode_request(&mut again, got, &Request::Hold { lease_s, wait_ms, place, owner: o, parts: ps });
                // encode_request puts the frame's length first.
                prop_assert_eq!(&again[4..], &frame[..]);
            }
            Ok(other) => prop_assert!(false, "a HOLD frame decoded as {:?}", other),
            Err(DecodeError::Invalid { id: got, .. }) => prop_assert_eq!(got, id),
            Err(DecodeError::Malformed(_)) => {}
            Err(DecodeError::UnknownOp(op)) => prop_assert!(false, "HOLD reported unknown: {}", op),
        }
    }
}

#[test]
fn a_hold_frame_built_field_by_field_decodes_and_encodes_back() {
    // The accepting arm of the property above, on fixed values (random fields reach it
    // only now and then).
    let parts = [(2, 3, b"s".to_vec()), (1, 1, b"a".to_vec())];
    let frame = hold_frame(7, 30, 5000, 1, b"o", &parts, usize::MAX);
    let (id, request) = decode_request(&frame).unwrap();
    assert_eq!(id, 7);
    let Request::Hold { lease_s: 30, wait_ms: 5000, place: true, ref owner, ref parts } = request else {
        panic!("{request:?}")
    };
    assert_eq!(owner, "o");
    assert_eq!((parts[0].key.as_str(), parts[0].count, parts[0].capacity), ("s", 2, 3));
    assert_eq!((parts[1].key.as_str(), parts[1].count, parts[1].capacity), ("a", 1, 1));
    let mut again = Vec::new();
    encode_request(&mut again, id, &request);
    assert_eq!(&again[4..], &frame[..]);
}
