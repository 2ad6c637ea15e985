//! The C ABI without a server: argument checks, error mapping, panics, ownership.
//! tests/c_abi.rs runs a C program and these functions against real servers.

use std::ffi::{c_char, c_int, CStr, CString};
use std::net::TcpListener;
use std::ptr;
use std::time::{Duration, Instant};

use super::boundary::{getter, guard};
use super::*;
use crate::client::{AcquireError, ClientError, HolderInfo, IndeterminateCause, ReleaseError};

const SECRET: &[u8] = b"capi-unit-secret-0123";
/// A millisecond and a second in the ABI's nanoseconds (an acquire's lease and wait).
const MS: i64 = 1_000_000;
const S: i64 = TICKETING_NS_PER_S;

fn cstr<'a>(p: *const c_char) -> &'a str {
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap()
}

/// An address where nothing listens: a port bound and closed again on loopback.
fn dead_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

/// The arguments of `ticketing_client_new` but its out-pointers.
struct NewArgs {
    addrs: *const *const c_char,
    addrs_len: usize,
    secret: *const u8,
    secret_len: usize,
    owner: *const c_char,
    ca: *const c_char,
}

impl NewArgs {
    /// One address, the test secret, no owner, no CA.
    fn of(addrs: &[*const c_char]) -> NewArgs {
        NewArgs {
            addrs: addrs.as_ptr(),
            addrs_len: addrs.len(),
            secret: SECRET.as_ptr(),
            secret_len: SECRET.len(),
            owner: ptr::null(),
            ca: ptr::null(),
        }
    }

    /// `ticketing_client_new`: its status, and the client or the error it handed out.
    fn call(&self) -> (c_int, *mut ticketing_client, *mut ticketing_error) {
        let (mut client, mut error) = (ptr::null_mut(), ptr::null_mut());
        let rc = unsafe {
            ticketing_client_new(
                self.addrs,
                self.addrs_len,
                self.secret,
                self.secret_len,
                self.owner,
                self.ca,
                &mut client,
                &mut error,
            )
        };
        (rc, client, error)
    }

    /// The kind and message of the error this call fails with.
    fn fails(&self) -> (c_int, String) {
        let (rc, client, error) = self.call();
        assert!(client.is_null(), "no client on failure");
        take_error(rc, error)
    }

    /// The kind and message of the error `ticketing_client_new_for(binding, ...)` fails with.
    fn fails_for(&self, binding: &CStr) -> (c_int, String) {
        let (mut client, mut error) = (ptr::null_mut(), ptr::null_mut());
        let rc = unsafe {
            ticketing_client_new_for(
                binding.as_ptr(),
                self.addrs,
                self.addrs_len,
                self.secret,
                self.secret_len,
                self.owner,
                self.ca,
                &mut client,
                &mut error,
            )
        };
        assert!(client.is_null(), "no client on failure");
        take_error(rc, error)
    }
}

/// A client of `addr`, through the C constructor.
fn new_client(addr: &str, owner: Option<&CStr>) -> *mut ticketing_client {
    let addr = CString::new(addr).unwrap();
    let addrs = [addr.as_ptr()];
    let args = NewArgs { owner: owner.map_or(ptr::null(), CStr::as_ptr), ..NewArgs::of(&addrs) };
    let (rc, client, error) = args.call();
    assert_eq!(rc, TICKETING_OK);
    assert!(error.is_null() && !client.is_null());
    client
}

/// Kind and message of a status call's error, freeing the error.
fn take_error(rc: c_int, error: *mut ticketing_error) -> (c_int, String) {
    assert!(!error.is_null(), "no error object for status {rc}");
    let kind = unsafe { ticketing_error_kind(error) };
    assert_eq!(kind, rc, "the status is the error's kind");
    let message = cstr(unsafe { ticketing_error_message(error) }).to_owned();
    unsafe { ticketing_error_free(error) };
    (kind, message)
}

