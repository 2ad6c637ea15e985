//! Strict binary encoding of peer messages (docs/protocol-cluster.md).
//!
//! Frame: `len u32 · op u8 · body`, big-endian, `len` = bytes after itself.
//! Decoding checks every length against a named limit and against the bytes
//! actually present BEFORE allocating, rejects short, long and trailing
//! bodies, non-canonical booleans and unsorted member sets, and never panics.

use std::collections::BTreeSet;

use super::membership::Membership;
use super::message::{Entry, EntryKind, Message, SnapshotMeta};
use super::NodeId;

/// Largest frame `len` accepted (op + body), 16 MiB.
pub const FRAME_LEN_MAX_BYTES: usize = 16 << 20;
/// Largest payload of one Normal entry, 1 MiB.
pub const ENTRY_DATA_MAX_BYTES: usize = 1 << 20;
/// Most entries in one Append.
pub const ENTRIES_PER_APPEND_MAX: usize = 65_536;
/// Largest data in one InstallSnapshot chunk, 8 MiB.
pub const SNAPSHOT_CHUNK_MAX_BYTES: usize = 8 << 20;
/// Largest snapshot a follower assembles, 1 GiB.
pub const SNAPSHOT_MAX_BYTES: usize = 1 << 30;
/// Most node ids in one member set (voters, outgoing or learners).
pub const MEMBERS_PER_SET_MAX: usize = 255;
/// Bytes of the `len` prefix.
pub const FRAME_HEADER_BYTES: usize = 4;
/// Smallest encoded entry: term, index, kind.
const ENTRY_MIN_BYTES: usize = 17;

/// Op letters, one per message.
pub mod op {
    pub const PRE_VOTE: u8 = b'p';
    pub const PRE_VOTE_RESP: u8 = b'q';
    pub const VOTE: u8 = b'v';
    pub const VOTE_RESP: u8 = b'w';
    pub const APPEND: u8 = b'a';
    pub const APPEND_RESP: u8 = b'r';
    pub const HEARTBEAT: u8 = b'h';
    pub const HEARTBEAT_RESP: u8 = b'k';
    pub const INSTALL_SNAPSHOT: u8 = b's';
    pub const INSTALL_SNAPSHOT_RESP: u8 = b't';
    pub const TIMEOUT_NOW: u8 = b'n';
    pub const REMOVED: u8 = b'x';
    pub const STOPPING: u8 = b'l';
}

const KIND_NOOP: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_CONFIG: u8 = 2;

