//! A TCP stream, with or without TLS, split into a read half and a write half that two
//! threads can use at once. Both halves share one socket (one file descriptor): a
//! connection costs one descriptor however many threads use it.
//!
//! rustls has no full-duplex split, so with TLS both halves share the connection state
//! behind a mutex. Why this is safe from deadlock: the mutex is never held across a
//! blocking socket *read* — the read half reads ciphertext from its own clone of the
//! socket first, then locks and feeds it to rustls. Writes (short, bounded by the
//! socket's write timeout) are done under the lock.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The reader's own TLS writes (handshake messages, alerts, key updates) are done under
/// the TLS lock; a peer that does not read them may hold it no longer than this.
const TLS_FLUSH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Longest wait to send the alert that tells the other side why TLS failed.
const ALERT_FLUSH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Size of one socket read, in bytes.
const NET_READ_BYTES: usize = 16 * 1024;

type Tls = Arc<Mutex<rustls::Connection>>;

/// Splits `tcp` (and its TLS state, if any) into halves.
pub fn split(
    tcp: impl Into<Arc<TcpStream>>,
    tls: Option<rustls::Connection>,
) -> io::Result<(ReadHalf, WriteHalf)> {
    let tls: Option<Tls> = tls.map(|c| Arc::new(Mutex::new(c)));
    let tcp = tcp.into();
    let reader = ReadHalf {
        tcp: tcp.clone(),
        tls: tls.clone(),
        deadline: None,
        armed: false,
        net: Vec::new(),
        net_pos: 0,
        heard: false,
    };
    let writer = WriteHalf { tcp, tls, deadline: None };
    Ok((reader, writer))
}

fn lock(tls: &Tls) -> MutexGuard<'_, rustls::Connection> {
    // A poisoned lock means another thread panicked mid-update; the TLS state is then
    // unusable and the connection will fail on its next use, which is what we want.
    tls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl crate::proto::io::ReadDeadline for ReadHalf {
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.set_deadline(deadline)
    }
}

/// Writes what TLS has queued; with a deadline, every blocking write is bounded by the
/// time left, so the whole flush ends by the deadline.
fn flush_tls(
    conn: &mut rustls::Connection,
    mut tcp: &TcpStream,
    deadline: Option<Instant>,
) -> io::Result<()> {
    while conn.wants_write() {
        arm_write_deadline(tcp, deadline)?;
        conn.write_tls(&mut tcp)?;
    }
    Ok(())
}

/// Sets the socket's send timeout to the time left until `deadline` (none: blocking).
fn arm_write_deadline(tcp: &TcpStream, deadline: Option<Instant>) -> io::Result<()> {
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        tcp.set_write_timeout(Some(left))?;
    }
    Ok(())
}

/// The reading side.
pub struct ReadHalf {
    tcp: Arc<TcpStream>,
    tls: Option<Tls>,
    deadline: Option<Instant>,
    /// A read timeout is set on the socket. Why track it: the server's reader sets and
    /// clears a deadline around every frame; almost always the frame is already
    /// buffered, no socket read happens in between, and clearing a timeout that was
    /// never set would be a `setsockopt` per request for nothing.
    armed: bool,
    /// Ciphertext read from the socket but not yet taken by rustls.
    net: Vec<u8>,
    net_pos: usize,
    /// Some byte arrived from the other side.
    heard: bool,
}

