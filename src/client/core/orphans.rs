//! No grant left orphaned (docs/client.md): the records of indeterminate ACQUIREs,
//! and the tokens this client has handed to callers.
//!
//! An ACQUIRE that ends `Indeterminate` may still be granted — its `G` lost with its
//! connection, or arriving after the caller gave up. Its record says who deals with
//! that grant:
//! - **Watching**: nobody claimed it. A `G` that arrives is released at once. Once the
//!   window in which the grant can still happen has passed (`settle_at`), the core
//!   QUERYs the key and releases a holder with this owner whose token no caller holds
//!   (**Checking**), trying again every [`ORPHAN_RETRY`] while no leader answers,
//!   until `give_up_at` (by then any grant made within the window has expired).
//! - **Claimed** by a `resolve` call, at any time before the record is done (a check
//!   under way is taken over and its result ignored): a `G` goes to it; if it ends
//!   without an answer the record is Watching again, so a token it did not take is
//!   never dropped.
//! - **Done**, with what became of it (kept a while, so a late `resolve` is told).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ids::{IdHasher, OpId, OrphanId};

/// Pause between two orphan checks that found no leader to answer.
pub const ORPHAN_RETRY: Duration = Duration::from_secs(1);
/// How long a finished record is kept for a `resolve` that comes late.
const DONE_KEPT: Duration = Duration::from_secs(600);
/// Most records kept; the oldest finished ones go first.
const RECORDS_MAX: usize = 4096;

/// Where an orphan record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Watching,
    Claimed(OpId),
    Checking(OpId),
    /// `released`: a grant was found (by its `G` or a QUERY) and is being released.
    Done {
        released: bool,
        at: Instant,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Orphan {
    pub(crate) key: String,
    pub(crate) owner: Arc<str>,
    /// The grant's token, when it is known (a release that ended unconfirmed); None
    /// for an indeterminate acquire (any token no caller holds is its grant).
    pub(crate) token: Option<u64>,
    /// The instant before the ACQUIRE's first byte could have been written.
    pub(crate) queued_at: Instant,
    /// When a grant of it can no longer happen (written + wait + commit margin).
    pub(crate) settle_at: Instant,
    pub(crate) give_up_at: Instant,
    pub(crate) state: State,
    next_check: Instant,
    /// The second look (see [`Orphans::not_found`]) was taken.
    rechecked: bool,
}

/// What a `resolve` learns when it claims a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Claimed: wait until `settle_at`, then QUERY.
    Claimed { settle_at: Instant },
    /// Finished already: a grant found is being released (`true`), or none was held.
    Done { released: bool },
    /// No record (an old one was dropped): the caller decides by QUERY alone.
    Missing,
}

/// What to do with a `G` that arrived for a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LateGrant {
    /// Release it (nobody will take it).
    Release { key: String, owner: Arc<str> },
    /// Hand it to the `resolve` operation that claimed the record.
    ToResolve(OpId),
}

pub(crate) struct Orphans {
    records: BTreeMap<OrphanId, Orphan>,
    next: u64,
    /// How long after a look that found no grant the second look is taken.
    recheck_after: Duration,
}

impl Orphans {
    /// `recheck_after`: the commit margin (see [`Orphans::not_found`]).
    pub(crate) fn new(recheck_after: Duration) -> Orphans {
        Orphans { records: BTreeMap::new(), next: 0, recheck_after }
    }

    /// Opens a record for an ACQUIRE that became indeterminate now.
    pub(crate) fn open(
        &mut self,
        key: String,
        owner: Arc<str>,
        lease: Duration,
        queued_at: Instant,
        settle_at: Instant,
        now: Instant,
    ) -> OrphanId {
        self.prune(now);
        self.next += 1;
        let id = OrphanId(self.next);
        let settle_at = settle_at.max(now);
        self.records.insert(
            id,
            Orphan {
                key,
                owner,
                token: None,
                queued_at,
                settle_at,
                give_up_at: settle_at + lease,
                state: State::Watching,
                next_check: settle_at,
                rechecked: false,
            },
        );
        id
    }

    /// Opens a record for a known grant whose release ended unconfirmed: it is checked
    /// at once, and then every [`ORPHAN_RETRY`] while no leader answers, until
    /// `give_up_at` (when its lease has surely ended).
    pub(crate) fn open_known(
        &mut self,
        key: String,
        owner: Arc<str>,
        token: u64,
        give_up_at: Instant,
        now: Instant,
    ) {
        self.prune(now);
        self.next += 1;
        let record = Orphan {
            key,
            owner,
            token: Some(token),
            queued_at: now,
            settle_at: now,
            give_up_at,
            state: State::Watching,
            next_check: now,
            rechecked: false,
        };
        self.records.insert(OrphanId(self.next), record);
    }

