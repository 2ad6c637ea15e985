//! Plain data the client returns: what a release came to, who holds a key.

use std::fmt;
use std::time::Duration;

/// What the server answered to a release. All are definitive about the present: the
/// key is no longer held under this token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// `R`: the release was committed; the key went to the next waiter or became free.
    Released,
    /// `N`: (key, owner, token) was not the holder: already released, expired, or
    /// never granted. Nothing changed.
    NotHolder,
    /// `N`, but an earlier attempt of this same release was written and its answer
    /// lost: that attempt may have released the key, or the lease had ended. Either
    /// way the key is no longer held under this token.
    ReleasedOrExpired,
}

impl fmt::Display for ReleaseOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::NotHolder => "not holder (already released or expired)",
            ReleaseOutcome::ReleasedOrExpired => {
                "no longer held (released by an earlier attempt, or expired)"
            }
        })
    }
}

/// The answer to [`Client::query`](super::Client::query) for a held key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's owner string.
    pub owner: String,
    /// The holder's fencing token.
    pub token: u64,
    /// Lease time left on the leader's clock when it answered.
    pub remaining: Duration,
    /// How many acquires wait in the key's queue.
    pub waiters: u32,
}

/// What a POOL read says of a key ([`Client::pool`](super::Client::pool)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The key's capacity; 0 when nobody holds the key or waits for it.
    pub capacity: u32,
    /// Permits held.
    pub in_use: u32,
    /// Holds on the key.
    pub holds: u32,
    /// Requests waiting for it.
    pub waiters: u32,
    /// How long the first of them has waited.
    pub oldest_wait: Duration,
    /// The oldest holds (at most 8): owner, token, lease time left, and in `waiters`
    /// the permits of the key each holds.
    pub holders: Vec<PoolHolding>,
}

/// One hold in a [`PoolInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolHolding {
    pub owner: String,
    pub token: u64,
    /// Permits of the key it holds.
    pub count: u32,
    /// Lease time left on the leader's clock when it answered.
    pub remaining: Duration,
}