#[test]
fn versions_and_the_names_of_every_declared_value() {
    assert_eq!(ticketing_version(), TICKETING_ABI_VERSION);
    assert_eq!(cstr(ticketing_version_string()), env!("CARGO_PKG_VERSION"));
    // Each name is the C name's tail in lower case: the binding's tables are read
    // through these, so a name that drifted from its constant would reach every one.
    for kind in ticketing_kind::ALL {
        let c_name = format!("{kind:?}");
        assert_eq!(format!("TICKETING_{}", cstr(ticketing_kind_name(kind as c_int)).to_uppercase()), c_name);
    }
    for cause in ticketing_cause::ALL {
        let c_name = format!("{cause:?}");
        assert_eq!(
            format!("TICKETING_CAUSE_{}", cstr(ticketing_cause_name(cause as c_int)).to_uppercase()),
            c_name
        );
    }
    for outcome in ticketing_release_outcome::ALL {
        let name = cstr(ticketing_release_outcome_name(outcome as c_int)).to_uppercase();
        assert_eq!(format!("TICKETING_{name}"), format!("{outcome:?}"));
    }
    for resolution in ticketing_resolution::ALL {
        let name = cstr(ticketing_resolution_name(resolution as c_int)).to_uppercase();
        assert_eq!(format!("TICKETING_{name}"), format!("{resolution:?}"));
    }
    // Numbered from 0 (kinds) or 1 (the others) without a gap; NULL around them, so
    // that a table read until NULL has every value, and TICKETING_UNKNOWN ("unknown", a
    // resolution) is not taken for its end.
    assert!(ticketing_kind::ALL.iter().enumerate().all(|(i, k)| *k as usize == i));
    assert!(ticketing_cause::ALL.iter().enumerate().all(|(i, c)| *c as usize == i + 1));
    assert!(ticketing_release_outcome::ALL.iter().enumerate().all(|(i, o)| *o as usize == i + 1));
    assert!(ticketing_resolution::ALL.iter().enumerate().all(|(i, r)| *r as usize == i + 1));
    for past in [-1, ticketing_kind::ALL.len() as c_int, c_int::MIN, c_int::MAX] {
        assert!(ticketing_kind_name(past).is_null());
        assert_eq!(ticketing_kind_is_definitive(past), 0);
    }
    for past in [0, ticketing_cause::ALL.len() as c_int + 1] {
        assert!(ticketing_cause_name(past).is_null());
    }
    for past in [0, ticketing_release_outcome::ALL.len() as c_int + 1] {
        assert!(ticketing_release_outcome_name(past).is_null());
    }
    for past in [0, ticketing_resolution::ALL.len() as c_int + 1] {
        assert!(ticketing_resolution_name(past).is_null());
    }
    assert_eq!(cstr(ticketing_resolution_name(TICKETING_UNKNOWN as c_int)), "unknown");
    // What a binding does at load: each table read from its first number until NULL.
    let table = |name: extern "C" fn(c_int) -> *const c_char, first: c_int| {
        (first..).map_while(|n| (!name(n).is_null()).then(|| cstr(name(n)))).collect::<Vec<_>>()
    };
    assert_eq!(table(ticketing_kind_name, 0).len(), ticketing_kind::ALL.len());
    assert_eq!(table(ticketing_cause_name, 1).len(), ticketing_cause::ALL.len());
    assert_eq!(table(ticketing_release_outcome_name, 1), ["released", "not_holder", "released_or_expired"]);
    assert_eq!(table(ticketing_resolution_name, 1), ["held", "not_held", "unknown"]);
}

#[test]
fn definitive_kinds_are_those_whose_operation_certainly_did_not_take_effect() {
    let not_definitive: Vec<&str> = ticketing_kind::ALL
        .iter()
        .filter(|k| ticketing_kind_is_definitive(**k as c_int) == 0)
        .map(|k| cstr(ticketing_kind_name(*k as c_int)))
        .collect();
    assert_eq!(not_definitive, ["ok", "indeterminate", "unconfirmed", "protocol", "internal"]);
}

