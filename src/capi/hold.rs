//! Counted and multi-key holds in the C ABI (docs/c.md, "Holds"): the part a caller
//! names, the place-in-line callback or queue, the hold's blocking call and its futures
//! (read with ticketing_future_get_lock), a lock's keys, and a lock's deadline on the
//! monotonic clock every binding shares.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, ThreadId};
use std::time::Instant;

use super::abi::*;
use super::boundary::{duration_ns, getter, guard, put, required, text};
use super::error::Failure;
use super::future::{run, start};
use super::handle;
use super::operation::{put_lock, Op, Operation, Value};
use super::queue::PlaceBox;
use crate::client::{check_hold_args, Place, Words};
use crate::proto::frame::HoldPart;

// The ABI's limits are the protocol's.
const _: () = assert!(TICKETING_HOLD_KEYS_MAX == crate::proto::limits::HOLD_KEYS_MAX);
const _: () = assert!(TICKETING_CAPACITY_MAX == crate::proto::limits::CAPACITY_MAX);

/// One key of a hold: `count` of the key's `capacity` permits. A key of capacity 1
/// with count 1 is the key's exclusive lock; every request on a key states the same
/// capacity (the server refuses another while the key has holders or waiters).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct ticketing_hold_part {
    /// The key (UTF-8, 1 to TICKETING_KEY_LEN_MAX bytes); read before the call returns.
    pub key: *const c_char,
    /// Permits taken, 1 to capacity.
    pub count: u32,
    /// The key's permits, 1 to TICKETING_CAPACITY_MAX.
    pub capacity: u32,
}

/// Called with a waiting hold's place in line: `ahead` requests before it in the
/// longest of its keys' queues, and `grants_per_ks` thousandths of a grant per second
/// the key saw lately (0: not measured yet; the estimated wait is ahead × 1000 ÷
/// grants_per_ks seconds). Called when the hold queues and then at most once a second
/// while the place changes, never after the hold's future is ready; on a thread of the
/// client's, so it must not block.
#[allow(non_camel_case_types)]
pub type ticketing_place_callback =
    Option<unsafe extern "C" fn(ahead: u32, grants_per_ks: u32, ctx: *mut c_void)>;

/// The program's place callback and its context.
struct PlaceTo(unsafe extern "C" fn(u32, u32, *mut c_void), *mut c_void);

// SAFETY: the context is the program's, handed back only to its own callback, which
// the header says runs on a thread of the client's.
unsafe impl Send for PlaceTo {}
unsafe impl Sync for PlaceTo {}

impl PlaceTo {
    fn call(&self, place: Place) {
        // SAFETY: the program's callback with its own context (header contract).
        unsafe { (self.0)(place.ahead, place.grants_per_ks, self.1) }
    }
}

/// The parts of a hold, read and checked by the client's rule before any I/O.
///
/// # Safety
/// `parts` is NULL or `parts_len` readable parts whose keys are NULL or C strings.
unsafe fn hold_parts(
    parts: *const ticketing_hold_part,
    parts_len: usize,
    words: &Words,
) -> Result<Vec<HoldPart>, Failure> {
    if parts_len == 0 || parts_len > TICKETING_HOLD_KEYS_MAX {
        return Err(Failure::invalid(format!(
            "a hold names 1 to {TICKETING_HOLD_KEYS_MAX} keys ({}); this one names {parts_len}",
            words.hold_keys
        )));
    }
    if parts.is_null() {
        return Err(Failure::invalid("parts is NULL"));
    }
    // SAFETY: by the caller's contract, parts_len parts are readable.
    let parts = unsafe { std::slice::from_raw_parts(parts, parts_len) };
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let key = unsafe { text(p.key, &format!("parts[{i}].key")) }?;
            Ok(HoldPart { key: key.to_owned(), count: p.count, capacity: p.capacity })
        })
        .collect()
}

/// Where a waiting hold's places go.
enum PlacesTo {
    Nowhere,
    Callback(PlaceTo),
    Queue(Arc<PlaceBox>),
}

