//! The C ABI over the official client: the functions of `include/ticketing.h`
//! (docs/c.md), exported by the crate's `cdylib` (libticketing.so) and `staticlib`
//! (libticketing.a).
//!
//! Each function wraps one call of [`crate::client`], named in its doc comment, and
//! adds only what a C boundary needs: checking pointers and UTF-8, turning durations
//! in milliseconds into [`Duration`]s (the client checks their ranges), mapping each
//! error to a kind (`error.rs`), and catching panics. No request is built, retried or
//! timed here.
//!
//! Handles are boxed Rust values behind opaque pointers: `ticketing_client` holds a
//! [`Client`] (itself `Send + Sync`), `ticketing_lock` a [`Lock`] behind a mutex
//! (releasing takes it out), `ticketing_error` an immutable [`ErrorHandle`].

mod error;
#[cfg(test)]
mod tests;

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::client::{Client, HolderInfo, Lock, ReleaseOutcome, Resolution, Words, C_WORDS, PYTHON_WORDS};

pub use error::*;

/// `TICKETING_ABI_VERSION` of include/ticketing.h.
pub const ABI_VERSION: u32 = 1;

pub const TICKETING_RELEASED: c_int = 1;
pub const TICKETING_NOT_HOLDER: c_int = 2;
pub const TICKETING_RELEASED_OR_EXPIRED: c_int = 3;

pub const TICKETING_HELD: c_int = 1;
pub const TICKETING_NOT_HELD: c_int = 2;
pub const TICKETING_UNKNOWN: c_int = 3;

/// `ticketing_client`.
pub struct ClientHandle {
    client: Client,
    owner: CString,
}

impl ClientHandle {
    fn new(client: Client) -> ClientHandle {
        let owner = c_string(client.owner());
        ClientHandle { client, owner }
    }
}

/// `ticketing_lock`.
pub struct LockHandle {
    lock: Mutex<Option<Lock>>,
    key: CString,
    owner: CString,
    token: u64,
    lease: Duration,
}

impl LockHandle {
    fn new(lock: Lock) -> LockHandle {
        LockHandle {
            key: c_string(lock.key()),
            owner: c_string(lock.owner()),
            token: lock.token(),
            lease: lock.lease(),
            lock: Mutex::new(Some(lock)),
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<Lock>> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `ticketing_holder`, laid out as in the header.
#[repr(C)]
pub struct Holder {
    pub token: u64,
    pub lease_left_ms: u64,
    pub waiters: u32,
    pub owner_len: u32,
    pub owner: [c_char; 256],
}

impl Holder {
    fn fill(&mut self, info: &HolderInfo) {
        self.token = info.token;
        self.lease_left_ms = millis(info.remaining);
        self.waiters = info.waiters;
        // Owners are at most 255 bytes (docs/protocol.md); cut at a character boundary
        // should a server ever send more.
        let mut len = info.owner.len().min(255);
        while !info.owner.is_char_boundary(len) {
            len -= 1;
        }
        for (dst, src) in self.owner.iter_mut().zip(info.owner.as_bytes()[..len].iter()) {
            *dst = *src as c_char;
        }
        self.owner[len] = 0;
        self.owner_len = len as u32;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `body` for a function that returns a status: a panic becomes
/// `TICKETING_INTERNAL`, and a failure is handed out through `error_out` when the
/// caller asked for it.
fn guard(error_out: *mut *mut ErrorHandle, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| Err(Failure::panic(&*panic)));
    let (kind, handle) = match result {
        Ok(()) => (TICKETING_OK, ptr::null_mut()),
        Err(failure) => (failure.kind, Box::into_raw(Box::new(ErrorHandle::from(failure)))),
    };
    if error_out.is_null() {
        if !handle.is_null() {
            // SAFETY: made by Box::into_raw just above and handed to nobody.
            drop(unsafe { Box::from_raw(handle) });
        }
    } else {
        // SAFETY: the caller passes a valid `ticketing_error **` or NULL (header rules).
        unsafe { *error_out = handle };
    }
    kind
}

/// Runs a getter: a panic gives `fallback`.
fn getter<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// The handle behind `p`, or why not.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by this module.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: by the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// The UTF-8 string behind `p`, or why not.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid during the call.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// Like [`text`], with NULL meaning "not given".
///
/// # Safety
/// As [`text`].
unsafe fn optional_text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    // SAFETY: by the caller's contract.
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { text(p, what) }.map(Some)
    }
}

/// A non-negative duration in milliseconds; the client checks its range.
fn duration(ms: i64, what: &str) -> Result<Duration, Failure> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| Failure::invalid(format!("{what} is {ms} ms; it must not be negative")))
}

