//! The byte-level pieces both lock formats (commands and snapshots) are made of: the
//! `str8` string, the checked big-endian reader, and the error every decoder returns.
//!
//! A leaf: it knows neither commands nor the lock state.

use byteorder::{BigEndian, ByteOrder};

/// Why bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecError(pub &'static str);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad lock command or snapshot: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

/// Writes `s` as `str8`: one length byte, then the bytes.
pub(super) fn put_str8(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() <= 255, "keys and owners are validated to 255 bytes");
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// Reads big-endian values off the front of a byte slice; every length is checked
/// before use, so reading never panics.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.buf.len() < n {
            return Err(CodecError("truncated"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(BigEndian::read_u16(self.take(2)?))
    }
    pub(super) fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(BigEndian::read_u32(self.take(4)?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(BigEndian::read_u64(self.take(8)?))
    }
    /// A non-empty UTF-8 `str8` (keys, owners, addresses).
    pub(super) fn str(&mut self) -> Result<&'a str, CodecError> {
        let len = self.u8()? as usize;
        let raw = self.take(len)?;
        if raw.is_empty() {
            return Err(CodecError("empty key or owner"));
        }
        std::str::from_utf8(raw).map_err(|_| CodecError("key or owner is not UTF-8"))
    }
    /// Nothing may follow a whole command or snapshot.
    pub(super) fn finish(&self) -> Result<(), CodecError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(CodecError("trailing bytes"))
        }
    }
}