#[test]
fn every_cause_of_the_client_has_its_number() {
    for (cause, name) in [
        (IndeterminateCause::ConnectionLost, "connection_lost"),
        (IndeterminateCause::ServerUnknown, "server_unknown"),
        (IndeterminateCause::NoAnswer, "no_answer"),
        (IndeterminateCause::ProtocolViolation, "protocol_violation"),
        (IndeterminateCause::ExpiredOnArrival, "expired_on_arrival"),
        (IndeterminateCause::Cancelled, "cancelled"),
    ] {
        assert_eq!(cstr(ticketing_cause_name(ticketing_cause::of(cause) as c_int)), name);
    }
}

#[test]
fn the_holder_struct_has_the_headers_layout() {
    assert_eq!(std::mem::size_of::<Holder>(), 8 + 8 + 4 + 4 + 256);
    assert_eq!(std::mem::align_of::<Holder>(), 8);
    assert_eq!(std::mem::offset_of!(Holder, owner), 24);
}

#[test]
fn bad_arguments_are_invalid_errors_that_name_the_argument() {
    let addrs = [c"127.0.0.1:1".as_ptr()];
    let nulls = [ptr::null::<c_char>()];
    let bad = [0xffu8, 0xfe, 0];
    let invalid =
        |args: NewArgs, message: &str| assert_eq!(args.fails(), (TICKETING_INVALID as c_int, message.into()));
    invalid(NewArgs { addrs: ptr::null(), ..NewArgs::of(&addrs) }, "addrs is NULL");
    invalid(NewArgs::of(&nulls), "addrs[0] is NULL");
    invalid(NewArgs { secret: ptr::null(), ..NewArgs::of(&addrs) }, "auth_token is NULL");
    invalid(NewArgs { owner: bad.as_ptr().cast(), ..NewArgs::of(&addrs) }, "owner is not UTF-8");
    invalid(NewArgs { ca: bad.as_ptr().cast(), ..NewArgs::of(&addrs) }, "tls_ca_file is not UTF-8");
    let mut error = ptr::null_mut();
    let rc = unsafe {
        ticketing_client_new(
            addrs.as_ptr(),
            1,
            SECRET.as_ptr(),
            16,
            ptr::null(),
            ptr::null(),
            ptr::null_mut(),
            &mut error,
        )
    };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "client_out is NULL".into()));

    let client = new_client(&dead_addr(), None);
    let mut lock = ptr::null_mut();
    let start = Instant::now();
    let cases: [(*const ticketing_client, *const c_char, i64, i64, &str); 6] = [
        (ptr::null(), c"k".as_ptr(), S, 0, "client is NULL"),
        (client, ptr::null(), S, 0, "key is NULL"),
        (client, bad.as_ptr().cast(), S, 0, "key is not UTF-8"),
        (client, c"k".as_ptr(), -S, 0, "lease is -1 s; it must not be negative"),
        (client, c"k".as_ptr(), S, i64::MIN, "wait is -9223372036.854776 s; it must not be negative"),
        (
            client,
            c"k".as_ptr(),
            1500 * MS,
            0,
            "invalid request: lease must be whole seconds from 1 to 250, not 1.5 s",
        ),
    ];
    for (c, key, lease, wait, message) in cases {
        let rc = unsafe { ticketing_acquire(c, key, lease, wait, &mut lock, &mut error) };
        assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, message.into()));
        assert!(lock.is_null());
    }
    // The client's own limits, before any I/O.
    for (lease, wait) in
        [(0, 0), (251 * S, 0), (S, 300_001 * MS), (S, 300 * S + 1), (S + 1, 0), (i64::MAX, 0)]
    {
        let rc = unsafe { ticketing_acquire(client, c"k".as_ptr(), lease, wait, &mut lock, ptr::null_mut()) };
        assert_eq!(rc, TICKETING_INVALID, "lease {lease} wait {wait}");
    }
    let rc = unsafe { ticketing_acquire(client, c"".as_ptr(), S, 0, &mut lock, ptr::null_mut()) };
    assert_eq!(rc, TICKETING_INVALID);
    let rc = unsafe { ticketing_acquire(client, c"k".as_ptr(), S, 0, ptr::null_mut(), &mut error) };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "lock_out is NULL".into()));
    assert!(start.elapsed() < Duration::from_secs(1), "no I/O for bad arguments");

    let mut held = 0;
    let rc = unsafe { ticketing_query(client, c"k".as_ptr(), ptr::null_mut(), ptr::null_mut(), &mut error) };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "held_out is NULL".into()));
    let rc = unsafe { ticketing_query(client, ptr::null(), &mut held, ptr::null_mut(), &mut error) };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "key is NULL".into()));
    let rc = unsafe { ticketing_release(client, c"".as_ptr(), 1, ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(rc, TICKETING_INVALID);
    let rc = unsafe { ticketing_lock_release(ptr::null_mut(), ptr::null_mut(), &mut error) };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "lock is NULL".into()));
    let mut drained = 0;
    let rc = unsafe { ticketing_client_close(client, -5, &mut drained, &mut error) };
    assert_eq!(
        take_error(rc, error),
        (TICKETING_INVALID as c_int, "timeout_ms is -5 ms; it must not be negative".into())
    );
    let mut resolution = 0;
    let rc = unsafe { ticketing_resolve(client, ptr::null(), 0, &mut resolution, &mut lock, &mut error) };
    assert_eq!(take_error(rc, error), (TICKETING_INVALID as c_int, "error is NULL".into()));
    let rc =
        unsafe { ticketing_client_with_owner(client, c"bad\nowner".as_ptr(), &mut lock.cast(), &mut error) };
    assert_eq!(take_error(rc, error).0, TICKETING_CONFIG);
    unsafe { ticketing_client_free(client) };
}

