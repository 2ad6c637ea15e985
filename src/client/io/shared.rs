//! The state the client's threads share, and what they do with the core's actions
//! (the locks and their order: `io/mod.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::cell::{wait_check, waits_after, Cell, Completion, Waker};
use super::conn::{Conn, Job};
use super::dial::Dialer;
use super::sync::lock;
use crate::client::core::DialFailure;
use crate::client::core::{Action, Config, Core, NetEvent, OpId, Outcome, SessionId, SlotId, WriteFailure};

/// A caller whose operation's deadline passed this long ago without an outcome drives
/// the core's time itself (the timer thread is late: a starved machine).
const SELF_DRIVE_SLACK: Duration = Duration::from_millis(20);

/// Everything the client's threads share.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) dialer: Dialer,
    /// Fault injection for tests: the next this-many writes fail before their first
    /// byte, as if the socket had broken.
    pub(crate) faults: AtomicUsize,
    pub(super) driver: OnceLock<Thread>,
    stopped: AtomicBool,
    /// The body of a slot's connection thread (`io/reader.rs`), given at start.
    run_slot: SlotThread,
    /// The process that made the client, and its fork generation then (see
    /// [`Shared::forked`]).
    pid: u32,
    forks: u64,
}

/// The body of a slot's connection thread: dials the addresses it receives.
pub(crate) type SlotThread = fn(Arc<Shared>, SlotId, Receiver<String>);

/// What the state mutex guards.
pub(crate) struct State {
    pub(crate) core: Core<Waker>,
    pub(super) conns: HashMap<SessionId, Arc<Conn>>,
    /// Each slot's connection thread, told the address to dial.
    slots: HashMap<SlotId, Sender<String>>,
    /// When the timer thread wakes by itself next (None: only when woken).
    pub(super) driver_until: Option<Instant>,
}

/// A caller writes at most this many batches as a session's writer (its own frame is
/// in the first); then the connection's writer thread takes over. Why: under load others
/// keep queueing, and a caller must not stay everyone's writer past its own call.
const CALLER_BATCHES_MAX: usize = 2;

/// May a thread wait for a socket while it does what the core asks?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A caller: its writes may wait (up to the write deadline), for at most
    /// [`CALLER_BATCHES_MAX`] batches; other sessions' writes go to their writer threads.
    Blocking,
    /// A connection's writer thread: writes until nothing is queued.
    Writer,
    /// A reader, the timer thread, a destructor: writes go out only as far as the
    /// socket takes them at once; the rest is handed to the connection's writer thread.
    NonBlocking,
    /// Hand the whole flush to the connection's writer thread (see `io/reader.rs`).
    Deferred,
}

/// Work found under the state mutex, done after it is let go.
pub(super) enum Work {
    Wake(Waker, OpId, Outcome),
    Flush(Arc<Conn>),
    Kill(Arc<Conn>),
    WakeDriver,
    Stop(Vec<Arc<Conn>>),
    Place(crate::client::place::PlaceNews),
}

impl Shared {
    pub(super) fn new(config: Config, dialer: Dialer, run_slot: SlotThread, now: Instant) -> Shared {
        Shared {
            state: Mutex::new(State {
                core: Core::new(config, now),
                conns: HashMap::new(),
                slots: HashMap::new(),
                driver_until: None,
            }),
            dialer,
            faults: AtomicUsize::new(0),
            driver: OnceLock::new(),
            stopped: AtomicBool::new(false),
            run_slot,
            pid: std::process::id(),
            forks: crate::sys::fork_generation(),
        }
    }

    /// Why this process cannot use the client: a child forked after it was made, with
    /// the parent's sockets and none of its threads. Nothing may touch the state then (a
    /// mutex held at the fork stays held): calls fail first, drops do nothing.
    pub(crate) fn forked(&self) -> Option<String> {
        self.is_forked().then(|| {
            format!(
                "this client was created in process {} before a fork; process {} cannot use it: create a \
                 new client in this process, with its own owner",
                self.pid,
                std::process::id()
            )
        })
    }