/// Writes `value` to `out` when `out` is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// `out`, or a failure naming it when it is NULL.
fn required<T>(out: *mut T, what: &str) -> Result<*mut T, Failure> {
    if out.is_null() {
        Err(Failure::invalid(format!("{what} is NULL")))
    } else {
        Ok(out)
    }
}

fn outcome_code(outcome: ReleaseOutcome) -> c_int {
    match outcome {
        ReleaseOutcome::Released => TICKETING_RELEASED,
        ReleaseOutcome::NotHolder => TICKETING_NOT_HOLDER,
        ReleaseOutcome::ReleasedOrExpired => TICKETING_RELEASED_OR_EXPIRED,
    }
}

/// `uint32_t ticketing_version(void)`: the ABI version, [`ABI_VERSION`].
#[no_mangle]
pub extern "C" fn ticketing_version() -> u32 {
    ABI_VERSION
}

/// `const char *ticketing_version_string(void)`: the crate's version.
#[no_mangle]
pub extern "C" fn ticketing_version_string() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

/// `const char *ticketing_kind_name(int kind)`.
#[no_mangle]
pub extern "C" fn ticketing_kind_name(kind: c_int) -> *const c_char {
    usize::try_from(kind).ok().and_then(|k| KIND_NAMES.get(k)).copied().unwrap_or(c"unknown").as_ptr()
}

/// `ticketing_client_new`: wraps [`Client::builder`] … [`ClientBuilder::build`](crate::client::ClientBuilder::build).
/// Its messages name this function's arguments (`tls_ca_file`, `auth_token`).
///
/// # Safety
/// Pointers as described in include/ticketing.h: `addrs` holds `addrs_len` string
/// pointers, `auth_token` `auth_token_len` bytes; out-pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_new(
    addrs: *const *const c_char,
    addrs_len: usize,
    auth_token: *const u8,
    auth_token_len: usize,
    owner: *const c_char,
    tls_ca_file: *const c_char,
    client_out: *mut *mut ClientHandle,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        // SAFETY: the caller's pointers, passed on unchanged (header contract).
        unsafe {
            new_client(&C_WORDS, addrs, addrs_len, auth_token, auth_token_len, owner, tls_ca_file, client_out)
        }
    })
}

/// `ticketing_client_new_for`: [`ticketing_client_new`] for a binding, whose own
/// names for the settings the client's messages then give (`binding` "python": the
/// `tls_ca=` keyword, say; NULL or "c": this ABI's arguments).
///
/// # Safety
/// As [`ticketing_client_new`]; `binding` is NULL or a NUL-terminated string.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ticketing_client_new_for(
    binding: *const c_char,
    addrs: *const *const c_char,
    addrs_len: usize,
    auth_token: *const u8,
    auth_token_len: usize,
    owner: *const c_char,
    tls_ca_file: *const c_char,
    client_out: *mut *mut ClientHandle,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let words = match unsafe { optional_text(binding, "binding") }? {
            None | Some("c") => &C_WORDS,
            Some("python") => &PYTHON_WORDS,
            Some(other) => {
                return Err(Failure::invalid(format!("binding {other:?} is not known: \"c\" or \"python\"")))
            }
        };
        // SAFETY: the caller's pointers, passed on unchanged (header contract).
        unsafe {
            new_client(words, addrs, addrs_len, auth_token, auth_token_len, owner, tls_ca_file, client_out)
        }
    })
}

/// The body of `ticketing_client_new`, with messages in `words`.
///
/// # Safety
/// As [`ticketing_client_new`].
#[allow(clippy::too_many_arguments)]
unsafe fn new_client(
    words: &'static Words,
    addrs: *const *const c_char,
    addrs_len: usize,
    auth_token: *const u8,
    auth_token_len: usize,
    owner: *const c_char,
    tls_ca_file: *const c_char,
    client_out: *mut *mut ClientHandle,
) -> Result<(), Failure> {
    let client_out = required(client_out, "client_out")?;
    if addrs.is_null() && addrs_len > 0 {
        return Err(Failure::invalid("addrs is NULL"));
    }
    let mut list = Vec::with_capacity(addrs_len);
    for i in 0..addrs_len {
        // SAFETY: `addrs` holds `addrs_len` pointers (header contract).
        let addr = unsafe { *addrs.add(i) };
        list.push(unsafe { text(addr, &format!("addrs[{i}]")) }?.to_owned());
    }
    if auth_token.is_null() {
        return Err(Failure::invalid("auth_token is NULL"));
    }
    // SAFETY: `auth_token` holds `auth_token_len` bytes (header contract).
    let secret = unsafe { std::slice::from_raw_parts(auth_token, auth_token_len) };
    let mut builder = Client::builder().words(words).addrs(list).auth_token(secret);
    if let Some(owner) = unsafe { optional_text(owner, "owner") }? {
        builder = builder.owner(owner);
    }
    if let Some(ca) = unsafe { optional_text(tls_ca_file, "tls_ca_file") }? {
        builder = builder.tls_ca_file(ca);
    }
    let client = builder.build()?;
    unsafe { put(client_out, Box::into_raw(Box::new(ClientHandle::new(client)))) };
    Ok(())
}

