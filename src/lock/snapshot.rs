//! The snapshot format: writers for its four parts (header, holders, members, pooled
//! holds) and a
//! reader that checks them. Layout in `codec.rs` and docs/protocol-cluster.md.
//!
//! A leaf below both users of the format: the lock state encodes itself in slices with
//! the writers (`state.rs`), and the codec builds a state from the reader (`codec.rs`).
//! Why a module of its own: the state and the codec each need the other's half of the
//! format; with the format here, both depend on it and not on each other.

use super::bytes::{put_str8, CodecError, Reader};
use super::command::Part;

/// The version written: version 2 and the pooled holds.
const SNAPSHOT_VERSION: u8 = 3;
/// Snapshots without pooled holds; still read.
const SNAPSHOT_VERSION_NO_POOLS: u8 = 2;
/// Snapshots of older versions, without member incarnations; still read.
const SNAPSHOT_VERSION_NO_INCARNATIONS: u8 = 1;
/// The fewest bytes one holder takes (two one-byte strings, token, lease).
const HOLDER_BYTES_MIN: usize = 14;

/// Writes the header: version, fencing domain, last token, number of holders.
pub(super) fn put_header(out: &mut Vec<u8>, domain: u64, last_token: u64, count: u32) {
    out.push(SNAPSHOT_VERSION);
    out.extend_from_slice(&domain.to_be_bytes());
    out.extend_from_slice(&last_token.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
}

/// Writes one holder.
pub(super) fn put_holder(out: &mut Vec<u8>, key: &str, owner: &str, token: u64, lease_ms: u32) {
    put_str8(out, key);
    put_str8(out, owner);
    out.extend_from_slice(&token.to_be_bytes());
    out.extend_from_slice(&lease_ms.to_be_bytes());
}

/// Writes the member records: (node, incarnation, address), in node order.
pub(super) fn put_members<'a>(
    out: &mut Vec<u8>,
    members: impl ExactSizeIterator<Item = (u64, u64, &'a str)>,
) {
    out.extend_from_slice(&(members.len() as u16).to_be_bytes());
    for (node, incarnation, addr) in members {
        out.extend_from_slice(&node.to_be_bytes());
        out.extend_from_slice(&incarnation.to_be_bytes());
        put_str8(out, addr);
    }
}

/// One holder as a snapshot records it (strings borrow the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HolderRecord<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub token: u64,
    pub lease_ms: u32,
}

/// Reads a snapshot part by part: [`SnapshotReader::new`] (the header), then
/// [`SnapshotReader::next_holder`] until `None`, then [`SnapshotReader::members`].
/// Everything a snapshot alone can tell is wrong is refused here; that a key appears
/// twice is for the state being built to say.
pub(super) struct SnapshotReader<'a> {
    r: Reader<'a>,
    version: u8,
    pub domain: u64,
    pub last_token: u64,
    /// Holders still to read.
    left: usize,
}

impl<'a> SnapshotReader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Result<SnapshotReader<'a>, CodecError> {
        let mut r = Reader { buf: bytes };
        let version = r.u8()?;
        if ![SNAPSHOT_VERSION, SNAPSHOT_VERSION_NO_POOLS, SNAPSHOT_VERSION_NO_INCARNATIONS].contains(&version)
        {
            return Err(CodecError("unknown snapshot version"));
        }
        let domain = r.u64()?;
        let last_token = r.u64()?;
        let left = r.u32()? as usize;
        // Refuse counts the input cannot hold before anything is built for them.
        if left > r.buf.len() / HOLDER_BYTES_MIN {
            return Err(CodecError("holder count larger than the snapshot"));
        }
        Ok(SnapshotReader { r, version, domain, last_token, left })
    }

    /// The next holder, `None` after the last.
    pub(super) fn next_holder(&mut self) -> Result<Option<HolderRecord<'a>>, CodecError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let r = &mut self.r;
        let holder = HolderRecord { key: r.str()?, owner: r.str()?, token: r.u64()?, lease_ms: r.u32()? };
        if holder.token > self.last_token {
            return Err(CodecError("holder token above last_token"));
        }
        if holder.token == 0 {
            return Err(CodecError("holder token 0"));
        }
        Ok(Some(holder))
    }

    /// The member records (node, incarnation, address) that follow the holders; call
    /// after the last holder.
    pub(super) fn members(&mut self) -> Result<Vec<(u64, u64, &'a str)>, CodecError> {
        debug_assert_eq!(self.left, 0, "members come after every holder");
        let count = self.r.u16()? as usize;
        let mut members = Vec::with_capacity(count.min(self.r.buf.len()));
        for _ in 0..count {
            let node = self.r.u64()?;
            let incarnation =
                if self.version != SNAPSHOT_VERSION_NO_INCARNATIONS { self.r.u64()? } else { 0 };
            members.push((node, incarnation, self.r.str()?));
        }
        Ok(members)
    }

    /// The pooled holds that end the snapshot (none before version 3); call after the
    /// members.
    pub(super) fn pooled(mut self) -> Result<Vec<PooledRecord<'a>>, CodecError> {
        let mut holds = Vec::new();
        if self.version == SNAPSHOT_VERSION {
            let count = self.r.u32()? as usize;
            if count > self.r.buf.len() / POOLED_BYTES_MIN {
                return Err(CodecError("pooled hold count larger than the snapshot"));
            }
            holds.reserve(count);
            for _ in 0..count {
                let (owner, token, lease_ms) = (self.r.str()?, self.r.u64()?, self.r.u32()?);
                let n = self.r.u8()? as usize;
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    parts.push(Part { key: self.r.str()?, count: self.r.u32()?, capacity: self.r.u32()? });
                }
                holds.push(PooledRecord { owner, token, lease_ms, parts });
            }
        }
        self.r.finish()?;
        Ok(holds)
    }
}

/// The fewest bytes one pooled hold takes (a one-byte owner, token, lease, one part).
const POOLED_BYTES_MIN: usize = 2 + 8 + 4 + 1 + 10;

/// One pooled hold as a snapshot records it (strings borrow the bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PooledRecord<'a> {
    pub owner: &'a str,
    pub token: u64,
    pub lease_ms: u32,
    pub parts: Vec<Part<&'a str>>,
}

/// Writes the pooled holds: (owner, token, lease, parts), in token order.
pub(super) fn put_pooled(out: &mut Vec<u8>, holds: &[(String, u64, u32, Vec<Part>)]) {
    out.extend_from_slice(&(holds.len() as u32).to_be_bytes());
    for (owner, token, lease_ms, parts) in holds {
        put_str8(out, owner);
        out.extend_from_slice(&token.to_be_bytes());
        out.extend_from_slice(&lease_ms.to_be_bytes());
        out.push(parts.len() as u8);
        for p in parts {
            put_str8(out, &p.key);
            out.extend_from_slice(&p.count.to_be_bytes());
            out.extend_from_slice(&p.capacity.to_be_bytes());
        }
    }
}
