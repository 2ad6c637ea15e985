//! SIGTERM and SIGINT ask the server to stop gracefully.
//!
//! Why a hand-written binding: the handler only stores to an atomic, which is
//! async-signal-safe, and std already links libc, so no crate is needed for two calls.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

extern "C" fn on_stop_signal(_signum: i32) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs the handlers for SIGTERM and SIGINT.
pub fn install() {
    // SAFETY: `signal` is called with valid signal numbers and a handler that only
    // performs an atomic store.
    unsafe {
        signal(SIGTERM, on_stop_signal);
        signal(SIGINT, on_stop_signal);
    }
}

/// Installs the handlers for SIGTERM, SIGINT and SIGHUP: for `ticketing top`, which
/// must put the terminal back however it is asked to stop (its window closed, a kill).
pub fn install_with_hangup() {
    install();
    // SAFETY: as in `install`.
    unsafe {
        signal(SIGHUP, on_stop_signal);
    }
}

/// True once one of the signals installed arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}
