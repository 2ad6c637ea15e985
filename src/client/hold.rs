//! A hold of several keys, or of permits of keys of more capacity, built and made in
//! one request (docs/client.md, "Counted and multi-key holds").

use std::sync::Arc;
use std::time::Duration;

use super::api::Client;
use super::callback::{start, Pending};
use super::calls::{acquired, check_acquire};
use super::core::hold_key;
use super::error::AcquireError;
use super::io::dial::Words;
use super::io::Completion;
use super::lock::Lock;
use super::place::Place;
use crate::proto::frame::HoldPart;
use crate::proto::limits::{CAPACITY_MAX, HOLD_KEYS_MAX};

/// A HOLD being built: [`Client::hold`], then [`key`](Hold::key) and
/// [`permits`](Hold::permits) for each key, then [`acquire`](Hold::acquire).
///
/// It is granted all at once — every key, one fencing token — only when no request
/// that came earlier and names one of its keys still waits and every key has its count
/// free; until then it waits, up to its wait, holding nothing. The oldest waiter is
/// first everywhere, so holds that name the same keys in other orders never deadlock.
///
/// ```no_run
/// # use std::time::Duration;
/// # fn f(client: &ticketing::client::Client) -> Result<(), ticketing::client::AcquireError> {
/// // Four adjacent seats, together or not at all, and 2 of a stock of 100 tickets.
/// let lock = client
///     .hold(Duration::from_secs(30), Duration::from_secs(10))
///     .key("seat:12:1").key("seat:12:2").key("seat:12:3").key("seat:12:4")
///     .permits("stock:sale-7", 2, 100)
///     .on_place(|place| println!("{} ahead of you", place.ahead))
///     .acquire()?;
/// # Ok(()) }
/// ```
#[must_use = "a hold does nothing until acquire() is called"]
pub struct Hold<'c> {
    client: &'c Client,
    lease: Duration,
    wait: Duration,
    parts: Vec<HoldPart>,
    on_place: Option<Arc<dyn Fn(Place) + Send + Sync>>,
}

impl Client {
    /// Starts a HOLD for `lease` (whole seconds, 1..=250 s), waiting up to `wait`
    /// (0..=300 s) for its turn.
    pub fn hold(&self, lease: Duration, wait: Duration) -> Hold<'_> {
        Hold { client: self, lease, wait, parts: Vec::new(), on_place: None }
    }
}

impl Hold<'_> {
    /// The exclusive lock of `key` (a key of capacity 1).
    pub fn key(self, key: &str) -> Self {
        self.permits(key, 1, 1)
    }

    /// `count` of the `capacity` permits of `key`. Every request on a key states its
    /// capacity; the server refuses one that states another while the key has holders
    /// or waiters.
    pub fn permits(mut self, key: &str, count: u32, capacity: u32) -> Self {
        self.parts.push(HoldPart { key: key.to_owned(), count, capacity });
        self
    }

    /// Calls `f` with the hold's place in line when it queues and then at most once a
    /// second while it changes, on a thread of the client's. Keep it short: it runs
    /// before the client's other news.
    pub fn on_place(mut self, f: impl Fn(Place) + Send + Sync + 'static) -> Self {
        self.on_place = Some(Arc::new(f));
        self
    }

    /// Sends the HOLD and waits for the answer: a [`Lock`] of every key (its release
    /// ends them all), or why not — the outcomes are those of
    /// [`Client::acquire`](super::Client::acquire).
    pub fn acquire(self) -> Result<Lock, AcquireError> {
        let lease_s = check_hold(&self.parts, self.lease, self.wait, self.client.words())?;
        let handle = self.client.handle();
        if let Some(why) = handle.shared.forked() {
            return Err(AcquireError::Forked(why));
        }
        let owner = self.client.owner_arc();
        let key = hold_key(&self.parts).to_owned();
        let (parts, on_place, wait) = (self.parts.clone(), self.on_place, self.wait);
        let outcome = handle.shared.call::<AcquireError>(|core, waker, now| {
            Ok(core.hold(waker, parts, on_place, owner, lease_s, wait, now))
        })?;
        Ok(acquired(handle, &key, owner, outcome)?.with_parts(self.parts))
    }
}

