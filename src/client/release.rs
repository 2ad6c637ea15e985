//! Releases (docs/client.md). An explicit release ([`Lock::release`](super::Lock::release),
//! [`Client::release`](super::Client::release)) is carried out by the calling thread
//! itself ([`release_now`]); the background release worker sends the others — dropped
//! [`Lock`](super::Lock)s and the compensation of grants that arrived after their
//! caller gave up — so a destructor never blocks. Both count against one bound.
//!
//! Each release carries the exact (key, owner, token) and an absolute deadline
//! [`RELEASE_DEADLINE`] after it was asked for. It is sent, and sent again (a release
//! is idempotent) after a lost connection, an `M`, a `U` or an unanswered attempt,
//! until the server answers `R` or `N` or the deadline passes. Only `R`/`N` count as
//! an outcome: a job that runs out of time is reported
//! [`ReleaseError::Unconfirmed`], and the server's lease is the last safety net.
//! The queue is bounded by [`RELEASE_QUEUE_CAPACITY`]; a full queue is an error the
//! caller sees at once, never a block.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::conn::{Reply, ReplyCell, SendError, Session, Waiter};
use super::pool::Pool;
use super::{ReleaseError, ReleaseOutcome};
use crate::proto::frame::{encode_release, ErrorCode, Response};

/// Most release jobs that may be queued or in progress at once.
pub const RELEASE_QUEUE_CAPACITY: usize = 1024;
/// A release is given up (unconfirmed) this long after it was enqueued.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(5);
/// An attempt without an answer for this long is sent again, on any connection.
const RELEASE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause before the next attempt when no connection is up or the server said `U`/`E 4`;
/// also the first pause after an `M` that leaves no other connection to try.
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often a release waiting for the leader's first connection looks again.
const RELEASE_LEADER_POLL: Duration = Duration::from_millis(20);
/// Longest pause between attempts of one release after repeated `M`s.
const RELEASE_MOVED_PAUSE_MAX: Duration = Duration::from_secs(1);

pub(crate) type Outcome = Result<ReleaseOutcome, ReleaseError>;

/// Why a job exists; only for logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Explicit,
    Dropped,
    Compensation,
}

/// One release to carry out.
pub(crate) struct Job {
    key: String,
    owner: String,
    token: u64,
    deadline: Instant,
    origin: Origin,
    reply: Option<Sender<Outcome>>,
}

impl Job {
    pub(crate) fn new(
        key: String,
        owner: String,
        token: u64,
        origin: Origin,
        reply: Option<Sender<Outcome>>,
    ) -> Job {
        Job { key, owner, token, deadline: Instant::now() + RELEASE_DEADLINE, origin, reply }
    }

    pub(crate) fn compensation(key: String, owner: String, token: u64) -> Job {
        Job::new(key, owner, token, Origin::Compensation, None)
    }
}

pub(crate) enum Msg {
    Job(Job),
    /// The last client handle is gone: finish the queued jobs, then stop everything.
    Close,
}

struct Item {
    job: Job,
    in_flight: Option<(Arc<Session>, u32, Instant)>,
    /// Attempts that ran past [`RELEASE_ATTEMPT_TIMEOUT`] and were sent again, still
    /// registered with their session. Why keep them: on a path slower than one attempt
    /// timeout every answer arrives after its attempt was abandoned, so a worker that
    /// only listened to the newest attempt reported `Unconfirmed` although the server
    /// answered `R` to each (found with the proxy in tests/client_proxy.rs). Any
    /// attempt's `R`/`N` is the job's outcome.
    earlier: Vec<(Arc<Session>, u32)>,
    next_try: Instant,
    /// Some attempt was written and then lost, unanswered or answered `U`: it may have
    /// executed, so a later `N` cannot tell whether this release did it.
    maybe_executed: bool,
    /// The newest attempt got `N` while earlier attempts were still out: wait for
    /// them (an `R` of theirs is the outcome), sending nothing more.
    not_holder: bool,
    /// The pause after the next `M` with nowhere else to go (doubles each time, and
    /// starts over when an `M` brings news: a leader hint other than the last one).
    moved_pause: Duration,
    /// The leader hint when the last `M` arrived.
    moved_hint: Option<String>,
}

