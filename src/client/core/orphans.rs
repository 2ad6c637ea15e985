//! No grant left orphaned (docs/client.md): the records of indeterminate ACQUIREs and
//! of releases that ended unconfirmed.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ids::{OpId, OrphanId};

/// Pause between two orphan checks that found no leader to answer.
pub const ORPHAN_RETRY: Duration = Duration::from_secs(1);
/// How long a finished record is kept for a `resolve` that comes late.
const DONE_KEPT: Duration = Duration::from_secs(600);
/// Most records kept; beyond it the finished ones opened first go first.
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
    /// The wait the ACQUIRE's frame carried.
    wait: Duration,
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
    /// The Watching records by their next check (what `next_check` and `due` read, so
    /// neither scans every record on each input).
    watching: BTreeSet<(Instant, OrphanId)>,
    /// Records not done yet.
    open: usize,
    next: u64,
    /// How long after a look that found no grant the second look is taken (the commit
    /// margin); also what the settle window adds after a frame's write.
    margin: Duration,
}

impl Orphans {
    /// `margin`: the commit margin (see [`Orphans::not_found`], [`Orphans::written`]).
    pub(crate) fn new(margin: Duration) -> Orphans {
        Orphans { records: BTreeMap::new(), watching: BTreeSet::new(), open: 0, next: 0, margin }
    }

    /// Moves record `id` to `state` (and, when Watching, its next check to `check`),
    /// keeping the index and the count of open records right.
    fn set(&mut self, id: OrphanId, state: State, check: Option<Instant>) {
        let Some(record) = self.records.get_mut(&id) else { return };
        let was_done = matches!(record.state, State::Done { .. });
        if record.state == State::Watching {
            self.watching.remove(&(record.next_check, id));
        }
        record.state = state;
        if let Some(at) = check {
            record.next_check = at;
        }
        if state == State::Watching {
            self.watching.insert((record.next_check, id));
        }
        match (was_done, matches!(state, State::Done { .. })) {
            (false, true) => self.open -= 1,
            (true, false) => self.open += 1,
            _ => {}
        }
    }

    fn insert(&mut self, record: Orphan, now: Instant) -> OrphanId {
        self.prune(now);
        self.next += 1;
        let id = OrphanId(self.next);
        self.watching.insert((record.next_check, id));
        self.open += 1;
        self.records.insert(id, record);
        id
    }

