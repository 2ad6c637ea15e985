//! The names the core gives things: every one is a counter that never goes back, so
//! an id seen once never means something else later.

use std::hash::Hasher;

/// One address the client dials (its connections come and go).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u64);

/// One authenticated connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// One operation: a caller's request, a release, a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// The record of an indeterminate ACQUIRE whose grant, if it happened, must be
/// adopted or released (docs/client.md, "No grant left orphaned").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrphanId(pub u64);

/// Keys here are counters the client hands out itself, so they are their own hash:
/// no SipHash per request (nothing is keyed by what a server sends).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault, Hash};

    use super::*;

    fn hash(value: impl Hash) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(value)
    }

    /// The ids' hash is the counter itself: distinct ids never collide (a map keyed by
    /// them stays one probe per lookup), whatever the width.
    #[test]
    fn an_id_is_its_own_hash() {
        for n in [0u64, 1, 255, 256, 1 << 40, u64::MAX] {
            assert_eq!(hash(SessionId(n)), n);
            assert_eq!(hash(OpId(n)), n);
        }
        for n in [0u32, 1, 256, u32::MAX] {
            assert_eq!(hash(n), u64::from(n));
        }
        // Anything else hashed as bytes: each byte shifts in, so short keys stay apart.
        let mut h = IdHasher::default();
        h.write(&[1, 2, 3]);
        assert_eq!(h.finish(), 0x010203);
    }
}
