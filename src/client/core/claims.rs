//! What this client has a stake in, so that a holder a QUERY finds is never taken for
//! a lost grant when it is not one (docs/client.md, "No grant left orphaned"):
//!
//! - tokens **handed to callers** (a `Lock` returned, `resolve`'s `Held`, a lock
//!   adopted), until their release starts or their lease is long over;
//! - tokens **being released** by this client, until their lease has surely ended —
//!   while a RELEASE is on its way the server still shows the holder;
//! - **acquires under way**, by (key, owner): while one runs, a holder with that owner
//!   and a token this client never saw may be its grant, whose `G` has not arrived yet.
//!
//! A holder with this client's owner is a lost grant only when none of these claims it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::{Duration, Instant};

use super::ids::IdHasher;

/// Entries kept before the ones past their time are swept out.
const SWEEP_AT: usize = 1024;

pub(crate) struct Claims {
    /// Token → its local deadline.
    held: HashMap<u64, Instant, BuildHasherDefault<IdHasher>>,
    /// Token → when its lease has surely ended.
    releasing: HashMap<u64, Instant, BuildHasherDefault<IdHasher>>,
    /// Hash of (key, owner) → acquires under way. A collision only makes a check wait.
    acquiring: HashMap<u64, u32, BuildHasherDefault<IdHasher>>,
    /// How long past its local deadline a held token still counts (the server's lease
    /// ends a little later than the local deadline).
    slack: Duration,
}

