//! Tests of the shared state's writes: who holds the pen, what a thread that must not
//! wait does with a full socket, and what a session's end does to queued frames.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::core::{Config, SlotId, Target, IDLE_PING_DEFAULT};
use crate::client::io::cell::{Cell, Waker};
use crate::client::io::conn::Conn;
use crate::client::io::dial::Dialer;
use crate::client::io::shared::{Mode, Shared, Work};
use crate::proto::frame::{encode_request, Request};
use crate::proto::handshake::{role, Welcome};

/// A client state with one session on one end of a loopback pair (nothing runs:
/// no threads were started), and the other end, unread.
fn session_on_loopback() -> (Arc<Shared>, Arc<Conn>, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sock = TcpStream::connect(&addr).unwrap();
    let (peer, _) = listener.accept().unwrap();
    let config = Config {
        seeds: vec![addr.clone()],
        tls: false,
        commit_margin: Duration::from_secs(5),
        idle_ping: IDLE_PING_DEFAULT,
        // Named: requests do not wait for the seed's second connection.
        named: true,
        seeds_setting: "addrs",
        name_setting: "cluster_name",
    };
    let dialer = Dialer {
        key: crate::proto::handshake::auth_key(b"0123456789abcdef"),
        tls: None,
        names: Default::default(),
        cluster_name: None,
    };
    let shared = Arc::new(Shared::new(config, dialer, |_, _, _| {}, Instant::now()));
    let welcome = Welcome { node_id: 1, role: role::STANDALONE, domain: 1, leader: String::new() };
    let (_, writer) = crate::transport::split(sock, None).unwrap();
    let conn = {
        let mut state = shared.state();
        while state.core.poll_action().is_some() {}
        let session = state.core.on_connected(SlotId(1), &welcome, addr, Instant::now()).unwrap();
        while state.core.poll_action().is_some() {}
        let conn = Arc::new(Conn::new(session, writer));
        state.conns.insert(session, Arc::clone(&conn));
        conn
    };
    (shared, conn, peer)
}

/// Queues a STATUS on the session (as a caller would) and returns the work the
/// core asks for.
fn queue_status(shared: &Arc<Shared>) -> Vec<Work> {
    let mut state = shared.state();
    let deadline = Instant::now() + Duration::from_secs(60);
    state.core.read(Waker::Thread(Cell::mine()), Request::Status, Target::Any, deadline, Instant::now());
    state.drain(shared)
}

fn status_frame(id: u32) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(&mut out, id, &Request::Status);
    out
}

fn read_to_end(mut peer: TcpStream) -> Vec<u8> {
    peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = peer.read_to_end(&mut got);
    got
}

#[cfg(target_os = "linux")]
#[test]
fn the_reader_hands_a_write_the_socket_cannot_take_to_another_thread() {
    let (shared, conn, peer) = session_on_loopback();
    // Fill both sockets' buffers first, so whatever their sizes the reader's write
    // below cannot go out whole.
    let mut filler = 0usize;
    let chunk = vec![0x5Au8; 1 << 16];
    while let Ok(n @ 1..) = crate::sys::send_nonblocking(&conn_socket(&conn), &chunk) {
        filler += n;
    }
    assert!(filler > 0);
    assert!(shared.state().core.take_pen(conn.session));
    // While the reader holds the pen a caller queues and returns: no write yet.
    for _ in 0..2 {
        let work = queue_status(&shared);
        assert!(!work.iter().any(|w| matches!(w, Work::Flush(_))), "the pen holder writes it");
    }
    assert!(!shared.state().core.take_pen(conn.session), "the pen is held");
    // The peer reads nothing until the reader has moved on: a reader that waited
    // for the socket here would wait for ever (or until the write deadline).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (reader_shared, reader_conn) = (Arc::clone(&shared), Arc::clone(&conn));
    std::thread::spawn(move || {
        reader_shared.flush(&reader_conn, Mode::NonBlocking);
        let _ = done_tx.send(());
    });
    done_rx.recv_timeout(Duration::from_secs(3)).expect("a non-blocking flush returned without waiting");
    assert!(!shared.state().core.take_pen(conn.session), "the writer thread holds the pen until it is done");
    // The peer reads: the filler, then exactly the two frames, once each, in order.
    let reading = std::thread::spawn(move || read_to_end(peer));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shared.state().core.take_pen(conn.session) {
        assert!(Instant::now() < deadline, "the writer thread never let go of the pen");
        std::thread::sleep(Duration::from_millis(5));
    }
    conn.kill();
    let got = reading.join().unwrap();
    let mut expected = vec![0x5Au8; filler];
    expected.extend(status_frame(1));
    expected.extend(status_frame(2));
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the bytes on the wire differ from the frames queued");
}

#[test]
fn with_the_pen_released_a_caller_writes_its_own_frame_again() {
    let (shared, conn, peer) = session_on_loopback();
    if shared.state().core.take_pen(conn.session) {
        shared.flush(&conn, Mode::NonBlocking);
    }
    // Nothing was queued: the pen is free and the next caller writes at once.
    let work = queue_status(&shared);
    assert!(work.iter().any(|w| matches!(w, Work::Flush(_))), "the caller is the writer");
    shared.perform(work, Mode::Blocking);
    conn.kill();
    assert_eq!(read_to_end(peer), status_frame(1));
}

#[test]
fn the_reader_leaving_with_the_pen_writes_nothing_and_the_frames_count_as_unsent() {
    let (shared, conn, peer) = session_on_loopback();
    assert!(shared.state().core.take_pen(conn.session));
    let work = queue_status(&shared);
    assert!(!work.iter().any(|w| matches!(w, Work::Flush(_))));
    // The server closed the connection while this was queued.
    shared.with_core(Mode::NonBlocking, |core, now| core.on_closed(conn.session, now));
    conn.kill();
    assert!(read_to_end(peer).is_empty(), "nothing was written");
    // The request was not sent: it waits for another session (there is none).
    assert!(!shared.state().core.is_connected());
}

fn conn_socket(conn: &Conn) -> TcpStream {
    conn.socket().try_clone().unwrap()
}