impl PlacesTo {
    fn callback(on_place: ticketing_place_callback, place_ctx: *mut c_void) -> PlacesTo {
        on_place.map_or(PlacesTo::Nowhere, |f| PlacesTo::Callback(PlaceTo(f, place_ctx)))
    }
}

/// Keeps a hold's places from reaching the program once its future is ready, as the
/// header promises: a place is told only while the gate is open, and closing it (just
/// before the outcome is handed over) waits for a place being told on another thread to
/// be done. The thread telling a place may itself end the hold (its callback cancels):
/// it closes the gate without waiting for itself.
#[derive(Default)]
struct PlaceGate {
    /// Closed, and the threads telling a place now.
    state: Mutex<(bool, Vec<ThreadId>)>,
    told: Condvar,
}

impl PlaceGate {
    fn state(&self) -> std::sync::MutexGuard<'_, (bool, Vec<ThreadId>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `tell` unless the gate is closed.
    fn tell(&self, tell: impl FnOnce()) {
        let me = thread::current().id();
        {
            let mut state = self.state();
            if state.0 {
                return;
            }
            state.1.push(me);
        }
        tell();
        let mut state = self.state();
        if let Some(i) = state.1.iter().position(|t| *t == me) {
            state.1.swap_remove(i);
        }
        self.told.notify_all();
    }

    /// Closes the gate, once every place being told on another thread is told.
    fn close(&self) {
        let me = thread::current().id();
        let mut state = self.state();
        state.0 = true;
        while state.1.iter().any(|t| *t != me) {
            state = self.told.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// ticketing_hold's operation (Hold::acquire_then).
///
/// # Safety
/// As ticketing_hold_start.
unsafe fn hold<'a>(
    client: *const ticketing_client,
    parts: *const ticketing_hold_part,
    parts_len: usize,
    lease_ns: i64,
    wait_ns: i64,
    places: PlacesTo,
) -> Result<Operation<'a>, Failure> {
    let client = unsafe { handle::hold(client, "client") }?;
    let words = client.value.client.words();
    let parts = unsafe { hold_parts(parts, parts_len, words) }?;
    let lease = duration_ns(lease_ns, "lease")?;
    let wait = duration_ns(wait_ns, "wait")?;
    check_hold_args(&parts, lease, wait, words)?;
    let kept = match &places {
        PlacesTo::Queue(places) => Some(Arc::clone(places)),
        _ => None,
    };
    let mut operation = Operation::new(Op::Acquire, move |done| {
        let mut hold = client.value.client.hold(lease, wait);
        for p in &parts {
            hold = hold.permits(&p.key, p.count, p.capacity);
        }
        let gate = Arc::new(PlaceGate::default());
        let at_gate = Arc::clone(&gate);
        match places {
            PlacesTo::Nowhere => {}
            PlacesTo::Callback(place) => hold = hold.on_place(move |p: Place| at_gate.tell(|| place.call(p))),
            PlacesTo::Queue(places) => hold = hold.on_place(move |p: Place| at_gate.tell(|| places.put(p))),
        }
        hold.acquire_then(move |r| {
            gate.close();
            done(r.map(Value::Lock).map_err(Failure::from))
        })
    });
    operation.places = kept;
    Ok(operation)
}

/// Holds every key of `parts` at once — `count` of each key's `capacity` permits — for
/// lease_ns (whole seconds, 1..=250 s, in nanoseconds), waiting at most wait_ns
/// (0..=300 s) for its turn. Wraps Client::hold(...).acquire(): granted all at once
/// (one token for every key) only when no earlier request naming one of its keys
/// still waits and every key has its count free; until then it waits holding nothing,
/// and holds that name the same keys in other orders never deadlock. on_place (may be
/// NULL) hears the hold's place in line while it waits.
///
/// The outcomes are ticketing_acquire's: TICKETING_OK and *lock_out, one lock of every
/// key (ticketing_lock_key_count, ticketing_lock_key_at) whose release ends them all;
/// TICKETING_INVALID for a part out of its limits, a key named twice, or a capacity
/// other than the key's (the message names both numbers); TICKETING_INDETERMINATE: it
/// MAY be held, resolve it as an acquire. lock_out must not be NULL. Blocks as
/// ticketing_acquire does.
///
/// # Safety
/// `client` is NULL or a client handle; `parts` NULL or `parts_len` readable parts whose
/// keys are NULL or C strings; `on_place`, when not NULL, callable with `place_ctx`
/// from any thread until the call returns; out-pointers NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ticketing_hold(
    client: *const ticketing_client,
    parts: *const ticketing_hold_part,
    parts_len: usize,
    lease_ns: i64,
    wait_ns: i64,
    on_place: ticketing_place_callback,
    place_ctx: *mut c_void,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let places = PlacesTo::callback(on_place, place_ctx);
        let value = run(unsafe { hold(client, parts, parts_len, lease_ns, wait_ns, places) }?)?;
        unsafe { put_lock(value, lock_out) }
    })
}

