//! Binary form of commands (Raft log entries) and of the applied state (snapshots).
//!
//! Big-endian, strings as `str8`, every length checked before use; decoding never
//! panics. The layout is documented in docs/protocol-cluster.md.
//!
//! ```text
//! origin  = node u64 · incarnation u64 · conn u64 · id u32
//! grant   = owner str8 · token u64 · lease_ms u32 · origin
//! next    = 0 | 1 · grant
//! command = 'G' · key str8 · grant
//!         | 'R' · key str8 · owner str8 · token u64 · origin · next
//!         | 'E' · key str8 · token u64 · next
//!         | 'D' · domain u64
//!         | 'M' · node u64 · incarnation u64 · addr str8
//!         | 'A' · node u64 · addr str8          (older versions; read as 'M' with incarnation 0)
//!         | 'H' · hold
//!         | 'X' · key str8 · token u64 · (0 | 1 · owner str8) · (0 | 1 · origin) · n u16 · n × hold
//! hold    = grant · n u8 (1..=16) · n × (key str8 · count u32 · capacity u32)
//! snapshot = version u8 (3) · domain u64 · last_token u64 · count u32 · count × (key str8 · owner str8 · token u64 · lease_ms u32)
//!            (holders in the state's slot order)
//!            · members u16 · members × (node u64 · incarnation u64 · addr str8)
//!            · pooled u32 · pooled × (owner str8 · token u64 · lease_ms u32 · n u8 · n × (key str8 · count u32 · capacity u32))
//!            (pooled holds in token order; version 2, still read, ends after the members;
//!            version 1 also has members × (node u64 · addr str8))
//! ```

use std::collections::BTreeMap;

use super::bytes::{put_str8, Reader};
use super::command::{Command, CommandRef, Grant, HoldGrant, Origin, Part};
use super::snapshot::{self, SnapshotReader};
use super::state::{LockState, MemberRecord};

pub use super::bytes::CodecError;

pub fn encode_command<S: AsRef<str>>(out: &mut Vec<u8>, command: &Command<S>) {
    match command {
        Command::Grant { key, grant } => {
            out.push(b'G');
            put_str8(out, key.as_ref());
            put_grant(out, grant);
        }
        Command::Release { key, owner, token, origin, next } => {
            out.push(b'R');
            put_str8(out, key.as_ref());
            put_str8(out, owner.as_ref());
            out.extend_from_slice(&token.to_be_bytes());
            put_origin(out, origin);
            put_next(out, next);
        }
        Command::Expire { key, token, next } => {
            out.push(b'E');
            put_str8(out, key.as_ref());
            out.extend_from_slice(&token.to_be_bytes());
            put_next(out, next);
        }
        Command::SetMember { node, incarnation, addr } => {
            out.push(b'M');
            out.extend_from_slice(&node.to_be_bytes());
            out.extend_from_slice(&incarnation.to_be_bytes());
            put_str8(out, addr.as_ref());
        }
        Command::SetDomain { domain } => {
            out.push(b'D');
            out.extend_from_slice(&domain.to_be_bytes());
        }
        Command::Hold { hold } => {
            out.push(b'H');
            put_hold(out, hold);
        }
        Command::End { key, token, owner, origin, next } => {
            out.push(b'X');
            put_str8(out, key.as_ref());
            out.extend_from_slice(&token.to_be_bytes());
            match owner {
                None => out.push(0),
                Some(owner) => {
                    out.push(1);
                    put_str8(out, owner.as_ref());
                }
            }
            match origin {
                None => out.push(0),
                Some(origin) => {
                    out.push(1);
                    put_origin(out, origin);
                }
            }
            out.extend_from_slice(&(next.len() as u16).to_be_bytes());
            for hold in next {
                put_hold(out, hold);
            }
        }
    }
}

fn put_hold<S: AsRef<str>>(out: &mut Vec<u8>, hold: &HoldGrant<S>) {
    put_grant(out, &hold.grant);
    out.push(hold.parts.len() as u8);
    for part in &hold.parts {
        put_str8(out, part.key.as_ref());
        out.extend_from_slice(&part.count.to_be_bytes());
        out.extend_from_slice(&part.capacity.to_be_bytes());
    }
}

pub fn decode_command(bytes: &[u8]) -> Result<Command, CodecError> {
    decode_command_ref(bytes).map(|c| c.to_owned_command())
}