/// `ticketing_acquire_check` refuses exactly what `ticketing_acquire_start` refuses, with
/// the same kind and message, and passes what it accepts: one rule, no client needed.
#[test]
fn the_acquire_check_is_the_starts_own() {
    let client = new_client(&dead_addr(), None);
    let bad = [0xffu8, 0xfe, 0];
    let long = CString::new("k".repeat(256)).unwrap();
    let keys = [c"k".as_ptr(), c"".as_ptr(), long.as_ptr(), bad.as_ptr().cast(), ptr::null()];
    let durations = [(S, 0), (0, 0), (1500 * MS, 0), (251 * S, 0), (-1, 0), (S, -1), (S, 300 * S + 1)];
    for key in keys {
        for (lease, wait) in durations {
            let (mut future, mut error) = (ptr::null_mut(), ptr::null_mut());
            let started =
                unsafe { ticketing_acquire_start(client, key, lease, wait, &mut future, &mut error) };
            if started == TICKETING_OK {
                unsafe { ticketing_future_free(future) };
            }
            let mut check_error = ptr::null_mut();
            let checked = unsafe { ticketing_acquire_check(key, lease, wait, &mut check_error) };
            assert_eq!(checked, started, "lease {lease} wait {wait}");
            if started == TICKETING_OK {
                assert!(check_error.is_null());
            } else {
                assert_eq!(take_error(checked, check_error), take_error(started, error));
            }
        }
    }
    let checked = unsafe { ticketing_acquire_check(c"k".as_ptr(), S, 300 * S, ptr::null_mut()) };
    assert_eq!(checked, TICKETING_OK);
    // The one rule: a lease is whole seconds to the nanosecond, a wait at most 300 s to
    // the nanosecond (what every binding passes, exactly, from its own duration type).
    for (lease, wait, ok) in [
        (1_000_400 * 1000, 0, false), // 1.0004 s
        (999_600 * 1000, 0, false),   // 0.9996 s
        (1500 * MS, 0, false),
        (250 * S, 0, true),
        (250 * S + 400 * 1000, 0, false), // 250.0004 s
        (S, 0, true),
        (S, 300 * S, true),
        (S, 300 * S + 400 * 1000, false), // 300.0004 s
    ] {
        let checked = unsafe { ticketing_acquire_check(c"k".as_ptr(), lease, wait, ptr::null_mut()) };
        assert_eq!(checked == TICKETING_OK, ok, "lease {lease} ns wait {wait} ns");
    }
    unsafe { ticketing_client_free(client) };
}

