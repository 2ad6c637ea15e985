//! What every call of the client does around its operation, blocking or not: the
//! checks of its arguments before any I/O, and what its outcome means for the caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::{Outcome, Resolved};
use super::error::{unexpected, AcquireError, BuildError, ClientError, Indeterminate};
use super::io::Handle;
use super::lock::{check_key, Lock};
use super::outcome::{HolderInfo, PoolHolding, PoolInfo};
use crate::proto::frame::Response;
use crate::proto::limits::{LEASE_S_MAX, LEASE_S_MIN, OWNER_LEN_MAX, OWNER_LEN_MIN, WAIT_MS_MAX};

/// What [`Client::resolve`](super::Client::resolve) found out about an indeterminate ACQUIRE.
#[derive(Debug)]
#[non_exhaustive]
pub enum Resolution {
    /// The key is held by the acquire's owner under a token no caller of this client
    /// holds: the grant did happen. The lock is adopted; its deadline is the instant
    /// before the QUERY was sent plus the lease the leader reported left (or, for a
    /// late `G`, the acquire's own deadline), so never later than the server's expiry.
    Held(Lock),
    /// The key is not held by that acquire (free, someone else's), or the client is
    /// already releasing its late grant. Nothing to do.
    NotHeld,
    /// Could not be told within the timeout (no leader answered, or the window in which
    /// the grant could still happen did not pass in time). The client goes on finding
    /// out in the background and releases the grant if there is one.
    Unknown,
}

/// The lease in whole seconds, after checking an acquire's arguments against the
/// protocol's limits (before any I/O).
pub(crate) fn check_acquire(key: &str, lease: Duration, wait: Duration) -> Result<u8, AcquireError> {
    let lease_s = lease_seconds(lease).map_err(AcquireError::Invalid)?;
    check_key(key).map_err(AcquireError::Invalid)?;
    // Exactly: 300.0004 s is over (its sub-millisecond rest is not dropped).
    if wait > Duration::from_millis(u64::from(WAIT_MS_MAX)) {
        return Err(AcquireError::Invalid(format!(
            "wait is {} s; it must be 0 to {} s",
            wait.as_secs_f64(),
            WAIT_MS_MAX / 1000
        )));
    }
    Ok(lease_s)
}

/// What an acquire's outcome means for its caller: a [`Lock`] of this client, or why not.
pub(crate) fn acquired(
    handle: &Handle,
    key: &str,
    owner: &Arc<str>,
    outcome: Outcome,
) -> Result<Lock, AcquireError> {
    match outcome {
        Outcome::Acquire(Ok(granted)) => Ok(Lock::new(
            handle.clone(),
            key.to_owned(),
            Arc::clone(owner),
            granted.token,
            granted.deadline,
            granted.lease,
        )),
        Outcome::Acquire(Err(e)) => Err(e),
        other => unreachable!("an acquire ended with {other:?}"),
    }
}

/// What a resolve's outcome means for its caller.
pub(crate) fn resolution(handle: &Handle, attempt: &Indeterminate, outcome: Outcome) -> Resolution {
    match outcome {
        Outcome::Resolve(Resolved::Held(granted)) => Resolution::Held(
            Lock::new(
                handle.clone(),
                attempt.key.to_string(),
                Arc::clone(&attempt.owner),
                granted.token,
                granted.deadline,
                granted.lease,
            )
            .with_parts(attempt.parts.as_deref().cloned().unwrap_or_default()),
        ),
        Outcome::Resolve(Resolved::NotHeld) => Resolution::NotHeld,
        _ => Resolution::Unknown,
    }
}

/// A QUERY's answer: the holder, or `None` for a free key.
pub(crate) fn holder(response: Response) -> Result<Option<HolderInfo>, ClientError> {
    match response {
        Response::Free => Ok(None),
        Response::Holder { token, remaining_ms, waiters, owner } => Ok(Some(HolderInfo {
            owner,
            token,
            remaining: Duration::from_millis(u64::from(remaining_ms)),
            waiters,
        })),
        other => Err(unexpected(other)),
    }
}

/// A POOL's answer.
pub(crate) fn pool_info(response: Response) -> Result<PoolInfo, ClientError> {
    match response {
        Response::Pool { capacity, in_use, holds, waiters, oldest_wait_ms, holders } => Ok(PoolInfo {
            capacity,
            in_use,
            holds,
            waiters,
            oldest_wait: Duration::from_millis(u64::from(oldest_wait_ms)),
            holders: holders
                .into_iter()
                .map(|h| PoolHolding {
                    owner: h.owner,
                    token: h.token,
                    count: h.count,
                    remaining: Duration::from_millis(u64::from(h.remaining_ms)),
                })
                .collect(),
        }),
        other => Err(unexpected(other)),
    }
}

/// `now + timeout`, or a year from now for a timeout past that (`Duration::MAX` means
/// "as long as it takes", not an overflow).
pub(crate) fn far(now: Instant, timeout: Duration) -> Instant {
    now + timeout.min(Duration::from_secs(365 * 24 * 3600))
}

/// The lease in whole seconds within the protocol's limits, or why not.
fn lease_seconds(lease: Duration) -> Result<u8, String> {
    let secs = lease.as_secs();
    if lease.subsec_nanos() != 0 || secs < u64::from(LEASE_S_MIN) || secs > u64::from(LEASE_S_MAX) {
        // In seconds, the unit every library's lease is given in (a C caller's 1500 ms
        // reads as 1.5 s), not in a Rust type's notation.
        return Err(format!(
            "lease must be whole seconds from {LEASE_S_MIN} to {LEASE_S_MAX}, not {} s",
            lease.as_secs_f64()
        ));
    }
    Ok(secs as u8)
}

/// An owner within the protocol's limits and printable, or why not.
pub(crate) fn check_owner(owner: &str) -> Result<(), BuildError> {
    if owner.len() < OWNER_LEN_MIN || owner.len() > OWNER_LEN_MAX {
        return Err(BuildError::BadOwner(format!("{} bytes; must be 1..=255", owner.len())));
    }
    if owner.chars().any(char::is_control) {
        return Err(BuildError::BadOwner("contains control characters".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_whole_seconds_in_range() {
        assert_eq!(lease_seconds(Duration::from_secs(1)), Ok(1));
        assert_eq!(lease_seconds(Duration::from_secs(250)), Ok(250));
        assert!(lease_seconds(Duration::ZERO).is_err());
        assert!(lease_seconds(Duration::from_secs(251)).is_err());
        assert!(lease_seconds(Duration::from_millis(1500)).is_err());
    }
}
