//! Field and frame limits of the client protocol (docs/protocol.md §9). Every limit is a named
//! constant with its unit in the name, checked before anything is allocated.

/// Shortest key, in bytes.
pub const KEY_LEN_MIN: usize = 1;
/// Longest key, in bytes (a `str8` cannot say more anyway).
pub const KEY_LEN_MAX: usize = 255;
/// Shortest owner, in bytes.
pub const OWNER_LEN_MIN: usize = 1;
/// Longest owner, in bytes.
pub const OWNER_LEN_MAX: usize = 255;
/// Shortest lease, in seconds.
pub const LEASE_S_MIN: u8 = 1;
/// Longest lease, in seconds: longer work is not supported in v1.
pub const LEASE_S_MAX: u8 = 250;
/// Longest wait in a queue, in milliseconds (0 = one immediate try).
pub const WAIT_MS_MAX: u32 = 300_000;
/// Smallest frame `len` (op + id).
pub const FRAME_LEN_MIN: u32 = 5;
/// Largest frame `len` a server accepts, but for HOLD.
pub const REQUEST_FRAME_LEN_MAX: u32 = 1024;
/// Largest frame `len` of a HOLD (16 keys of 255 bytes fit).
pub const HOLD_FRAME_LEN_MAX: u32 = 8192;
/// Most keys one HOLD names.
pub const HOLD_KEYS_MAX: usize = 16;
/// Largest capacity of a key.
pub const CAPACITY_MAX: u32 = 1_000_000;
/// Most holders a POOL answer lists (the oldest).
pub const POOL_HOLDERS_LISTED_MAX: usize = 8;
/// Largest frame `len` a client accepts.
pub const RESPONSE_FRAME_LEN_MAX: u32 = 65_535;
/// Default limit of waiters queued on one key (`TICKETING_MAX_WAITERS`).
pub const WAITERS_PER_KEY_MAX_DEFAULT: usize = 4096;
/// A handshake not finished within this many milliseconds is closed by the server.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// Shortest accepted auth token, in bytes.
pub const AUTH_TOKEN_LEN_MIN: usize = 16;
/// Longest STATUS text, in bytes (`str16`).
pub const STATUS_TEXT_LEN_MAX: usize = 65_535 - 5 - 2;
/// Longest cluster name (`TICKETING_CLUSTER_NAME`), in bytes.
pub const CLUSTER_NAME_LEN_MAX: usize = 63;

/// Checks a cluster name (docs/configuration.md): 1 to [`CLUSTER_NAME_LEN_MAX`] bytes of
/// ASCII letters, digits, `.`, `_` and `-`. Why so narrow: it travels in a STATUS line
/// and in the peer HELLO, and an operator types and compares it; a space or a
/// look-alike character would make two names that read the same differ.
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > CLUSTER_NAME_LEN_MAX {
        return Err(format!("{name:?} must be 1 to {CLUSTER_NAME_LEN_MAX} bytes long"));
    }
    match name.bytes().find(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))) {
        Some(_) => Err(format!("{name:?} may hold only ASCII letters, digits, '.', '_' and '-'")),
        None => Ok(()),
    }
}