impl ReadHalf {
    /// Reads fail with `TimedOut` once `deadline` has passed (`None`: no deadline).
    pub fn set_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.deadline = deadline;
        if deadline.is_none() && self.armed {
            self.tcp.set_read_timeout(None)?;
            self.armed = false;
        }
        Ok(())
    }

    /// True once any byte arrived from the other side. Why it matters: at a TLS port, a
    /// connection that ends without a byte is a plain dialer waiting for the greeting,
    /// one that ends after its ClientHello is another story (a plain dialer's probe).
    pub fn heard(&self) -> bool {
        self.heard
    }

    /// The certificate the other side presented in the TLS handshake (its end-entity
    /// certificate), if any.
    pub fn peer_certificate(&self) -> Option<rustls::pki_types::CertificateDer<'static>> {
        let tls = self.tls.as_ref()?;
        let conn = lock(tls);
        conn.peer_certificates()?.first().map(|c| c.clone().into_owned())
    }

    fn arm_deadline(&mut self) -> io::Result<()> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.tcp.set_read_timeout(Some(left))?;
            self.armed = true;
        }
        Ok(())
    }

    fn read_tls(&mut self, tls: &Tls, out: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = lock(tls);
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // The peer closed without close_notify: for length-framed messages a
                    // truncation is detected anyway, so report an ordinary end of stream.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
                if self.net_pos < self.net.len() {
                    let mut pending = &self.net[self.net_pos..];
                    let before = pending.len();
                    conn.read_tls(&mut pending)?;
                    self.net_pos += before - pending.len();
                    if let Err(e) = conn.process_new_packets() {
                        // rustls queued an alert that says why (an unknown CA, say): sent,
                        // it lets the other side name the mistake instead of seeing the
                        // connection drop.
                        let _ = flush_tls(&mut conn, &self.tcp, Some(Instant::now() + ALERT_FLUSH_DEADLINE));
                        return Err(tls_error(e));
                    }
                    flush_tls(&mut conn, &self.tcp, Some(Instant::now() + TLS_FLUSH_DEADLINE))?;
                    continue;
                }
                flush_tls(&mut conn, &self.tcp, Some(Instant::now() + TLS_FLUSH_DEADLINE))?;
            }
            self.arm_deadline()?;
            self.net.resize(NET_READ_BYTES, 0);
            self.net_pos = 0;
            let n = match (&*self.tcp).read(&mut self.net) {
                Ok(n) => n,
                Err(e) => {
                    self.net.clear();
                    return Err(e);
                }
            };
            self.net.truncate(n);
            if n == 0 {
                return Ok(0);
            }
            self.heard = true;
        }
    }
}

impl Read for ReadHalf {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self.tls.clone() {
            None => {
                self.arm_deadline()?;
                let n = (&*self.tcp).read(out)?;
                self.heard |= n > 0;
                Ok(n)
            }
            Some(tls) => self.read_tls(&tls, out),
        }
    }
}

/// The writing side.
pub struct WriteHalf {
    tcp: Arc<TcpStream>,
    tls: Option<Tls>,
    /// Writes fail with `TimedOut` once this has passed (`None`: no deadline).
    deadline: Option<Instant>,
}

impl WriteHalf {
    /// Bounds every following write and flush by `deadline` as a whole, not per
    /// system call: a peer that takes one byte a minute cannot hold a writer forever.
    pub fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.deadline = deadline;
        if deadline.is_none() {
            self.tcp.set_write_timeout(None)?;
        }
        Ok(())
    }

    /// The socket both halves share (for a short cut that writes without the halves).
    pub fn socket(&self) -> Arc<TcpStream> {
        self.tcp.clone()
    }

    /// Closes both directions: the read half's blocked read returns at once.
    pub fn shutdown(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    /// Closes after an error answer: sends FIN, then reads and discards what the
    /// client still sends (briefly), so closing does not reset the connection and
    /// destroy the answer before the client has read it.
    pub fn close_gracefully(&self) {
        let _ = self.tcp.shutdown(Shutdown::Write);
        let _ = self.tcp.set_read_timeout(Some(std::time::Duration::from_millis(200)));
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match (&*self.tcp).read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// True without TLS: bytes written to the socket are the frames themselves.
    pub fn is_plain(&self) -> bool {
        self.tls.is_none()
    }
}

/// A socket writer that first writes without waiting, and arms the deadline only when
/// the socket takes nothing: most writes find room, and a `setsockopt` per write to set
/// a timeout that is never needed was a third of the client's writes' cost. Once it
/// waits, every blocking write is given only the time left (a peer that drains slowly
/// gets no fresh timeout per write), and the deadline is an error.
struct Paced<'a> {
    tcp: &'a TcpStream,
    deadline: Instant,
    armed: bool,
}