/// Decodes a command whose strings borrow `bytes` (nothing is allocated).
pub fn decode_command_ref(bytes: &[u8]) -> Result<CommandRef<'_>, CodecError> {
    let mut r = Reader { buf: bytes };
    let command = match r.u8()? {
        b'G' => Command::Grant { key: r.str()?, grant: r.grant()? },
        b'R' => Command::Release {
            key: r.str()?,
            owner: r.str()?,
            token: r.u64()?,
            origin: r.origin()?,
            next: r.next()?,
        },
        b'E' => Command::Expire { key: r.str()?, token: r.u64()?, next: r.next()? },
        b'D' => Command::SetDomain { domain: r.u64()? },
        b'M' => Command::SetMember { node: r.u64()?, incarnation: r.u64()?, addr: r.str()? },
        b'A' => Command::SetMember { node: r.u64()?, incarnation: 0, addr: r.str()? },
        b'H' => Command::Hold { hold: r.hold()? },
        b'X' => {
            let (key, token) = (r.str()?, r.u64()?);
            let owner = match r.u8()? {
                0 => None,
                1 => Some(r.str()?),
                _ => return Err(CodecError("bad owner flag")),
            };
            let origin = match r.u8()? {
                0 => None,
                1 => Some(r.origin()?),
                _ => return Err(CodecError("bad origin flag")),
            };
            let n = r.u16()? as usize;
            // Each grant takes more than 40 bytes: refuse a count the input cannot hold.
            if n > r.buf.len() / 40 {
                return Err(CodecError("more grants than bytes"));
            }
            let mut next = Vec::with_capacity(n);
            for _ in 0..n {
                next.push(r.hold()?);
            }
            Command::End { key, token, owner, origin, next }
        }
        _ => return Err(CodecError("unknown command tag")),
    };
    r.finish()?;
    Ok(command)
}

/// The applied state as bytes, holders in slot order (a decoded snapshot gives its
/// keys the same slots, so decoding and encoding again gives the same bytes). The
/// lock-table thread encodes in slices instead: [`LockState::begin_snapshot`].
pub fn encode_snapshot(state: &LockState) -> Vec<u8> {
    let mut out = Vec::new();
    snapshot::put_header(&mut out, state.domain(), state.last_token(), state.keys_held() as u32);
    for (key, holder) in state.holders() {
        snapshot::put_holder(&mut out, key, holder.owner, holder.token, holder.lease_ms);
    }
    let members = state.members().iter().map(|(node, m)| (*node, m.incarnation, m.addr.as_str()));
    snapshot::put_members(&mut out, members);
    snapshot::put_pooled(&mut out, &state.pooled_records());
    out
}

pub fn decode_snapshot(bytes: &[u8]) -> Result<LockState, CodecError> {
    let mut r = SnapshotReader::new(bytes)?;
    let mut state = LockState::from_parts(Vec::new(), r.last_token, r.domain).expect("no holders");
    while let Some(h) = r.next_holder()? {
        if !state.restore_holder(h.key, h.owner, h.token, h.lease_ms) {
            return Err(CodecError("a key appears twice"));
        }
    }
    let members = r.members()?.into_iter();
    let members: BTreeMap<u64, MemberRecord> = members
        .map(|(node, incarnation, addr)| (node, MemberRecord { addr: addr.to_owned(), incarnation }))
        .collect();
    for hold in r.pooled()? {
        if !state.restore_pooled(hold.owner, hold.token, hold.lease_ms, &hold.parts) {
            return Err(CodecError("a pooled hold that cannot be held"));
        }
    }
    Ok(state.with_members(members))
}

fn put_origin(out: &mut Vec<u8>, o: &Origin) {
    out.extend_from_slice(&o.node.to_be_bytes());
    out.extend_from_slice(&o.incarnation.to_be_bytes());
    out.extend_from_slice(&o.conn.to_be_bytes());
    out.extend_from_slice(&o.id.to_be_bytes());
}

fn put_grant<S: AsRef<str>>(out: &mut Vec<u8>, g: &Grant<S>) {
    put_str8(out, g.owner.as_ref());
    out.extend_from_slice(&g.token.to_be_bytes());
    out.extend_from_slice(&g.lease_ms.to_be_bytes());
    put_origin(out, &g.origin);
}

fn put_next<S: AsRef<str>>(out: &mut Vec<u8>, next: &Option<Grant<S>>) {
    match next {
        None => out.push(0),
        Some(g) => {
            out.push(1);
            put_grant(out, g);
        }
    }
}