/// The future of ticketing_hold (read with ticketing_future_get_lock); see
/// ticketing_acquire_start. on_place may be called until the future is ready, never
/// after; ticketing_future_cancel stops the wait as it stops an acquire's. Never blocks.
///
/// # Safety
/// As ticketing_hold, `on_place` callable until the future is ready.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ticketing_hold_start(
    client: *const ticketing_client,
    parts: *const ticketing_hold_part,
    parts_len: usize,
    lease_ns: i64,
    wait_ns: i64,
    on_place: ticketing_place_callback,
    place_ctx: *mut c_void,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe {
        start(future_out, error_out, || {
            hold(client, parts, parts_len, lease_ns, wait_ns, PlacesTo::callback(on_place, place_ctx))
        })
    }
}

/// As ticketing_hold_start, but the hold's places come through `queue` instead of a
/// callback, for a program that runs none of its code on the client's threads (an event
/// loop). Whenever the place changes (when the hold queues, then at most once a second)
/// the future keeps it and leaves `place_tag` in `queue` — at most one of them waiting
/// there at once; ticketing_future_take_place reads the latest. No place_tag is left
/// after the future is ready (one left before may still wait: take_place then gives 0).
/// The future's own completion is handed over as any future's (ticketing_future_set_queue
/// with its own tag, a callback, or a block). `queue` is kept until the future is freed.
/// Never blocks.
///
/// # Safety
/// As ticketing_hold; `queue` is NULL or a queue handle.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ticketing_hold_start_queued(
    client: *const ticketing_client,
    parts: *const ticketing_hold_part,
    parts_len: usize,
    lease_ns: i64,
    wait_ns: i64,
    queue: *mut ticketing_queue,
    place_tag: u64,
    future_out: *mut *mut ticketing_future,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe {
        start(future_out, error_out, || {
            let queue = handle::hold(queue.cast_const(), "queue")?;
            let places = PlacesTo::Queue(Arc::new(PlaceBox::new(queue, place_tag)));
            hold(client, parts, parts_len, lease_ns, wait_ns, places)
        })
    }
}

/// The latest place in line of a future started by ticketing_hold_start_queued: 1, with
/// *ahead_out and *grants_per_ks_out (each may be NULL; as ticketing_place_callback's
/// arguments), when a place came since the last take; 0 when none did, or `future` is not
/// such a future. Never blocks.
///
/// # Safety
/// `future` is NULL or a future handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_future_take_place(
    future: *const ticketing_future,
    ahead_out: *mut u32,
    grants_per_ks_out: *mut u32,
) -> c_int {
    getter(0, || {
        let Some(place) = unsafe { handle::peek(future) }.and_then(|f| f.places()?.take()) else {
            return 0;
        };
        unsafe {
            put(ahead_out, place.ahead);
            put(grants_per_ks_out, place.grants_per_ks);
        }
        1
    })
}

