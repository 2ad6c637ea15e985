//! A peer connection inside the mio event loop: non-blocking reads into a buffer
//! that yields whole Raft frames, and a bounded send queue.
//!
//! The handshake was done before (blocking, see `peer.rs`); here the loop owns the
//! socket and its TLS state alone, so rustls needs no lock.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

use crate::raft::{wire, Message};

/// Bytes queued for one peer at most; beyond that messages are dropped (Raft treats a
/// lost message like any network loss and retries).
pub const SEND_QUEUE_MAX_BYTES: usize = 64 << 20;
/// Bytes read from the socket per read call.
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub struct PeerConn {
    pub peer: u64,
    stream: TcpStream,
    tls: Option<rustls::Connection>,
    /// Plaintext received, not yet decoded.
    inbuf: Vec<u8>,
    /// Plaintext queued for sending.
    outbuf: Vec<u8>,
    /// Ciphertext read during the handshake that TLS has not seen yet.
    leftover: Vec<u8>,
    chunk: Box<[u8]>,
}

impl PeerConn {
    pub fn new(peer: u64, stream: TcpStream, tls: Option<rustls::Connection>, leftover: Vec<u8>) -> PeerConn {
        PeerConn {
            peer,
            stream,
            tls,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            leftover,
            chunk: vec![0u8; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Reads everything available. `Ok(false)`: the peer closed the connection.
    ///
    /// `until_would_block`: read until the socket says it has nothing (needed when the
    /// event also reported the peer's close, which no later event would report again).
    /// Otherwise a plain read that fills less than the buffer ends it. Why that is
    /// enough: the socket is registered edge-triggered, and every later arrival of
    /// data raises a new event; it saves a `recv` that fails with `EAGAIN` per event.
    pub fn read_available(&mut self, until_would_block: bool) -> io::Result<bool> {
        match &mut self.tls {
            None => loop {
                match self.stream.read(&mut self.chunk) {
                    Ok(0) => return Ok(false),
                    Ok(n) if n < self.chunk.len() && !until_would_block => {
                        self.inbuf.extend_from_slice(&self.chunk[..n]);
                        return Ok(true);
                    }
                    Ok(n) => self.inbuf.extend_from_slice(&self.chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            },
            Some(conn) => {
                if !self.leftover.is_empty() {
                    let mut rest = &self.leftover[..];
                    while !rest.is_empty() {
                        let took = conn.read_tls(&mut rest)?;
                        conn.process_new_packets().map_err(io::Error::other)?;
                        drain_plaintext(conn, &mut self.inbuf)?;
                        if took == 0 {
                            // TLS takes nothing more (the peer sent close_notify):
                            // the connection is over; what came before it stands.
                            self.leftover.clear();
                            return Ok(false);
                        }
                    }
                    self.leftover.clear();
                }
                loop {
                    match conn.read_tls(&mut self.stream) {
                        Ok(0) => return Ok(false),
                        Ok(_) => {
                            conn.process_new_packets().map_err(io::Error::other)?;
                            drain_plaintext(conn, &mut self.inbuf)?;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    /// The next whole message received, if any. An undecodable frame is an error
    /// (the caller closes the connection).
    pub fn next_message(&mut self) -> Result<Option<Message>, wire::WireError> {
        match wire::decode(&self.inbuf)? {
            None => Ok(None),
            Some((msg, used)) => {
                self.inbuf.drain(..used);
                Ok(Some(msg))
            }
        }
    }

    /// Queues `msg`; false if the queue is full and it was dropped.
    pub fn queue(&mut self, msg: &Message) -> bool {
        if self.outbuf.len() >= SEND_QUEUE_MAX_BYTES {
            return false;
        }
        wire::encode(msg, &mut self.outbuf).is_ok()
    }

    /// Queues frames encoded already (messages that waited for this link); false if
    /// the queue is full and they were dropped.
    pub fn queue_encoded(&mut self, frames: &[u8]) -> bool {
        if self.outbuf.len() >= SEND_QUEUE_MAX_BYTES {
            return false;
        }
        self.outbuf.extend_from_slice(frames);
        true
    }

    /// Writes as much as the socket takes. `Ok(true)`: everything went out.
    pub fn flush(&mut self) -> io::Result<bool> {
        match &mut self.tls {
            None => {
                while !self.outbuf.is_empty() {
                    match self.stream.write(&self.outbuf) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            self.outbuf.drain(..n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(true)
            }
            Some(conn) => loop {
                // Feed rustls only as much as its own buffer takes, so our queue
                // stays the one bounded place where a slow peer's backlog lives.
                while conn.wants_write() {
                    match conn.write_tls(&mut self.stream) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if self.outbuf.is_empty() {
                    return Ok(true);
                }
                let n = conn.writer().write(&self.outbuf)?;
                if n == 0 {
                    return Ok(false);
                }
                self.outbuf.drain(..n);
            },
        }
    }
}

fn drain_plaintext(conn: &mut rustls::Connection, inbuf: &mut Vec<u8>) -> io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match conn.reader().read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => inbuf.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished TLS handshake over loopback: the server's side as a `PeerConn`
    /// socket and TLS state, the client's side to produce ciphertext with.
    fn tls_pair() -> (std::net::TcpStream, rustls::ServerConnection, rustls::ClientConnection) {
        let (server_config, client_config) = crate::tls::throwaway_configs();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client_sock = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server_sock, _) = listener.accept().unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut client = rustls::ClientConnection::new(client_config, name).unwrap();
        let handshake = std::thread::spawn(move || {
            while client.is_handshaking() {
                client.complete_io(&mut client_sock).unwrap();
            }
            client
        });
        let mut server = rustls::ServerConnection::new(server_config).unwrap();
        while server.is_handshaking() {
            server.complete_io(&mut server_sock).unwrap();
        }
        (server_sock, server, handshake.join().unwrap())
    }

    #[test]
    fn a_close_notify_in_the_handshake_leftover_ends_the_connection_instead_of_spinning() {
        let (server_sock, server, mut client) = tls_pair();
        // What a peer sent right after the handshake, read along with it: a Raft-sized
        // record, its close_notify, and more bytes after that (which TLS never takes).
        let mut leftover = Vec::new();
        client.writer().write_all(b"hello").unwrap();
        client.send_close_notify();
        client.write_tls(&mut leftover).unwrap();
        leftover.extend_from_slice(&[0x17; 8000]);
        server_sock.set_nonblocking(true).unwrap();
        let stream = TcpStream::from_std(server_sock);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut conn = PeerConn::new(2, stream, Some(rustls::Connection::Server(server)), leftover);
            let open = conn.read_available(false).unwrap();
            let _ = done_tx.send((open, conn.inbuf.clone()));
        });
        let (open, inbuf) =
            done_rx.recv_timeout(std::time::Duration::from_secs(5)).expect("read_available returned");
        assert!(!open, "the peer closed");
        assert_eq!(inbuf, b"hello", "what came before the close_notify stands");
    }
}