/// Why a frame could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// `len` outside 1..=FRAME_LEN_MAX_BYTES.
    FrameLen(u64),
    UnknownOp(u8),
    /// The body ended before a field did.
    Short,
    /// Bytes left over after the last field.
    Trailing,
    /// A field broke a limit or a format rule (which one).
    Invalid(&'static str),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::FrameLen(n) => write!(f, "frame length {n} out of range"),
            WireError::UnknownOp(op) => write!(f, "unknown op {op:#04x}"),
            WireError::Short => write!(f, "body too short"),
            WireError::Trailing => write!(f, "trailing bytes after body"),
            WireError::Invalid(why) => write!(f, "invalid field: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

// ----- encoding -------------------------------------------------------------

/// Appends one framed message to `out`.
pub fn encode(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    encode_body(msg, out)?;
    let len = out.len() - start - FRAME_HEADER_BYTES;
    if len > FRAME_LEN_MAX_BYTES {
        out.truncate(start);
        return Err(WireError::FrameLen(len as u64));
    }
    out[start..start + FRAME_HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Writes `op · body` (no length prefix).
pub fn encode_body(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    match msg {
        Message::PreVote { term, last_index, last_term } => {
            out.push(op::PRE_VOTE);
            put_u64s(out, &[*term, *last_index, *last_term]);
        }
        Message::PreVoteResp { term, granted } => {
            out.push(op::PRE_VOTE_RESP);
            put_u64s(out, &[*term]);
            out.push(*granted as u8);
        }
        Message::Vote { term, last_index, last_term, transfer } => {
            out.push(op::VOTE);
            put_u64s(out, &[*term, *last_index, *last_term]);
            out.push(*transfer as u8);
        }
        Message::VoteResp { term, granted } => {
            out.push(op::VOTE_RESP);
            put_u64s(out, &[*term]);
            out.push(*granted as u8);
        }
        Message::Append { term, prev_index, prev_term, entries, commit } => {
            out.push(op::APPEND);
            put_u64s(out, &[*term, *prev_index, *prev_term, *commit]);
            if entries.len() > ENTRIES_PER_APPEND_MAX {
                return Err(WireError::Invalid("too many entries"));
            }
            out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
            for e in entries {
                encode_entry(e, out)?;
            }
        }
        Message::AppendResp { term, success, index, conflict_term, hint_index } => {
            out.push(op::APPEND_RESP);
            put_u64s(out, &[*term]);
            out.push(*success as u8);
            put_u64s(out, &[*index]);
            out.push(conflict_term.is_some() as u8);
            put_u64s(out, &[conflict_term.unwrap_or(0), *hint_index]);
        }
        Message::Heartbeat { term, commit, read_seq } => {
            out.push(op::HEARTBEAT);
            put_u64s(out, &[*term, *commit, *read_seq]);
        }
        Message::HeartbeatResp { term, read_seq } => {
            out.push(op::HEARTBEAT_RESP);
            put_u64s(out, &[*term, *read_seq]);
        }
        Message::InstallSnapshot { term, meta, offset, data, done } => {
            out.push(op::INSTALL_SNAPSHOT);
            put_u64s(out, &[*term]);
            encode_meta(meta, out)?;
            put_u64s(out, &[*offset]);
            out.push(*done as u8);
            put_bytes(out, data, SNAPSHOT_CHUNK_MAX_BYTES)?;
        }
        Message::InstallSnapshotResp { term, index, next_offset, done } => {
            out.push(op::INSTALL_SNAPSHOT_RESP);
            put_u64s(out, &[*term, *index, *next_offset]);
            out.push(*done as u8);
        }
        Message::TimeoutNow { term } => {
            out.push(op::TIMEOUT_NOW);
            put_u64s(out, &[*term]);
        }
        Message::Removed { term, config_index } => {
            out.push(op::REMOVED);
            put_u64s(out, &[*term, *config_index]);
        }
        Message::Stopping { term, leave } => {
            out.push(op::STOPPING);
            put_u64s(out, &[*term]);
            out.push(*leave as u8);
        }
    }
    Ok(())
}

/// `term u64 · index u64 · kind u8 · payload` (see the protocol doc).
pub fn encode_entry(e: &Entry, out: &mut Vec<u8>) -> Result<(), WireError> {
    put_u64s(out, &[e.term, e.index]);
    match &e.kind {
        EntryKind::Noop => out.push(KIND_NOOP),
        EntryKind::Normal(data) => {
            out.push(KIND_NORMAL);
            put_bytes(out, data, ENTRY_DATA_MAX_BYTES)?;
        }
        EntryKind::Config(m) => {
            out.push(KIND_CONFIG);
            encode_membership(m, out)?;
        }
    }
    Ok(())
}

fn encode_meta(meta: &SnapshotMeta, out: &mut Vec<u8>) -> Result<(), WireError> {
    put_u64s(out, &[meta.index, meta.term]);
    encode_membership(&meta.membership, out)
}

fn encode_membership(m: &Membership, out: &mut Vec<u8>) -> Result<(), WireError> {
    for set in [&m.voters, &m.outgoing, &m.learners] {
        if set.len() > MEMBERS_PER_SET_MAX {
            return Err(WireError::Invalid("member set too large"));
        }
        out.extend_from_slice(&(set.len() as u16).to_be_bytes());
        put_u64s(out, &set.iter().copied().collect::<Vec<_>>());
    }
    Ok(())
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

fn put_bytes(out: &mut Vec<u8>, data: &[u8], max: usize) -> Result<(), WireError> {
    if data.len() > max {
        return Err(WireError::Invalid("byte string too long"));
    }
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    Ok(())
}

// ----- decoding -------------------------------------------------------------

/// Decodes the first frame in `buf`. `Ok(None)`: not all of it has arrived
/// yet. `Ok(Some((msg, used)))`: one message and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(header) = buf.get(..FRAME_HEADER_BYTES) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len == 0 || len > FRAME_LEN_MAX_BYTES {
        return Err(WireError::FrameLen(len as u64));
    }
    let Some(frame) = buf.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
        return Ok(None);
    };
    let msg = decode_body(frame)?;
    Ok(Some((msg, FRAME_HEADER_BYTES + len)))
}

/// Decodes `op · body` exactly (no trailing bytes allowed).
pub fn decode_body(frame: &[u8]) -> Result<Message, WireError> {
    let mut r = Reader { buf: frame, pos: 0 };
    let op = r.u8()?;
    let msg = match op {
        op::PRE_VOTE => Message::PreVote { term: r.u64()?, last_index: r.u64()?, last_term: r.u64()? },
        op::PRE_VOTE_RESP => Message::PreVoteResp { term: r.u64()?, granted: r.bool()? },
        op::VOTE => {
            Message::Vote { term: r.u64()?, last_index: r.u64()?, last_term: r.u64()?, transfer: r.bool()? }
        }
        op::VOTE_RESP => Message::VoteResp { term: r.u64()?, granted: r.bool()? },
        op::APPEND => decode_append(&mut r)?,
        op::APPEND_RESP => decode_append_resp(&mut r)?,
        op::HEARTBEAT => Message::Heartbeat { term: r.u64()?, commit: r.u64()?, read_seq: r.u64()? },
        op::HEARTBEAT_RESP => Message::HeartbeatResp { term: r.u64()?, read_seq: r.u64()? },
        op::INSTALL_SNAPSHOT => Message::InstallSnapshot {
            term: r.u64()?,
            meta: decode_meta(&mut r)?,
            offset: r.u64()?,
            done: r.bool()?,
            data: r.bytes(SNAPSHOT_CHUNK_MAX_BYTES)?,
        },
        op::INSTALL_SNAPSHOT_RESP => Message::InstallSnapshotResp {
            term: r.u64()?,
            index: r.u64()?,
            next_offset: r.u64()?,
            done: r.bool()?,
        },
        op::TIMEOUT_NOW => Message::TimeoutNow { term: r.u64()? },
        op::REMOVED => Message::Removed { term: r.u64()?, config_index: r.u64()? },
        op::STOPPING => Message::Stopping { term: r.u64()?, leave: r.bool()? },
        other => return Err(WireError::UnknownOp(other)),
    };
    r.finish()?;
    Ok(msg)
}

fn decode_append(r: &mut Reader<'_>) -> Result<Message, WireError> {
    let term = r.u64()?;
    let prev_index = r.u64()?;
    let prev_term = r.u64()?;
    let commit = r.u64()?;
    let count = r.u32()? as usize;
    // Why both checks: a forged count must not make us reserve memory.
    if count > ENTRIES_PER_APPEND_MAX || count.saturating_mul(ENTRY_MIN_BYTES) > r.remaining() {
        return Err(WireError::Invalid("entry count"));
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(decode_entry_from(r)?);
    }
    Ok(Message::Append { term, prev_index, prev_term, entries, commit })
}

fn decode_append_resp(r: &mut Reader<'_>) -> Result<Message, WireError> {
    let term = r.u64()?;
    let success = r.bool()?;
    let index = r.u64()?;
    let has_conflict = r.bool()?;
    let conflict = r.u64()?;
    let hint_index = r.u64()?;
    if !has_conflict && conflict != 0 {
        return Err(WireError::Invalid("conflict term without flag"));
    }
    Ok(Message::AppendResp {
        term,
        success,
        index,
        conflict_term: has_conflict.then_some(conflict),
        hint_index,
    })
}

/// Decodes exactly one encoded entry.
pub fn decode_entry(buf: &[u8]) -> Result<Entry, WireError> {
    let mut r = Reader { buf, pos: 0 };
    let e = decode_entry_from(&mut r)?;
    r.finish()?;
    Ok(e)
}

fn decode_entry_from(r: &mut Reader<'_>) -> Result<Entry, WireError> {
    let term = r.u64()?;
    let index = r.u64()?;
    let kind = match r.u8()? {
        KIND_NOOP => EntryKind::Noop,
        KIND_NORMAL => EntryKind::Normal(r.shared_bytes(ENTRY_DATA_MAX_BYTES)?),
        KIND_CONFIG => EntryKind::Config(decode_membership(r)?),
        _ => return Err(WireError::Invalid("entry kind")),
    };
    Ok(Entry { term, index, kind })
}

fn decode_meta(r: &mut Reader<'_>) -> Result<SnapshotMeta, WireError> {
    Ok(SnapshotMeta { index: r.u64()?, term: r.u64()?, membership: decode_membership(r)? })
}

fn decode_membership(r: &mut Reader<'_>) -> Result<Membership, WireError> {
    Ok(Membership { voters: decode_set(r)?, outgoing: decode_set(r)?, learners: decode_set(r)? })
}

/// `count u16 · ids u64…`, strictly ascending (one canonical encoding).
fn decode_set(r: &mut Reader<'_>) -> Result<BTreeSet<NodeId>, WireError> {
    let count = r.u16()? as usize;
    if count > MEMBERS_PER_SET_MAX {
        return Err(WireError::Invalid("member set too large"));
    }
    let mut set = BTreeSet::new();
    let mut prev: Option<u64> = None;
    for _ in 0..count {
        let id = r.u64()?;
        if prev.is_some_and(|p| p >= id) {
            return Err(WireError::Invalid("member set not strictly ascending"));
        }
        prev = Some(id);
        set.insert(id);
    }
    Ok(set)
}

/// A bounds-checked cursor. Every read fails with `Short` instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Short);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid("boolean not 0 or 1")),
        }
    }

    /// `len u32 · bytes`, with `len <= max` checked before allocating.
    fn bytes(&mut self, max: usize) -> Result<Vec<u8>, WireError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(WireError::Invalid("byte string too long"));
        }
        Ok(self.take(len)?.to_vec())
    }

    /// Like [`Reader::bytes`], into one shared allocation.
    fn shared_bytes(&mut self, max: usize) -> Result<std::sync::Arc<[u8]>, WireError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(WireError::Invalid("byte string too long"));
        }
        Ok(self.take(len)?.into())
    }

    fn finish(&self) -> Result<(), WireError> {
        if self.remaining() != 0 {
            return Err(WireError::Trailing);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(v: &[u64], o: &[u64], l: &[u64]) -> Membership {
        Membership {
            voters: v.iter().copied().collect(),
            outgoing: o.iter().copied().collect(),
            learners: l.iter().copied().collect(),
        }
    }

    fn roundtrip(msg: &Message) -> Message {
        let mut buf = Vec::new();
        encode(msg, &mut buf).unwrap();
        let (back, used) = decode(&buf).unwrap().unwrap();
        assert_eq!(used, buf.len());
        back
    }

    #[test]
    fn heartbeat_layout_is_exact() {
        let mut buf = Vec::new();
        let msg = Message::Heartbeat { term: 1, commit: 2, read_seq: 3 };
        encode(&msg, &mut buf).unwrap();
        let mut want = vec![0, 0, 0, 25, b'h'];
        for v in [1u64, 2, 3] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(buf, want);
    }

    #[test]
    fn append_with_all_entry_kinds_roundtrips() {
        let msg = Message::Append {
            term: 5,
            prev_index: 9,
            prev_term: 4,
            commit: 8,
            entries: vec![
                Entry { term: 5, index: 10, kind: EntryKind::Noop },
                Entry { term: 5, index: 11, kind: EntryKind::Normal(b"hello".as_slice().into()) },
                Entry { term: 5, index: 12, kind: EntryKind::Config(members(&[1, 2, 4], &[1, 2, 3], &[7])) },
            ],
        };
        assert_eq!(roundtrip(&msg), msg);
    }

    #[test]
    fn short_trailing_and_partial_frames_are_told_apart() {
        let mut buf = Vec::new();
        encode(&Message::TimeoutNow { term: 3 }, &mut buf).unwrap();
        assert_eq!(decode(&buf[..buf.len() - 1]), Ok(None));
        assert_eq!(decode_body(&buf[4..buf.len() - 1]), Err(WireError::Short));
        let mut long = buf[4..].to_vec();
        long.push(0);
        assert_eq!(decode_body(&long), Err(WireError::Trailing));
    }

    #[test]
    fn bad_lengths_and_fields_are_rejected() {
        assert_eq!(decode(&[0, 0, 0, 0]), Err(WireError::FrameLen(0)));
        assert!(matches!(decode(&[0xff, 0xff, 0xff, 0xff, b'h']), Err(WireError::FrameLen(_))));
        assert_eq!(decode_body(b"Z"), Err(WireError::UnknownOp(b'Z')));
        // Vote with transfer = 2.
        let mut body = vec![b'v'];
        body.extend_from_slice(&[0; 24]);
        body.push(2);
        assert!(matches!(decode_body(&body), Err(WireError::Invalid(_))));
        // Append claiming 60 000 entries in a tiny body: refused before allocation.
        let mut body = vec![b'a'];
        body.extend_from_slice(&[0; 32]);
        body.extend_from_slice(&60_000u32.to_be_bytes());
        assert_eq!(decode_body(&body), Err(WireError::Invalid("entry count")));
        // Member set out of order.
        let mut e = vec![0; 16];
        e.push(2);
        e.extend_from_slice(&2u16.to_be_bytes());
        e.extend_from_slice(&5u64.to_be_bytes());
        e.extend_from_slice(&4u64.to_be_bytes());
        e.extend_from_slice(&[0, 0, 0, 0]);
        assert!(matches!(decode_entry(&e), Err(WireError::Invalid(_))));
    }

    #[test]
    fn oversized_entry_is_not_encoded() {
        let e =
            Entry { term: 1, index: 1, kind: EntryKind::Normal(vec![0; ENTRY_DATA_MAX_BYTES + 1].into()) };
        assert!(encode_entry(&e, &mut Vec::new()).is_err());
    }

    fn arb_set() -> impl Strategy<Value = BTreeSet<u64>> {
        proptest::collection::btree_set(any::<u64>(), 0..6)
    }

    fn arb_membership() -> impl Strategy<Value = Membership> {
        (arb_set(), arb_set(), arb_set()).prop_map(|(voters, outgoing, learners)| Membership {
            voters,
            outgoing,
            learners,
        })
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        let kind = prop_oneof![
            Just(EntryKind::Noop),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|v| EntryKind::Normal(v.into())),
            arb_membership().prop_map(EntryKind::Config),
        ];
        (any::<u64>(), any::<u64>(), kind).prop_map(|(term, index, kind)| Entry { term, index, kind })
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let u = any::<u64>;
        prop_oneof![
            (u(), u(), u()).prop_map(|(term, last_index, last_term)| Message::PreVote {
                term,
                last_index,
                last_term
            }),
            (u(), any::<bool>()).prop_map(|(term, granted)| Message::PreVoteResp { term, granted }),
            (u(), u(), u(), any::<bool>()).prop_map(|(term, last_index, last_term, transfer)| {
                Message::Vote { term, last_index, last_term, transfer }
            }),
            (u(), any::<bool>()).prop_map(|(term, granted)| Message::VoteResp { term, granted }),
            (u(), u(), u(), u(), proptest::collection::vec(arb_entry(), 0..5)).prop_map(
                |(term, prev_index, prev_term, commit, entries)| {
                    Message::Append { term, prev_index, prev_term, entries, commit }
                }
            ),
            (u(), any::<bool>(), u(), proptest::option::of(u()), u()).prop_map(
                |(term, success, index, conflict_term, hint_index)| Message::AppendResp {
                    term,
                    success,
                    index,
                    conflict_term,
                    hint_index
                }
            ),
            (u(), u(), u()).prop_map(|(term, commit, read_seq)| Message::Heartbeat {
                term,
                commit,
                read_seq
            }),
            (u(), u()).prop_map(|(term, read_seq)| Message::HeartbeatResp { term, read_seq }),
            (
                u(),
                u(),
                u(),
                arb_membership(),
                u(),
                proptest::collection::vec(any::<u8>(), 0..64),
                any::<bool>()
            )
                .prop_map(|(term, index, sterm, membership, offset, data, done)| {
                    Message::InstallSnapshot {
                        term,
                        meta: SnapshotMeta { index, term: sterm, membership },
                        offset,
                        data,
                        done,
                    }
                }),
            (u(), u(), u(), any::<bool>()).prop_map(|(term, index, next_offset, done)| {
                Message::InstallSnapshotResp { term, index, next_offset, done }
            }),
            u().prop_map(|term| Message::TimeoutNow { term }),
            (u(), u()).prop_map(|(term, config_index)| Message::Removed { term, config_index }),
            (u(), any::<bool>()).prop_map(|(term, leave)| Message::Stopping { term, leave }),
        ]
    }

    proptest! {
        #[test]
        fn every_message_roundtrips(msg in arb_message()) {
            prop_assert_eq!(roundtrip(&msg), msg);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
            let _ = decode_body(&bytes);
            let _ = decode_entry(&bytes);
        }

        #[test]
        fn truncated_frames_never_decode(msg in arb_message(), cut in 1usize..64) {
            let mut buf = Vec::new();
            encode(&msg, &mut buf).unwrap();
            let keep = buf.len().saturating_sub(cut).max(FRAME_HEADER_BYTES);
            if keep < buf.len() {
                prop_assert_eq!(decode(&buf[..keep]), Ok(None));
                prop_assert!(decode_body(&buf[FRAME_HEADER_BYTES..keep]).is_err());
            }
        }

        #[test]
        fn mutated_frames_never_panic(msg in arb_message(), pos in any::<usize>(), byte in any::<u8>()) {
            let mut buf = Vec::new();
            encode(&msg, &mut buf).unwrap();
            let i = pos % buf.len();
            buf[i] = byte;
            let _ = decode(&buf);
        }
    }
}