/// How many keys the lock holds: 1 for ticketing_acquire's, 1 to
/// TICKETING_HOLD_KEYS_MAX for ticketing_hold's. 0 if lock is NULL.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_key_count(lock: *const ticketing_lock) -> usize {
    getter(0, || unsafe { handle::peek(lock) }.map_or(0, |l| l.parts().len()))
}

/// The lock's key number `index` (0 to ticketing_lock_key_count - 1, in the order the
/// hold named them): *key_out (valid until the lock is freed), *count_out and
/// *capacity_out (each may be NULL). TICKETING_INVALID for an index past the last key.
///
/// # Safety
/// `lock` is NULL or a lock handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_key_at(
    lock: *const ticketing_lock,
    index: usize,
    key_out: *mut *const c_char,
    count_out: *mut u32,
    capacity_out: *mut u32,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let lock = unsafe { handle::hold(lock, "lock") }?;
        let parts = lock.value.parts();
        let (key, count, capacity) = parts.get(index).ok_or_else(|| {
            Failure::invalid(format!("index is {index}; the lock holds {} key(s)", parts.len()))
        })?;
        let key_out = required(key_out, "key_out")?;
        unsafe {
            put(key_out, key.as_ptr());
            put(count_out, *count);
            put(capacity_out, *capacity);
        }
        Ok(())
    })
}

/// The instant the clock of ticketing_now_ns starts from (the first call that asks).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn since_epoch(at: Instant) -> i64 {
    i64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(i64::MAX)
}

/// Now, in nanoseconds on the library's monotonic clock (CLOCK_MONOTONIC, from an
/// instant of the process's first call): the clock of ticketing_lock_deadline_ns, shared
/// by every binding in the process. Never blocks.
#[no_mangle]
pub extern "C" fn ticketing_now_ns() -> i64 {
    getter(0, || since_epoch(Instant::now()))
}

/// The lock's local deadline on the clock of ticketing_now_ns: the instant before its
/// request was written plus the lease (the server's lease never ends before it). Work
/// under the lock must be done, or stopped, by then; a binding turns it into its
/// language's deadline (a context, a signal, a timer). 0 if lock is NULL.
///
/// # Safety
/// `lock` is NULL or a lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_deadline_ns(lock: *const ticketing_lock) -> i64 {
    getter(0, || {
        epoch();
        unsafe { handle::peek(lock) }.map_or(0, |l| since_epoch(l.deadline()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    #[test]
    fn no_place_is_told_after_the_gate_closed_and_closing_waits_for_one_being_told() {
        let gate = Arc::new(PlaceGate::default());
        let (started, telling) = (Arc::new(AtomicBool::new(false)), Arc::clone(&gate));
        let (go_on, wait_here) = mpsc::channel::<()>();
        let (flag, told) = (Arc::clone(&started), Arc::new(AtomicBool::new(false)));
        let told_there = Arc::clone(&told);
        let teller = thread::spawn(move || {
            telling.tell(|| {
                flag.store(true, Ordering::SeqCst);
                wait_here.recv().unwrap();
                told_there.store(true, Ordering::SeqCst);
            })
        });
        while !started.load(Ordering::SeqCst) {
            thread::yield_now();
        }
        let closer = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || gate.close())
        };
        // The closer has closed the gate and waits for the place being told.
        while !gate.state().0 {
            thread::yield_now();
        }
        assert!(!closer.is_finished(), "close waits while a place is being told");
        go_on.send(()).unwrap();
        closer.join().unwrap();
        assert!(told.load(Ordering::SeqCst), "close returned only after the place was told");
        teller.join().unwrap();
        let mut late = false;
        gate.tell(|| late = true);
        assert!(!late, "no place after the gate closed");
    }

    #[test]
    fn a_place_whose_teller_ends_the_hold_closes_the_gate_without_waiting_for_itself() {
        let gate = PlaceGate::default();
        gate.tell(|| gate.close());
        let mut late = false;
        gate.tell(|| late = true);
        assert!(!late);
    }
}
