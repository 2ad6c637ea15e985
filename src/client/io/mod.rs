//! The I/O around the client's core (docs/client.md, "Structure"): sockets, threads
//! and the clock. It decides nothing: it hands events to the [`Core`] under one mutex
//! and does what the core's [`Action`]s say, after letting the mutex go.
//!
//! Threads:
//! - **callers** (any thread of the application) start an operation, write if the core
//!   makes them a session's writer, and wait on their [`Cell`] until the outcome;
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
mod shared;
mod sync;

use std::sync::Arc;
use std::time::Instant;

use crate::client::core::Config;
pub(crate) use cell::{set_wait_check, wait_check, waiting_after, Completion, WaitCheck, Waker};
pub use conn::WRITE_DEADLINE;
use dial::Dialer;
pub(crate) use shared::{Mode, Shared};

/// Closes the client when the last handle on it is gone: the core finishes its
/// background work (releases, orphan checks), then every thread stops. Never blocks.
pub(crate) struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        // In a forked child the client is the parent's: nothing to close here.
        if !self.0.is_forked() {
            self.0.with_core(Mode::NonBlocking, |core, now| core.close(now));
        }
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
    let shared = Arc::new(Shared::new(config, dialer, reader::run_slot, Instant::now()));
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