/// FNV-1a of key and owner: cheap, and a collision is harmless (see `acquiring`).
fn key_owner(key: &str, owner: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in key.bytes().chain(std::iter::once(0xff)).chain(owner.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn sweep(map: &mut HashMap<u64, Instant, BuildHasherDefault<IdHasher>>, now: Instant) {
    if map.len() >= SWEEP_AT && map.len().is_power_of_two() {
        map.retain(|_, until| *until > now);
    }
}

impl Claims {
    pub(crate) fn new(slack: Duration) -> Claims {
        Claims {
            held: HashMap::default(),
            releasing: HashMap::default(),
            acquiring: HashMap::default(),
            slack,
        }
    }

    /// `token` is a caller's now, until `deadline`.
    pub(crate) fn hand_out(&mut self, token: u64, deadline: Instant, now: Instant) {
        sweep(&mut self.held, now);
        self.held.insert(token, deadline + self.slack);
    }

    /// The local deadline of a token handed to a caller.
    pub(crate) fn deadline(&self, token: u64) -> Option<Instant> {
        self.held.get(&token).map(|until| *until - self.slack)
    }

    /// The client starts releasing `token` (a caller gave it up, or nobody holds it),
    /// whose lease surely ends by `until`.
    pub(crate) fn releasing(&mut self, token: u64, until: Instant, now: Instant) {
        self.held.remove(&token);
        sweep(&mut self.releasing, now);
        self.releasing.insert(token, until);
    }

    /// The server confirmed `token` is no longer held (`R` or `N`).
    pub(crate) fn released(&mut self, token: u64) {
        self.releasing.remove(&token);
    }

    /// True when `token` is a caller's or being released by this client.
    pub(crate) fn owns_token(&self, token: u64, now: Instant) -> bool {
        let live = |map: &HashMap<u64, Instant, _>| map.get(&token).is_some_and(|until| *until > now);
        live(&self.held) || live(&self.releasing)
    }

    pub(crate) fn acquire_started(&mut self, key: &str, owner: &str) {
        *self.acquiring.entry(key_owner(key, owner)).or_default() += 1;
    }

    pub(crate) fn acquire_ended(&mut self, key: &str, owner: &str) {
        let k = key_owner(key, owner);
        if let Some(n) = self.acquiring.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                self.acquiring.remove(&k);
            }
        }
    }

    /// True while an acquire of `key` by `owner` is under way.
    pub(crate) fn acquiring(&self, key: &str, owner: &str) -> bool {
        self.acquiring.contains_key(&key_owner(key, owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_tokens_count_until_their_deadline_plus_slack_and_released_ones_until_their_lease_ends() {
        let now = Instant::now();
        let mut claims = Claims::new(Duration::from_secs(5));
        claims.hand_out(9, now + Duration::from_secs(1), now);
        assert!(claims.owns_token(9, now + Duration::from_secs(5)));
        assert!(!claims.owns_token(9, now + Duration::from_secs(6)));
        claims.hand_out(9, now + Duration::from_secs(1), now);
        claims.releasing(9, now + Duration::from_secs(30), now);
        assert!(claims.owns_token(9, now + Duration::from_secs(20)), "a RELEASE is on its way");
        claims.released(9);
        assert!(!claims.owns_token(9, now));
    }

    #[test]
    fn acquires_under_way_are_counted_by_key_and_owner() {
        let mut claims = Claims::new(Duration::from_secs(5));
        claims.acquire_started("k", "o");
        claims.acquire_started("k", "o");
        claims.acquire_ended("k", "o");
        assert!(claims.acquiring("k", "o"));
        assert!(!claims.acquiring("k", "p") && !claims.acquiring("j", "o"));
        claims.acquire_ended("k", "o");
        assert!(!claims.acquiring("k", "o"));
    }

    /// A sweep runs at doubling sizes from SWEEP_AT (each is a pass over the map, so a
    /// claim costs O(1) amortized) and keeps exactly the claims that still count.
    #[test]
    fn ended_claims_are_swept_at_doubling_sizes_and_live_ones_kept() {
        let start = Instant::now();
        let slack = Duration::from_secs(5);
        let mut claims = Claims::new(slack);
        // Below SWEEP_AT nothing is swept, not even a claim that ended.
        // Token 1's claim ends exactly at `start` (its deadline plus the slack).
        claims.hand_out(1, start - slack, start);
        let later = start + Duration::from_secs(60);
        for token in 2..SWEEP_AT as u64 {
            claims.hand_out(token, later, start);
        }
        assert_eq!(claims.held.len(), SWEEP_AT - 1);
        assert_eq!(claims.deadline(1), Some(start - slack), "kept until the map reaches SWEEP_AT");
        // At SWEEP_AT: the one that ended (exactly now) goes, the rest stay.
        let now = start;
        claims.hand_out(SWEEP_AT as u64, later, now);
        claims.hand_out(SWEEP_AT as u64 + 1, later, now);
        assert_eq!(claims.deadline(1), None);
        assert_eq!(claims.held.len(), SWEEP_AT);
        assert!((2..SWEEP_AT as u64 + 2).all(|t| claims.owns_token(t, now)));
    }

    #[test]
    fn claims_of_ended_leases_do_not_pile_up() {
        let start = Instant::now();
        let mut claims = Claims::new(Duration::from_secs(1));
        for i in 0..20_000u64 {
            // Each claim ends before the next is made.
            let now = start + Duration::from_secs(2 * i);
            claims.hand_out(i, now, now);
            claims.releasing(1_000_000 + i, now + Duration::from_secs(1), now);
        }
        assert!(claims.held.len() <= 2 * SWEEP_AT, "{} held claims kept", claims.held.len());
        assert!(claims.releasing.len() <= 2 * SWEEP_AT, "{} releasing claims kept", claims.releasing.len());
    }

    /// Different (key, owner) pairs rarely share a hash: a shared one would make the
    /// background check of one wait for the other's acquire.
    #[test]
    fn key_and_owner_pairs_hash_apart() {
        let mut seen = std::collections::HashSet::new();
        for k in 0..200 {
            for o in 0..20 {
                assert!(
                    seen.insert(key_owner(&format!("seat:{k}"), &format!("box-office-{o}"))),
                    "seat:{k} box-office-{o}"
                );
            }
        }
        assert_ne!(key_owner("ab", "c"), key_owner("a", "bc"), "the key ends where the owner starts");
    }
}
