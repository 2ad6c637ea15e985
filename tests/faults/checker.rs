//! The checker: safety and recovery properties over a history (see docs/safety.md).
//!
//! Every grant — a plain ACQUIRE's or a HOLD's (counted and multi-key holds, docs/
//! guarantees.md §3.1) — has a window on each of its keys: [G received, min(release of
//! its token invoked, send time + lease)], the time the client may use it. Its end is
//! the client's local deadline, which the server's lease never ends before. What is
//! checked (numbers as in the code below):
//!
//! - (1) exclusive keys (capacity 1): no two windows overlap (`overlap`);
//! - (1b) keys of capacity > 1: at no instant do the windows open on a key hold more
//!   permits than its capacity (`over-capacity`); a POOL read that answers more
//!   permits in use than the capacity is the same violation seen by the server;
//! - (1c) tokens only grow on an exclusive key: a window that ended before another
//!   started carries the smaller token (`token-order-on-key`);
//! - (2) tokens are unique over all grants and grow in real-time order
//!   (`token-reused`, `token-order`): one grant per token, so a multi-key hold has
//!   one token;
//! - (3) FIFO per connection for plain ACQUIREs (`fifo`);
//! - (4) fencing on exclusive keys (`stale-write-accepted`,
//!   `write-with-ungranted-token`);
//! - (5) no acknowledged release undone, by QUERY or POOL (`release-undone`); (5b) no
//!   lease ended early (`lease-ended-early`);
//! - (6) recovery after every heal (`no-recovery`);
//! - (7) whole holds: a linearizable read (QUERY, POOL) of one of a grant's keys made
//!   wholly inside the grant's window shows the grant's token on that key, and a POOL
//!   read its capacity and at least its permits (`hold-not-whole`): a grant holds all
//!   of its keys with its one token.
//!
//! A grant whose outcome is unknown (an indeterminate ACQUIRE or HOLD) has no window:
//! it may have been granted, which could only add holders, so the counts over the
//! definite windows are never above the truth and any excess they find is real; the
//! lease bounds the unknown ones.

use std::collections::{BTreeMap, HashMap};

use super::history::{AcqOutcome, Event, Part, PoolOutcome, QueryOutcome, RelOutcome};

pub struct CheckConfig {
    /// End of the workload: after the last heal, a grant must complete before it (as
    /// after any other heal, before the next fault is injected; the harness waits for
    /// that grant before it goes on).
    pub run_end: u64,
    /// Two windows may touch by this much without counting as an overlap (the server
    /// rounds its lease start down to a whole millisecond).
    pub overlap_tolerance_us: u64,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig { run_end: u64::MAX, overlap_tolerance_us: 2_000 }
    }
}

/// Violation categories.
pub const OVERLAP: &str = "overlap";
pub const TOKEN_REUSED: &str = "token-reused";
pub const TOKEN_ORDER: &str = "token-order";
pub const FIFO: &str = "fifo";
pub const STALE_WRITE: &str = "stale-write-accepted";
pub const UNKNOWN_TOKEN_WRITE: &str = "write-with-ungranted-token";
pub const RELEASE_UNDONE: &str = "release-undone";
pub const NO_RECOVERY: &str = "no-recovery";
pub const LEASE_EARLY: &str = "lease-ended-early";
pub const NOT_HEALED: &str = "fault-not-healed";
pub const OVER_CAPACITY: &str = "over-capacity";
pub const TOKEN_KEY_ORDER: &str = "token-order-on-key";
pub const NOT_WHOLE: &str = "hold-not-whole";

