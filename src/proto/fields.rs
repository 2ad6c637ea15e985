//! The pieces every frame is read and written with (docs/protocol.md §4): the
//! bounds-checked cursor and its error, the checks of keys and owners, and the writers.
//! A leaf below `frame.rs` and `pool_frames.rs`.

use byteorder::{BigEndian, ByteOrder};

use super::limits::{KEY_LEN_MIN, OWNER_LEN_MIN};

/// Why a frame could not be decoded, and so what the server must do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Frame structure is wrong: answer `E 3` with id 0 and close.
    Malformed(&'static str),
    /// Unknown op letter: answer `E 2` with id 0 and close.
    UnknownOp(u8),
    /// Structure is fine but a field is out of range: answer `E 1` with this id.
    Invalid { id: u32, reason: &'static str },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Malformed(why) => write!(f, "malformed frame: {why}"),
            DecodeError::UnknownOp(op) => write!(f, "unknown op 0x{op:02x}"),
            DecodeError::Invalid { reason, .. } => write!(f, "invalid field: {reason}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A bounds-checked reader over one frame's bytes; every read fails instead of panicking.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Malformed("body shorter than its op needs"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(BigEndian::read_u16(self.take(2)?))
    }
    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(BigEndian::read_u32(self.take(4)?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(BigEndian::read_u64(self.take(8)?))
    }
    pub(super) fn str8(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u8()? as usize;
        self.take(len)
    }
    pub(super) fn str16(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u16()? as usize;
        self.take(len)
    }
    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed("body longer than its op needs"))
        }
    }
}

pub(super) fn key_field(id: u32, raw: &[u8]) -> Result<String, DecodeError> {
    if raw.len() < KEY_LEN_MIN {
        return Err(DecodeError::Invalid { id, reason: "key must be 1..=255 bytes" });
    }
    utf8_field(id, raw, "key is not valid UTF-8")
}

pub(super) fn owner_field(id: u32, raw: &[u8]) -> Result<String, DecodeError> {
    if raw.len() < OWNER_LEN_MIN {
        return Err(DecodeError::Invalid { id, reason: "owner must be 1..=255 bytes" });
    }
    utf8_field(id, raw, "owner is not valid UTF-8")
}

pub(super) fn utf8_field(id: u32, raw: &[u8], reason: &'static str) -> Result<String, DecodeError> {
    match std::str::from_utf8(raw) {
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err(DecodeError::Invalid { id, reason }),
    }
}

/// `text` as bytes, cut at a char boundary to at most `max`.
pub(super) fn truncate(text: &str, max: usize) -> &[u8] {
    if text.len() <= max {
        return text.as_bytes();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text.as_bytes()[..end]
}

pub(super) fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    start
}

pub(super) fn end_frame(out: &mut [u8], start: usize) {
    let len = out.len() - start - 4;
    BigEndian::write_u32(&mut out[start..start + 4], len as u32);
}

pub(super) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn put_str8(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() <= 255, "str8 longer than 255 bytes");
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}
