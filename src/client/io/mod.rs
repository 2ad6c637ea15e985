//! The I/O around the client's core (docs/client.md, "Structure"): sockets, threads
//! and the clock. It decides nothing: it hands events to the [`Core`] under one mutex
//! and does what the core's [`Action`]s say, after letting the mutex go.
//!
//! Threads:
//! - **callers** (any thread of the application) start an operation, write if the core
//!   makes them a session's writer, and park on their [`Cell`] until the outcome;
//! - **one connection thread per slot** (`ticketing-conn-ADDR`) dials when told, then
//!   reads its session and hands each read's frames to the core at once ([`reader`]);
//! - **the timer thread** (`ticketing-timer`) calls [`Core::handle_timeout`] whenever
//!   [`Core::poll_timeout`] says ([`driver`]);
//! - **a writer thread per connection** (`ticketing-flush`), started the first time a
//!   thread that must not wait (a reader, the timer thread, a destructor) meets a full
//!   socket or a TLS connection, finishes such writes ([`conn`]).
//!
//! Locks, and their order: the state mutex ([`State`]: the core, the connections, the
//! slot threads) is taken first and held only for the core's bookkeeping — never
//! across a socket read, a write or a dial. A connection's write half is locked only by
//! the session's writer of the moment (the core names one at a time), after the state
//! mutex was let go; with TLS the read half locks the shared TLS state for the moment
//! it decrypts (never across a socket read). A caller's cell is locked last, for a
//! moment.

mod cell;
mod conn;
pub(crate) mod dial;
mod driver;
pub(crate) mod oneoff;
mod reader;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::client::core::{Action, Config, Core, NetEvent, OpId, Outcome, SessionId, SlotId};
pub(crate) use cell::Cell;
pub(crate) use conn::Conn;
pub use conn::WRITE_DEADLINE;
use dial::Dialer;

/// How a caller is woken.
pub(crate) type Waker = Arc<Cell>;

/// A caller whose operation's deadline passed this long ago without an outcome drives
/// the core's time itself (the timer thread is late: a starved machine).
const SELF_DRIVE_SLACK: Duration = Duration::from_millis(20);

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent at each step, so a panic elsewhere is no reason to stop the client.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything the client's threads share.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) dialer: Dialer,
    /// Fault injection for tests: the next this-many writes fail before their first
    /// byte, as if the socket had broken.
    pub(crate) faults: AtomicUsize,
    driver: OnceLock<Thread>,
    stopped: AtomicBool,
}

/// What the state mutex guards.
pub(crate) struct State {
    pub(crate) core: Core<Waker>,
    conns: HashMap<SessionId, Arc<Conn>>,
    /// Each slot's connection thread, told the address to dial.
    slots: HashMap<SlotId, Sender<String>>,
    /// When the timer thread wakes by itself next (None: only when woken).
    driver_until: Option<Instant>,
}

/// May a thread wait for a socket while it does what the core asks?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A caller: its writes may wait (up to the write deadline).
    Blocking,
    /// A reader, the timer thread, a destructor: writes go out only as far as the
    /// socket takes them at once; the rest is handed to the connection's writer thread.
    NonBlocking,
}

/// Work found under the state mutex, done after it is let go.
enum Work {
    Wake(Waker, OpId, Outcome),
    Flush(Arc<Conn>),
    Kill(Arc<Conn>),
    WakeDriver,
    Stop(Vec<Arc<Conn>>),
}

impl Shared {
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
            let op = start(&mut state.core, Arc::clone(&cell), Instant::now())?;
            let deadline = state.core.op_deadline(op);
            (op, deadline, state.drain(self))
        };
        self.perform(work, Mode::Blocking);
        loop {
            if let Some(outcome) = cell.take(op) {
                return Ok(outcome);
            }
            Cell::park(deadline.map(|d| d + SELF_DRIVE_SLACK));
            if let Some(outcome) = cell.take(op) {
                return Ok(outcome);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d + SELF_DRIVE_SLACK) {
                let work = {
                    let mut state = self.state();
                    state.core.handle_timeout(now);
                    deadline = state.core.op_deadline(op);
                    state.drain(self)
                };
                self.perform(work, Mode::Blocking);
            }
        }
    }

    /// Does the work found under the mutex.
    fn perform(self: &Arc<Self>, work: Vec<Work>, mode: Mode) {
        for item in work {
            match item {
                Work::Wake(cell, op, outcome) => cell.put(op, outcome),
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
        if mode == Mode::NonBlocking && !conn.is_plain() {
            // A TLS write may wait under the TLS state: never in a thread that must
            // not wait.
            conn.hand_over(self, Vec::new(), 0);
            return;
        }
        let mut buf = conn.spare_buffer();
        loop {
            if !self.state().core.next_batch(conn.session, &mut buf) {
                break;
            }
            let result = match mode {
                Mode::Blocking => conn.write(&buf, self),
                Mode::NonBlocking => match conn.send_now(&buf, self) {
                    Ok(n) if n < buf.len() => {
                        // The socket's buffer is full (the server is not reading,
                        // perhaps because it waits for us to read): the writer thread
                        // finishes this batch and flushes on.
                        conn.hand_over(self, buf, n);
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
        result: Result<(), crate::client::core::WriteFailure>,
        mode: Mode,
    ) {
        self.with_core(mode, |core, now| core.on_written(session, result, now));
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

impl State {
    /// Takes the core's actions: what can be done under the mutex is done (telling a
    /// connection thread to dial, starting one), the rest is returned.
    fn drain(&mut self, shared: &Arc<Shared>) -> Vec<Work> {
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
            .spawn(move || reader::run_slot(thread_shared, slot, rx));
        match started {
            Ok(_) => {
                let _ = tx.send(addr);
                self.slots.insert(slot, tx);
            }
            Err(e) => {
                log::warn!("cannot start a connection thread for {addr}: {e}");
                self.core.on_dial_failed(
                    slot,
                    format!("{addr}: cannot start a connection thread: {e}"),
                    Instant::now(),
                );
            }
        }
    }
}

/// Closes the client when the last handle on it is gone: the core finishes its
/// background work (releases, orphan checks), then every thread stops. Never blocks.
pub(crate) struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.with_core(Mode::NonBlocking, |core, now| core.close(now));
    }
}

/// A handle on a running client: what `Client` and `Lock` hold. The client closes
/// when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) shared: Arc<Shared>,
    _closer: Arc<Closer>,
}

/// Starts a client: its core, its connection threads (through the core's first
/// actions) and its timer thread.
pub(crate) fn start(config: Config, dialer: Dialer) -> std::io::Result<Handle> {
    let now = Instant::now();
    let shared = Arc::new(Shared {
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
    });
    let handle = Handle { shared: Arc::clone(&shared), _closer: Arc::new(Closer(Arc::clone(&shared))) };
    let driver_shared = Arc::clone(&shared);
    let driver = std::thread::Builder::new()
        .name("ticketing-timer".into())
        .spawn(move || driver::run(driver_shared))?;
    let _ = shared.driver.set(driver.thread().clone());
    // The seeds' dials, and the timer thread's first wake-up.
    shared.with_core(Mode::NonBlocking, |_, _| ());
    Ok(handle)
}