#[derive(Default, Debug)]
pub struct Report {
    pub ops: u64,
    pub acquires: u64,
    pub grants: u64,
    pub busy: u64,
    pub timeouts: u64,
    pub not_leader: u64,
    pub unavailable: u64,
    pub other_errors: u64,
    pub indeterminate: BTreeMap<String, u64>,
    pub releases: u64,
    pub released: u64,
    pub release_not_holder: u64,
    pub release_failed: u64,
    pub queries: u64,
    /// HOLDs (counted and multi-key): made, granted, and of the grants those of the
    /// stock alone and those of several keys.
    pub holds: u64,
    pub hold_grants: u64,
    pub hold_grants_multi: u64,
    pub hold_busy: u64,
    pub hold_timeouts: u64,
    pub hold_not_leader: u64,
    pub hold_other: u64,
    pub hold_indeterminate: BTreeMap<String, u64>,
    /// POOL reads answered, and the most permits one of them saw in use on a key of
    /// capacity > 1.
    pub pools: u64,
    pub pool_failed: u64,
    pub pool_peak_in_use: u32,
    pub writes: u64,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    pub zombie_writes: u64,
    pub zombie_writes_rejected: u64,
    pub faults: BTreeMap<String, u64>,
    pub max_recovery_us: u64,
    /// Pairs of one connection's queued ACQUIREs the FIFO check judged.
    pub fifo_pairs: u64,
    /// `N` before the deadline after a retried release (see check 5b): the client's
    /// own first attempt had released the key.
    pub early_not_holder_after_retry: u64,
    /// Exclusive windows compared for overlaps.
    pub windows: u64,
    /// Windows on keys of capacity > 1 counted against the capacity, and the most
    /// permits they held at once.
    pub counted_windows: u64,
    pub peak_permits: u32,
    /// Reads (QUERY, POOL) made inside a grant's window and judged for whole holds.
    pub whole_reads: u64,
    pub violations: Vec<(&'static str, String)>,
}

impl Report {
    pub fn indeterminate_total(&self) -> u64 {
        self.indeterminate.values().sum()
    }

    pub fn count(&self, category: &str) -> usize {
        self.violations.iter().filter(|(c, _)| *c == category).count()
    }

    fn flag(&mut self, category: &'static str, message: String) {
        self.violations.push((category, message));
    }

    /// The one-screen summary.
    pub fn render(&self, title: &str) -> String {
        let mut s = String::new();
        let secs = |us: u64| us as f64 / 1e6;
        s.push_str(&format!("==== {title} ====\n"));
        s.push_str(&format!(
            "ops {}  (acquire {}, release {}, query {})\n",
            self.ops, self.acquires, self.releases, self.queries
        ));
        s.push_str(&format!(
            "acquire: granted {}  busy {}  timeout {}  not-leader {}  unavailable {}  other {}  indeterminate {}\n",
            self.grants,
            self.busy,
            self.timeouts,
            self.not_leader,
            self.unavailable,
            self.other_errors,
            self.indeterminate_total()
        ));
        if !self.indeterminate.is_empty() {
            let parts: Vec<String> = self.indeterminate.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            s.push_str(&format!("  indeterminate by cause: {}\n", parts.join(", ")));
        }
        if self.holds > 0 {
            s.push_str(&format!(
                "hold: {}  granted {} (of several keys {})  busy {}  timeout {}  not-leader {}  other {}  indeterminate {}\n",
                self.holds,
                self.hold_grants,
                self.hold_grants_multi,
                self.hold_busy,
                self.hold_timeouts,
                self.hold_not_leader,
                self.hold_other,
                self.hold_indeterminate.values().sum::<u64>()
            ));
            if !self.hold_indeterminate.is_empty() {
                let parts: Vec<String> =
                    self.hold_indeterminate.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                s.push_str(&format!("  indeterminate by cause: {}\n", parts.join(", ")));
            }
            s.push_str(&format!(
                "pool reads: {}  failed {}  most permits in use seen on a counted key: {}\n",
                self.pools, self.pool_failed, self.pool_peak_in_use
            ));
        }
        s.push_str(&format!(
            "release: released {}  not-holder {} (of them before the deadline after a retried attempt: {})  unconfirmed {}\n",
            self.released, self.release_not_holder, self.early_not_holder_after_retry, self.release_failed
        ));
        s.push_str(&format!(
            "fenced writes: {}  accepted {}  rejected stale {}  (zombie writes after a client pause: {}, of them rejected {})\n",
            self.writes, self.writes_accepted, self.writes_rejected, self.zombie_writes, self.zombie_writes_rejected
        ));
        let faults: Vec<String> = self.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&format!(
            "faults injected: {}  ({})\n",
            self.faults.values().sum::<u64>(),
            if faults.is_empty() { "none".into() } else { faults.join(", ") }
        ));
        s.push_str(&format!(
            "checked: {} exclusive windows, {} FIFO pairs; slowest recovery after a heal: {:.1} s\n",
            self.windows,
            self.fifo_pairs,
            secs(self.max_recovery_us)
        ));
        if self.counted_windows > 0 || self.whole_reads > 0 {
            s.push_str(&format!(
                "checked: {} windows on counted keys (at most {} permits held at once), {} reads inside a grant's window\n",
                self.counted_windows, self.peak_permits, self.whole_reads
            ));
        }
        if self.violations.is_empty() {
            s.push_str("violations: 0\n");
        } else {
            let mut by: BTreeMap<&str, usize> = BTreeMap::new();
            for (c, _) in &self.violations {
                *by.entry(c).or_default() += 1;
            }
            s.push_str(&format!("violations: {}  {:?}\n", self.violations.len(), by));
            for (c, m) in self.violations.iter().take(12) {
                s.push_str(&format!("  [{c}] {m}\n"));
            }
            if self.violations.len() > 12 {
                s.push_str(&format!("  … and {} more (see the history)\n", self.violations.len() - 12));
            }
        }
        s
    }
}