#[test]
fn configuration_errors_say_what_is_wrong() {
    let addrs = [c"127.0.0.1:1".as_ptr()];
    let config = |args: NewArgs| {
        let (kind, message) = args.fails();
        assert_eq!(kind, TICKETING_CONFIG, "{message}");
        message
    };
    let short = b"short";
    let message = config(NewArgs { secret: short.as_ptr(), secret_len: 5, ..NewArgs::of(&addrs) });
    assert_eq!(message, "auth token is 5 bytes (auth_token); at least 16 are required");
    assert_eq!(config(NewArgs::of(&[])), "no server address given in addrs");
    assert_eq!(config(NewArgs::of(&[c"no-port".as_ptr()])), "address \"no-port\" (addrs) is not host:port");
    let long = CString::new("o".repeat(256)).unwrap();
    let message = config(NewArgs { owner: long.as_ptr(), ..NewArgs::of(&addrs) });
    assert_eq!(message, "bad owner (owner): 256 bytes; must be 1..=255");
    let message = config(NewArgs { ca: c"/nonexistent/ca.pem".as_ptr(), ..NewArgs::of(&addrs) });
    assert!(message.starts_with("cannot read /nonexistent/ca.pem"), "{message}");
    // A binary secret is fine: the length, not a NUL, ends it.
    let binary = [0u8; 20];
    let (rc, client, _) = NewArgs { secret: binary.as_ptr(), secret_len: 20, ..NewArgs::of(&addrs) }.call();
    assert_eq!(rc, TICKETING_OK);
    unsafe { ticketing_client_free(client) };
}

/// Each binding's refused configuration names the setting in that language's terms: the
/// Go module's `Config` fields, the Java builder's and the Node.js package's options, the
/// Python keywords.
#[test]
fn configuration_errors_name_each_bindings_own_setting() {
    let addrs = [c"127.0.0.1:1".as_ptr()];
    let long = CString::new("o".repeat(256)).unwrap();
    let short = b"short";
    let cases = [
        (c"go", ["Config.Addrs", "Config.AuthToken", "Config.Owner"]),
        (c"java", ["addrs", "authToken", "owner"]),
        (c"node", ["addrs", "authToken", "owner"]),
        (c"python", ["addrs", "auth_token=", "owner="]),
        (c"c", ["addrs", "auth_token", "owner"]),
    ];
    for (binding, [addrs_word, token_word, owner_word]) in cases {
        let fails = |args: NewArgs| {
            let (kind, message) = args.fails_for(binding);
            assert_eq!(kind, TICKETING_CONFIG, "{binding:?}: {message}");
            message
        };
        assert_eq!(fails(NewArgs::of(&[])), format!("no server address given in {addrs_word}"));
        assert_eq!(
            fails(NewArgs::of(&[c"no-port".as_ptr()])),
            format!("address \"no-port\" ({addrs_word}) is not host:port")
        );
        assert_eq!(
            fails(NewArgs { secret: short.as_ptr(), secret_len: 5, ..NewArgs::of(&addrs) }),
            format!("auth token is 5 bytes ({token_word}); at least 16 are required")
        );
        assert_eq!(
            fails(NewArgs { owner: long.as_ptr(), ..NewArgs::of(&addrs) }),
            format!("bad owner ({owner_word}): 256 bytes; must be 1..=255")
        );
    }
}

#[test]
fn owners_and_views() {
    let client = new_client(&dead_addr(), Some(c"box-office-7"));
    assert_eq!(cstr(unsafe { ticketing_client_owner(client) }), "box-office-7");
    let mut other = ptr::null_mut();
    let rc =
        unsafe { ticketing_client_with_owner(client, c"box-office-8".as_ptr(), &mut other, ptr::null_mut()) };
    assert_eq!(rc, TICKETING_OK);
    assert_eq!(cstr(unsafe { ticketing_client_owner(other) }), "box-office-8");
    unsafe { ticketing_client_free(client) };
    // The view outlives the handle it came from.
    assert_eq!(cstr(unsafe { ticketing_client_owner(other) }), "box-office-8");
    let mut drained = 0;
    assert_eq!(unsafe { ticketing_client_close(other, 100, &mut drained, ptr::null_mut()) }, TICKETING_OK);
    assert_eq!(drained, 1, "nothing to release");
    unsafe { ticketing_client_free(other) };
    assert!(unsafe { ticketing_client_owner(ptr::null()) }.is_null());
    let default = new_client(&dead_addr(), None);
    assert!(!cstr(unsafe { ticketing_client_owner(default) }).is_empty(), "host-pid-random");
    unsafe { ticketing_client_free(default) };
}

