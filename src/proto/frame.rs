//! Frames of the client protocol (docs/protocol.md §4): `len u32 · op u8 · id u32 · body`.
//!
//! Decoding is strict and never panics: the body must have exactly the length its op
//! needs (short, long or trailing bytes are `malformed`), and field limits (docs/protocol.md §9) are
//! checked after the structure, so an out-of-range field is `invalid` and answerable
//! with the request's id while the connection stays open.

pub use super::fields::DecodeError;
use super::fields::{
    begin_frame, end_frame, key_field, owner_field, put_str8, put_u16, put_u32, put_u64, truncate,
    utf8_field, Cursor,
};
use super::limits::*;
use super::pool_frames::decode_hold;
pub use super::pool_frames::{HoldPart, PoolHolder};

/// A request, client → server. Keys and owners are validated UTF-8 within docs/protocol.md §9.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `A`: take `key` for `lease_s` seconds, queueing up to `wait_ms`.
    Acquire { lease_s: u8, wait_ms: u32, key: String, owner: String },
    /// `R`: give `key` back; only the exact (key, owner, token) holder succeeds.
    Release { token: u64, key: String, owner: String },
    /// `Q`: who holds `key`?
    Query { key: String },
    /// `S`: the node's status text.
    Status,
    /// `P`: liveness check.
    Ping,
    /// `C`: membership change (cluster administration, docs/protocol.md §5.5): replace
    /// voter `old` by node `new` reachable at client address `addr`. Answered with
    /// `S` (the outcome as text), `M` (not the leader) or `E` (refused, with why).
    Replace { old: u64, new: u64, addr: String },
    /// `L`: list the members as this node sees them (cluster administration): voters,
    /// learners, each one's address and recorded process incarnation. Answered with `S`.
    Members,
    /// `K`: the `n` keys (1..=100) with the longest queues, as the lock table that
    /// queues them (a leader, or a standalone node) sees them. Answered with `K`, or
    /// `M` by a follower.
    TopKeys { n: u8 },
    /// `T`: hand leadership over (cluster administration, docs/protocol.md §5.5): to
    /// voter `target`, or (`None`, sent as 0) to the voter the leader chooses. Answered
    /// with `S` (`leader=ID@ADDR`) once another node leads, `M` (not the leader) or `E`
    /// (refused, or not completed within an election timeout).
    TransferLeader { target: Option<u64> },
    /// `J`: a joining node (cluster administration, docs/protocol.md §5.5) asks to be
    /// added as a standby learner under its id `node`, reachable at client address
    /// `addr`. Answered with `S` once the learner is in the committed configuration,
    /// `M` (not the leader) or `E` (refused, with why).
    Join { node: u64, addr: String },
    /// `H`: HOLD (docs/protocol.md §5.7): `parts` (1–16 distinct keys, each with a count
    /// of its capacity's permits) all at once, for `lease_s` seconds, queueing up to
    /// `wait_ms`; `place`: tell me my place in line (`I` frames before the answer).
    Hold { lease_s: u8, wait_ms: u32, place: bool, owner: String, parts: Vec<HoldPart> },
    /// `O`: POOL: the capacity, permits in use, holders and waiters of `key`.
    Pool { key: String },
    /// `F`: found a new cluster (cluster administration, docs/protocol.md §5.5) of
    /// these voters: sent to each of them, waiting nodes started with
    /// `TICKETING_CLUSTER_STATE=join` that know no cluster. Answered with `S`, or `E`
    /// (refused, with why).
    Found { voters: Vec<(u64, String)> },
}

/// Most keys one TOP KEYS answer lists.
pub const TOP_KEYS_MAX: u8 = 100;

/// One key of a TOP KEYS answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKey {
    pub key: String,
    /// ACQUIREs queued on the key.
    pub waiters: u32,
    /// How long the first of them has waited, in ms.
    pub oldest_wait_ms: u32,
    /// The holder (token 0 and an empty owner when none, for a moment between holders).
    pub token: u64,
    pub owner: String,
    /// Lease time the holder has left, in ms.
    pub remaining_ms: u32,
}