#[derive(Clone, Debug)]
struct Grant {
    client: u32,
    thread: u32,
    /// The keys granted: one of capacity 1 for a plain ACQUIRE.
    parts: Vec<Part>,
    /// A HOLD's grant (judged for FIFO only when false).
    hold: bool,
    token: u64,
    invoke: u64,
    sent: u64,
    received: u64,
    deadline: u64,
    wait_ms: u64,
}

impl Grant {
    /// The key named in messages (a plain ACQUIRE's only key).
    fn key(&self) -> &str {
        &self.parts[0].key
    }

    fn part(&self, key: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.key == key)
    }

    fn keys(&self) -> String {
        let keys: Vec<String> = self
            .parts
            .iter()
            .map(|p| {
                if p.capacity == 1 {
                    p.key.clone()
                } else {
                    format!("{}×{}/{}", p.key, p.count, p.capacity)
                }
            })
            .collect();
        keys.join("+")
    }
}

/// A grant's window on one of its keys.
#[derive(Clone, Copy)]
struct Window<'a> {
    start: u64,
    end: u64,
    count: u32,
    capacity: u32,
    grant: &'a Grant,
}

/// What a linearizable read saw on a key.
enum Seen {
    /// QUERY: the holder's token, or free.
    Holder(Option<u64>),
    /// POOL: capacity, permits in use, holds, and the tokens it listed.
    Pool { capacity: u32, in_use: u32, holds: u32, tokens: Vec<u64> },
}

struct Read {
    key: String,
    invoke: u64,
    complete: u64,
    seen: Seen,
}