impl Item {
    fn new(job: Job, now: Instant) -> Item {
        Item {
            job,
            in_flight: None,
            earlier: Vec::new(),
            next_try: now,
            maybe_executed: false,
            not_holder: false,
            moved_pause: RELEASE_RETRY_PAUSE,
            moved_hint: None,
        }
    }

    /// What an `N` means for this job, once no earlier attempt can still answer.
    fn not_holder_outcome(&self) -> ReleaseOutcome {
        if self.maybe_executed {
            ReleaseOutcome::ReleasedOrExpired
        } else {
            ReleaseOutcome::NotHolder
        }
    }

    /// Unregisters every attempt: a late answer to any of them is dropped.
    fn forget_attempts(&mut self) {
        if let Some((session, id, _)) = self.in_flight.take() {
            session.forget(id);
        }
        for (session, id) in self.earlier.drain(..) {
            session.forget(id);
        }
    }
}

/// The release worker's body. Returns when the client is closed and the queue drained.
pub(crate) fn run_worker(pool: Arc<Pool>, jobs: Receiver<Msg>) {
    let (answers_tx, answers) = unbounded::<(u32, Reply)>();
    let mut items: Vec<Item> = Vec::new();
    let mut closing = false;
    let mut frame = Vec::with_capacity(64);
    loop {
        if closing && items.is_empty() {
            break;
        }
        let now = Instant::now();
        let wake = items.iter().map(wake_of).min().unwrap_or(now + Duration::from_secs(3600));
        let timeout = wake.saturating_duration_since(now);
        crossbeam_channel::select! {
            recv(jobs) -> msg => match msg {
                Ok(Msg::Job(job)) => items.push(Item::new(job, now)),
                Ok(Msg::Close) | Err(_) => closing = true,
            },
            recv(answers) -> answer => {
                if let Ok((id, reply)) = answer {
                    on_answer(&pool, &mut items, id, reply, &mut |job, outcome| {
                        let _ = finish(&pool, job, outcome);
                    });
                }
            },
            default(timeout) => {}
        }
        // Take everything else that is ready before sending, so a burst goes out at once.
        while let Ok(msg) = jobs.try_recv() {
            match msg {
                Msg::Job(job) => items.push(Item::new(job, now)),
                Msg::Close => closing = true,
            }
        }
        while let Ok((id, reply)) = answers.try_recv() {
            on_answer(&pool, &mut items, id, reply, &mut |job, outcome| {
                let _ = finish(&pool, job, outcome);
            });
        }
        let mut done = |job: Job, outcome: Outcome| {
            let _ = finish(&pool, job, outcome);
        };
        step(&pool, &mut items, Instant::now(), Waiting::Worker(&answers_tx), &mut frame, &mut done);
    }
    pool.shut_down();
}

/// Who listens for the answers of an attempt.
#[derive(Clone, Copy)]
enum Waiting<'a> {
    /// The release worker's shared channel.
    Worker(&'a Sender<(u32, Reply)>),
    /// The calling thread itself (`release_now`).
    Caller(&'a Arc<ReplyCell>),
}

impl Waiting<'_> {
    fn waiter(self) -> Waiter {
        match self {
            Waiting::Worker(tx) => Waiter::Worker(tx.clone()),
            Waiting::Caller(cell) => Waiter::Caller(Arc::clone(cell)),
        }
    }
}

/// Moves every item on: gives up those past their deadline, sends again those whose
/// attempt ran out of time (still listening to it), sends those due. Finished items
/// go to `done`.
fn step(
    pool: &Pool,
    items: &mut Vec<Item>,
    now: Instant,
    waiting: Waiting<'_>,
    frame: &mut Vec<u8>,
    done: &mut dyn FnMut(Job, Outcome),
) {
    let mut index = 0;
    while index < items.len() {
        let item = &mut items[index];
        if now >= item.job.deadline {
            item.forget_attempts();
            let item = items.swap_remove(index);
            // After an `N`, the key is certainly no longer held under this token; only
            // who ended the hold is unknown.
            let outcome = if item.not_holder {
                Ok(ReleaseOutcome::ReleasedOrExpired)
            } else {
                Err(ReleaseError::Unconfirmed)
            };
            done(item.job, outcome);
            continue;
        }
        if item.not_holder {
            index += 1;
            continue;
        }
        if item.in_flight.as_ref().is_some_and(|(_, _, attempt_end)| now >= *attempt_end) {
            // Send again, but keep listening to this attempt (see `Item::earlier`).
            let (session, id, _) = item.in_flight.take().expect("checked");
            log::debug!(
                "release of {:?}: no answer from {} within {RELEASE_ATTEMPT_TIMEOUT:?}",
                item.job.key,
                session.addr
            );
            item.earlier.push((session, id));
            item.maybe_executed = true;
            item.next_try = now;
        }
        if item.in_flight.is_none() && now >= item.next_try {
            attempt(pool, item, waiting, frame, now);
        }
        index += 1;
    }
}

