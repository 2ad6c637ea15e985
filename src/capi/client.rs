//! The client handle (`ticketing_client`) and the blocking operations started on it:
//! acquire, resolve, release by token, query.

use std::ffi::{c_char, c_int, CString};
use std::ptr;

use super::boundary::{duration, guard, optional_text, put, required, text};
use super::error::{c_string, Failure};
use super::handle::ErrorPtr;
use super::handle::{self, Kind, Tagged};
use super::lock::{outcome_code, LockHandle, LockPtr};
use crate::client::{
    Client, HolderInfo, Resolution, Words, C_WORDS, GO_WORDS, JAVA_WORDS, NODE_WORDS, PYTHON_WORDS,
};

/// Seed addresses a client takes at most (`ticketing_client_new`'s `addrs_len`).
pub const ADDRS_MAX: usize = 64;
/// Bytes of a client secret at most (`auth_token_len`).
pub const AUTH_TOKEN_LEN_MAX: usize = 4096;

pub const TICKETING_HELD: c_int = 1;
pub const TICKETING_NOT_HELD: c_int = 2;
pub const TICKETING_UNKNOWN: c_int = 3;

/// `ticketing_client`.
#[doc(hidden)]
pub struct ClientHandle {
    pub(super) client: Client,
    owner: CString,
}

impl Kind for ClientHandle {
    const TAG: u64 = 0x7469_636b_2d63_6c69; // "tick-cli"
    const NAME: &'static str = "ticketing_client";
}

/// The pointer C holds.
#[doc(hidden)]
pub type ClientPtr = Tagged<ClientHandle>;

impl ClientHandle {
    fn new(client: Client) -> ClientHandle {
        let owner = c_string(client.owner());
        ClientHandle { client, owner }
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
    pub(super) fn fill(&mut self, info: &HolderInfo) {
        self.token = info.token;
        self.lease_left_ms = super::boundary::millis(info.remaining);
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
    client_out: *mut *mut ClientPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        // SAFETY: the caller's pointers, passed on unchanged (header contract).
        unsafe {
            new_client(
                &C_WORDS,
                addrs,
                addrs_len,
                auth_token,
                auth_token_len,
                owner,
                tls_ca_file,
                None,
                client_out,
            )
        }
    })
}

/// `ticketing_client_new_for`: [`ticketing_client_new`] for a binding, whose own
/// names for the settings the client's messages then give (`binding` "python": the
/// `tls_ca=` keyword, say; "go": `Config.TLSCAFile`; "java": the builder's `tlsCaFile`;
/// "node": the Node.js package's `tlsCa` option; NULL or "c": this ABI's arguments).
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
    client_out: *mut *mut ClientPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let words = binding_words(unsafe { optional_text(binding, "binding") }?)?;
        // SAFETY: the caller's pointers, passed on unchanged (header contract).
        unsafe {
            new_client(
                words,
                addrs,
                addrs_len,
                auth_token,
                auth_token_len,
                owner,
                tls_ca_file,
                None,
                client_out,
            )
        }
    })
}

/// `ticketing_client_new_named`: [`ticketing_client_new_for`] with the cluster's name
/// ([`ClientBuilder::cluster_name`](crate::client::ClientBuilder::cluster_name); NULL:
/// none, the fencing domains are compared instead).
///
/// # Safety
/// As [`ticketing_client_new_for`]; `cluster_name` is NULL or a NUL-terminated string.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ticketing_client_new_named(
    binding: *const c_char,
    cluster_name: *const c_char,
    addrs: *const *const c_char,
    addrs_len: usize,
    auth_token: *const u8,
    auth_token_len: usize,
    owner: *const c_char,
    tls_ca_file: *const c_char,
    client_out: *mut *mut ClientPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let words = binding_words(unsafe { optional_text(binding, "binding") }?)?;
        let name = unsafe { optional_text(cluster_name, "cluster_name") }?;
        // SAFETY: the caller's pointers, passed on unchanged (header contract).
        unsafe {
            new_client(
                words,
                addrs,
                addrs_len,
                auth_token,
                auth_token_len,
                owner,
                tls_ca_file,
                name,
                client_out,
            )
        }
    })
}

/// The words of `binding` (see [`ticketing_client_new_for`]).
fn binding_words(binding: Option<&str>) -> Result<&'static Words, Failure> {
    Ok(match binding {
        None | Some("c") => &C_WORDS,
        Some("python") => &PYTHON_WORDS,
        Some("go") => &GO_WORDS,
        Some("java") => &JAVA_WORDS,
        Some("node") => &NODE_WORDS,
        Some(other) => {
            return Err(Failure::invalid(format!(
                "binding {other:?} is not known: \"c\", \"python\", \"go\", \"java\" or \"node\""
            )))
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
    cluster_name: Option<&str>,
    client_out: *mut *mut ClientPtr,
) -> Result<(), Failure> {
    let client_out = required(client_out, "client_out")?;
    if addrs.is_null() && addrs_len > 0 {
        return Err(Failure::invalid("addrs is NULL"));
    }
    // Counts are checked before anything is read or allocated.
    if addrs_len > ADDRS_MAX {
        return Err(Failure::invalid(format!(
            "addrs_len is {addrs_len}; a client takes at most {ADDRS_MAX} seed addresses"
        )));
    }
    if auth_token_len > AUTH_TOKEN_LEN_MAX {
        return Err(Failure::invalid(format!(
            "auth_token_len is {auth_token_len}; a secret is at most {AUTH_TOKEN_LEN_MAX} bytes"
        )));
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
    if let Some(name) = cluster_name {
        builder = builder.cluster_name(name);
    }
    // A refused setting is named as the binding names it (Go's `Config.Addrs`).
    let client = builder.build().map_err(|e| Failure::config(e.in_words(&words.settings)))?;
    unsafe { put(client_out, handle::into_raw(ClientHandle::new(client))) };
    Ok(())
}

/// `ticketing_client_with_owner`: wraps [`Client::with_owner`].
///
/// # Safety
/// `client` is NULL or a client handle; other pointers as in the header.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_with_owner(
    client: *const ClientPtr,
    owner: *const c_char,
    client_out: *mut *mut ClientPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let client_out = required(client_out, "client_out")?;
        let client = unsafe { handle::hold(client, "client") }?;
        let owner = unsafe { text(owner, "owner") }?;
        let other = client.value.client.with_owner(owner)?;
        unsafe { put(client_out, handle::into_raw(ClientHandle::new(other))) };
        Ok(())
    })
}