    /// Opens a record for an ACQUIRE that became indeterminate now. `wait`: the wait its
    /// frame carried (see [`Orphans::written`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        &mut self,
        key: String,
        owner: Arc<str>,
        lease: Duration,
        wait: Duration,
        queued_at: Instant,
        settle_at: Instant,
        now: Instant,
    ) -> OrphanId {
        let settle_at = settle_at.max(now);
        let record = Orphan {
            key,
            owner,
            token: None,
            wait,
            queued_at,
            settle_at,
            give_up_at: settle_at + lease,
            state: State::Watching,
            next_check: settle_at,
            rechecked: false,
        };
        self.insert(record, now)
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
        let record = Orphan {
            key,
            owner,
            token: Some(token),
            wait: Duration::ZERO,
            queued_at: now,
            settle_at: now,
            give_up_at,
            state: State::Watching,
            next_check: now,
            rechecked: false,
        };
        self.insert(record, now);
    }

    pub(crate) fn get(&self, id: OrphanId) -> Option<&Orphan> {
        self.records.get(&id)
    }

    /// The frame of record `id`'s ACQUIRE — still pending, its caller gone — was written
    /// only `now` (it was held up behind a slow write): the grant can happen until its
    /// wait plus the commit margin after now, so the window moves.
    pub(crate) fn written(&mut self, id: OrphanId, now: Instant) {
        let margin = self.margin;
        let Some(record) = self.records.get_mut(&id) else { return };
        let settle_at = now + record.wait + margin;
        if settle_at <= record.settle_at {
            return;
        }
        let lease = record.give_up_at.saturating_duration_since(record.settle_at);
        record.settle_at = settle_at;
        record.give_up_at = settle_at + lease;
        if record.state == State::Watching && record.next_check < settle_at {
            self.set(id, State::Watching, Some(settle_at));
        }
    }

    /// A `resolve` operation `op` takes the record over. The record must be the one the
    /// error names (same key, owner and send instant): an error of another client
    /// carries an id that means something else here.
    pub(crate) fn claim(
        &mut self,
        id: OrphanId,
        op: OpId,
        key: &str,
        owner: &str,
        queued_at: Instant,
    ) -> Claim {
        let Some(record) = self
            .records
            .get(&id)
            .filter(|r| r.key == key && &*r.owner == owner && r.queued_at == queued_at && r.token.is_none())
        else {
            return Claim::Missing;
        };
        let settle_at = record.settle_at;
        match record.state {
            State::Done { released, .. } => Claim::Done { released },
            // A running check is taken over (its result will be ignored); so is an
            // earlier resolve of the same error (the newest caller gets the grant).
            State::Claimed(_) | State::Checking(_) | State::Watching => {
                self.set(id, State::Claimed(op), None);
                Claim::Claimed { settle_at }
            }
        }
    }

    /// The `resolve` that claimed the record ended without an answer: the background
    /// check takes it over again.
    pub(crate) fn unclaim(&mut self, id: OrphanId, op: OpId, now: Instant) {
        if let Some(record) = self.records.get(&id).filter(|r| r.state == State::Claimed(op)) {
            let at = record.settle_at.max(now);
            self.set(id, State::Watching, Some(at));
        }
    }

    /// The record is settled (`released`: a grant of it is being released).
    pub(crate) fn finish(&mut self, id: OrphanId, released: bool, now: Instant) {
        self.set(id, State::Done { released, at: now }, None);
    }

    /// A look (a check's or a `resolve`'s QUERY) found no grant of the record's
    /// ACQUIRE. The settle window assumes the grant commits within the commit margin of
    /// the write; one that commits later (a slow commit, a partition on the way) would
    /// escape, so a record of an unknown token gets a second look one commit margin
    /// later before it is done. A `resolve` has answered `NotHeld` by then: the second
    /// look, should it find the grant after all, releases it — no caller holds it.
    pub(crate) fn not_found(&mut self, id: OrphanId, now: Instant) {
        let Some(record) = self.records.get_mut(&id) else { return };
        let second_look = record.token.is_none() && !record.rechecked;
        record.rechecked = true;
        if second_look {
            let at = now + self.margin;
            self.set(id, State::Watching, Some(at));
        } else {
            self.set(id, State::Done { released: false, at: now }, None);
        }
    }

    /// A `G` arrived for the record's ACQUIRE (None: the record is gone).
    pub(crate) fn late_grant(&mut self, id: OrphanId, now: Instant) -> Option<LateGrant> {
        let record = self.records.get(&id)?;
        Some(match record.state {
            State::Claimed(op) => LateGrant::ToResolve(op),
            _ => {
                let grant = LateGrant::Release { key: record.key.clone(), owner: Arc::clone(&record.owner) };
                self.set(id, State::Done { released: true, at: now }, None);
                grant
            }
        })
    }

    /// Records whose check is due now (Watching, `next_check` passed), with their key.
    pub(crate) fn due(&self, now: Instant) -> Vec<(OrphanId, String)> {
        self.watching
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| (*id, self.records[id].key.clone()))
            .collect()
    }

    /// True while `op` is the check of record `id` (a `resolve` may have taken the
    /// record over since: then the check's result is not acted on).
    pub(crate) fn is_checking(&self, id: OrphanId, op: OpId) -> bool {
        self.records.get(&id).is_some_and(|r| r.state == State::Checking(op))
    }

    /// The check `op` runs for record `id`.
    pub(crate) fn checking(&mut self, id: OrphanId, op: OpId) {
        self.set(id, State::Checking(op), None);
    }

    /// A check ended without an answer: try again later, or give up (at `give_up_at`,
    /// or at once when the client is closing: a closed client lingers no longer).
    pub(crate) fn check_failed(&mut self, id: OrphanId, closing: bool, now: Instant) {
        let Some(record) = self.records.get(&id).filter(|r| matches!(r.state, State::Checking(_))) else {
            return;
        };
        if closing || now >= record.give_up_at {
            log::warn!(
                "could not find out whether the grant of {:?} is still held (no leader answered); it has \
                 expired by now, or ends with its lease",
                record.key
            );
            self.set(id, State::Done { released: false, at: now }, None);
        } else {
            self.set(id, State::Watching, Some(now + ORPHAN_RETRY));
        }
    }

    /// When the next check is due.
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.watching.first().map(|(at, _)| *at)
    }

    /// Records not finished yet (a closing client waits for them).
    pub(crate) fn outstanding(&self) -> usize {
        self.open
    }

    /// Drops finished records past [`DONE_KEPT`], and beyond [`RECORDS_MAX`] the finished
    /// ones opened first.
    fn prune(&mut self, now: Instant) {
        if self.records.len() < RECORDS_MAX / 4 {
            return;
        }
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

#[cfg(test)]
#[path = "orphans_tests.rs"]
mod tests;