impl Request {
    /// Admin ops need a connection that proved the operator secret (docs/security.md).
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            Request::Replace { .. }
                | Request::Members
                | Request::TransferLeader { .. }
                | Request::Join { .. }
                | Request::Found { .. }
        )
    }
}

/// How the refusal (`E 5`) of an admin request on a connection that proved only the
/// client secret begins: the CLI tells this mistake from a refusal of the operation.
pub const NEEDS_OPERATOR_SECRET: &str = "admin operations need the operator secret";

/// Error codes of an `E` response (docs/protocol.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// 1: a field outside the limits of docs/protocol.md §9; the connection stays open.
    Invalid,
    /// 2: unknown request letter; sent with id 0, then the connection is closed.
    UnknownOp,
    /// 3: bad frame length or body size; sent with id 0, then the connection is closed.
    Malformed,
    /// 4: too many requests pending on this connection or node; the connection stays open.
    Overloaded,
    /// 5: a membership change was refused (the message says why); the connection stays open.
    Refused,
    /// Any code this version does not know (a client keeps what it received).
    Other(u8),
}

impl ErrorCode {
    pub fn to_u8(self) -> u8 {
        match self {
            ErrorCode::Invalid => 1,
            ErrorCode::UnknownOp => 2,
            ErrorCode::Malformed => 3,
            ErrorCode::Overloaded => 4,
            ErrorCode::Refused => 5,
            ErrorCode::Other(code) => code,
        }
    }

    pub fn from_u8(code: u8) -> ErrorCode {
        match code {
            1 => ErrorCode::Invalid,
            2 => ErrorCode::UnknownOp,
            3 => ErrorCode::Malformed,
            4 => ErrorCode::Overloaded,
            5 => ErrorCode::Refused,
            other => ErrorCode::Other(other),
        }
    }
}

/// A response, server → client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// `G`: you hold the key (committed before this was sent).
    Granted { token: u64, lease_ms: u32 },
    /// `B`: definitive: not acquired.
    Busy,
    /// `T`: definitive: the wait elapsed before your turn.
    Timeout,
    /// `R`: your release was committed.
    Released,
    /// `N`: definitive: (key, owner, token) is not the current holder.
    NotHolder,
    /// `M`: not the leader; the request was NOT executed.
    Moved { leader: String },
    /// `U`: proposed, but the outcome cannot be learned here.
    Unknown,
    /// `H`: answer to QUERY when held.
    Holder { token: u64, remaining_ms: u32, waiters: u32, owner: String },
    /// `F`: answer to QUERY when free.
    Free,
    /// `S`: `name=value` lines.
    Status { text: String },
    /// `P`: answer to PING.
    Pong,
    /// `E`: see [`ErrorCode`].
    Error { code: ErrorCode, message: String },
    /// `K`: answer to TOP KEYS, longest queue first (at most [`TOP_KEYS_MAX`]).
    TopKeys { keys: Vec<TopKey> },
    /// `I`: not an answer but news for a waiting HOLD that asked for its place in line:
    /// `ahead` requests are ahead of it in the longest of its queues, and that key saw
    /// `grants_per_ks` thousandths of a grant per second lately (0: not measured yet).
    /// Sent when it queues and then at most once a second while `ahead` changes; its
    /// one answer follows.
    InLine { ahead: u32, grants_per_ks: u32 },
    /// `O`: answer to POOL. `capacity` 0: nobody holds the key or waits for it (a key
    /// with neither is forgotten, its capacity with it). `holders` lists the oldest
    /// (at most [`POOL_HOLDERS_LISTED_MAX`]).
    Pool {
        capacity: u32,
        in_use: u32,
        holds: u32,
        waiters: u32,
        oldest_wait_ms: u32,
        holders: Vec<PoolHolder>,
    },
}

/// Checks a frame's `len` field against the receiving side's limit before anything
/// is allocated for the body.
pub fn check_frame_len(len: u32, max: u32) -> Result<usize, DecodeError> {
    if len < FRAME_LEN_MIN {
        return Err(DecodeError::Malformed("frame length below 5"));
    }
    if len > max {
        return Err(DecodeError::Malformed("frame length above the limit"));
    }
    Ok(len as usize)
}