    pub(crate) fn get(&self, id: OrphanId) -> Option<&Orphan> {
        self.records.get(&id)
    }

    /// A `resolve` operation `op` takes the record over.
    pub(crate) fn claim(&mut self, id: OrphanId, op: OpId) -> Claim {
        let Some(record) = self.records.get_mut(&id) else { return Claim::Missing };
        match record.state {
            State::Done { released, .. } => Claim::Done { released },
            // A running check is taken over (its result will be ignored); so is an
            // earlier resolve of the same error (the newest caller gets the grant).
            State::Claimed(_) | State::Checking(_) | State::Watching => {
                record.state = State::Claimed(op);
                Claim::Claimed { settle_at: record.settle_at }
            }
        }
    }

    /// The `resolve` that claimed the record ended without an answer: the background
    /// check takes it over again.
    pub(crate) fn unclaim(&mut self, id: OrphanId, op: OpId, now: Instant) {
        if let Some(record) = self.records.get_mut(&id) {
            if record.state == State::Claimed(op) {
                record.state = State::Watching;
                record.next_check = record.settle_at.max(now);
            }
        }
    }

    /// The record is settled (`released`: a grant of it is being released).
    pub(crate) fn finish(&mut self, id: OrphanId, released: bool, now: Instant) {
        if let Some(record) = self.records.get_mut(&id) {
            record.state = State::Done { released, at: now };
        }
    }

    /// A look (a check's or a `resolve`'s QUERY) found no grant of the record's
    /// ACQUIRE. The settle window assumes the grant commits within the commit margin of
    /// the write; one that commits later (a slow commit, a partition on the way) would
    /// escape, so a record of an unknown token gets a second look one commit margin
    /// later before it is done. A `resolve` has answered `NotHeld` by then: the second
    /// look, should it find the grant after all, releases it — no caller holds it.
    pub(crate) fn not_found(&mut self, id: OrphanId, now: Instant) {
        let Some(record) = self.records.get_mut(&id) else { return };
        if record.token.is_none() && !record.rechecked {
            record.rechecked = true;
            record.state = State::Watching;
            record.next_check = now + self.recheck_after;
        } else {
            record.state = State::Done { released: false, at: now };
        }
    }

    /// A `G` arrived for the record's ACQUIRE (None: the record is gone).
    pub(crate) fn late_grant(&mut self, id: OrphanId, now: Instant) -> Option<LateGrant> {
        let record = self.records.get_mut(&id)?;
        Some(match record.state {
            State::Claimed(op) => LateGrant::ToResolve(op),
            _ => {
                record.state = State::Done { released: true, at: now };
                LateGrant::Release { key: record.key.clone(), owner: Arc::clone(&record.owner) }
            }
        })
    }

    /// Records whose check is due now (Watching, `next_check` passed), with their key.
    pub(crate) fn due(&self, now: Instant) -> Vec<(OrphanId, String)> {
        self.records
            .iter()
            .filter(|(_, r)| r.state == State::Watching && r.next_check <= now)
            .map(|(id, r)| (*id, r.key.clone()))
            .collect()
    }

    /// True while `op` is the check of record `id` (a `resolve` may have taken the
    /// record over since: then the check's result is not acted on).
    pub(crate) fn is_checking(&self, id: OrphanId, op: OpId) -> bool {
        self.records.get(&id).is_some_and(|r| r.state == State::Checking(op))
    }

    /// The check `op` runs for record `id`.
    pub(crate) fn checking(&mut self, id: OrphanId, op: OpId) {
        if let Some(record) = self.records.get_mut(&id) {
            record.state = State::Checking(op);
        }
    }

    /// A check ended without an answer: try again later, or give up (at `give_up_at`,
    /// or at once when the client is closing: a closed client lingers no longer).
    pub(crate) fn check_failed(&mut self, id: OrphanId, closing: bool, now: Instant) {
        if let Some(record) = self.records.get_mut(&id).filter(|r| matches!(r.state, State::Checking(_))) {
            if closing || now >= record.give_up_at {
                log::warn!(
                    "could not find out whether the indeterminate acquire of {:?} was granted (no leader \
                     answered); any grant of it has expired by now",
                    record.key
                );
                record.state = State::Done { released: false, at: now };
            } else {
                record.state = State::Watching;
                record.next_check = now + ORPHAN_RETRY;
            }
        }
    }

    /// When the next check is due.
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.records.values().filter(|r| r.state == State::Watching).map(|r| r.next_check).min()
    }

    /// Records not finished yet (a closing client waits for them).
    pub(crate) fn outstanding(&self) -> usize {
        self.records.values().filter(|r| !matches!(r.state, State::Done { .. })).count()
    }

    /// Drops finished records past [`DONE_KEPT`], and the oldest finished ones beyond
    /// [`RECORDS_MAX`].
    fn prune(&mut self, now: Instant) {
        self.records.retain(|_, r| match r.state {
            State::Done { at, .. } => now.saturating_duration_since(at) < DONE_KEPT,
            _ => true,
        });
        while self.records.len() >= RECORDS_MAX {
            let oldest =
                self.records.iter().find(|(_, r)| matches!(r.state, State::Done { .. })).map(|(id, _)| *id);
            match oldest {
                Some(id) => self.records.remove(&id),
                None => break,
            };
        }
    }
}