    /// Is this a child forked after the client was made? One load; allocates nothing
    /// (drops in such a child must not: see [`Shared::forked`]).
    pub(crate) fn is_forked(&self) -> bool {
        crate::sys::fork_generation() != self.forks
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs `f` on the core and does what it asked for, waiting for sockets as `mode`
    /// allows.
    pub(crate) fn with_core<R>(
        self: &Arc<Self>,
        mode: Mode,
        f: impl FnOnce(&mut Core<Waker>, Instant) -> R,
    ) -> R {
        let (result, work) = {
            let mut state = self.state();
            let result = f(&mut state.core, Instant::now());
            (result, state.drain(self))
        };
        self.perform(work, mode);
        result
    }

    /// Starts an operation for the calling thread and waits for its outcome.
    pub(crate) fn call<E>(
        self: &Arc<Self>,
        start: impl FnOnce(&mut Core<Waker>, Waker, Instant) -> Result<OpId, E>,
    ) -> Result<Outcome, E> {
        let cell = Cell::mine();
        let (op, mut deadline, work) = {
            let mut state = self.state();
            let op = start(&mut state.core, Waker::Thread(Arc::clone(&cell)), Instant::now())?;
            let deadline = state.core.op_deadline(op);
            (op, deadline, state.drain(self))
        };
        self.perform(work, Mode::Blocking);
        let check = wait_check();
        loop {
            let mut until = deadline.map(|d| d + SELF_DRIVE_SLACK);
            if let Some(check) = &check {
                let slice_end = Instant::now() + check.slice;
                until = Some(until.map_or(slice_end, |u| u.min(slice_end)));
            }
            if let Some(outcome) = cell.wait(op, until) {
                return Ok(outcome);
            }
            // The host's check says stop (its signal handler raised): cancelled now,
            // its cancelled outcome put in this thread's cell on the way.
            if check.as_ref().is_some_and(|c| (c.check)()) && self.cancel(op) {
                if let Some(outcome) = cell.wait(op, Some(Instant::now())) {
                    return Ok(outcome);
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d + SELF_DRIVE_SLACK) {
                deadline = self.drive_late(op);
            }
        }
    }

    /// When a thread waiting for `op` drives the core's time itself ([`Shared::drive_late`]):
    /// [`SELF_DRIVE_SLACK`] past the operation's deadline. None once it ended.
    pub(crate) fn late_at(&self, op: OpId) -> Option<Instant> {
        self.state().core.op_deadline(op).map(|d| d + SELF_DRIVE_SLACK)
    }

    /// A thread waits for `op` past its deadline: the timer thread is late (a starved
    /// machine), so this one does what it would do now. Returns `op`'s next deadline.
    pub(crate) fn drive_late(self: &Arc<Self>, op: OpId) -> Option<Instant> {
        let (deadline, work) = {
            let mut state = self.state();
            state.core.handle_timeout(Instant::now());
            (state.core.op_deadline(op), state.drain(self))
        };
        self.perform(work, Mode::Deferred);
        deadline
    }

    /// Starts an operation whose outcome goes to `done` (see [`Waker::Done`]). The caller
    /// may be an event loop: it does no I/O. The connection's writer thread writes the
    /// frame, and gathers what a burst of starts queues meanwhile into one write — from
    /// one event loop, 64 concurrent acquire+release loops made 1.5× the pairs/s of
    /// writing each frame from the loop itself, for ~30 µs more per lone request.
    /// A thread that waits for the outcome at once (`cell::waiting_after`) writes the frame
    /// itself, as [`Shared::call`] does.
    pub(crate) fn start<R>(
        self: &Arc<Self>,
        done: Completion,
        start: impl FnOnce(&mut Core<Waker>, Waker, Instant) -> R,
    ) -> R {
        let mode = if waits_after() { Mode::Blocking } else { Mode::Deferred };
        self.with_core(mode, |core, now| start(core, Waker::Done(done), now))
    }

    /// The caller of `op` stops waiting ([`Core::cancel`]); false when it had ended.
    pub(crate) fn cancel(self: &Arc<Self>, op: OpId) -> bool {
        self.with_core(Mode::NonBlocking, |core, now| core.cancel(op, now))
    }

    /// Does the work found under the mutex.
    pub(super) fn perform(self: &Arc<Self>, work: Vec<Work>, mode: Mode) {
        for item in work {
            match item {
                Work::Wake(waker, op, outcome) => waker.wake(op, outcome),
                Work::Place(news) => news.deliver(),
                Work::Kill(conn) => conn.kill(),
                Work::Flush(conn) => self.flush(&conn, mode),
                Work::WakeDriver => {
                    if let Some(driver) = self.driver.get() {
                        driver.unpark();
                    }
                }
                Work::Stop(conns) => {
                    self.stopped.store(true, Ordering::Release);
                    for conn in conns {
                        conn.kill();
                    }
                    if let Some(driver) = self.driver.get() {
                        driver.unpark();
                    }
                }
            }
        }
    }

    /// Writes what is queued on `conn`'s session, as its writer (the core made this
    /// thread the writer). See [`Mode`].
    pub(crate) fn flush(self: &Arc<Self>, conn: &Arc<Conn>, mode: Mode) {
        if mode == Mode::Deferred || (mode == Mode::NonBlocking && !conn.is_plain()) {
            // A TLS write may wait under the TLS state: never in a thread that must
            // not wait.
            self.hand_over(conn, Vec::new(), 0);
            return;
        }
        let mut buf = conn.spare_buffer();
        let mut batches = 0;
        loop {
            if mode == Mode::Blocking && batches == CALLER_BATCHES_MAX {
                // Still queued: the writer thread goes on (it takes its own batches).
                conn.return_buffer(buf);
                self.hand_over(conn, Vec::new(), 0);
                return;
            }
            if !self.state().core.next_batch(conn.session, &mut buf) {
                break;
            }
            batches += 1;
            let result = match mode {
                Mode::Blocking | Mode::Writer | Mode::Deferred => conn.write(&buf, &self.faults),
                Mode::NonBlocking => match conn.send_now(&buf, &self.faults) {
                    Ok(n) if n < buf.len() => {
                        // The socket's buffer is full (the server is not reading,
                        // perhaps because it waits for us to read): the writer thread
                        // finishes this batch and flushes on.
                        self.hand_over(conn, buf, n);
                        return;
                    }
                    Ok(_) => Ok(()),
                    Err(failure) => Err(failure),
                },
            };
            let failed = result.is_err();
            self.written(conn.session, result, mode);
            if failed {
                break;
            }
        }
        conn.return_buffer(buf);
    }

    /// Reports a batch's write to the core.
    pub(crate) fn written(
        self: &Arc<Self>,
        session: SessionId,
        result: Result<(), WriteFailure>,
        mode: Mode,
    ) {
        // What the write sets off on other sessions (requests it did not carry, sent
        // elsewhere now) is their writer threads' to write, not this thread's.
        let others = match mode {
            Mode::NonBlocking => Mode::NonBlocking,
            Mode::Blocking | Mode::Writer | Mode::Deferred => Mode::Deferred,
        };
        self.with_core(others, |core, now| core.on_written(session, result, now));
    }

    /// Hands the writer's role on `conn` to its writer thread (started the first time
    /// it is needed, kept while the connection lives): it finishes `batch`, of which
    /// `written` bytes went out (empty: none in flight), and flushes on.
    fn hand_over(self: &Arc<Self>, conn: &Arc<Conn>, batch: Vec<u8>, written: usize) {
        let job = Job { conn: Arc::clone(conn), batch, written };
        let Some(job) = conn.queue_job(job) else { return };
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let shared = Arc::clone(self);
        let started = std::thread::Builder::new().name("ticketing-flush".into()).spawn(move || {
            // Ends when the connection is gone (its sender dropped with it).
            while let Ok(job) = rx.recv() {
                shared.finish_job(job);
            }
        });
        match started {
            Ok(_) => conn.set_writer(tx, job),
            Err(e) => {
                log::warn!("cannot start a thread to finish a write ({e}); finishing it here");
                self.finish_job(job);
            }
        }
    }

    /// The writer thread's work: the rest of a batch, then an ordinary flush.
    fn finish_job(self: &Arc<Self>, job: Job) {
        let Job { conn, batch, written } = job;
        if !batch.is_empty() {
            let result = conn.write_from(&batch, written, &self.faults);
            let failed = result.is_err();
            self.written(conn.session, result, Mode::Writer);
            conn.return_buffer(batch);
            if failed {
                return;
            }
        }
        self.flush(&conn, Mode::Writer);
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

impl State {
    /// Takes the core's actions: what can be done under the mutex is done (telling a
    /// connection thread to dial, starting one), the rest is returned.
    pub(super) fn drain(&mut self, shared: &Arc<Shared>) -> Vec<Work> {
        let mut work = Vec::new();
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Complete { waker, op, outcome } => work.push(Work::Wake(waker, op, outcome)),
                Action::Net(NetEvent::Flush { session }) => match self.conns.get(&session) {
                    Some(conn) => work.push(Work::Flush(Arc::clone(conn))),
                    None => debug_assert!(false, "a session without a connection"),
                },
                Action::Net(NetEvent::Close { session }) => {
                    if let Some(conn) = self.conns.get(&session) {
                        work.push(Work::Kill(Arc::clone(conn)));
                    }
                }
                Action::Net(NetEvent::Dial { slot, addr }) => self.dial(shared, slot, addr),
                Action::Net(NetEvent::Forget { slot }) => {
                    // The thread ends once it is idle (its channel closed).
                    self.slots.remove(&slot);
                }
                Action::Place(news) => work.push(Work::Place(news)),
                Action::Shutdown => {
                    self.slots.clear();
                    work.push(Work::Stop(self.conns.values().cloned().collect()));
                }
            }
        }
        if let Some(at) = self.core.poll_timeout() {
            if self.driver_until.is_none_or(|until| at < until) {
                self.driver_until = Some(at);
                work.push(Work::WakeDriver);
            }
        }
        work
    }

    /// Tells `slot`'s connection thread to dial `addr`, starting the thread first if
    /// it has none.
    fn dial(&mut self, shared: &Arc<Shared>, slot: SlotId, addr: String) {
        if let Some(tx) = self.slots.get(&slot) {
            if tx.send(addr.clone()).is_ok() {
                return;
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread_shared = Arc::clone(shared);
        let started = std::thread::Builder::new()
            .name(format!("ticketing-conn-{addr}"))
            .spawn(move || (thread_shared.run_slot)(thread_shared, slot, rx));
        match started {
            Ok(_) => {
                let _ = tx.send(addr);
                self.slots.insert(slot, tx);
            }
            Err(e) => {
                log::warn!("cannot start a connection thread for {addr}: {e}");
                self.core.on_dial_failed(
                    slot,
                    DialFailure::transient(format!("{addr}: cannot start a connection thread: {e}")),
                    Instant::now(),
                );
            }
        }
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