#[test]
fn an_unreachable_server_is_unavailable_and_retryable() {
    let client = new_client(&dead_addr(), None);
    let mut lock = ptr::null_mut();
    let mut error = ptr::null_mut();
    let start = Instant::now();
    let rc = unsafe { ticketing_acquire(client, c"seat:1".as_ptr(), 5 * S, 0, &mut lock, &mut error) };
    assert_eq!(rc, TICKETING_UNAVAILABLE);
    assert!(lock.is_null());
    // The send budget of a zero wait is CONNECT_WAIT_MIN (3 s).
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(2900) && took < Duration::from_secs(6), "{took:?}");
    assert_eq!(unsafe { ticketing_error_is_retryable(error) }, 1);
    assert_eq!(unsafe { ticketing_error_cause(error) }, 0);
    assert!(unsafe { ticketing_error_leader(error) }.is_null());
    let message = cstr(unsafe { ticketing_error_message(error) });
    assert!(message.contains("nothing was sent") && message.contains("refused"), "{message}");
    // Not indeterminate: resolving it is definitive.
    let mut resolution = 0;
    let rc = unsafe { ticketing_resolve(client, error, 0, &mut resolution, &mut lock, ptr::null_mut()) };
    assert_eq!((rc, resolution), (TICKETING_OK as c_int, TICKETING_NOT_HELD as c_int));
    assert!(lock.is_null());
    unsafe { ticketing_error_free(error) };
    unsafe { ticketing_client_free(client) };
}

#[test]
fn every_client_error_maps_to_its_kind() {
    let f = Failure::from(AcquireError::NotLeader { leader: Some("127.0.0.2:5225".into()) });
    assert_eq!(
        (f.kind, f.leader.as_deref(), f.retryable),
        (TICKETING_NOT_LEADER, Some("127.0.0.2:5225"), true)
    );
    let e = handle::into_raw(ErrorHandle::from(f));
    assert_eq!(cstr(unsafe { ticketing_error_leader(e) }), "127.0.0.2:5225");
    unsafe { ticketing_error_free(e) };
    for (err, kind, retryable) in [
        (AcquireError::Busy, TICKETING_BUSY, false),
        (AcquireError::Timeout, TICKETING_TIMEOUT, false),
        (AcquireError::Overloaded, TICKETING_OVERLOADED, true),
        (AcquireError::Invalid("x".into()), TICKETING_INVALID, false),
        (AcquireError::Unavailable { last_error: None, lasting: false }, TICKETING_UNAVAILABLE, true),
        (
            AcquireError::Unavailable { last_error: Some("x".into()), lasting: true },
            TICKETING_UNAVAILABLE,
            false,
        ),
    ] {
        let message = err.to_string();
        let f = Failure::from(err);
        assert_eq!(
            (f.kind, f.retryable, f.message.as_str(), f.acquire.is_none()),
            (kind, retryable, &*message, true)
        );
    }
    for (err, kind) in [
        (ReleaseError::QueueFull, TICKETING_QUEUE_FULL),
        (ReleaseError::Unconfirmed, TICKETING_UNCONFIRMED),
        (ReleaseError::Unavailable { last_error: None, lasting: true }, TICKETING_UNAVAILABLE),
        (ReleaseError::Invalid("x".into()), TICKETING_INVALID),
    ] {
        assert_eq!(Failure::from(err).kind, kind);
    }
    for (err, kind, retryable) in [
        (ClientError::Unavailable { last_error: None, lasting: false }, TICKETING_UNAVAILABLE, true),
        (ClientError::Unavailable { last_error: None, lasting: true }, TICKETING_UNAVAILABLE, false),
        (ClientError::NoAnswer, TICKETING_NO_ANSWER, false),
        (ClientError::NotLeader { leader: None }, TICKETING_NOT_LEADER, true),
        (ClientError::Invalid("x".into()), TICKETING_INVALID, false),
        (ClientError::Overloaded, TICKETING_OVERLOADED, true),
        (ClientError::Protocol("x".into()), TICKETING_PROTOCOL, false),
        (ClientError::Refused("x".into()), TICKETING_REFUSED, false),
    ] {
        let f = Failure::from(err);
        assert_eq!((f.kind, f.retryable), (kind, retryable));
    }
}

