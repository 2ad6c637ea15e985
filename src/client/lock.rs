//! The lock handle, and the releases it and the client make.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::Outcome;
use super::error::ReleaseError;
use super::io::{Handle, Mode};
use super::outcome::ReleaseOutcome;
use crate::proto::frame::HoldPart;
use crate::proto::limits::{KEY_LEN_MAX, KEY_LEN_MIN};

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
    handle: Handle,
    key: String,
    owner: Arc<str>,
    token: u64,
    deadline: Instant,
    lease: Duration,
    /// True once the key is known released (an outcome came back) or given up without
    /// releasing: the handle's `Drop` releases nothing then.
    released: bool,
    /// An earlier release was sent and its outcome never came: an `N` to a later one
    /// may answer that earlier release (released or expired, not "not the holder").
    attempted: bool,
    /// A hold of several keys or permits: each key with its count and capacity (empty
    /// for an ACQUIRE of `key`).
    parts: Vec<HoldPart>,
}

/// The plain data of a [`Lock`], from [`Lock::into_parts`];
/// [`Client::adopt`](super::Client::adopt) makes it
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
        handle: Handle,
        key: String,
        owner: Arc<str>,
        token: u64,
        deadline: Instant,
        lease: Duration,
    ) -> Lock {
        Lock {
            handle,
            key,
            owner,
            token,
            deadline,
            lease,
            released: false,
            attempted: false,
            parts: Vec::new(),
        }
    }

    /// The same lock, a hold of `parts`.
    pub(crate) fn with_parts(mut self, parts: Vec<HoldPart>) -> Lock {
        self.parts = parts;
        self
    }

    /// Every key this lock holds, with the permits it holds of each and the key's
    /// capacity: (key, 1, 1) for an [`acquire`](super::Client::acquire). Its release
    /// ends the hold of all of them at once.
    pub fn keys(&self) -> Vec<(&str, u32, u32)> {
        if self.parts.is_empty() {
            return vec![(self.key.as_str(), 1, 1)];
        }
        self.parts.iter().map(|p| (p.key.as_str(), p.count, p.capacity)).collect()
    }

    pub(crate) fn from_parts(handle: Handle, parts: LockParts) -> Lock {
        Lock::new(handle, parts.key, Arc::from(parts.owner), parts.token, parts.deadline, parts.lease)
    }

    /// Gives up the handle without releasing and returns its data; the key stays held
    /// until released (by [`Client::adopt`](super::Client::adopt)'s lock, or
    /// [`Client::release`](super::Client::release) with the same owner) or its lease
    /// ends.
    pub fn into_parts(mut self) -> LockParts {
        self.released = true;
        LockParts {
            key: std::mem::take(&mut self.key),
            owner: self.owner.to_string(),
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
    /// the release is not confirmed: the key may stay held until the client, which keeps
    /// checking in the background, releases it or its lease ends.
    pub fn release(mut self) -> Result<ReleaseOutcome, ReleaseError> {
        let result = self.try_release();
        // Whatever the outcome, the handle is spent: after `Unconfirmed` or
        // `Unavailable` the client's own orphan record releases the key.
        self.released = true;
        result
    }

    /// Releases and waits for the outcome, keeping the handle: it counts as released
    /// only once an outcome came back (or the server refused the release as invalid,
    /// which no retry changes). After any other error it stays releasable: release it
    /// again, or drop it to hand the release to the background queue. (The C ABI's
    /// `ticketing_lock_release`.)
    pub(crate) fn try_release(&mut self) -> Result<ReleaseOutcome, ReleaseError> {
        if self.released {
            return Err(ReleaseError::Invalid("the lock was already released".into()));
        }
        let result = release_now(&self.handle, &self.owner, &self.key, self.token);
        self.settle_release(result)
    }

    /// What a release's `result` means for this handle (see [`Lock::try_release`]).
    pub(crate) fn settle_release(
        &mut self,
        result: Result<ReleaseOutcome, ReleaseError>,
    ) -> Result<ReleaseOutcome, ReleaseError> {
        match &result {
            Ok(_) | Err(ReleaseError::Invalid(_)) => self.released = true,
            // Sent, or (never sent) left to the client's own background check, which
            // may release it before a retry does.
            Err(ReleaseError::Unconfirmed | ReleaseError::Cancelled | ReleaseError::Unavailable { .. }) => {
                self.attempted = true
            }
            Err(ReleaseError::QueueFull | ReleaseError::Forked(_)) => {}
        }
        match result {
            Ok(ReleaseOutcome::NotHolder) if self.attempted => Ok(ReleaseOutcome::ReleasedOrExpired),
            other => other,
        }
    }

    /// What a release of this lock sends: its client, owner, key and token.
    pub(crate) fn release_parts(&self) -> (Handle, Arc<str>, String, u64) {
        (self.handle.clone(), Arc::clone(&self.owner), self.key.clone(), self.token)
    }

    /// True once the lock was released (an outcome came back) or given up.
    pub(crate) fn is_released(&self) -> bool {
        self.released
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
            release_in_background(&self.handle, &self.owner, &self.key, self.token);
        }
    }
}

/// Releases (key, owner, token) and waits for the outcome: at most the release
/// deadline (5 s). Counts against the release queue's bound.
pub(crate) fn release_now(
    handle: &Handle,
    owner: &Arc<str>,
    key: &str,
    token: u64,
) -> Result<ReleaseOutcome, ReleaseError> {
    check_key(key).map_err(ReleaseError::Invalid)?;
    if let Some(why) = handle.shared.forked() {
        return Err(ReleaseError::Forked(why));
    }
    let outcome = handle.shared.call(|core, waker, now| core.release(Some(waker), key, owner, token, now))?;
    match outcome {
        Outcome::Release(result) => result,
        other => unreachable!("a release ended with {other:?}"),
    }
}

/// Hands a release to the background without waiting (what dropping a [`Lock`] does).
/// Never blocks: a write the socket cannot take at once goes to a writer thread.
pub(crate) fn release_in_background(handle: &Handle, owner: &Arc<str>, key: &str, token: u64) {
    if handle.shared.is_forked() {
        return; // the parent's lock: its own client releases it
    }
    let result =
        handle.shared.with_core(Mode::NonBlocking, |core, now| core.release(None, key, owner, token, now));
    if let Err(e) = result {
        log::warn!("dropped lock on {key:?} (token {token}) not released: {e}; its lease will end it");
    }
}

/// A key within the protocol's limits, or why not.
pub(crate) fn check_key(key: &str) -> Result<(), String> {
    if key.len() < KEY_LEN_MIN || key.len() > KEY_LEN_MAX {
        return Err(format!("key is {} bytes; must be {KEY_LEN_MIN}..={KEY_LEN_MAX}", key.len()));
    }
    Ok(())
}