impl<'a> Paced<'a> {
    fn new(tcp: &'a TcpStream, deadline: Instant) -> Paced<'a> {
        Paced { tcp, deadline, armed: false }
    }
}

impl Write for Paced<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.armed {
            match crate::sys::send_nonblocking(self.tcp, buf) {
                Ok(0) if !buf.is_empty() => self.armed = true,
                other => return other,
            }
        }
        arm_write_deadline(self.tcp, Some(self.deadline))?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How far a failed [`WriteHalf::write_counted`] got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteProgress {
    /// This many bytes reached the socket (plain TCP: exact).
    Plain(usize),
    /// TLS: whether any ciphertext reached the socket (records do not map to the
    /// bytes written, so any byte out counts for all).
    Tls { any: bool },
}

impl WriteHalf {
    /// Writes `bytes` whole by `deadline`, and on failure says how far it got — what a
    /// sender needs that must never send a request twice: which of its frames may have
    /// left. TLS takes the bytes in pieces (it buffers at most 64 KiB of ciphertext),
    /// each written out before the next. When a TLS write fails, the socket is shut
    /// down while the TLS state is still held: ciphertext left in TLS's buffer must
    /// never leave later (the read half writes whatever TLS wants written when it
    /// next holds the state), or bytes reported as not sent would arrive after all.
    pub fn write_counted(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), WriteProgress> {
        match &self.tls {
            None => {
                let mut out = Paced::new(&self.tcp, deadline);
                let mut wrote = 0usize;
                while wrote < bytes.len() {
                    match out.write(&bytes[wrote..]) {
                        Ok(0) => return Err(WriteProgress::Plain(wrote)),
                        Ok(n) => wrote += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(WriteProgress::Plain(wrote)),
                    }
                }
                Ok(())
            }
            Some(tls) => {
                let mut conn = lock(tls);
                let mut out = Paced::new(&self.tcp, deadline);
                let failed = |tcp: &TcpStream, wrote: usize| {
                    let _ = tcp.shutdown(Shutdown::Both);
                    WriteProgress::Tls { any: wrote > 0 }
                };
                // Plaintext handed to TLS, and ciphertext that reached the socket.
                let (mut taken, mut wrote) = (0usize, 0usize);
                loop {
                    while taken < bytes.len() {
                        match conn.writer().write(&bytes[taken..]) {
                            Ok(0) => break,
                            Ok(n) => taken += n,
                            Err(_) => return Err(failed(&self.tcp, wrote)),
                        }
                    }
                    if !conn.wants_write() {
                        if taken == bytes.len() {
                            return Ok(());
                        }
                        // TLS took nothing and has nothing to write: it will not move.
                        return Err(failed(&self.tcp, wrote));
                    }
                    match conn.write_tls(&mut out) {
                        Ok(0) => return Err(failed(&self.tcp, wrote)),
                        Ok(n) => wrote += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(failed(&self.tcp, wrote)),
                    }
                }
            }
        }
    }

    /// Plain connections only: writes what the socket takes at once from `bytes`,
    /// never waiting (a full send buffer is `Ok(0)`).
    pub fn send_now(&self, bytes: &[u8]) -> io::Result<usize> {
        debug_assert!(self.tls.is_none(), "send_now on a TLS connection");
        let mut wrote = 0usize;
        while wrote < bytes.len() {
            match crate::sys::send_nonblocking(&self.tcp, &bytes[wrote..]) {
                Ok(0) => break,
                Ok(n) => wrote += n,
                Err(e) if wrote > 0 => {
                    log::debug!("send: {e}");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(wrote)
    }
}

impl Write for WriteHalf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.tls {
            None => {
                arm_write_deadline(&self.tcp, self.deadline)?;
                (&*self.tcp).write(buf)
            }
            Some(tls) => {
                let mut conn = lock(tls);
                let n = conn.writer().write(buf)?;
                flush_tls(&mut conn, &self.tcp, self.deadline)?;
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &self.tls {
            None => Ok(()),
            Some(tls) => flush_tls(&mut lock(tls), &self.tcp, self.deadline),
        }
    }
}

/// Joins the halves again after a blocking handshake, to hand the connection to an
/// event loop: the socket, its TLS state, and ciphertext already read from the socket
/// but not yet given to TLS (always empty without TLS: plain reads are unbuffered).
pub fn unsplit(
    reader: ReadHalf,
    writer: WriteHalf,
) -> io::Result<(TcpStream, Option<rustls::Connection>, Vec<u8>)> {
    let leftover = reader.net[reader.net_pos.min(reader.net.len())..].to_vec();
    let ReadHalf { tls: read_tls, tcp: read_tcp, .. } = reader;
    let WriteHalf { tcp, tls: write_tls, .. } = writer;
    drop(write_tls);
    drop(read_tcp);
    let tcp = Arc::try_unwrap(tcp).map_err(|_| io::Error::other("socket still shared"))?;
    let tls = match read_tls {
        None => None,
        Some(shared) => {
            let mutex = Arc::try_unwrap(shared).map_err(|_| io::Error::other("TLS state still shared"))?;
            Some(mutex.into_inner().unwrap_or_else(|p| p.into_inner()))
        }
    };
    Ok((tcp, tls, leftover))
}

/// Both halves as one stream, for the handshake.
pub struct Duplex<'a> {
    pub reader: &'a mut ReadHalf,
    pub writer: &'a mut WriteHalf,
}

impl Read for Duplex<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.reader.read(out)
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        (sock, peer)
    }