/// Decodes a request from `payload` = op · id · body (the bytes after `len`).
pub fn decode_request(payload: &[u8]) -> Result<(u32, Request), DecodeError> {
    let mut cur = Cursor { buf: payload };
    let op = cur.u8().map_err(|_| DecodeError::Malformed("frame shorter than op + id"))?;
    let id = cur.u32().map_err(|_| DecodeError::Malformed("frame shorter than op + id"))?;
    // Why malformed and not invalid: an answer with id 0 means "connection-level error",
    // so a request that uses the reserved id cannot be answered any other way.
    if id == 0 {
        return Err(DecodeError::Malformed("request id 0 is reserved"));
    }
    if op != b'H' && payload.len() > REQUEST_FRAME_LEN_MAX as usize {
        return Err(DecodeError::Malformed("frame length above the limit"));
    }
    let request = match op {
        b'H' => {
            let (lease_s, wait_ms, place, owner, parts) = decode_hold(id, &mut cur)?;
            Request::Hold { lease_s, wait_ms, place, owner, parts }
        }
        b'O' => {
            let key = cur.str8()?;
            cur.finish()?;
            Request::Pool { key: key_field(id, key)? }
        }
        b'A' => {
            let lease_s = cur.u8()?;
            let wait_ms = cur.u32()?;
            let key = cur.str8()?;
            let owner = cur.str8()?;
            cur.finish()?;
            if !(LEASE_S_MIN..=LEASE_S_MAX).contains(&lease_s) {
                return Err(DecodeError::Invalid { id, reason: "lease_s must be 1..=250" });
            }
            if wait_ms > WAIT_MS_MAX {
                return Err(DecodeError::Invalid { id, reason: "wait_ms must be 0..=300000" });
            }
            let key = key_field(id, key)?;
            let owner = owner_field(id, owner)?;
            Request::Acquire { lease_s, wait_ms, key, owner }
        }
        b'R' => {
            let token = cur.u64()?;
            let key = cur.str8()?;
            let owner = cur.str8()?;
            cur.finish()?;
            let key = key_field(id, key)?;
            let owner = owner_field(id, owner)?;
            Request::Release { token, key, owner }
        }
        b'Q' => {
            let key = cur.str8()?;
            cur.finish()?;
            Request::Query { key: key_field(id, key)? }
        }
        b'S' => {
            cur.finish()?;
            Request::Status
        }
        b'P' => {
            cur.finish()?;
            Request::Ping
        }
        b'C' => {
            let old = cur.u64()?;
            let new = cur.u64()?;
            let addr = cur.str8()?;
            cur.finish()?;
            if old == 0 || new == 0 {
                return Err(DecodeError::Invalid { id, reason: "node ids must be non-zero" });
            }
            let addr = addr_field(id, addr)?;
            Request::Replace { old, new, addr }
        }
        b'L' => {
            cur.finish()?;
            Request::Members
        }
        b'J' => {
            let node = cur.u64()?;
            let addr = cur.str8()?;
            cur.finish()?;
            if node == 0 {
                return Err(DecodeError::Invalid { id, reason: "node ids must be non-zero" });
            }
            let addr = addr_field(id, addr)?;
            Request::Join { node, addr }
        }
        b'F' => {
            let n = cur.u8()?;
            let mut voters = Vec::with_capacity(usize::from(n).min(5));
            for _ in 0..n {
                let node = cur.u64()?;
                let addr = cur.str8()?;
                voters.push((node, addr));
            }
            cur.finish()?;
            if n != 3 && n != 5 {
                return Err(DecodeError::Invalid { id, reason: "a new cluster has 3 or 5 voters" });
            }
            let mut checked: Vec<(u64, String)> = Vec::with_capacity(voters.len());
            for (node, addr) in voters {
                if node == 0 || checked.iter().any(|(n, _)| *n == node) {
                    return Err(DecodeError::Invalid {
                        id,
                        reason: "node ids must be non-zero and distinct",
                    });
                }
                checked.push((node, addr_field(id, addr)?));
            }
            Request::Found { voters: checked }
        }
        b'K' => {
            let n = cur.u8()?;
            cur.finish()?;
            if n == 0 || n > TOP_KEYS_MAX {
                return Err(DecodeError::Invalid { id, reason: "n must be 1..=100" });
            }
            Request::TopKeys { n }
        }
        b'T' => {
            let target = cur.u64()?;
            cur.finish()?;
            Request::TransferLeader { target: (target != 0).then_some(target) }
        }
        other => return Err(DecodeError::UnknownOp(other)),
    };
    Ok((id, request))
}