#[test]
fn a_nul_in_a_message_does_not_cut_it() {
    let e = handle::into_raw(ErrorHandle::from(Failure::invalid("before\0after")));
    assert_eq!(cstr(unsafe { ticketing_error_message(e) }), "before\u{fffd}after");
    unsafe { ticketing_error_free(e) };
}

#[test]
fn a_panic_becomes_an_internal_error_and_never_crosses() {
    let mut error = ptr::null_mut();
    let rc = guard(&mut error, || panic!("boom {}", 42));
    assert_eq!(
        take_error(rc, error),
        (TICKETING_INTERNAL as c_int, "internal error in libticketing (a bug): boom 42".into())
    );
    let rc = guard(ptr::null_mut(), || std::panic::panic_any(7u8));
    assert_eq!(rc, TICKETING_INTERNAL);
    let mut error = ptr::null_mut();
    let rc = guard(&mut error, || std::panic::panic_any(7u8));
    assert!(take_error(rc, error).1.ends_with("a panic without a message"));
    assert_eq!(getter(5, || panic!("getter")), 5);
    // A success clears the out-pointer.
    let mut error = ptr::dangling_mut::<ticketing_error>();
    assert_eq!(guard(&mut error, || Ok(())), TICKETING_OK);
    assert!(error.is_null());
}

#[test]
fn null_handles_are_harmless_for_getters_and_frees() {
    unsafe {
        assert_eq!(ticketing_lock_token(ptr::null()), 0);
        assert!(ticketing_lock_key(ptr::null()).is_null());
        assert!(ticketing_lock_owner(ptr::null()).is_null());
        assert_eq!(ticketing_lock_lease_ms(ptr::null()), 0);
        assert_eq!(ticketing_lock_remaining_ms(ptr::null()), 0);
        assert_eq!(ticketing_error_kind(ptr::null()), TICKETING_INVALID);
        assert!(ticketing_error_message(ptr::null()).is_null());
        assert_eq!(ticketing_error_cause(ptr::null()), 0);
        assert_eq!(ticketing_error_is_retryable(ptr::null()), 0);
        ticketing_lock_free(ptr::null_mut());
        ticketing_error_free(ptr::null_mut());
        ticketing_client_free(ptr::null_mut());
    }
}

#[test]
fn a_holder_is_copied_with_its_owner_cut_at_255_bytes() {
    let mut holder = Holder { token: 0, lease_left_ms: 0, waiters: 0, owner_len: 0, owner: [1; 256] };
    let info =
        |owner: String| HolderInfo { owner, token: 9, remaining: Duration::from_millis(1500), waiters: 3 };
    holder.fill(&info("box-office-7".into()));
    assert_eq!((holder.token, holder.lease_left_ms, holder.waiters, holder.owner_len), (9, 1500, 3, 12));
    assert_eq!(cstr(holder.owner.as_ptr()), "box-office-7");
    holder.fill(&info("é".repeat(200)));
    assert_eq!(holder.owner_len, 254, "cut at a character boundary");
    assert_eq!(cstr(holder.owner.as_ptr()), "é".repeat(127));
}

#[test]
fn every_handle_may_be_shared_between_threads() {
    // The header promises that any number of threads may use one handle at once.
    fn shared<T: Send + Sync>() {}
    shared::<ClientHandle>();
    shared::<LockHandle>();
    shared::<ErrorHandle>();
}
