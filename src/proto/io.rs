//! Moving whole frames over blocking streams.

use std::io::{self, BufReader, Read};
use std::time::{Duration, Instant};

use super::frame::{check_frame_len, DecodeError};

/// Why a frame could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the stream cleanly between two frames.
    Closed,
    /// The stream failed, or ended inside a frame.
    Io(io::Error),
    /// The `len` field is outside the receiver's limits (nothing was allocated).
    BadLength(DecodeError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "connection closed"),
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::BadLength(e) => write!(f, "{e}"),
        }
    }
}

/// A stream whose blocking reads can be bounded by a deadline.
pub trait ReadDeadline {
    /// Reads fail with `TimedOut` once `deadline` has passed (`None`: no deadline).
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()>;
}

impl<R: ReadDeadline> ReadDeadline for BufReader<R> {
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.get_mut().set_read_deadline(deadline)
    }
}

/// Reads frames one at a time into a reused buffer, checking `len` against
/// `max_len` before reading the body (and, for one op allowed longer frames, the op
/// byte before the rest of a longer one).
pub struct FrameReader<R> {
    inner: R,
    max_len: u32,
    /// An op whose frames may be up to this long (a HOLD).
    long_op: Option<(u8, u32)>,
    payload: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R, max_len: u32) -> Self {
        FrameReader { inner, max_len, long_op: None, payload: Vec::with_capacity(max_len.min(4096) as usize) }
    }

    /// Frames of `op` may be up to `max_len` long; a longer frame of any other op is
    /// refused once its op byte is read, before its body.
    pub fn with_long_op(mut self, op: u8, max_len: u32) -> Self {
        self.long_op = Some((op, max_len));
        self
    }

    /// Reads the payload of a frame whose length prefix is `len`.
    fn body(&mut self, len: [u8; 4]) -> Result<(), ReadError> {
        let limit = self.long_op.map_or(self.max_len, |(_, m)| m.max(self.max_len));
        let len = check_frame_len(u32::from_be_bytes(len), limit).map_err(ReadError::BadLength)?;
        self.payload.resize(len, 0);
        if len > self.max_len as usize {
            self.inner.read_exact(&mut self.payload[..1]).map_err(ReadError::Io)?;
            if self.long_op.map(|(op, _)| op) != Some(self.payload[0]) {
                return Err(ReadError::BadLength(DecodeError::Malformed("frame length above the limit")));
            }
            return self.inner.read_exact(&mut self.payload[1..]).map_err(ReadError::Io);
        }
        self.inner.read_exact(&mut self.payload).map_err(ReadError::Io)
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The next frame's op · id · body.
    pub fn read_payload(&mut self) -> Result<&[u8], ReadError> {
        let mut len = [0u8; 4];
        match read_full(&mut self.inner, &mut len) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(4) => {}
            Ok(_) => return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(ReadError::Io(e)),
        }
        self.body(len)?;
        Ok(&self.payload)
    }
}

impl<R: Read> FrameReader<BufReader<R>> {
    /// True when a whole frame (length prefix and payload) is already buffered, so the
    /// next [`FrameReader::read_payload`] returns without touching the socket.
    pub fn has_buffered_frame(&self) -> bool {
        let buffered = self.inner.buffer();
        match buffered.get(..4) {
            Some(len) => {
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                buffered.len() - 4 >= len
            }
            None => false,
        }
    }
}

impl<R: Read + ReadDeadline> FrameReader<R> {
    /// Like [`FrameReader::read_payload`], but once the first byte of a frame has
    /// arrived the rest must arrive within `limit`: waiting between frames is free,
    /// dripping a frame is not.
    pub fn read_payload_within(&mut self, limit: Duration) -> Result<&[u8], ReadError> {
        let mut len = [0u8; 4];
        let first = loop {
            match self.inner.read(&mut len[..1]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        };
        if first == 0 {
            return Err(ReadError::Closed);
        }
        self.inner.set_read_deadline(Some(Instant::now() + limit)).map_err(ReadError::Io)?;
        let rest = self.read_rest(&mut len);
        let cleared = self.inner.set_read_deadline(None);
        rest?;
        cleared.map_err(ReadError::Io)?;
        Ok(&self.payload)
    }

    /// The rest of a frame whose first byte is in `len[0]`.
    fn read_rest(&mut self, len: &mut [u8; 4]) -> Result<(), ReadError> {
        match read_full(&mut self.inner, &mut len[1..]) {
            Ok(3) => {}
            Ok(_) => return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(ReadError::Io(e)),
        }
        self.body(*len)
    }
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
fn read_full<R: Read>(inner: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match inner.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame reader whose buffer holds `bytes` (read once from a slice).
    fn buffered(bytes: &[u8]) -> FrameReader<BufReader<&[u8]>> {
        let mut reader = FrameReader::new(BufReader::with_capacity(64, bytes), 1024);
        std::io::BufRead::fill_buf(reader.get_mut()).unwrap();
        reader
    }

    #[test]
    fn a_buffered_frame_is_one_whose_length_prefix_and_payload_are_all_there() {
        // len 6 · op · id 1 · one byte of body.
        let frame = [0, 0, 0, 6, b'P', 0, 0, 0, 1, 9];
        assert!(buffered(&frame).has_buffered_frame(), "exact");
        assert!(!buffered(&frame[..9]).has_buffered_frame(), "payload short by one");
        assert!(!buffered(&frame[..3]).has_buffered_frame(), "prefix split");
        assert!(!buffered(&frame[..4]).has_buffered_frame(), "prefix only");
        assert!(!buffered(&[]).has_buffered_frame(), "nothing");
        let mut two = frame.to_vec();
        two.extend_from_slice(&frame[..5]);
        let mut reader = buffered(&two);
        assert!(reader.has_buffered_frame(), "two, the first whole");
        assert_eq!(reader.read_payload().unwrap(), &frame[4..]);
        assert!(!reader.has_buffered_frame(), "what is left is a partial frame");
        // A length the reader refuses is "whole" too: reading it fails without waiting.
        assert!(buffered(&[0, 0, 0, 0]).has_buffered_frame());
    }
}
