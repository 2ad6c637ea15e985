//! The client handle (`ticketing_client`): making one, its owner, closing and freeing
//! it; and `ticketing_holder`, what a query fills in. The operations started on it are
//! in `operation.rs` (their blocking calls in `blocking.rs`).

use std::ffi::{c_char, c_int, CString};
use std::ptr;

use super::abi::*;
use super::boundary::{duration, guard, optional_text, put, required, text};
use super::error::{c_string, Failure};
use super::handle::{self, Kind, Opaque};
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
        self.owner_len = owner_into(&mut self.owner, &info.owner);
    }
}

/// Copies `owner` into a NUL-terminated field and returns its length. Owners are at
/// most 255 bytes (docs/protocol.md); cut at a character boundary should a server ever
/// send more.
pub(super) fn owner_into(field: &mut [c_char; 256], owner: &str) -> u32 {
    let mut len = owner.len().min(255);
    while !owner.is_char_boundary(len) {
        len -= 1;
    }
    for (dst, src) in field.iter_mut().zip(owner.as_bytes()[..len].iter()) {
        *dst = *src as c_char;
    }
    field[len] = 0;
    len as u32
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