/// The tokens handed to callers (a `Lock` returned, `resolve`'s `Held`), until their
/// release ends or their lease is long over: a holder found with one of them is a
/// caller's lock, never an orphan.
pub(crate) struct Held {
    tokens: HashMap<u64, Instant, BuildHasherDefault<IdHasher>>,
    /// How long past its local deadline a token still counts (the server's lease ends a
    /// little later than the local deadline).
    slack: Duration,
}

impl Held {
    pub(crate) fn new(slack: Duration) -> Held {
        Held { tokens: HashMap::default(), slack }
    }

    pub(crate) fn insert(&mut self, token: u64, deadline: Instant, now: Instant) {
        if self.tokens.len() >= 1024 && self.tokens.len().is_power_of_two() {
            let slack = self.slack;
            self.tokens.retain(|_, d| *d + slack > now);
        }
        self.tokens.insert(token, deadline);
    }

    /// The local deadline of a token handed to a caller.
    pub(crate) fn deadline(&self, token: u64) -> Option<Instant> {
        self.tokens.get(&token).copied()
    }

    pub(crate) fn remove(&mut self, token: u64) {
        self.tokens.remove(&token);
    }

    pub(crate) fn contains(&self, token: u64, now: Instant) -> bool {
        self.tokens.get(&token).is_some_and(|d| *d + self.slack > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_that_finds_nothing_is_taken_again_one_commit_margin_later() {
        let now = Instant::now();
        let mut orphans = Orphans::new(Duration::from_secs(5));
        let id = record(&mut orphans, now);
        orphans.checking(id, OpId(1));
        orphans.not_found(id, now + Duration::from_secs(5));
        assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(10)));
        orphans.checking(id, OpId(2));
        orphans.not_found(id, now + Duration::from_secs(10));
        assert_eq!(orphans.outstanding(), 0, "two looks, then done");
    }

    fn record(orphans: &mut Orphans, now: Instant) -> OrphanId {
        orphans.open("k".into(), "o".into(), Duration::from_secs(30), now, now + Duration::from_secs(5), now)
    }

    #[test]
    fn a_late_grant_goes_to_the_resolve_that_claimed_the_record_and_else_is_released() {
        let now = Instant::now();
        let mut orphans = Orphans::new(Duration::from_secs(5));
        let id = record(&mut orphans, now);
        assert_eq!(orphans.claim(id, OpId(7)), Claim::Claimed { settle_at: now + Duration::from_secs(5) });
        assert_eq!(orphans.late_grant(id, now), Some(LateGrant::ToResolve(OpId(7))));
        orphans.unclaim(id, OpId(7), now);
        assert_eq!(
            orphans.late_grant(id, now),
            Some(LateGrant::Release { key: "k".into(), owner: "o".into() })
        );
        assert_eq!(orphans.claim(id, OpId(8)), Claim::Done { released: true });
        assert_eq!(orphans.outstanding(), 0);
    }

    #[test]
    fn a_resolve_that_gives_up_hands_the_record_back_to_the_background_check() {
        let now = Instant::now();
        let mut orphans = Orphans::new(Duration::from_secs(5));
        let id = record(&mut orphans, now);
        orphans.claim(id, OpId(1));
        assert_eq!(orphans.next_check(), None, "claimed: no background check");
        orphans.unclaim(id, OpId(1), now);
        assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(5)));
        assert_eq!(orphans.due(now + Duration::from_secs(5)), vec![(id, "k".to_owned())]);
        orphans.checking(id, OpId(2));
        orphans.check_failed(id, false, now + Duration::from_secs(6));
        assert_eq!(orphans.next_check(), Some(now + Duration::from_secs(6) + ORPHAN_RETRY));
        orphans.checking(id, OpId(3));
        orphans.check_failed(id, false, now + Duration::from_secs(40));
        assert_eq!(orphans.outstanding(), 0, "past settle + lease it gives up");
    }

    #[test]
    fn held_tokens_count_until_their_deadline_plus_slack() {
        let now = Instant::now();
        let mut held = Held::new(Duration::from_secs(5));
        held.insert(9, now + Duration::from_secs(1), now);
        assert!(held.contains(9, now + Duration::from_secs(5)));
        assert!(!held.contains(9, now + Duration::from_secs(6)));
        held.remove(9);
        assert!(!held.contains(9, now));
    }
}