/// `ticketing_client_with_owner`: wraps [`Client::with_owner`].
///
/// # Safety
/// `client` is NULL or a live client handle; other pointers as in the header.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_with_owner(
    client: *const ClientHandle,
    owner: *const c_char,
    client_out: *mut *mut ClientHandle,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let client_out = required(client_out, "client_out")?;
        let client = unsafe { handle(client, "client") }?;
        let owner = unsafe { text(owner, "owner") }?;
        let other = client.client.with_owner(owner)?;
        unsafe { put(client_out, Box::into_raw(Box::new(ClientHandle::new(other)))) };
        Ok(())
    })
}

/// `ticketing_client_owner`: wraps [`Client::owner`].
///
/// # Safety
/// `client` is NULL or a live client handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_owner(client: *const ClientHandle) -> *const c_char {
    getter(ptr::null(), || unsafe { client.as_ref() }.map_or(ptr::null(), |c| c.owner.as_ptr()))
}

/// `ticketing_client_close`: wraps [`Client::close`] (on a clone: the handle stays).
///
/// # Safety
/// `client` is NULL or a live client handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_close(
    client: *const ClientHandle,
    timeout_ms: i64,
    drained_out: *mut c_int,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let client = unsafe { handle(client, "client") }?;
        let timeout = duration(timeout_ms, "timeout_ms")?;
        let drained = client.client.clone().close(timeout);
        unsafe { put(drained_out, c_int::from(drained)) };
        Ok(())
    })
}

/// `ticketing_client_free`: drops the handle's [`Client`].
///
/// # Safety
/// `client` is NULL or a live client handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_free(client: *mut ClientHandle) {
    if !client.is_null() {
        // SAFETY: made by Box::into_raw in this module; the caller's last use.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(client) })));
    }
}

/// `ticketing_acquire`: wraps [`Client::acquire`].
///
/// # Safety
/// `client` is NULL or a live client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire(
    client: *const ClientHandle,
    key: *const c_char,
    lease_ms: i64,
    wait_ms: i64,
    lock_out: *mut *mut LockHandle,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let lease = duration(lease_ms, "lease_ms")?;
        let wait = duration(wait_ms, "wait_ms")?;
        let lock = client.client.acquire(key, lease, wait)?;
        unsafe { put(lock_out, Box::into_raw(Box::new(LockHandle::new(lock)))) };
        Ok(())
    })
}

/// `ticketing_resolve`: wraps [`Client::resolve`].
///
/// # Safety
/// `client` and `error` are NULL or live handles; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_resolve(
    client: *const ClientHandle,
    error: *const ErrorHandle,
    timeout_ms: i64,
    resolution_out: *mut c_int,
    lock_out: *mut *mut LockHandle,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let resolution_out = required(resolution_out, "resolution_out")?;
        let lock_out = required(lock_out, "lock_out")?;
        let client = unsafe { handle(client, "client") }?;
        let error = unsafe { handle(error, "error") }?;
        let timeout = duration(timeout_ms, "timeout_ms")?;
        let resolution = match &error.acquire {
            Some(attempt) => client.client.resolve(attempt, timeout),
            // Any error but an indeterminate acquire is definitive (Client::resolve).
            None => Resolution::NotHeld,
        };
        let code = match resolution {
            Resolution::Held(lock) => {
                unsafe { put(lock_out, Box::into_raw(Box::new(LockHandle::new(lock)))) };
                TICKETING_HELD
            }
            Resolution::NotHeld => TICKETING_NOT_HELD,
            Resolution::Unknown => TICKETING_UNKNOWN,
        };
        unsafe { put(resolution_out, code) };
        Ok(())
    })
}

/// `ticketing_lock_release`: wraps [`Lock::release`].
///
/// # Safety
/// `lock` is NULL or a live lock handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_release(
    lock: *mut LockHandle,
    outcome_out: *mut c_int,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let lock = unsafe { handle(lock.cast_const(), "lock") }?;
        let held = lock.held().take();
        let held = held.ok_or_else(|| Failure::invalid("the lock was already released"))?;
        let outcome = held.release()?;
        unsafe { put(outcome_out, outcome_code(outcome)) };
        Ok(())
    })
}