/// When an item next needs attention.
fn wake_of(item: &Item) -> Instant {
    match &item.in_flight {
        Some((_, _, attempt_end)) => (*attempt_end).min(item.job.deadline),
        None => item.next_try.min(item.job.deadline),
    }
}

/// A release carried out by the calling thread itself (`Lock::release`,
/// `Client::release`): the same attempts, retries and outcomes as the worker's, but
/// no hop through another thread. The queue's bound ([`RELEASE_QUEUE_CAPACITY`]) and
/// the [`RELEASE_DEADLINE`] apply all the same. Blocks at most the deadline.
pub(crate) fn release_now(pool: &Pool, key: &str, owner: &str, token: u64) -> Outcome {
    admit(pool)?;
    let job = Job::new(key.to_owned(), owner.to_owned(), token, Origin::Explicit, None);
    let cell = ReplyCell::fresh();
    let mut items = vec![Item::new(job, Instant::now())];
    let mut frame = Vec::with_capacity(64);
    let mut result: Option<Outcome> = None;
    loop {
        let mut done = |job: Job, outcome: Outcome| result = Some(finish(pool, job, outcome));
        step(pool, &mut items, Instant::now(), Waiting::Caller(&cell), &mut frame, &mut done);
        if let Some(outcome) = result.take() {
            return outcome;
        }
        let wake = wake_of(&items[0]);
        if let Some(((_, id), reply)) = cell.wait(Some(wake)) {
            let mut done = |job: Job, outcome: Outcome| result = Some(finish(pool, job, outcome));
            on_answer(pool, &mut items, id, reply, &mut done);
            if let Some(outcome) = result.take() {
                return outcome;
            }
        }
    }
}

/// Counts a release against the queue's bound, or says the queue is full.
pub(crate) fn admit(pool: &Pool) -> Result<(), ReleaseError> {
    let before = pool.release_outstanding.fetch_add(1, Ordering::AcqRel);
    if before >= RELEASE_QUEUE_CAPACITY {
        pool.release_outstanding.fetch_sub(1, Ordering::AcqRel);
        return Err(ReleaseError::QueueFull);
    }
    Ok(())
}

fn attempt(pool: &Pool, item: &mut Item, waiting: Waiting<'_>, frame: &mut Vec<u8>, now: Instant) {
    if pool.leader_connecting() {
        // The leader an `M` named is being dialed; sending elsewhere would earn an `M`.
        item.next_try = now + RELEASE_LEADER_POLL;
        return;
    }
    let Some(session) = pool.pick() else {
        log::debug!("release of {:?}: no connection up", item.job.key);
        item.next_try = now + RELEASE_RETRY_PAUSE;
        return;
    };
    frame.clear();
    encode_release(frame, 0, item.job.token, &item.job.key, &item.job.owner);
    match session.send(&pool.ids, waiting.waiter(), frame) {
        Ok((id, _)) => item.in_flight = Some((session, id, now + RELEASE_ATTEMPT_TIMEOUT)),
        // Why retry at once: the failed session is now dead, so the next pick is another.
        Err(SendError::NotSent) => item.next_try = now,
    }
}

