//! SIGTERM and SIGINT ask the server to stop gracefully: a flag, and a wake-up for the
//! thread that waits for it.
//!
//! Why a hand-written binding: the handler only stores to an atomic and writes one byte
//! to a socket, both async-signal-safe, and std already links libc, so no crate is
//! needed for three calls. Why the wake-up: a cluster node's stop begins by telling
//! its peers it stops (so none hands it leadership); noticed at once rather than at the
//! next poll, nodes stopped together learn it of each other before one of them hands
//! leadership over.

use std::io::Read;
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);
/// The write end of the wake-up socket pair (-1 until `install`).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// Its read end, which `wait` reads.
static WAKE_READ: OnceLock<UnixStream> = OnceLock::new();

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn __errno_location() -> *mut i32;
}

extern "C" fn on_stop_signal(_signum: i32) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: `write` on a non-blocking socket is async-signal-safe; errno is put
        // back so that the interrupted code does not see it change.
        unsafe {
            let errno = *__errno_location();
            let _ = write(fd, [1u8].as_ptr(), 1);
            *__errno_location() = errno;
        }
    }
}

/// Installs the handlers for SIGTERM and SIGINT.
pub fn install() {
    if WAKE_READ.get().is_none() {
        if let Ok((read, write_end)) = UnixStream::pair() {
            if write_end.set_nonblocking(true).is_ok() && WAKE_READ.set(read).is_ok() {
                WAKE_FD.store(write_end.into_raw_fd(), Ordering::SeqCst);
            }
        }
    }
    // SAFETY: `signal` is called with valid signal numbers and a handler that only
    // performs an atomic store and a `write`.
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

/// Waits until one of the signals installed arrives, at most `timeout`; whether one
/// did. Returns at once when one arrived before.
pub fn wait(timeout: Duration) -> bool {
    if stop_requested() {
        return true;
    }
    match WAKE_READ.get() {
        Some(mut read) if read.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).is_ok() => {
            let mut byte = [0u8; 16];
            let _ = read.read(&mut byte);
        }
        _ => std::thread::sleep(timeout),
    }
    stop_requested()
}
