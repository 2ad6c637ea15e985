//! The lock handle and the plain data the client returns.

use std::fmt;
use std::time::{Duration, Instant};

use super::{Client, ReleaseError};

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

/// The answer to [`Client::query`] for a held key.
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

/// A held lock: proof that the server granted `key` to this client's owner under
/// [`token`](Lock::token), valid at most until [`deadline`](Lock::deadline).
///
/// Pass the token to every store the critical section writes to, which must refuse
/// writes carrying a token lower than one it has seen (docs/fencing.md): a lease can end while
/// a process is paused, and only the token protects the data then.
///
/// Call [`release`](Lock::release) to give the key back and learn the outcome.
/// Dropping the handle instead hands the release to the client's release queue (it
/// never blocks); if that fails, the lease ends the hold.
#[must_use = "dropping a Lock releases it at once; hold it for the critical section and call release()"]
pub struct Lock {
    client: Client,
    key: String,
    owner: String,
    token: u64,
    deadline: Instant,
    lease: Duration,
    released: bool,
}

/// The plain data of a [`Lock`], from [`Lock::into_parts`]; [`Client::adopt`] makes it
/// a lock again. Only this crate makes one, so a lock is never forged from guesses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockParts {
    pub key: String,
    pub owner: String,
    pub token: u64,
    /// The local deadline (see [`Lock::deadline`]).
    pub deadline: Instant,
    pub lease: Duration,
}

impl Lock {
    pub(crate) fn new(
        client: Client,
        key: String,
        owner: String,
        token: u64,
        deadline: Instant,
        lease: Duration,
    ) -> Lock {
        Lock { client, key, owner, token, deadline, lease, released: false }
    }

    pub(crate) fn from_parts(client: Client, parts: LockParts) -> Lock {
        Lock::new(client, parts.key, parts.owner, parts.token, parts.deadline, parts.lease)
    }

    /// Gives up the handle without releasing and returns its data; the key stays held
    /// until released (by [`Client::adopt`]'s lock, or [`Client::release`] with the
    /// same owner) or its lease ends.
    pub fn into_parts(mut self) -> LockParts {
        self.released = true;
        LockParts {
            key: std::mem::take(&mut self.key),
            owner: std::mem::take(&mut self.owner),
            token: self.token,
            deadline: self.deadline,
            lease: self.lease,
        }
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner the lock was granted to.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token: strictly greater than every earlier grant's in the domain.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lease the server granted.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The local deadline: the instant taken just before the ACQUIRE's first byte was
    /// written, plus the lease. The server's lease never ends before it.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until [`Lock::deadline`] (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// True once the local deadline has passed: the key may be someone else's now.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Releases the lock through the release queue and waits for the server's answer
    /// (at most the release deadline, 5 s).
    ///
    /// `Ok` only after the server answered `R` ([`ReleaseOutcome::Released`]) or `N`
    /// ([`ReleaseOutcome::NotHolder`]: the lease had already ended). An error means
    /// the release is not confirmed and the key may stay held until its lease ends.
    pub fn release(mut self) -> Result<ReleaseOutcome, ReleaseError> {
        self.released = true;
        self.client.release_as(&self.owner, &self.key, self.token)
    }
}

impl Lock {
    /// Gives up the handle *without* releasing: the key stays held until someone
    /// releases it with this owner and token, or its lease ends. Returns the token.
    /// (The CLI's `acquire` command uses this: the process exits holding the key.)
    pub fn into_token(mut self) -> u64 {
        self.released = true;
        self.token
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("owner", &self.owner())
            .field("token", &self.token)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            self.client.release_in_background(&self.owner, &self.key, self.token);
        }
    }
}
