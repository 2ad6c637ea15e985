//! The client handle (`ticketing_client`) and the blocking operations started on it:
//! acquire, resolve, release by token, query — each its future started and waited for
//! (`future::run`, `operation.rs`).

use std::ffi::{c_char, c_int, CString};
use std::ptr;

use super::abi::*;
use super::boundary::{duration, guard, optional_text, put, required, text};
use super::error::{c_string, Failure};
use super::future::run;
use super::handle::{self, Kind, Opaque};
use super::operation;
use crate::client::{Client, HolderInfo, Words, C_WORDS, GO_WORDS, JAVA_WORDS, NODE_WORDS, PYTHON_WORDS};

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

impl Opaque for ticketing_client {
    type Value = ClientHandle;
}

impl ClientHandle {
    fn new(client: Client) -> ClientHandle {
        let owner = c_string(client.owner());
        ClientHandle { client, owner }
    }
}

/// What ticketing_query fills in for a held key. The caller owns the storage.
#[repr(C)]
pub struct Holder {
    /// The holder's fencing token.
    pub token: u64,
    /// Lease left on the leader's clock when it answered.
    pub lease_left_ms: u64,
    /// Acquires queued for the key.
    pub waiters: u32,
    /// Bytes of owner, without the NUL.
    pub owner_len: u32,
    /// The holder's owner, NUL-terminated (owners are 1..=TICKETING_OWNER_LEN_MAX bytes).
    pub owner: [c_char; 256],
}

const _: () = assert!(256 == TICKETING_OWNER_LEN_MAX + 1, "room for the longest owner and its NUL");

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

/// Creates a client. Wraps ClientBuilder::new().addrs(..).auth_token(..).owner(..)
/// .tls_ca_file(..).build().
///
/// addrs, addrs_len: seed addresses "host:port" (one live member of the cluster is
///   enough; the client finds the leader and the other members).
/// auth_token, auth_token_len: the client secret, any bytes, at least 16.
/// owner: the owner string sent with every acquire and release (1..=255 bytes, no control
///   characters); NULL for the default host-pid-random, unique per client.
/// tls_ca_file: path of a PEM CA bundle: turns TLS on; NULL for plain TCP.
/// *client_out: the new client, on success.
///
/// Errors: TICKETING_CONFIG (the message names what is wrong), TICKETING_INVALID.
/// Does no network I/O (connections are made in the background). Blocks at most for
/// reading the CA file.
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
    client_out: *mut *mut ticketing_client,
    error_out: *mut *mut ticketing_error,
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

/// ticketing_client_new for a language binding built on this ABI: the client's messages
/// then name that language's settings where they name a fix (the Python package's
/// `tls_ca=` keyword, say, where a C caller reads "tls_ca_file"). binding: "python",
/// "go" (the Go module's Config fields), "java" (the Java library's builder methods), "node" (the Node.js package's options), or NULL or "c" for this header's argument names (as ticketing_client_new); any other
/// is TICKETING_INVALID. Otherwise as ticketing_client_new.
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
    client_out: *mut *mut ticketing_client,
    error_out: *mut *mut ticketing_error,
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

/// ticketing_client_new_for with the name of the cluster this client serves (the nodes'
/// TICKETING_CLUSTER_NAME): each connection reads its node's STATUS first, and a node
/// that reports another name or none is sent nothing (its connection fails as a lasting
/// mistake naming both names). cluster_name: 1 to 63 ASCII letters, digits, '.', '_'
/// and '-' (else TICKETING_CONFIG), or NULL for none: the client then compares the
/// fencing domains its nodes report, and serves nothing while they disagree (docs/c.md,
/// "One cluster per client"). Otherwise as ticketing_client_new_for.
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
    client_out: *mut *mut ticketing_client,
    error_out: *mut *mut ticketing_error,
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
    client_out: *mut *mut ticketing_client,
) -> Result<(), Failure> {
    let client_out = required(client_out, "client_out")?;
    if addrs.is_null() && addrs_len > 0 {
        return Err(Failure::invalid("addrs is NULL"));
    }
    // Counts are checked before anything is read or allocated.
    if addrs_len > TICKETING_ADDRS_MAX {
        return Err(Failure::invalid(format!(
            "addrs_len is {addrs_len}; a client takes at most {TICKETING_ADDRS_MAX} seed addresses"
        )));
    }
    if auth_token_len > TICKETING_AUTH_TOKEN_LEN_MAX {
        return Err(Failure::invalid(format!(
            "auth_token_len is {auth_token_len}; a secret is at most {TICKETING_AUTH_TOKEN_LEN_MAX} bytes"
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

/// A new handle on the same client (connections, release queue) that acquires and
/// releases as `owner`. Wraps Client::with_owner. Use one owner per logical caller when
/// ticketing_resolve must tell an indeterminate acquire's grant from another grant to the
/// same owner. Free it with ticketing_client_free. Never blocks.
///
/// # Safety
/// `client` is NULL or a client handle; other pointers as in the header.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_with_owner(
    client: *const ticketing_client,
    owner: *const c_char,
    client_out: *mut *mut ticketing_client,
    error_out: *mut *mut ticketing_error,
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

/// The owner this handle acquires as. Wraps Client::owner. Valid until the handle is
/// freed. NULL if client is NULL.
///
/// # Safety
/// `client` is NULL or a client handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_owner(client: *const ticketing_client) -> *const c_char {
    super::boundary::getter(ptr::null(), || {
        unsafe { handle::peek(client) }.map_or(ptr::null(), |c| c.owner.as_ptr())
    })
}

/// Waits until every release the client still has to make (freed locks, late grants,
/// releases in progress) is finished, or timeout_ms passes. Wraps Client::close.
/// *drained_out (may be NULL) is 1 when none was left, 0 when the timeout came first.
/// The handle stays valid: free it with ticketing_client_free. Blocks at most
/// timeout_ms.
///
/// # Safety
/// `client` is NULL or a client handle; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_close(
    client: *const ticketing_client,
    timeout_ms: i64,
    drained_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let client = unsafe { handle::hold(client, "client") }?;
        let timeout = duration(timeout_ms, "timeout_ms")?;
        let drained = client.value.client.clone().close(timeout);
        unsafe { put(drained_out, c_int::from(drained)) };
        Ok(())
    })
}

/// Frees the handle (drops the Rust Client). Never blocks. The connections close once
/// the last handle and the last lock of the client are gone and the releases still
/// queued are done; locks taken through this handle stay valid.
///
/// # Safety
/// `client` is NULL or a client handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_client_free(client: *mut ticketing_client) {
    super::boundary::getter((), || unsafe { handle::free(client, "ticketing_client_free") })
}