/// `ticketing_release`: wraps [`Client::release`].
///
/// # Safety
/// `client` is NULL or a live client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_release(
    client: *const ClientHandle,
    key: *const c_char,
    token: u64,
    outcome_out: *mut c_int,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let outcome = client.client.release(key, token)?;
        unsafe { put(outcome_out, outcome_code(outcome)) };
        Ok(())
    })
}

/// `ticketing_query`: wraps [`Client::query`].
///
/// # Safety
/// `client` is NULL or a live client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_query(
    client: *const ClientHandle,
    key: *const c_char,
    held_out: *mut c_int,
    holder_out: *mut Holder,
    error_out: *mut *mut ErrorHandle,
) -> c_int {
    guard(error_out, || {
        let held_out = required(held_out, "held_out")?;
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let holder = client.client.query(key)?;
        if let (Some(info), Some(out)) = (&holder, unsafe { holder_out.as_mut() }) {
            out.fill(info);
        }
        unsafe { put(held_out, c_int::from(holder.is_some())) };
        Ok(())
    })
}

/// `ticketing_lock_token`: wraps [`Lock::token`] (kept from the grant).
///
/// # Safety
/// `lock` is NULL or a live lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_token(lock: *const LockHandle) -> u64 {
    getter(0, || unsafe { lock.as_ref() }.map_or(0, |l| l.token))
}

/// `ticketing_lock_key`: wraps [`Lock::key`].
///
/// # Safety
/// `lock` is NULL or a live lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_key(lock: *const LockHandle) -> *const c_char {
    getter(ptr::null(), || unsafe { lock.as_ref() }.map_or(ptr::null(), |l| l.key.as_ptr()))
}

/// `ticketing_lock_owner`: wraps [`Lock::owner`].
///
/// # Safety
/// `lock` is NULL or a live lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_owner(lock: *const LockHandle) -> *const c_char {
    getter(ptr::null(), || unsafe { lock.as_ref() }.map_or(ptr::null(), |l| l.owner.as_ptr()))
}

/// `ticketing_lock_lease_ms`: wraps [`Lock::lease`].
///
/// # Safety
/// `lock` is NULL or a live lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_lease_ms(lock: *const LockHandle) -> u64 {
    getter(0, || unsafe { lock.as_ref() }.map_or(0, |l| millis(l.lease)))
}

/// `ticketing_lock_remaining_ms`: wraps [`Lock::remaining`]; 0 once released.
///
/// # Safety
/// `lock` is NULL or a live lock handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_remaining_ms(lock: *const LockHandle) -> u64 {
    getter(0, || {
        unsafe { lock.as_ref() }
            .and_then(|l| l.held().as_ref().map(|held| millis(held.remaining())))
            .unwrap_or(0)
    })
}

/// `ticketing_lock_free`: drops the handle; an unreleased [`Lock`] is released in the
/// background (its `Drop`).
///
/// # Safety
/// `lock` is NULL or a live lock handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_lock_free(lock: *mut LockHandle) {
    if !lock.is_null() {
        // SAFETY: made by Box::into_raw in this module; the caller's last use.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(lock) })));
    }
}

/// `ticketing_error_kind`.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_kind(error: *const ErrorHandle) -> c_int {
    unsafe { error.as_ref() }.map_or(TICKETING_INVALID, |e| e.kind)
}

/// `ticketing_error_message`: the Rust error's `Display`.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_message(error: *const ErrorHandle) -> *const c_char {
    unsafe { error.as_ref() }.map_or(ptr::null(), |e| e.message.as_ptr())
}

/// `ticketing_error_cause`: wraps [`AcquireError::indeterminate_cause`](crate::client::AcquireError::indeterminate_cause).
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_cause(error: *const ErrorHandle) -> c_int {
    unsafe { error.as_ref() }.map_or(0, |e| e.cause)
}

/// `ticketing_error_leader`: the leader an `M` named.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_leader(error: *const ErrorHandle) -> *const c_char {
    unsafe { error.as_ref() }.and_then(|e| e.leader.as_ref()).map_or(ptr::null(), |l| l.as_ptr())
}

/// `ticketing_error_is_retryable`: wraps `is_retryable` of the client's error.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_is_retryable(error: *const ErrorHandle) -> c_int {
    unsafe { error.as_ref() }.map_or(0, |e| c_int::from(e.retryable))
}

/// `ticketing_error_free`.
///
/// # Safety
/// `error` is NULL or a live error handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_error_free(error: *mut ErrorHandle) {
    if !error.is_null() {
        // SAFETY: made by Box::into_raw in this module; the caller's last use.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(error) })));
    }
}