/// A node's client address: UTF-8 `host:port` as every stored address is checked.
fn addr_field(id: u32, raw: &[u8]) -> Result<String, DecodeError> {
    let addr = utf8_field(id, raw, "address is not valid UTF-8")?;
    if crate::proto::addr::check_client_addr(&addr).is_err() {
        return Err(DecodeError::Invalid {
            id,
            reason: "address must be host:port (a name or IP, port 1..=64535)",
        });
    }
    Ok(addr)
}

/// Decodes a response from `payload` = op · id · body (the bytes after `len`).
/// Strings the server sent are taken lossily: a client never fails on odd text.
pub fn decode_response(payload: &[u8]) -> Result<(u32, Response), DecodeError> {
    let mut cur = Cursor { buf: payload };
    let op = cur.u8().map_err(|_| DecodeError::Malformed("frame shorter than op + id"))?;
    let id = cur.u32().map_err(|_| DecodeError::Malformed("frame shorter than op + id"))?;
    let lossy = |raw: &[u8]| String::from_utf8_lossy(raw).into_owned();
    let response = match op {
        b'G' => Response::Granted { token: cur.u64()?, lease_ms: cur.u32()? },
        b'B' => Response::Busy,
        b'T' => Response::Timeout,
        b'R' => Response::Released,
        b'N' => Response::NotHolder,
        b'M' => Response::Moved { leader: lossy(cur.str8()?) },
        b'U' => Response::Unknown,
        b'H' => {
            let token = cur.u64()?;
            let remaining_ms = cur.u32()?;
            let waiters = cur.u32()?;
            let owner = lossy(cur.str8()?);
            Response::Holder { token, remaining_ms, waiters, owner }
        }
        b'F' => Response::Free,
        b'I' => Response::InLine { ahead: cur.u32()?, grants_per_ks: cur.u32()? },
        b'O' => {
            let (capacity, in_use, holds, waiters, oldest_wait_ms) =
                (cur.u32()?, cur.u32()?, cur.u32()?, cur.u32()?, cur.u32()?);
            let n = cur.u8()?;
            if usize::from(n) > POOL_HOLDERS_LISTED_MAX {
                return Err(DecodeError::Malformed("more than 8 holders in a POOL answer"));
            }
            let mut holders = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let (token, count, remaining_ms) = (cur.u64()?, cur.u32()?, cur.u32()?);
                holders.push(PoolHolder { token, count, remaining_ms, owner: lossy(cur.str8()?) });
            }
            Response::Pool { capacity, in_use, holds, waiters, oldest_wait_ms, holders }
        }
        b'S' => Response::Status { text: lossy(cur.str16()?) },
        b'P' => Response::Pong,
        b'E' => {
            let code = ErrorCode::from_u8(cur.u8()?);
            Response::Error { code, message: lossy(cur.str8()?) }
        }
        b'K' => {
            let count = cur.u8()?;
            if count > TOP_KEYS_MAX {
                return Err(DecodeError::Malformed("more than 100 keys in a TOP KEYS answer"));
            }
            let mut keys = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let waiters = cur.u32()?;
                let oldest_wait_ms = cur.u32()?;
                let token = cur.u64()?;
                let remaining_ms = cur.u32()?;
                let key = lossy(cur.str8()?);
                let owner = lossy(cur.str8()?);
                keys.push(TopKey { key, waiters, oldest_wait_ms, token, owner, remaining_ms });
            }
            Response::TopKeys { keys }
        }
        other => return Err(DecodeError::UnknownOp(other)),
    };
    cur.finish()?;
    Ok((id, response))
}