    /// The halves of a TLS client connection, handshake done, to a throw-away server
    /// whose thread reads nothing for `pause`, then returns every plaintext byte it reads
    /// until EOF.
    fn tls_halves(pause: Duration) -> (ReadHalf, WriteHalf, std::thread::JoinHandle<Vec<u8>>) {
        let (server_config, client_config) = crate::tls::throwaway_configs();
        let (mut sock, mut peer) = loopback_pair();
        let server = std::thread::spawn(move || {
            let mut conn = rustls::ServerConnection::new(server_config).unwrap();
            while conn.is_handshaking() {
                if conn.complete_io(&mut peer).is_err() {
                    return Vec::new();
                }
            }
            std::thread::sleep(pause);
            let mut stream = rustls::Stream::new(&mut conn, &mut peer);
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got);
            got
        });
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(client_config, name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        let (reader, writer) = split(sock, Some(rustls::Connection::Client(conn))).unwrap();
        (reader, writer, server)
    }

    #[test]
    fn a_tls_batch_larger_than_the_tls_buffer_is_written_whole() {
        let (_reader, mut writer, server) = tls_halves(Duration::ZERO);
        // rustls holds at most 64 KiB of ciphertext; a batch of 1 MiB must still go.
        let batch: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        assert_eq!(writer.write_counted(&batch, Instant::now() + Duration::from_secs(10)), Ok(()));
        let tls = writer.tls.clone().unwrap();
        lock(&tls).send_close_notify();
        flush_tls(&mut lock(&tls), &writer.tcp, None).unwrap();
        let _ = writer.tcp.shutdown(Shutdown::Write);
        let got = server.join().unwrap();
        assert_eq!(got.len(), batch.len());
        assert!(got == batch);
    }

    #[test]
    fn a_failed_tls_write_shuts_the_socket_so_no_buffered_ciphertext_leaves_later() {
        let start = Instant::now();
        let (_reader, mut writer, server) = tls_halves(Duration::from_secs(2));
        // The server reads nothing for a while: writes fill both sockets' buffers and
        // one of them runs past its deadline (as a write to a stalled server does) with
        // a record still buffered in TLS.
        let chunk = vec![7u8; 16 << 10];
        let failed = loop {
            if let Err(progress) = writer.write_counted(&chunk, Instant::now() + Duration::from_millis(50)) {
                break progress;
            }
            assert!(
                start.elapsed() < Duration::from_millis(1500),
                "no write timed out while the server slept"
            );
        };
        assert!(matches!(failed, WriteProgress::Tls { .. }), "{failed:?}");
        // The server reads again. What the read half does when it next holds the TLS
        // state — write whatever TLS wants written — must not put the failed batch on
        // the wire after it was reported as failed.
        std::thread::sleep(Duration::from_millis(2500).saturating_sub(start.elapsed()));
        let tls = writer.tls.clone().unwrap();
        let mut conn = lock(&tls);
        assert!(conn.wants_write(), "the record is still buffered in TLS");
        assert!(conn.write_tls(&mut &*writer.tcp).is_err(), "the socket is shut: it cannot leave");
        drop(conn);
        let _ = server.join();
    }

    #[test]
    fn a_counted_write_to_a_slow_reader_ends_at_its_deadline() {
        let (sock, mut peer) = loopback_pair();
        let (_reader, mut writer) = split(sock, None).unwrap();
        // The peer drains slowly: a little every 20 ms. Each blocking write makes some
        // progress, so only a deadline over the whole batch can end it.
        let draining = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end {
                match peer.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        let batch = vec![3u8; 64 << 20];
        let start = Instant::now();
        let result = writer.write_counted(&batch, start + Duration::from_millis(300));
        let took = start.elapsed();
        assert!(matches!(result, Err(WriteProgress::Plain(n)) if n < batch.len()), "{result:?}");
        assert!(took < Duration::from_millis(900), "the deadline held: {took:?}");
        writer.shutdown();
        let _ = draining.join();
    }

    #[test]
    fn a_failed_plain_write_says_how_many_bytes_left() {
        let (sock, peer) = loopback_pair();
        let (_reader, mut writer) = split(sock, None).unwrap();
        drop(peer);
        // The peer is gone: the first writes may still be taken by the kernel, then
        // one fails; the count never exceeds what was handed over.
        let chunk = vec![1u8; 64 << 10];
        let mut total = 0usize;
        for _ in 0..64 {
            match writer.write_counted(&chunk, Instant::now() + Duration::from_secs(2)) {
                Ok(()) => total += chunk.len(),
                Err(WriteProgress::Plain(n)) => {
                    assert!(n <= chunk.len());
                    return;
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        panic!("{total} bytes written to a closed peer without an error");
    }
}
