//! The checker: safety and recovery properties over a history (see docs/safety.md).

use std::collections::{BTreeMap, HashMap};

use super::history::{AcqOutcome, Event, QueryOutcome, RelOutcome};

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
    key: String,
    token: u64,
    invoke: u64,
    sent: u64,
    received: u64,
    deadline: u64,
    wait_ms: u64,
}

pub fn check(events: &[Event], cfg: &CheckConfig) -> Report {
    let mut r = Report::default();
    let mut grants: Vec<Grant> = Vec::new();
    let mut release_sent: HashMap<(String, u64), u64> = HashMap::new();
    let mut released_acks: Vec<(String, u64, u64)> = Vec::new();
    let mut not_holder: Vec<(String, u64, u64, u64)> = Vec::new();
    let mut writes = Vec::new();
    let mut queries = Vec::new();
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
                            key: key.clone(),
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
            Event::Release { key, token, invoke, complete, outcome, .. } => {
                r.ops += 1;
                r.releases += 1;
                let sent = release_sent.entry((key.clone(), *token)).or_insert(*invoke);
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
                if let QueryOutcome::Holder(t) = outcome {
                    queries.push((key.clone(), *t, *invoke, *complete));
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

    // 1. Exclusive windows per key: [G received, min(release sent, sent + lease)].
    let mut by_key: HashMap<&str, Vec<(u64, u64, &Grant)>> = HashMap::new();
    for g in &grants {
        let mut end = g.deadline;
        if let Some(rel) = release_sent.get(&(g.key.clone(), g.token)) {
            end = end.min(*rel);
        }
        if end > g.received {
            r.windows += 1;
            by_key.entry(&g.key).or_default().push((g.received, end, g));
        }
    }
    for windows in by_key.values_mut() {
        windows.sort_by_key(|w| w.0);
        let mut open: Option<(u64, &Grant)> = None; // the window that ends last so far
        for (start, end, g) in windows.iter() {
            if let Some((oend, og)) = open {
                if *start + cfg.overlap_tolerance_us < oend {
                    r.flag(
                        OVERLAP,
                        format!(
                            "key {}: client {}/{} token {} held until {} s while client {}/{} token {} got it at {} s",
                            g.key,
                            og.client,
                            og.thread,
                            og.token,
                            secs(oend),
                            g.client,
                            g.thread,
                            g.token,
                            secs(*start)
                        ),
                    );
                }
            }
            if open.is_none_or(|(oend, _)| *end > oend) {
                open = Some((*end, g));
            }
        }
    }

    // 2. Tokens: unique, and increasing in real-time order (G received before the
    // other ACQUIRE was invoked → smaller token), over all keys of the domain.
    let mut seen: HashMap<u64, &Grant> = HashMap::new();
    for g in &grants {
        if let Some(o) = seen.insert(g.token, g) {
            r.flag(TOKEN_REUSED, format!("token {} granted twice: key {} and key {}", g.token, o.key, g.key));
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
                        "token went back: key {} token {} (G at {} s) then key {} token {} for an ACQUIRE invoked at {} s",
                        b.key,
                        b.token,
                        secs(b.received),
                        g.key,
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
    for g in &grants {
        per_conn.entry((g.client, &g.key)).or_default().push(g);
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
                            a.key, a.client, a.thread, secs(a.sent), b.thread, secs(b.sent), a.token, b.token
                        ),
                    );
                }
            }
        }
    }

    // 4. Fenced resource: replayed in its own order, an accepted write never carries a
    // token below the key's high-water mark (equal = more writes of the same grant),
    // and every accepted write carries a token some client was granted.
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
            if seen.get(token).is_none_or(|g| g.key != *key) {
                r.flag(
                    UNKNOWN_TOKEN_WRITE,
                    format!("key {key}: accepted write with token {token}, never granted on it"),
                );
            }
        }
    }

    // 5. No acknowledged release is undone: once `R` came back for (key, token), no
    // later QUERY shows that token holding the key.
    let mut acks: HashMap<(&str, u64), u64> = HashMap::new();
    for (key, token, at) in &released_acks {
        let e = acks.entry((key.as_str(), *token)).or_insert(*at);
        *e = (*e).min(*at);
    }
    for (key, token, invoke, complete) in &queries {
        if let Some(at) = acks.get(&(key.as_str(), *token)) {
            if *invoke > *at {
                r.flag(
                    RELEASE_UNDONE,
                    format!(
                        "key {key}: token {token} released (R at {} s) but a QUERY invoked at {} s shows it holding (answered {} s)",
                        secs(*at),
                        secs(*invoke),
                        secs(*complete)
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
        if let Some(g) = seen.get(token).filter(|g| g.key == *key) {
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
    r
}

fn secs(us: u64) -> String {
    format!("{:.3}", us as f64 / 1e6)
}