/// Appends one whole request frame (len included) to `out`.
///
/// Panics if a string is longer than its length prefix can say: callers validate
/// keys and owners first (the client does, with a clear error).
pub fn encode_request(out: &mut Vec<u8>, id: u32, request: &Request) {
    let start = begin_frame(out);
    match request {
        Request::Acquire { lease_s, wait_ms, key, owner } => {
            out.truncate(start);
            return encode_acquire(out, id, *lease_s, *wait_ms, key, owner);
        }
        Request::Release { token, key, owner } => {
            out.truncate(start);
            return encode_release(out, id, *token, key, owner);
        }
        Request::Query { key } => {
            out.push(b'Q');
            put_u32(out, id);
            put_str8(out, key.as_bytes());
        }
        Request::Hold { lease_s, wait_ms, place, owner, parts } => {
            out.push(b'H');
            put_u32(out, id);
            out.push(*lease_s);
            put_u32(out, *wait_ms);
            out.push(u8::from(*place));
            put_str8(out, owner.as_bytes());
            out.push(parts.len().min(255) as u8);
            for p in parts.iter().take(255) {
                put_u32(out, p.count);
                put_u32(out, p.capacity);
                put_str8(out, p.key.as_bytes());
            }
        }
        Request::Pool { key } => {
            out.push(b'O');
            put_u32(out, id);
            put_str8(out, key.as_bytes());
        }
        Request::Status => {
            out.push(b'S');
            put_u32(out, id);
        }
        Request::Ping => {
            out.push(b'P');
            put_u32(out, id);
        }
        Request::Replace { old, new, addr } => {
            out.push(b'C');
            put_u32(out, id);
            put_u64(out, *old);
            put_u64(out, *new);
            put_str8(out, addr.as_bytes());
        }
        Request::Members => {
            out.push(b'L');
            put_u32(out, id);
        }
        Request::Join { node, addr } => {
            out.push(b'J');
            put_u32(out, id);
            put_u64(out, *node);
            put_str8(out, addr.as_bytes());
        }
        Request::Found { voters } => {
            out.push(b'F');
            put_u32(out, id);
            out.push(voters.len().min(255) as u8);
            for (node, addr) in voters.iter().take(255) {
                put_u64(out, *node);
                put_str8(out, addr.as_bytes());
            }
        }
        Request::TopKeys { n } => {
            out.push(b'K');
            put_u32(out, id);
            out.push(*n);
        }
        Request::TransferLeader { target } => {
            out.push(b'T');
            put_u32(out, id);
            put_u64(out, target.unwrap_or(0));
        }
    }
    end_frame(out, start);
}

/// Appends one ACQUIRE frame (len included) to `out`, from borrowed strings: the same
/// bytes as [`encode_request`] with [`Request::Acquire`], without building one.
pub fn encode_acquire(out: &mut Vec<u8>, id: u32, lease_s: u8, wait_ms: u32, key: &str, owner: &str) {
    let start = begin_frame(out);
    out.push(b'A');
    put_u32(out, id);
    out.push(lease_s);
    put_u32(out, wait_ms);
    put_str8(out, key.as_bytes());
    put_str8(out, owner.as_bytes());
    end_frame(out, start);
}

/// Appends one RELEASE frame (len included) to `out`, from borrowed strings: the same
/// bytes as [`encode_request`] with [`Request::Release`].
pub fn encode_release(out: &mut Vec<u8>, id: u32, token: u64, key: &str, owner: &str) {
    let start = begin_frame(out);
    out.push(b'R');
    put_u32(out, id);
    put_u64(out, token);
    put_str8(out, key.as_bytes());
    put_str8(out, owner.as_bytes());
    end_frame(out, start);
}