impl Hold<'_> {
    /// [`Hold::acquire`] without a waiting thread: returns at once and calls `done`
    /// once with the outcome, by the rules of
    /// [`Client::acquire_then`](super::Client::acquire_then) (a thread of the client, or
    /// this one when it ends at once; `done` must not block). The places in line go to
    /// [`on_place`](Hold::on_place) as with `acquire`; [`Pending::cancel`] stops the
    /// wait as it stops an acquire's.
    pub fn acquire_then(self, done: impl FnOnce(Result<Lock, AcquireError>) + Send + 'static) -> Pending {
        let handle = self.client.handle();
        let checked =
            check_hold(&self.parts, self.lease, self.wait, self.client.words()).and_then(|lease_s| {
                handle.shared.forked().map_or(Ok(lease_s), |why| Err(AcquireError::Forked(why)))
            });
        let lease_s = match checked {
            Ok(lease_s) => lease_s,
            Err(e) => {
                done(Err(e));
                return Pending::ended();
            }
        };
        let owner = self.client.owner_arc();
        let (kept, key, on_place, wait) =
            (self.parts.clone(), hold_key(&self.parts).to_owned(), self.on_place, self.wait);
        let (in_done, in_done_owner) = (handle.clone(), Arc::clone(owner));
        let completion: Completion = Box::new(move |outcome| {
            done(acquired(&in_done, &key, &in_done_owner, outcome).map(|lock| lock.with_parts(kept)))
        });
        start(handle, completion, |core, waker, now| {
            core.hold(waker, self.parts, on_place, owner, lease_s, wait, now)
        })
    }
}

/// The lease in whole seconds after checking a HOLD's keys against the protocol's
/// limits (before any I/O), each mistake named in `words`: the way the caller wrote the
/// hold (the Rust builder's `Hold::permits("k", 3, 2)`, Python's `Permits("k", 3, 2)`,
/// ...: the client's words, chosen by its binding).
pub(crate) fn check_hold(
    parts: &[HoldPart],
    lease: Duration,
    wait: Duration,
    words: &Words,
) -> Result<u8, AcquireError> {
    if parts.is_empty() || parts.len() > HOLD_KEYS_MAX {
        return Err(AcquireError::Invalid(format!(
            "a hold names 1 to {HOLD_KEYS_MAX} keys ({}); this one names {}",
            words.hold_keys,
            parts.len()
        )));
    }
    let part = |p: &HoldPart| words.hold_part(&p.key, p.count, p.capacity);
    let mut lease_s = None;
    for (i, p) in parts.iter().enumerate() {
        lease_s = Some(check_acquire(&p.key, lease, wait)?);
        if parts[..i].iter().any(|q| q.key == p.key) {
            return Err(AcquireError::Invalid(format!(
                "key {:?} is named twice in one hold; name each key once",
                p.key
            )));
        }
        if !(1..=CAPACITY_MAX).contains(&p.capacity) {
            return Err(AcquireError::Invalid(format!(
                "{}: the capacity must be 1 to {CAPACITY_MAX}",
                part(p)
            )));
        }
        if p.count == 0 || p.count > p.capacity {
            return Err(AcquireError::Invalid(format!("{}: the count must be 1 to the capacity", part(p))));
        }
    }
    Ok(lease_s.expect("at least one key"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::io::dial::{
        CLI_WORDS, C_WORDS, ENV_WORDS, GO_WORDS, JAVA_WORDS, NODE_WORDS, PYTHON_WORDS, RUST_WORDS,
    };

    fn refusal(parts: &[(&str, u32, u32)], words: &Words) -> String {
        let parts: Vec<HoldPart> = parts
            .iter()
            .map(|&(k, count, capacity)| HoldPart { key: k.to_owned(), count, capacity })
            .collect();
        match check_hold(&parts, Duration::from_secs(30), Duration::ZERO, words) {
            Err(AcquireError::Invalid(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_hold_names_its_part_as_each_caller_writes_it() {
        for (words, part) in [
            (&RUST_WORDS, r#"Hold::permits("k", 3, 2)"#),
            (&C_WORDS, r#"ticketing_hold_part {.key = "k", .count = 3, .capacity = 2}"#),
            (&PYTHON_WORDS, r#"Permits("k", 3, 2)"#),
            (&GO_WORDS, r#"Part{Key: "k", Count: 3, Capacity: 2}"#),
            (&JAVA_WORDS, r#"permits("k", 3, 2)"#),
            (&NODE_WORDS, r#"{ key: "k", count: 3, capacity: 2 }"#),
            (&ENV_WORDS, r#"Hold::permits("k", 3, 2)"#),
            (&CLI_WORDS, r#"KEY "k" with --count 3 --permits 2"#),
        ] {
            let why = refusal(&[("k", 3, 2)], words);
            assert_eq!(why, format!("{part}: the count must be 1 to the capacity"));
            let why = refusal(&[("a", 1, 1), ("k", 1, 0)], words);
            assert!(why.ends_with(": the capacity must be 1 to 1000000"), "{why}");
            let many: Vec<(&str, u32, u32)> = vec![("k", 1, 1); HOLD_KEYS_MAX + 1];
            let why = refusal(&many, words);
            assert_eq!(why, format!("a hold names 1 to 16 keys ({}); this one names 17", words.hold_keys));
        }
        let why = refusal(&[("k", 1, 0)], &PYTHON_WORDS);
        assert_eq!(why, r#"Permits("k", 1, 0): the capacity must be 1 to 1000000"#);
    }
}