/// Acquires `key` for lease_ns (whole seconds, 1..=250 s, in nanoseconds), queueing at
/// most wait_ns (0..=300 s in nanoseconds; 0 is one immediate try). Wraps
/// Client::acquire, which checks both: as every blocking call here, it is its future
/// (ticketing_acquire_start) started and waited for as
/// ticketing_future_block_until_ready waits, then read as ticketing_future_get_lock
/// reads it.
///
/// TICKETING_OK: *lock_out is the held lock (free it with ticketing_lock_free; release it
/// with ticketing_lock_release first, or freeing it releases it in the background).
/// Definitive, the key is NOT held by this call: TICKETING_BUSY, TICKETING_TIMEOUT,
/// TICKETING_NOT_LEADER, TICKETING_INVALID, TICKETING_OVERLOADED, TICKETING_UNAVAILABLE.
/// TICKETING_INDETERMINATE: it MAY be held; do not enter the critical section; keep the
/// error to pass to ticketing_resolve. lock_out must not be NULL.
///
/// Blocks at most max(wait, 3 s) to put the request on a connection, then what is left
/// of wait plus the commit margin (5 s) for the answer.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_acquire(
    client: *const ticketing_client,
    key: *const c_char,
    lease_ns: i64,
    wait_ns: i64,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let lock_out = required(lock_out, "lock_out")?;
        let value = run(unsafe { operation::acquire(client, key, lease_ns, wait_ns) }?)?;
        unsafe { operation::put_lock(value, lock_out) }
    })
}

/// Finds out, without sending it again, whether the indeterminate acquire `error` (a
/// TICKETING_INDETERMINATE error from ticketing_acquire) holds its key after all. Wraps
/// Client::resolve (ticketing_resolve_start, waited for): it waits until the acquire's
/// grant can no longer happen (its send instant + its wait + 5 s), then asks the leader.
///
/// *resolution_out: TICKETING_HELD (*lock_out is the lock, adopted: free it as any
/// other), TICKETING_NOT_HELD, or TICKETING_UNKNOWN (not known within timeout_ms: do not
/// enter the critical section). Any other kind of error resolves as TICKETING_NOT_HELD.
/// Safe only when the acquire's owner did not acquire the same key meanwhile (see
/// ticketing_client_with_owner). resolution_out and lock_out must not be NULL.
/// Blocks at most timeout_ms.
///
/// # Safety
/// `client` and `error` are NULL or handles of their kinds; out-pointers NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_resolve(
    client: *const ticketing_client,
    error: *const ticketing_error,
    timeout_ms: i64,
    resolution_out: *mut c_int,
    lock_out: *mut *mut ticketing_lock,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    unsafe { put(lock_out, ptr::null_mut()) };
    guard(error_out, || {
        let resolution_out = required(resolution_out, "resolution_out")?;
        let lock_out = required(lock_out, "lock_out")?;
        let value = run(unsafe { operation::resolve(client, error, timeout_ms) }?)?;
        unsafe { operation::put_resolve(value, resolution_out, lock_out) }
    })
}

/// Releases `key` held by this handle's owner under `token` (a token kept elsewhere; the
/// CLI's `release`). Wraps Client::release (ticketing_release_start, waited for).
/// Outcomes and errors as ticketing_lock_release. Blocks at most the release deadline,
/// 5 s.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_release(
    client: *const ticketing_client,
    key: *const c_char,
    token: u64,
    outcome_out: *mut c_int,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let value = run(unsafe { operation::release(client, key, token) }?)?;
        unsafe { operation::put_release(value, outcome_out) }
    })
}

/// Who holds `key`, linearizably (answered by the leader). Wraps Client::query
/// (ticketing_query_start, waited for).
/// *held_out is 1 and *holder_out filled when the key is held, 0 when it is free
/// (holder_out untouched). held_out must not be NULL; holder_out may be NULL.
/// Errors: TICKETING_UNAVAILABLE, TICKETING_NO_ANSWER, TICKETING_INVALID, ...
/// Blocks at most the request timeout, 10 s.
///
/// # Safety
/// `client` is NULL or a client handle; `key` NULL or a C string; out-pointers
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_query(
    client: *const ticketing_client,
    key: *const c_char,
    held_out: *mut c_int,
    holder_out: *mut Holder,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let held_out = required(held_out, "held_out")?;
        let value = run(unsafe { operation::query(client, key) }?)?;
        unsafe { operation::put_query(value, held_out, holder_out) }
    })
}