/// Appends one whole response frame (len included) to `out`. Text that does not fit
/// its length prefix (a long error message, a huge status) is cut at a char boundary.
pub fn encode_response(out: &mut Vec<u8>, id: u32, response: &Response) {
    let start = begin_frame(out);
    let (op, _) = response_op(response);
    out.push(op);
    put_u32(out, id);
    match response {
        Response::Granted { token, lease_ms } => {
            put_u64(out, *token);
            put_u32(out, *lease_ms);
        }
        Response::InLine { ahead, grants_per_ks } => {
            put_u32(out, *ahead);
            put_u32(out, *grants_per_ks);
        }
        Response::Pool { capacity, in_use, holds, waiters, oldest_wait_ms, holders } => {
            for n in [capacity, in_use, holds, waiters, oldest_wait_ms] {
                put_u32(out, *n);
            }
            let holders = &holders[..holders.len().min(POOL_HOLDERS_LISTED_MAX)];
            out.push(holders.len() as u8);
            for h in holders {
                put_u64(out, h.token);
                put_u32(out, h.count);
                put_u32(out, h.remaining_ms);
                put_str8(out, truncate(&h.owner, 255));
            }
        }
        Response::Busy
        | Response::Timeout
        | Response::Released
        | Response::NotHolder
        | Response::Unknown
        | Response::Free
        | Response::Pong => {}
        Response::Moved { leader } => put_str8(out, truncate(leader, 255)),
        Response::Holder { token, remaining_ms, waiters, owner } => {
            put_u64(out, *token);
            put_u32(out, *remaining_ms);
            put_u32(out, *waiters);
            put_str8(out, truncate(owner, 255));
        }
        Response::Status { text } => {
            let text = truncate(text, STATUS_TEXT_LEN_MAX);
            put_u16(out, text.len() as u16);
            out.extend_from_slice(text);
        }
        Response::Error { code, message } => {
            out.push(code.to_u8());
            put_str8(out, truncate(message, 255));
        }
        Response::TopKeys { keys } => {
            let keys = &keys[..keys.len().min(TOP_KEYS_MAX as usize)];
            out.push(keys.len() as u8);
            for k in keys {
                put_u32(out, k.waiters);
                put_u32(out, k.oldest_wait_ms);
                put_u64(out, k.token);
                put_u32(out, k.remaining_ms);
                put_str8(out, truncate(&k.key, 255));
                put_str8(out, truncate(&k.owner, 255));
            }
        }
    }
    end_frame(out, start);
}

/// The number of bytes [`encode_response`] appends for `response` (len field included).
pub fn encoded_response_len(response: &Response) -> usize {
    let body = match response {
        Response::Granted { .. } => 12,
        Response::InLine { .. } => 8,
        Response::Pool { holders, .. } => {
            20 + 1
                + holders
                    .iter()
                    .take(POOL_HOLDERS_LISTED_MAX)
                    .map(|h| 16 + 1 + truncate(&h.owner, 255).len())
                    .sum::<usize>()
        }
        Response::Busy
        | Response::Timeout
        | Response::Released
        | Response::NotHolder
        | Response::Unknown
        | Response::Free
        | Response::Pong => 0,
        Response::Moved { leader } => 1 + truncate(leader, 255).len(),
        Response::Holder { owner, .. } => 16 + 1 + truncate(owner, 255).len(),
        Response::Status { text } => 2 + truncate(text, STATUS_TEXT_LEN_MAX).len(),
        Response::Error { message, .. } => 1 + 1 + truncate(message, 255).len(),
        Response::TopKeys { keys } => {
            1 + keys
                .iter()
                .take(TOP_KEYS_MAX as usize)
                .map(|k| 20 + 2 + truncate(&k.key, 255).len() + truncate(&k.owner, 255).len())
                .sum::<usize>()
        }
    };
    4 + 1 + 4 + body
}

/// The op letter of a response and its name, for logs and docs.
pub fn response_op(response: &Response) -> (u8, &'static str) {
    match response {
        Response::Granted { .. } => (b'G', "GRANTED"),
        Response::Busy => (b'B', "BUSY"),
        Response::Timeout => (b'T', "TIMEOUT"),
        Response::Released => (b'R', "RELEASED"),
        Response::NotHolder => (b'N', "NOT_HOLDER"),
        Response::Moved { .. } => (b'M', "MOVED"),
        Response::Unknown => (b'U', "UNKNOWN"),
        Response::Holder { .. } => (b'H', "HOLDER"),
        Response::Free => (b'F', "FREE"),
        Response::Status { .. } => (b'S', "STATUS"),
        Response::Pong => (b'P', "PONG"),
        Response::Error { .. } => (b'E', "ERROR"),
        Response::TopKeys { .. } => (b'K', "TOP_KEYS"),
        Response::InLine { .. } => (b'I', "IN_LINE"),
        Response::Pool { .. } => (b'O', "POOL"),
    }
}