/// The command format's compound reads, on top of the shared reader.
impl<'a> Reader<'a> {
    fn origin(&mut self) -> Result<Origin, CodecError> {
        Ok(Origin { node: self.u64()?, incarnation: self.u64()?, conn: self.u64()?, id: self.u32()? })
    }
    fn grant(&mut self) -> Result<Grant<&'a str>, CodecError> {
        Ok(Grant { owner: self.str()?, token: self.u64()?, lease_ms: self.u32()?, origin: self.origin()? })
    }
    fn hold(&mut self) -> Result<HoldGrant<&'a str>, CodecError> {
        let grant = self.grant()?;
        let n = self.u8()? as usize;
        if n == 0 || n > crate::lock::lines::KEYS_PER_REQUEST_MAX {
            return Err(CodecError("a hold names 1 to 16 keys"));
        }
        let mut parts = Vec::with_capacity(n);
        for _ in 0..n {
            let part = Part { key: self.str()?, count: self.u32()?, capacity: self.u32()? };
            if part.count == 0 || part.count > part.capacity {
                return Err(CodecError("a hold's count is outside 1 to its capacity"));
            }
            parts.push(part);
        }
        Ok(HoldGrant { grant, parts })
    }
    fn next(&mut self) -> Result<Option<Grant<&'a str>>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.grant()?)),
            _ => Err(CodecError("bad next-grant flag")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn origin() -> impl Strategy<Value = Origin> {
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>())
            .prop_map(|(node, incarnation, conn, id)| Origin { node, incarnation, conn, id })
    }
    fn name() -> impl Strategy<Value = String> {
        "[a-z0-9:é]{1,60}"
    }
    fn grant() -> impl Strategy<Value = Grant> {
        (name(), any::<u64>(), any::<u32>(), origin()).prop_map(|(owner, token, lease_ms, origin)| Grant {
            owner,
            token,
            lease_ms,
            origin,
        })
    }
    fn hold() -> impl Strategy<Value = HoldGrant> {
        (grant(), proptest::collection::vec((name(), 1u32..5, 0u32..5), 1..=16)).prop_map(|(grant, parts)| {
            let parts = parts
                .into_iter()
                .map(|(key, count, more)| Part { key, count, capacity: count + more })
                .collect();
            HoldGrant { grant, parts }
        })
    }

    fn command() -> impl Strategy<Value = Command> {
        prop_oneof![
            (name(), grant()).prop_map(|(key, grant)| Command::Grant { key, grant }),
            (name(), name(), any::<u64>(), origin(), proptest::option::of(grant())).prop_map(
                |(key, owner, token, origin, next)| Command::Release { key, owner, token, origin, next }
            ),
            (name(), any::<u64>(), proptest::option::of(grant()))
                .prop_map(|(key, token, next)| Command::Expire { key, token, next }),
            (any::<u64>(), any::<u64>(), name()).prop_map(|(node, incarnation, addr)| Command::SetMember {
                node,
                incarnation,
                addr
            }),
            any::<u64>().prop_map(|domain| Command::SetDomain { domain }),
            hold().prop_map(|hold| Command::Hold { hold }),
            (
                name(),
                any::<u64>(),
                proptest::option::of(name()),
                proptest::option::of(origin()),
                proptest::collection::vec(hold(), 0..4)
            )
                .prop_map(|(key, token, owner, origin, next)| Command::End {
                    key,
                    token,
                    owner,
                    origin,
                    next
                }),
        ]
    }

    proptest! {
        #[test]
        fn command_round_trips(c in command()) {
            let mut bytes = Vec::new();
            encode_command(&mut bytes, &c);
            prop_assert_eq!(decode_command(&bytes).unwrap(), c);
            for cut in 0..bytes.len() {
                prop_assert!(decode_command(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_command(&bytes);
            let _ = decode_snapshot(&bytes);
        }
    }

    #[test]
    fn snapshot_round_trips_and_is_canonical() {
        let mut state = LockState::default();
        let mut effects = Vec::new();
        for (i, key) in ["b", "a", "c"].iter().enumerate() {
            let origin = Origin { node: 1, incarnation: 1, conn: 1, id: 1 };
            let grant = Grant { owner: format!("o{i}"), token: 10 + i as u64, lease_ms: 1000, origin };
            state.apply(&Command::Grant { key: key.to_string(), grant }, &mut effects);
        }
        let member =
            |node, incarnation, addr: &str| Command::SetMember { node, incarnation, addr: addr.to_string() };
        state.apply(&member(1, 77, "10.0.0.1:5225"), &mut effects);
        state.apply(&member(2, 0, "10.0.0.2:5225"), &mut effects);
        let bytes = encode_snapshot(&state);
        let back = decode_snapshot(&bytes).unwrap();
        assert_eq!(back, state);
        assert_eq!(encode_snapshot(&back), bytes);
        for cut in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_bad_command_says_why() {
        let e = decode_command(b"Z").unwrap_err();
        assert!(e.to_string().contains("unknown command tag"), "{e}");
        // Bytes after a whole command or snapshot: not what was encoded.
        let mut bytes = Vec::new();
        encode_command(&mut bytes, &Command::<String>::SetDomain { domain: 7 });
        bytes.push(0);
        assert!(decode_command(&bytes).is_err());
        let mut snapshot = encode_snapshot(&LockState::default());
        snapshot.push(0);
        assert!(decode_snapshot(&snapshot).is_err());
        // A holder count the bytes cannot hold (here one holder, with fewer bytes left
        // than the smallest holder takes) is refused before anything is built.
        let mut huge = encode_snapshot(&LockState::default());
        assert!(huge.len() - 21 < 14, "an empty snapshot is a header and a short trailer");
        huge[17..21].copy_from_slice(&1u32.to_be_bytes()); // version 1, domain 8, last token 8
        let e = decode_snapshot(&huge).unwrap_err();
        assert!(e.to_string().contains("holder count larger than the snapshot"), "{e}");
    }

    #[test]
    fn an_old_member_record_and_an_old_snapshot_are_still_read() {
        let mut bytes = vec![b'A'];
        bytes.extend_from_slice(&7u64.to_be_bytes());
        bytes.push(4);
        bytes.extend_from_slice(b"h:10");
        assert_eq!(
            decode_command(&bytes).unwrap(),
            Command::SetMember { node: 7, incarnation: 0, addr: "h:10".into() }
        );
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&5u64.to_be_bytes()); // domain
        v1.extend_from_slice(&0u64.to_be_bytes()); // last token
        v1.extend_from_slice(&0u32.to_be_bytes()); // holders
        v1.extend_from_slice(&1u16.to_be_bytes()); // members
        v1.extend_from_slice(&7u64.to_be_bytes());
        v1.push(4);
        v1.extend_from_slice(b"h:10");
        let state = decode_snapshot(&v1).unwrap();
        assert_eq!(state.domain(), 5);
        assert_eq!(state.members()[&7], MemberRecord { addr: "h:10".into(), incarnation: 0 });
    }
}

#[cfg(test)]
mod slice_tests {
    use super::*;
    use crate::lock::state::LockState;
    use proptest::prelude::*;

    const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const OWNERS: [&str; 3] = ["x", "y", "z"];

    fn origin() -> Origin {
        Origin { node: 1, incarnation: 1, conn: 1, id: 1 }
    }

    /// A command that changes something in `state` most of the time.
    fn command(state: &LockState, key: usize, owner: usize, kind: u8, token: &mut u64) -> Command {
        let key = KEYS[key].to_string();
        let next = |token: &mut u64| {
            *token += 1;
            Some(Grant { owner: OWNERS[owner].into(), token: *token, lease_ms: 1000, origin: origin() })
        };
        match (state.holder(&key), kind % 3) {
            (None, _) => {
                *token += 1;
                let grant =
                    Grant { owner: OWNERS[owner].into(), token: *token, lease_ms: 1000, origin: origin() };
                Command::Grant { key, grant }
            }
            (Some(h), 0) => {
                Command::Release { key, owner: h.owner, token: h.token, origin: origin(), next: None }
            }
            (Some(h), 1) => {
                Command::Release { key, owner: h.owner, token: h.token, origin: origin(), next: next(token) }
            }
            (Some(h), _) => Command::Expire { key, token: h.token, next: next(token) },
        }
    }

    proptest! {
        #[test]
        fn a_snapshot_encoded_in_slices_is_the_state_it_began_with(
            before in proptest::collection::vec((0..6usize, 0..3usize, any::<u8>()), 0..30),
            during in proptest::collection::vec((0..6usize, 0..3usize, any::<u8>(), 0..3usize), 0..60),
        ) {
            let mut state = LockState::default();
            let mut effects = Vec::new();
            let mut token = 0;
            for (k, o, kind) in before {
                let c = command(&state, k, o, kind, &mut token);
                state.apply(&c, &mut effects);
            }
            let expected = encode_snapshot(&state);
            let at_begin = state.clone();
            state.begin_snapshot();
            let mut bytes = None;
            for (k, o, kind, slice) in during {
                let c = command(&state, k, o, kind, &mut token);
                state.apply(&c, &mut effects);
                if bytes.is_none() {
                    bytes = state.snapshot_step(slice);
                }
            }
            let bytes = match bytes {
                Some(b) => b,
                None => state.snapshot_step(usize::MAX).expect("done"),
            };
            prop_assert_eq!(decode_snapshot(&bytes).unwrap(), at_begin);
            prop_assert_eq!(bytes.len(), expected.len());
        }
    }
}
