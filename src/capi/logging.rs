//! Where the library's log records and panics go inside a host program: nowhere until
//! the host sets a logger (`ticketing_set_logger`), then to the host's callback, called
//! on a thread of the library's own — never to the host's standard error.
//!
//! Records are queued (bounded: [`QUEUE_MAX`]; more are counted and dropped) and handed
//! to the callback by the `ticketing-log` thread, so a callback that takes the host's
//! own locks (Python's GIL) never runs under one of the client's.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::error::{c_string, Failure};

/// The host's callback: `(ctx, level, target, message)`, both strings valid only during
/// the call.
pub(crate) type LogFn = unsafe extern "C" fn(*mut c_void, c_int, *const c_char, *const c_char);

/// Receives one log record of the library: `level` (TICKETING_LOG_ERROR..TRACE), the
/// module it comes from ("ticketing::client::...", "ticketing::panic" for a caught
/// panic) and the message; both strings are valid only during the call.
#[allow(non_camel_case_types)]
pub type ticketing_log_fn = Option<
    unsafe extern "C" fn(ctx: *mut c_void, level: c_int, target: *const c_char, message: *const c_char),
>;

/// Records waiting for the callback at most; past it they are dropped and counted.
pub(crate) const QUEUE_MAX: usize = 4096;

/// `TICKETING_LOG_OFF` … `TICKETING_LOG_TRACE`.
pub(crate) const LOG_LEVEL_MAX: c_int = 5;

/// The callback and its context (a pointer the host owns: kept, never read).
struct Sink {
    log_fn: LogFn,
    ctx: *mut c_void,
}

// SAFETY: the context is the host's pointer, only handed back to its own callback; the
// header says the callback may be called from any thread.
unsafe impl Send for Sink {}

/// The current sink. The `ticketing-log` thread holds this mutex while it calls the
/// callback, so that once `ticketing_set_logger` returns the old callback is never
/// called again.
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// The sink, whatever a panicking callback left behind.
fn sink() -> MutexGuard<'static, Option<Sink>> {
    SINK.lock().unwrap_or_else(|e| e.into_inner())
}

/// True once the forwarding logger is the process's `log` logger.
static OURS: AtomicBool = AtomicBool::new(false);

/// Records dropped because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);

struct Record {
    level: c_int,
    target: CString,
    message: CString,
}

struct Forward {
    queue: Sender<Record>,
}

impl log::Log for Forward {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let record = Record {
            level: record.level() as c_int,
            target: c_string(record.target()),
            message: c_string(&record.args().to_string()),
        };
        if let Err(TrySendError::Full(_)) = self.queue.try_send(record) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {}
}

/// Installs the forwarding logger and starts its thread, once. `Err` when the process
/// has another `log` logger already (a Rust host that set its own).
fn install() -> Result<(), Failure> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let (queue, records) = crossbeam_channel::bounded(QUEUE_MAX);
            log::set_boxed_logger(Box::new(Forward { queue })).map_err(|_| {
                "this process has a logger of the `log` crate already (a Rust host): the library's \
                 records go to it"
                    .to_string()
            })?;
            log::set_max_level(log::LevelFilter::Off);
            std::thread::Builder::new()
                .name("ticketing-log".into())
                .spawn(move || deliver(records))
                .map(|_| OURS.store(true, Ordering::Release))
                .map_err(|e| format!("cannot start the logging thread: {e}"))
        })
        .clone()
        .map_err(|why| Failure { kind: super::abi::TICKETING_CONFIG, ..Failure::invalid(why) })
}

/// The `ticketing-log` thread: hands each record to the callback of the moment.
fn deliver(records: Receiver<Record>) {
    let mut reported = 0;
    while let Ok(record) = records.recv() {
        let sink = sink();
        let Some(sink) = sink.as_ref() else { continue };
        let dropped = DROPPED.load(Ordering::Relaxed);
        if dropped > reported {
            let note =
                c_string(&format!("{} log records were dropped (the callback was slow)", dropped - reported));
            // SAFETY: the host's callback with its own context (header contract).
            unsafe {
                (sink.log_fn)(sink.ctx, log::Level::Warn as c_int, c"ticketing".as_ptr(), note.as_ptr())
            };
            reported = dropped;
        }
        // SAFETY: as above.
        unsafe { (sink.log_fn)(sink.ctx, record.level, record.target.as_ptr(), record.message.as_ptr()) };
    }
}

/// `ticketing_set_logger`: sends records up to `max_level` to `log_fn`, or with NULL
/// (or level 0) turns logging off. Waits for a callback in progress to return.
pub fn set_logger(log_fn: Option<LogFn>, ctx: *mut c_void, max_level: c_int) -> Result<(), Failure> {
    if !(0..=LOG_LEVEL_MAX).contains(&max_level) {
        return Err(Failure::invalid(format!(
            "max_level is {max_level}; must be TICKETING_LOG_OFF (0) ..= TICKETING_LOG_TRACE (5)"
        )));
    }
    quiet_panics();
    let level = match (log_fn, max_level) {
        (None, _) | (_, 0) => log::LevelFilter::Off,
        (Some(_), 1) => log::LevelFilter::Error,
        (Some(_), 2) => log::LevelFilter::Warn,
        (Some(_), 3) => log::LevelFilter::Info,
        (Some(_), 4) => log::LevelFilter::Debug,
        (Some(_), _) => log::LevelFilter::Trace,
    };
    if level == log::LevelFilter::Off {
        if OURS.load(Ordering::Acquire) {
            log::set_max_level(level);
        }
        *sink() = None;
        return Ok(());
    }
    install()?;
    *sink() = log_fn.map(|log_fn| Sink { log_fn, ctx });
    log::set_max_level(level);
    Ok(())
}

thread_local! {
    /// Calls of the C ABI under way on this thread.
    static IN_CALL: Cell<u32> = const { Cell::new(0) };
}

/// Marks the calling thread as inside a call of the C ABI while `body` runs: a panic
/// there is the library's.
pub fn in_call<R>(body: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let _ = IN_CALL.try_with(|n| n.set(n.get().saturating_sub(1)));
        }
    }
    let _ = IN_CALL.try_with(|n| n.set(n.get() + 1));
    let _leave = Leave;
    body()
}

/// Is a panic on this thread the library's: inside a C ABI call, or on one of the
/// client's own threads (named `ticketing-…`)?
fn ours() -> bool {
    let inside = IN_CALL.try_with(|n| n.get() > 0).unwrap_or(true);
    inside || std::thread::current().name().is_some_and(|name| name.starts_with("ticketing-"))
}

/// Installs (once) the panic hook that keeps the library's panics off the host's
/// standard error: they become log records (level error, target `ticketing::panic`);
/// any other panic goes to the hook that was there before.
pub fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if ours() {
                log::error!(target: "ticketing::panic", "{info}");
            } else {
                previous(info);
            }
        }));
    });
}