fn on_answer(pool: &Pool, items: &mut Vec<Item>, id: u32, reply: Reply, done: &mut dyn FnMut(Job, Outcome)) {
    let Some(index) = items.iter().position(|item| {
        matches!(&item.in_flight, Some((_, current, _)) if *current == id)
            || item.earlier.iter().any(|(_, earlier)| *earlier == id)
    }) else {
        return; // an answer to a job already finished
    };
    let now = Instant::now();
    let item = &mut items[index];
    let definitive = matches!(
        reply,
        Reply::Answer(
            Response::Released | Response::NotHolder | Response::Error { code: ErrorCode::Invalid, .. }
        )
    );
    if let Some(at) = item.earlier.iter().position(|(_, earlier)| *earlier == id) {
        // An attempt already sent again: only a definitive answer matters; anything
        // else leaves the newer attempt in charge.
        item.earlier.swap_remove(at);
        if !definitive {
            if matches!(reply, Reply::Lost | Reply::Answer(Response::Unknown)) {
                item.maybe_executed = true;
            }
            if item.not_holder && item.earlier.is_empty() {
                let outcome = Ok(item.not_holder_outcome());
                let mut item = items.swap_remove(index);
                item.forget_attempts();
                done(item.job, outcome);
            }
            return;
        }
        if matches!(reply, Reply::Answer(Response::NotHolder)) {
            // This earlier attempt found no holder either; wait for the others.
            item.not_holder = true;
            if !item.earlier.is_empty() || item.in_flight.is_some() {
                return;
            }
            let outcome = Ok(item.not_holder_outcome());
            let mut item = items.swap_remove(index);
            item.forget_attempts();
            done(item.job, outcome);
            return;
        }
    } else {
        let (session, _, _) = item.in_flight.take().expect("matched the attempt in flight");
        match &reply {
            Reply::Answer(Response::Moved { .. }) => {
                // The reader already moved the leader hint. Go again at once only when it
                // now points at another live connection; otherwise (the leader is not
                // reachable, or unknown) back off, so queued releases do not bounce off
                // the followers at round-trip speed.
                let elsewhere = pool.pick_other(&session).is_some_and(|s| s.leads() || pool.is_hinted(&s));
                log::debug!(
                    "release of {:?}: M from {} (another leader up: {elsewhere})",
                    item.job.key,
                    session.addr
                );
                let hint = pool.hint();
                if hint.is_some() && hint != item.moved_hint {
                    item.moved_pause = RELEASE_RETRY_PAUSE;
                }
                item.moved_hint = hint;
                if elsewhere {
                    item.next_try = now;
                } else {
                    item.next_try = now + item.moved_pause;
                    item.moved_pause = (item.moved_pause * 2).min(RELEASE_MOVED_PAUSE_MAX);
                }
                return;
            }
            Reply::Unsent => {
                // Not a byte went out: simply send it again, elsewhere.
                item.next_try = now;
                return;
            }
            Reply::Lost => {
                log::debug!("release of {:?}: connection to {} lost", item.job.key, session.addr);
                item.maybe_executed = true;
                item.next_try = now;
                return;
            }
            Reply::Answer(Response::NotHolder) if !item.earlier.is_empty() => {
                // An earlier attempt may still answer R: that, not this N, is the outcome.
                item.not_holder = true;
                return;
            }
            Reply::Answer(Response::Unknown) => item.maybe_executed = true,
            _ => {}
        }
    }
    let outcome = match reply {
        Reply::Answer(Response::Released) => Ok(ReleaseOutcome::Released),
        Reply::Answer(Response::NotHolder) => Ok(item.not_holder_outcome()),
        Reply::Answer(Response::Error { code: ErrorCode::Invalid, message }) => {
            Err(ReleaseError::Invalid(message))
        }
        Reply::Answer(other) => {
            log::debug!("release of {:?} answered {other:?}; retrying", item.job.key);
            item.next_try = now + RELEASE_RETRY_PAUSE;
            return;
        }
        Reply::Lost | Reply::Unsent => unreachable!("handled above"),
    };
    let mut item = items.swap_remove(index);
    item.forget_attempts();
    done(item.job, outcome);
}

fn finish(pool: &Pool, job: Job, outcome: Outcome) -> Outcome {
    pool.release_outstanding.fetch_sub(1, Ordering::AcqRel);
    match (&outcome, job.origin) {
        (Err(e), Origin::Dropped | Origin::Compensation) => {
            log::warn!("release of {:?} token {} failed: {e}", job.key, job.token)
        }
        _ => log::debug!("release of {:?} token {} ({:?}): {outcome:?}", job.key, job.token, job.origin),
    }
    if let Some(reply) = job.reply {
        let _ = reply.send(outcome.clone());
    }
    outcome
}