pub fn check(events: &[Event], cfg: &CheckConfig) -> Report {
    let mut r = Report::default();
    let mut grants: Vec<Grant> = Vec::new();
    let mut release_sent: HashMap<u64, u64> = HashMap::new();
    let mut released_acks: Vec<(String, u64, u64)> = Vec::new();
    let mut not_holder: Vec<(String, u64, u64, u64)> = Vec::new();
    let mut writes = Vec::new();
    let mut reads: Vec<Read> = Vec::new();
    let mut faults = Vec::new();
    for e in events {
        match e {
            Event::Acquire { client, thread, key, wait_ms, invoke, complete, outcome, .. } => {
                r.ops += 1;
                r.acquires += 1;
                match outcome {
                    AcqOutcome::Granted { token, sent, deadline } => {
                        r.grants += 1;
                        grants.push(Grant {
                            client: *client,
                            thread: *thread,
                            parts: vec![Part { key: key.clone(), count: 1, capacity: 1 }],
                            hold: false,
                            token: *token,
                            invoke: *invoke,
                            sent: *sent,
                            received: *complete,
                            deadline: *deadline,
                            wait_ms: *wait_ms,
                        });
                    }
                    AcqOutcome::Busy => r.busy += 1,
                    AcqOutcome::Timeout => r.timeouts += 1,
                    AcqOutcome::NotLeader => r.not_leader += 1,
                    AcqOutcome::Unavailable => r.unavailable += 1,
                    AcqOutcome::Overloaded | AcqOutcome::Invalid(_) => r.other_errors += 1,
                    AcqOutcome::Indeterminate(why) => *r.indeterminate.entry(why.clone()).or_default() += 1,
                }
            }
            Event::Hold { client, thread, parts, wait_ms, invoke, complete, outcome, .. } => {
                r.ops += 1;
                r.holds += 1;
                match outcome {
                    AcqOutcome::Granted { token, sent, deadline } => {
                        r.hold_grants += 1;
                        if parts.len() > 1 {
                            r.hold_grants_multi += 1;
                        }
                        grants.push(Grant {
                            client: *client,
                            thread: *thread,
                            parts: parts.clone(),
                            hold: true,
                            token: *token,
                            invoke: *invoke,
                            sent: *sent,
                            received: *complete,
                            deadline: *deadline,
                            wait_ms: *wait_ms,
                        });
                    }
                    AcqOutcome::Busy => r.hold_busy += 1,
                    AcqOutcome::Timeout => r.hold_timeouts += 1,
                    AcqOutcome::NotLeader => r.hold_not_leader += 1,
                    AcqOutcome::Indeterminate(why) => {
                        *r.hold_indeterminate.entry(why.clone()).or_default() += 1
                    }
                    _ => r.hold_other += 1,
                }
            }
            Event::Release { key, token, invoke, complete, outcome, .. } => {
                r.ops += 1;
                r.releases += 1;
                let sent = release_sent.entry(*token).or_insert(*invoke);
                *sent = (*sent).min(*invoke);
                match outcome {
                    RelOutcome::Released => {
                        r.released += 1;
                        released_acks.push((key.clone(), *token, *complete));
                    }
                    RelOutcome::NotHolder => {
                        r.release_not_holder += 1;
                        not_holder.push((key.clone(), *token, *invoke, *complete));
                    }
                    RelOutcome::Failed(_) => r.release_failed += 1,
                }
            }
            Event::Write { seq, key, token, at, accepted, zombie, client, thread } => {
                r.writes += 1;
                if *accepted {
                    r.writes_accepted += 1;
                } else {
                    r.writes_rejected += 1;
                }
                if *zombie {
                    r.zombie_writes += 1;
                    if !*accepted {
                        r.zombie_writes_rejected += 1;
                    }
                }
                writes.push((*seq, key.clone(), *token, *at, *accepted, *client, *thread));
            }
            Event::Query { key, invoke, complete, outcome, .. } => {
                r.ops += 1;
                r.queries += 1;
                let seen = match outcome {
                    QueryOutcome::Holder(t) => Seen::Holder(Some(*t)),
                    QueryOutcome::Free => Seen::Holder(None),
                    QueryOutcome::Failed(_) => continue,
                };
                reads.push(Read { key: key.clone(), invoke: *invoke, complete: *complete, seen });
            }
            Event::Pool { key, invoke, complete, outcome, .. } => {
                r.ops += 1;
                match outcome {
                    PoolOutcome::Seen { capacity, in_use, holds, tokens } => {
                        r.pools += 1;
                        if *capacity > 1 {
                            r.pool_peak_in_use = r.pool_peak_in_use.max(*in_use);
                        }
                        if in_use > capacity || holds > in_use {
                            r.flag(
                                OVER_CAPACITY,
                                format!(
                                    "key {key}: a POOL read from {} s to {} s answered {in_use} permits in use by {holds} holds, capacity {capacity}",
                                    secs(*invoke),
                                    secs(*complete)
                                ),
                            );
                        }
                        let seen = Seen::Pool {
                            capacity: *capacity,
                            in_use: *in_use,
                            holds: *holds,
                            tokens: tokens.clone(),
                        };
                        reads.push(Read { key: key.clone(), invoke: *invoke, complete: *complete, seen });
                    }
                    PoolOutcome::Failed(_) => r.pool_failed += 1,
                }
            }
            Event::Fault { kind, detail, start, end, healed } => {
                *r.faults.entry(kind.clone()).or_default() += 1;
                if !healed {
                    r.flag(
                        NOT_HEALED,
                        format!("{kind} ({detail}) injected at {} s was not healed", secs(*start)),
                    );
                }
                faults.push((kind.clone(), detail.clone(), *start, *end));
            }
        }
    }

    // Windows per key: [G received, min(release of its token sent, send time + lease)].
    let mut exclusive: HashMap<&str, Vec<Window>> = HashMap::new();
    let mut counted: HashMap<&str, Vec<Window>> = HashMap::new();
    for g in &grants {
        let mut end = g.deadline;
        if let Some(rel) = release_sent.get(&g.token) {
            end = end.min(*rel);
        }
        if end <= g.received {
            continue;
        }
        for p in &g.parts {
            let w = Window { start: g.received, end, count: p.count, capacity: p.capacity, grant: g };
            if p.capacity == 1 {
                r.windows += 1;
                exclusive.entry(&p.key).or_default().push(w);
            } else {
                r.counted_windows += 1;
                counted.entry(&p.key).or_default().push(w);
            }
        }
    }

    // 1. Exclusive keys: no two windows overlap.
    for (key, windows) in exclusive.iter_mut() {
        windows.sort_by_key(|w| w.start);
        let mut open: Option<(u64, &Grant)> = None; // the window that ends last so far
        for w in windows.iter() {
            let g = w.grant;
            if let Some((oend, og)) = open {
                if w.start + cfg.overlap_tolerance_us < oend {
                    r.flag(
                        OVERLAP,
                        format!(
                            "key {}: client {}/{} token {} held until {} s while client {}/{} token {} got it at {} s",
                            key.to_string() + &other_keys(og, g),
                            og.client,
                            og.thread,
                            og.token,
                            secs(oend),
                            g.client,
                            g.thread,
                            g.token,
                            secs(w.start)
                        ),
                    );
                }
            }
            if open.is_none_or(|(oend, _)| w.end > oend) {
                open = Some((w.end, g));
            }
        }
    }

    // 1b. Keys of capacity > 1: the permits of the windows open at each window's start
    // (the 2 ms tolerance as for overlaps) stay within the capacity.
    for (key, windows) in counted.iter_mut() {
        windows.sort_by_key(|w| w.start);
        let mut open: Vec<Window> = Vec::new();
        for w in windows.iter() {
            open.retain(|o| w.start + cfg.overlap_tolerance_us < o.end);
            let held = w.count + open.iter().map(|o| o.count).sum::<u32>();
            r.peak_permits = r.peak_permits.max(held);
            let capacity = open.iter().map(|o| o.capacity).fold(w.capacity, u32::min);
            if held > capacity {
                let others: Vec<String> = open
                    .iter()
                    .map(|o| format!("token {} ×{} until {} s", o.grant.token, o.count, secs(o.end)))
                    .collect();
                r.flag(
                    OVER_CAPACITY,
                    format!(
                        "key {key} (capacity {capacity}): client {}/{} token {} got {} permits at {} s while {} held",
                        w.grant.client,
                        w.grant.thread,
                        w.grant.token,
                        w.count,
                        secs(w.start),
                        others.join(", ")
                    ),
                );
            }
            open.push(*w);
        }
    }

    // 1c. Tokens only grow on an exclusive key: a window that ended before another
    // started (by the server's lease, the later grant came after the earlier one's
    // hold ended) carries the smaller token. Judged for windows longer than the
    // tolerance (the server's millisecond rounding could otherwise reorder them).
    for (key, windows) in exclusive.iter() {
        let mut by_start: Vec<&Window> = windows.iter().collect();
        by_start.sort_by_key(|w| w.start);
        let mut by_end: Vec<&Window> = windows.iter().collect();
        by_end.sort_by_key(|w| w.end);
        let (mut k, mut best): (usize, Option<&Window>) = (0, None);
        for w in by_start {
            while k < by_end.len() && by_end[k].end <= w.start {
                if best.is_none_or(|b| by_end[k].grant.token > b.grant.token) {
                    best = Some(by_end[k]);
                }
                k += 1;
            }
            if w.end < w.start + cfg.overlap_tolerance_us {
                continue;
            }
            if let Some(b) = best.filter(|b| b.grant.token >= w.grant.token) {
                r.flag(
                    TOKEN_KEY_ORDER,
                    format!(
                        "key {key}: token {} (keys {}) held until {} s, then token {} (keys {}) from {} s",
                        b.grant.token,
                        b.grant.keys(),
                        secs(b.end),
                        w.grant.token,
                        w.grant.keys(),
                        secs(w.start)
                    ),
                );
            }
        }
    }

    // 2. Tokens: unique, and increasing in real-time order (G received before the
    // other ACQUIRE or HOLD was invoked → smaller token), over all keys of the domain.
    // One grant per token: a hold's keys all carry its one token.
    let mut seen: HashMap<u64, &Grant> = HashMap::new();
    for g in &grants {
        if let Some(o) = seen.insert(g.token, g) {
            r.flag(
                TOKEN_REUSED,
                format!("token {} granted twice: keys {} and keys {}", g.token, o.keys(), g.keys()),
            );
        }
    }
    let mut by_received: Vec<&Grant> = grants.iter().collect();
    by_received.sort_by_key(|g| g.received);
    let mut by_invoke: Vec<&Grant> = grants.iter().collect();
    by_invoke.sort_by_key(|g| g.invoke);
    let mut k = 0;
    let mut best: Option<&Grant> = None;
    for g in by_invoke {
        while k < by_received.len() && by_received[k].received < g.invoke {
            if best.is_none_or(|b| by_received[k].token > b.token) {
                best = Some(by_received[k]);
            }
            k += 1;
        }
        if let Some(b) = best {
            if g.token <= b.token {
                r.flag(
                    TOKEN_ORDER,
                    format!(
                        "token went back: key {} token {} (G at {} s) then key {} token {} for a request invoked at {} s",
                        b.keys(),
                        b.token,
                        secs(b.received),
                        g.keys(),
                        g.token,
                        secs(g.invoke)
                    ),
                );
            }
        }
    }

    // 3. FIFO per key on one connection: two ACQUIREs of one client (one connection to
    // the leader) for one key, the first written before the second, both granted by one
    // leader (no fault around them): the first must get the key first.
    // Quiet: no fault from 1 s before to 3 s after (an election started by a fault
    // ends within one election timeout, 2.0–2.3 s, of the heal).
    let quiet =
        |from: u64, to: u64| faults.iter().all(|(_, _, s, e)| to + 1_000_000 < *s || *e + 3_000_000 < from);
    let mut per_conn: HashMap<(u32, &str), Vec<&Grant>> = HashMap::new();
    for g in grants.iter().filter(|g| !g.hold) {
        per_conn.entry((g.client, g.key())).or_default().push(g);
    }
    for list in per_conn.values_mut() {
        list.sort_by_key(|g| g.sent);
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.sent >= a.received {
                    break;
                }
                // 5 ms between the two writes: the writes of one connection are
                // serialized, so the earlier `sent` reached the socket first.
                if a.wait_ms == 0 || b.sent <= a.sent + 5_000 || !quiet(a.sent, a.received.max(b.received)) {
                    continue;
                }
                r.fifo_pairs += 1;
                if b.token < a.token {
                    r.flag(
                        FIFO,
                        format!(
                            "key {}: client {} sent ACQUIRE (thread {}) at {} s before thread {} at {} s, but the later one got the key first (tokens {} > {})",
                            a.key(), a.client, a.thread, secs(a.sent), b.thread, secs(b.sent), a.token, b.token
                        ),
                    );
                }
            }
        }
    }

    // 4. Fenced resource: replayed in its own order, an accepted write never carries a
    // token below the key's high-water mark (equal = more writes of the same grant),
    // and every accepted write carries a token some client was granted that key with.
    writes.sort_by_key(|w| w.0);
    let mut high: HashMap<&str, (u64, u64)> = HashMap::new();
    for (_, key, token, at, accepted, client, thread) in &writes {
        let hw = high.get(key.as_str()).copied().unwrap_or((0, 0));
        if *accepted {
            if *token < hw.0 {
                r.flag(
                    STALE_WRITE,
                    format!(
                        "key {key}: write with token {token} by client {client}/{thread} accepted at {} s after token {} had written (at {} s)",
                        secs(*at),
                        hw.0,
                        secs(hw.1)
                    ),
                );
            } else {
                high.insert(key, (*token, *at));
            }
            if seen.get(token).is_none_or(|g| g.part(key).is_none()) {
                r.flag(
                    UNKNOWN_TOKEN_WRITE,
                    format!("key {key}: accepted write with token {token}, never granted on it"),
                );
            }
        }
    }

    // 5. No acknowledged release is undone: once `R` came back for a token (a release
    // ends every key of its grant), no later QUERY or POOL read shows that token
    // holding a key.
    let mut acks: HashMap<u64, (u64, &str)> = HashMap::new();
    for (key, token, at) in &released_acks {
        let e = acks.entry(*token).or_insert((*at, key));
        if *at < e.0 {
            *e = (*at, key);
        }
    }
    for read in &reads {
        let tokens: &[u64] = match &read.seen {
            Seen::Holder(Some(t)) => std::slice::from_ref(t),
            Seen::Holder(None) => &[],
            Seen::Pool { tokens, .. } => tokens,
        };
        for token in tokens {
            if let Some((at, released_key)) = acks.get(token).filter(|(at, _)| read.invoke > *at) {
                r.flag(
                    RELEASE_UNDONE,
                    format!(
                        "key {}: token {token} released (R for key {released_key} at {} s) but a read invoked at {} s shows it holding (answered {} s)",
                        read.key,
                        secs(*at),
                        secs(read.invoke),
                        secs(read.complete)
                    ),
                );
            }
        }
    }

    // 5b. A lease never ends before the holder's local deadline (guarantees.md §4): a
    // RELEASE answered `N` before that deadline means the server ended the hold early —
    // but only if that `N` answered the release's first attempt. The client sends a
    // release again after 1 s without an answer (or a lost connection); the retry then
    // gets `N` when the first attempt did commit and its `R` was dropped as the answer
    // of an abandoned attempt. So: judged only for answers within 0.95 s of the
    // invocation, away from faults (which break connections).
    for (key, token, invoke, at) in &not_holder {
        let single_attempt = at.saturating_sub(*invoke) < 950_000;
        let calm = faults.iter().all(|(_, _, s, e)| at + 1_000_000 < *s || e + 1_000_000 < *invoke);
        if let Some(g) = seen.get(token).filter(|g| g.part(key).is_some()) {
            if *at + cfg.overlap_tolerance_us < g.deadline && single_attempt && calm {
                r.flag(
                    LEASE_EARLY,
                    format!(
                        "key {key}: release of token {token} answered N at {} s, before the holder's deadline {} s",
                        secs(*at),
                        secs(g.deadline)
                    ),
                );
            } else if *at + cfg.overlap_tolerance_us < g.deadline {
                r.early_not_holder_after_retry += 1;
            }
        }
    }

    // 6. Recovery: after each heal, a grant completes before the next fault is injected
    // (after the last, before the run ends). An order, not a time: the harness waits
    // for that grant (60 s against a hang) before it injects the next fault.
    let mut received: Vec<u64> = grants.iter().map(|g| g.received).collect();
    received.sort_unstable();
    let mut starts: Vec<u64> = faults.iter().map(|(_, _, start, _)| *start).collect();
    starts.sort_unstable();
    for (kind, detail, _, end) in &faults {
        let next_fault = starts.iter().copied().find(|s| s >= end).unwrap_or(cfg.run_end);
        let i = received.partition_point(|t| t < end);
        match received.get(i) {
            Some(t) if *t <= next_fault => r.max_recovery_us = r.max_recovery_us.max(t - end),
            other => r.flag(
                NO_RECOVERY,
                format!(
                    "no grant after {kind} ({detail}) healed at {} s before {} at {} s (next grant: {})",
                    secs(*end),
                    if next_fault == cfg.run_end { "the run's end" } else { "the next fault" },
                    secs(next_fault),
                    other.map(|t| format!("{} s", secs(*t))).unwrap_or("never".into())
                ),
            ),
        }
    }

    // 7. Whole holds: a read (linearizable: it saw the state at one instant between its
    // invocation and its answer) made wholly inside a grant's window on one of its keys
    // must show that grant there — its token; for a POOL read also the key's capacity
    // and at least the grant's permits in use. A POOL read lists at most 8 holds: the
    // token is looked for only when it listed them all. A QUERY of a key of capacity
    // > 1 is not judged.
    let mut windows_of: HashMap<&str, (Vec<Window>, u64)> = HashMap::new();
    for (key, ws) in exclusive.iter().chain(counted.iter()) {
        let entry = windows_of.entry(key).or_default();
        entry.0.extend(ws.iter().copied());
    }
    for (ws, longest) in windows_of.values_mut() {
        ws.sort_by_key(|w| w.start);
        *longest = ws.iter().map(|w| w.end - w.start).max().unwrap_or(0);
    }
    for read in &reads {
        let Some((ws, longest)) = windows_of.get(read.key.as_str()) else { continue };
        let from = ws.partition_point(|w| w.start + longest < read.invoke);
        let to = ws.partition_point(|w| w.start <= read.invoke);
        for w in &ws[from..to] {
            if read.complete + cfg.overlap_tolerance_us > w.end {
                continue;
            }
            let g = w.grant;
            let missing = match &read.seen {
                Seen::Holder(_) if w.capacity > 1 => continue,
                Seen::Holder(Some(t)) if *t == g.token => None,
                Seen::Holder(Some(t)) => Some(format!("a QUERY showed token {t}")),
                Seen::Holder(None) => Some("a QUERY showed it free".to_owned()),
                Seen::Pool { capacity, in_use, holds, tokens } => {
                    if *capacity != w.capacity || *in_use < w.count {
                        Some(format!("a POOL read answered capacity {capacity}, {in_use} permits in use"))
                    } else if tokens.len() as u32 >= *holds && !tokens.contains(&g.token) {
                        Some(format!("a POOL read listed the holds {tokens:?}"))
                    } else {
                        None
                    }
                }
            };
            r.whole_reads += 1;
            if let Some(what) = missing {
                r.flag(
                    NOT_WHOLE,
                    format!(
                        "key {}: client {}/{} token {} (keys {}) held it from {} s to {} s, but {what} (from {} s to {} s)",
                        read.key,
                        g.client,
                        g.thread,
                        g.token,
                        g.keys(),
                        secs(w.start),
                        secs(w.end),
                        secs(read.invoke),
                        secs(read.complete)
                    ),
                );
            }
        }
    }
    r
}

/// For an overlap message: the keys of the two grants when either names several.
fn other_keys(a: &Grant, b: &Grant) -> String {
    if a.parts.len() == 1 && b.parts.len() == 1 {
        String::new()
    } else {
        format!(" (keys {} and {})", a.keys(), b.keys())
    }
}

fn secs(us: u64) -> String {
    format!("{:.3}", us as f64 / 1e6)
}