/// `ticketing_client_owner`: wraps [`Client::owner`].
///
/// # Safety
/// `client` is NULL or a client handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_owner(client: *const ClientPtr) -> *const c_char {
    super::boundary::getter(ptr::null(), || {
        unsafe { handle::peek(client) }.map_or(ptr::null(), |c| c.owner.as_ptr())
    })
}

/// `ticketing_client_close`: wraps [`Client::close`] (on a clone: the handle stays).
///
/// # Safety
/// `client` is NULL or a client handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_close(
    client: *const ClientPtr,
    timeout_ms: i64,
    drained_out: *mut c_int,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let client = unsafe { handle::hold(client, "client") }?;
        let timeout = duration(timeout_ms, "timeout_ms")?;
        let drained = client.value.client.clone().close(timeout);
        unsafe { put(drained_out, c_int::from(drained)) };
        Ok(())
    })
}

/// `ticketing_client_free`: drops the handle's [`Client`] (once no call uses it).
///
/// # Safety
/// `client` is NULL or a client handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_free(client: *mut ClientPtr) {
    super::boundary::getter((), || unsafe { handle::free(client, "ticketing_client_free") })
}

/// `ticketing_acquire`: wraps [`Client::acquire`].
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire(
    client: *const ClientPtr,
    key: *const c_char,
    lease_ms: i64,
    wait_ms: i64,
    lock_out: *mut *mut LockPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let client = unsafe { handle::hold(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let lease = duration(lease_ms, "lease_ms")?;
        let wait = duration(wait_ms, "wait_ms")?;
        let lock = client.value.client.acquire(key, lease, wait)?;
        unsafe { put(lock_out, handle::into_raw(LockHandle::new(lock))) };
        Ok(())
    })
}

/// `ticketing_resolve`: wraps [`Client::resolve`].
///
/// # Safety
/// `client` and `error` are NULL or handles of their kinds; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_resolve(
    client: *const ClientPtr,
    error: *const ErrorPtr,
    timeout_ms: i64,
    resolution_out: *mut c_int,
    lock_out: *mut *mut LockPtr,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let resolution_out = required(resolution_out, "resolution_out")?;
        let lock_out = required(lock_out, "lock_out")?;
        let client = unsafe { handle::hold(client, "client") }?;
        let error = unsafe { handle::hold_error(error, "error") }?;
        let timeout = duration(timeout_ms, "timeout_ms")?;
        let resolution = match error.as_ref().and_then(|e| e.value.acquire.as_ref()) {
            Some(attempt) => client.value.client.resolve(attempt, timeout),
            // Any error but an indeterminate acquire is definitive (Client::resolve).
            None => Resolution::NotHeld,
        };
        let code = match resolution {
            Resolution::Held(lock) => {
                unsafe { put(lock_out, handle::into_raw(LockHandle::new(lock))) };
                TICKETING_HELD
            }
            Resolution::NotHeld => TICKETING_NOT_HELD,
            Resolution::Unknown => TICKETING_UNKNOWN,
        };
        unsafe { put(resolution_out, code) };
        Ok(())
    })
}

/// `ticketing_release`: wraps [`Client::release`].
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_release(
    client: *const ClientPtr,
    key: *const c_char,
    token: u64,
    outcome_out: *mut c_int,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let client = unsafe { handle::hold(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let outcome = client.value.client.release(key, token)?;
        unsafe { put(outcome_out, outcome_code(outcome)) };
        Ok(())
    })
}

/// `ticketing_query`: wraps [`Client::query`].
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_query(
    client: *const ClientPtr,
    key: *const c_char,
    held_out: *mut c_int,
    holder_out: *mut Holder,
    error_out: *mut *mut ErrorPtr,
) -> c_int {
    guard(error_out, || {
        let held_out = required(held_out, "held_out")?;
        let client = unsafe { handle::hold(client, "client") }?;
        let key = unsafe { text(key, "key") }?;
        let holder = client.value.client.query(key)?;
        if let (Some(info), Some(out)) = (&holder, unsafe { holder_out.as_mut() }) {
            out.fill(info);
        }
        unsafe { put(held_out, c_int::from(holder.is_some())) };
        Ok(())
    })
}
