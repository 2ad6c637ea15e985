//! The leader's lines for counted and multi-key holds (docs/architecture.md, "Lines"):
//! pools of permits, one arrival sequence for all keys, grants all-or-nothing in strict
//! FIFO order across keys, and each waiter's place in line.
//!
//! A pure, deterministic state machine: no clock reads, no I/O. Keys are the caller's
//! handles (`K`, a key's slot in the lock table); each waiter carries the caller's
//! payload (`T`: its connection, request id, owner, lease …) and is named by its
//! arrival number ([`Seq`]).
//!
//! The rule: a request is granted — all of
//! its keys at once — only when for every key it names (a) no request that arrived
//! earlier and names that key still waits, and (b) the key has `count` permits free.
//! Queues are kept in arrival order, so (a) means "first in the queue of every key it
//! names". The oldest waiter is first everywhere it waits, so it is granted as soon as
//! its keys have the permits: no deadlock, no starvation, no barging.
//!
//! What it costs: a request of `n` keys joins and leaves `n` queues (a binary search and
//! a shift within one key's queue); a freed permit wakes only the first waiter of each
//! key it frees; a place in line is a binary search per key, asked at most once per
//! second per waiter that wants it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;

/// Most keys one request names.
pub const KEYS_PER_REQUEST_MAX: usize = crate::proto::limits::HOLD_KEYS_MAX;
/// Largest capacity of a key.
pub const CAPACITY_MAX: u32 = crate::proto::limits::CAPACITY_MAX;
/// A waiter that asked for its place in line hears it at most this often.
pub const POSITION_EVERY_MS: u64 = 1_000;
/// The grant rate of a key is measured over windows of this length.
const RATE_WINDOW_MS: u64 = 10_000;

/// A request's arrival number: one sequence for all keys, in the order the leader
/// accepted the requests.
pub type Seq = u64;

/// One key a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want<K> {
    pub key: K,
    /// Permits of the key the request takes (1 ≤ count ≤ capacity).
    pub count: u32,
    /// The key's capacity as the request states it.
    pub capacity: u32,
}

/// Why a request was refused before anything changed (`E 1`, naming the field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No keys, or more than [`KEYS_PER_REQUEST_MAX`].
    KeyCount { keys: usize },
    /// The request names the key at index `at` twice (`first` is the earlier index).
    DuplicateKey { first: usize, at: usize },
    /// Capacity 0 or over [`CAPACITY_MAX`].
    Capacity { at: usize, capacity: u32 },
    /// Count 0 or over the capacity stated.
    Count { at: usize, count: u32, capacity: u32 },
    /// The key has holders or waiters and another capacity.
    CapacityMismatch { at: usize, asked: u32, has: u32 },
}

impl Refusal {
    /// The refusal naming the key at index `at` by `name(at)`.
    pub fn message_naming(&self, name: impl Fn(usize) -> String) -> String {
        let plain = self.message();
        match self {
            Refusal::Capacity { at, .. }
            | Refusal::Count { at, .. }
            | Refusal::CapacityMismatch { at, .. } => plain.replacen(&format!("key {at}"), &name(*at), 1),
            _ => plain,
        }
    }

    /// The refusal in the protocol's words: the field, the numbers and the fix.
    pub fn message(&self) -> String {
        match self {
            Refusal::KeyCount { keys } => {
                format!("keys: a request names 1 to {KEYS_PER_REQUEST_MAX} keys, not {keys}")
            }
            Refusal::DuplicateKey { first, at } => {
                format!("keys: key {at} is key {first} again; name each key once")
            }
            Refusal::Capacity { at, capacity } => {
                format!("capacity of key {at}: {capacity} is outside 1 to {CAPACITY_MAX}")
            }
            Refusal::Count { at, count, capacity } => {
                format!("count of key {at}: {count} is outside 1 to its capacity {capacity}")
            }
            Refusal::CapacityMismatch { at, asked, has } => format!(
                "capacity of key {at}: the request says {asked}, and the key has capacity {has} while it \
                 has holders or waiters; every request on a key states the same capacity"
            ),
        }
    }
}

/// What became of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked<T> {
    /// Granted at once: every key had its permits and nobody waited on them.
    Granted(T),
    /// Waits in line as `seq`; `ahead` requests are ahead of it in the longest of its
    /// queues (told to it now if it asked for its place).
    Queued { seq: Seq, ahead: u32 },
    /// Not granted, and it may not wait (wait 0, or a queue is full).
    Busy(T),
}

/// A waiting request that was granted: its arrival number, its keys and its payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Granted<K, T> {
    pub seq: Seq,
    pub wants: Vec<Want<K>>,
    pub payload: T,
}

/// A waiter's place in line, as told to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub seq: Seq,
    /// Requests ahead of it in the longest of its queues.
    pub ahead: u32,
    /// Recent grants per second on that key, in thousandths (0: none measured yet).
    pub grants_per_ks: u32,
}

struct Waiter<K, T> {
    wants: Vec<Want<K>>,
    payload: T,
    /// Asked for its place in line: the place last told (none yet: `u32::MAX`), and
    /// when it is next looked at (its entry in `places_due`).
    told: Option<(u32, u64)>,
}

#[derive(Default)]
struct Rate {
    since_ms: u64,
    grants: u32,
    /// Thousandths of a grant per second over the last full window.
    last_per_ks: u32,
}

struct Line {
    capacity: u32,
    in_use: u32,
    /// Waiting requests naming this key, in arrival order.
    queue: VecDeque<Seq>,
    rate: Rate,
}

impl Line {
    fn free(&self) -> u32 {
        self.capacity - self.in_use
    }

    /// Requests ahead of `seq` in this queue.
    fn ahead(&self, seq: Seq) -> u32 {
        match self.queue.binary_search(&seq) {
            Ok(i) | Err(i) => i as u32,
        }
    }

    fn counted_grant(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.rate.since_ms);
        if elapsed >= RATE_WINDOW_MS {
            self.rate.last_per_ks =
                (u64::from(self.rate.grants) * 1_000_000 / elapsed).min(u64::from(u32::MAX)) as u32;
            self.rate.since_ms = now_ms;
            self.rate.grants = 0;
        }
        self.rate.grants = self.rate.grants.saturating_add(1);
    }

    fn per_ks(&self, now_ms: u64) -> u32 {
        let elapsed = now_ms.saturating_sub(self.rate.since_ms);
        let current = if elapsed >= POSITION_EVERY_MS {
            (u64::from(self.rate.grants) * 1_000_000 / elapsed).min(u64::from(u32::MAX)) as u32
        } else {
            0
        };
        if self.rate.last_per_ks == 0 {
            current
        } else {
            self.rate.last_per_ks
        }
    }
}

/// The pools, their lines and their waiters. See the module docs.
pub struct Lines<K, T> {
    lines: HashMap<K, Line>,
    waiters: HashMap<Seq, Waiter<K, T>>,
    /// Waiters that asked for their place, by when it is next looked at.
    places_due: BTreeSet<(u64, Seq)>,
    next_seq: Seq,
    waiters_per_key_max: usize,
    /// Keys with at least one waiter.
    queued_keys: usize,
    /// Places in queues: the keys named by all waiting requests, summed.
    places: usize,
}

impl<K, T> std::fmt::Debug for Lines<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("keys", &self.lines.len())
            .field("waiters", &self.waiters.len())
            .finish()
    }
}

impl<K: Copy + Eq + Hash + std::fmt::Debug, T> Lines<K, T> {
    /// Empty lines; one more waiter than `waiters_per_key_max` on a key is `Busy`.
    pub fn new(waiters_per_key_max: usize) -> Self {
        Lines {
            lines: HashMap::new(),
            waiters: HashMap::new(),
            places_due: BTreeSet::new(),
            next_seq: 1,
            waiters_per_key_max,
            queued_keys: 0,
            places: 0,
        }
    }

    /// A line for `key` with `in_use` permits held (a new leader's lines start from
    /// the pooled holds it applied). Adds to a line that exists.
    pub fn seed(&mut self, key: K, capacity: u32, in_use: u32) {
        let line = self.line(&Want { key, count: 0, capacity });
        line.in_use += in_use;
    }

    /// Every waiter, with its payload, oldest first; the lines are emptied (this node
    /// no longer leads).
    pub fn drain(&mut self) -> Vec<(Seq, T)> {
        let mut all: Vec<(Seq, T)> = self.waiters.drain().map(|(seq, w)| (seq, w.payload)).collect();
        all.sort_unstable_by_key(|(seq, _)| *seq);
        self.lines.clear();
        self.places_due.clear();
        self.queued_keys = 0;
        self.places = 0;
        all
    }

    /// Keys with waiters: each with its capacity, permits in use, number of waiters
    /// and the first waiter's payload (unordered).
    pub fn queued(&self) -> impl Iterator<Item = (K, u32, u32, usize, &T)> {
        self.lines.iter().filter_map(|(k, l)| {
            let head = self.waiters.get(l.queue.front()?)?;
            Some((*k, l.capacity, l.in_use, l.queue.len(), &head.payload))
        })
    }

    /// Keys with at least one waiter.
    pub fn queued_keys(&self) -> usize {
        self.queued_keys
    }

    /// The keys and counts of waiter `seq`.
    pub fn wants(&self, seq: Seq) -> Option<&[Want<K>]> {
        self.waiters.get(&seq).map(|w| w.wants.as_slice())
    }

    /// Checks a request's keys, counts and capacities against the limits and against
    /// the keys' capacities; changes nothing.
    pub fn check(&self, wants: &[Want<K>], outside: impl Fn(K) -> u32) -> Result<(), Refusal> {
        if wants.is_empty() || wants.len() > KEYS_PER_REQUEST_MAX {
            return Err(Refusal::KeyCount { keys: wants.len() });
        }
        for (at, w) in wants.iter().enumerate() {
            if let Some(first) = wants[..at].iter().position(|x| x.key == w.key) {
                return Err(Refusal::DuplicateKey { first, at });
            }
            if w.capacity == 0 || w.capacity > CAPACITY_MAX {
                return Err(Refusal::Capacity { at, capacity: w.capacity });
            }
            if w.count == 0 || w.count > w.capacity {
                return Err(Refusal::Count { at, count: w.count, capacity: w.capacity });
            }
            let has = match self.lines.get(&w.key) {
                Some(line) => Some(line.capacity),
                None => (outside(w.key) > 0).then_some(1),
            };
            if let Some(has) = has.filter(|&has| has != w.capacity) {
                return Err(Refusal::CapacityMismatch { at, asked: w.capacity, has });
            }
        }
        Ok(())
    }

    /// A request arrives. `may_wait`: its wait is above 0. `place`: it asked for its
    /// place in line. Granted at once only if no earlier request waits on any of its
    /// keys and each has its count free. `outside(key)`: permits of a key without a
    /// line that are held outside the lines (its own holder: 1, capacity 1); a line
    /// made for the key starts with them in use, and they come back through
    /// [`Lines::free`].
    #[allow(clippy::too_many_arguments)]
    pub fn ask(
        &mut self,
        wants: Vec<Want<K>>,
        may_wait: bool,
        place: bool,
        payload: T,
        now_ms: u64,
        outside: impl Fn(K) -> u32,
    ) -> Result<Asked<T>, (Refusal, T)> {
        if let Err(refusal) = self.check(&wants, &outside) {
            return Err((refusal, payload));
        }
        let fits = wants.iter().all(|w| match self.lines.get(&w.key) {
            Some(l) => l.queue.is_empty() && l.free() >= w.count,
            None => outside(w.key) + w.count <= w.capacity,
        });
        if fits {
            for w in &wants {
                let held = if self.lines.contains_key(&w.key) { 0 } else { outside(w.key) };
                let line = self.line(w);
                line.in_use += w.count + held;
                line.counted_grant(now_ms);
            }
            return Ok(Asked::Granted(payload));
        }
        let full = wants
            .iter()
            .any(|w| self.lines.get(&w.key).map_or(0, |l| l.queue.len()) >= self.waiters_per_key_max);
        if !may_wait || full {
            return Ok(Asked::Busy(payload));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        for w in &wants {
            let held = if self.lines.contains_key(&w.key) { 0 } else { outside(w.key) };
            let line = self.line(w);
            line.in_use += held;
            line.queue.push_back(seq);
            if line.queue.len() == 1 {
                self.queued_keys += 1;
            }
        }
        self.places += wants.len();
        let ahead = self.ahead_of(&wants, seq).0;
        let told = place.then_some((ahead, now_ms + POSITION_EVERY_MS));
        if place {
            self.places_due.insert((now_ms + POSITION_EVERY_MS, seq));
        }
        self.waiters.insert(seq, Waiter { wants, payload, told });
        Ok(Asked::Queued { seq, ahead })
    }

    /// A hold ended: its permits go back to its keys, and to the waiters that now meet
    /// the rule, in arrival order (returned, each with its keys).
    pub fn free(&mut self, held: &[Want<K>], now_ms: u64) -> Vec<Granted<K, T>> {
        let mut woken = Vec::with_capacity(held.len());
        for w in held {
            let Some(line) = self.lines.get_mut(&w.key) else {
                debug_assert!(false, "permits freed on a key with no line: {:?}", w.key);
                continue;
            };
            debug_assert!(line.in_use >= w.count, "more permits freed than in use");
            line.in_use -= w.count.min(line.in_use);
            woken.extend(line.queue.front().copied());
            self.forget_if_idle(w.key);
        }
        self.grant_from(woken, now_ms)
    }

    /// Waiter `seq` leaves its lines (its wait ended, it was cancelled, its connection
    /// closed). Whoever it held up and now meets the rule is granted (returned).
    pub fn leave(&mut self, seq: Seq, now_ms: u64) -> Option<(T, Vec<Granted<K, T>>)> {
        let waiter = self.waiters.remove(&seq)?;
        if let Some((_, due)) = waiter.told {
            self.places_due.remove(&(due, seq));
        }
        let mut woken = Vec::new();
        for w in &waiter.wants {
            let Some(line) = self.lines.get_mut(&w.key) else { continue };
            if let Ok(i) = line.queue.binary_search(&seq) {
                line.queue.remove(i);
                self.places -= 1;
                if line.queue.is_empty() {
                    self.queued_keys -= 1;
                }
                if i == 0 {
                    woken.extend(line.queue.front().copied());
                }
            }
            self.forget_if_idle(w.key);
        }
        let granted = self.grant_from(woken, now_ms);
        Some((waiter.payload, granted))
    }

    /// The places in line due now: of each waiter that asked for its place and whose
    /// place changed since it was last told, at most once per [`POSITION_EVERY_MS`].
    pub fn places_due(&mut self, now_ms: u64) -> Vec<(Place, &T)> {
        let mut told = Vec::new();
        while let Some(&(due, seq)) = self.places_due.first() {
            if due > now_ms {
                break;
            }
            self.places_due.pop_first();
            let Some(waiter) = self.waiters.get(&seq) else { continue };
            let (ahead, key) = self.ahead_of(&waiter.wants, seq);
            let last = waiter.told.map(|(a, _)| a);
            if last != Some(ahead) {
                let grants_per_ks = self.lines.get(&key).map_or(0, |l| l.per_ks(now_ms));
                told.push(Place { seq, ahead, grants_per_ks });
            }
            let due = now_ms + POSITION_EVERY_MS;
            if let Some(w) = self.waiters.get_mut(&seq) {
                w.told = Some((ahead, due));
            }
            self.places_due.insert((due, seq));
        }
        told.into_iter().filter_map(|place| Some((place, &self.waiters.get(&place.seq)?.payload))).collect()
    }

    /// When [`Lines::places_due`] next has something to look at.
    pub fn next_place_due(&self) -> Option<u64> {
        self.places_due.first().map(|&(due, _)| due)
    }

    /// The waiter `seq`'s payload.
    pub fn waiter(&self, seq: Seq) -> Option<&T> {
        self.waiters.get(&seq).map(|w| &w.payload)
    }

    /// What the lines know of `key`: (capacity, permits in use, waiters).
    pub fn pool(&self, key: K) -> Option<(u32, u32, usize)> {
        if self.lines.is_empty() {
            return None;
        }
        self.lines.get(&key).map(|l| (l.capacity, l.in_use, l.queue.len()))
    }

    /// Waiting requests.
    pub fn waiters(&self) -> usize {
        self.waiters.len()
    }

    /// Keys with holders or waiters.
    pub fn keys(&self) -> usize {
        self.lines.len()
    }

    /// Places in queues: every waiting request counted once per key it names.
    pub fn places(&self) -> usize {
        self.places
    }

    /// The recent grant rate of the key of the longest of waiter `seq`'s queues (the
    /// one its place counts), in thousandths of a grant per second; 0 when none is
    /// measured yet (or `seq` does not wait).
    pub fn grants_per_ks(&self, seq: Seq, now_ms: u64) -> u32 {
        let Some(waiter) = self.waiters.get(&seq) else { return 0 };
        let (_, key) = self.ahead_of(&waiter.wants, seq);
        self.lines.get(&key).map_or(0, |l| l.per_ks(now_ms))
    }

    /// The first broken rule, if any: permits in use within capacity, queues in
    /// arrival order and holding exactly the waiters that name their key, no idle
    /// line, and no waiter that meets the rule left waiting (a freed permit is never
    /// idle while a request that fits waits first in line).
    pub fn find_broken(&self) -> Result<(), String> {
        let mut queued = 0;
        for (key, line) in &self.lines {
            if line.in_use > line.capacity || line.capacity == 0 || line.capacity > CAPACITY_MAX {
                return Err(format!("{key:?}: {} of {} permits in use", line.in_use, line.capacity));
            }
            if line.in_use == 0 && line.queue.is_empty() {
                return Err(format!("{key:?}: an idle line is kept"));
            }
            if !line.queue.iter().zip(line.queue.iter().skip(1)).all(|(a, b)| a < b) {
                return Err(format!("{key:?}: the queue is out of arrival order: {:?}", line.queue));
            }
            for seq in &line.queue {
                let Some(w) = self.waiters.get(seq) else {
                    return Err(format!("{key:?}: queued request {seq} is not waiting"));
                };
                if !w.wants.iter().any(|x| x.key == *key) {
                    return Err(format!("{key:?}: queued request {seq} does not name it"));
                }
            }
            queued += line.queue.len();
        }
        let mut named = 0;
        for (seq, w) in &self.waiters {
            for x in &w.wants {
                let Some(line) = self.lines.get(&x.key) else {
                    return Err(format!("request {seq} waits on {:?}, which has no line", x.key));
                };
                if line.capacity != x.capacity {
                    return Err(format!(
                        "request {seq} states capacity {} of {:?}, which has {}",
                        x.capacity, x.key, line.capacity
                    ));
                }
                if line.queue.binary_search(seq).is_err() {
                    return Err(format!("request {seq} is missing from the queue of {:?}", x.key));
                }
            }
            named += w.wants.len();
            if self.meets_rule(*seq, &w.wants) {
                return Err(format!("request {seq} meets the rule and still waits"));
            }
        }
        if named != queued || queued != self.places {
            return Err(format!(
                "{queued} queue places for {named} keys named by waiters, {} counted",
                self.places
            ));
        }
        let queued_keys = self.lines.values().filter(|l| !l.queue.is_empty()).count();
        if queued_keys != self.queued_keys {
            return Err(format!("{queued_keys} keys with waiters, {} counted", self.queued_keys));
        }
        Ok(())
    }

    fn line(&mut self, w: &Want<K>) -> &mut Line {
        self.lines.entry(w.key).or_insert_with(|| Line {
            capacity: w.capacity,
            in_use: 0,
            queue: VecDeque::new(),
            rate: Rate::default(),
        })
    }

    /// A key with no holder and no waiter is forgotten (its capacity with it).
    fn forget_if_idle(&mut self, key: K) {
        if self.lines.get(&key).is_some_and(|l| l.in_use == 0 && l.queue.is_empty()) {
            self.lines.remove(&key);
        }
    }

    /// First in line on every key it names, and every key has its count free.
    fn meets_rule(&self, seq: Seq, wants: &[Want<K>]) -> bool {
        wants.iter().all(|w| {
            self.lines.get(&w.key).is_some_and(|l| l.queue.front() == Some(&seq) && l.free() >= w.count)
        })
    }

    /// Requests ahead of `seq` in the longest of its queues, and that queue's key.
    fn ahead_of(&self, wants: &[Want<K>], seq: Seq) -> (u32, K) {
        let mut best = (0, wants[0].key);
        for w in wants {
            let ahead = self.lines.get(&w.key).map_or(0, |l| l.ahead(seq));
            if ahead > best.0 {
                best = (ahead, w.key);
            }
        }
        best
    }

    /// Grants, in arrival order, every request that meets the rule among `candidates`
    /// (requests that just became first in some line) and those that become first
    /// behind the ones granted.
    fn grant_from(&mut self, candidates: Vec<Seq>, now_ms: u64) -> Vec<Granted<K, T>> {
        let mut todo: BTreeSet<Seq> = candidates.into_iter().collect();
        let mut granted = Vec::new();
        while let Some(seq) = todo.pop_first() {
            let Some(waiter) = self.waiters.get(&seq) else { continue };
            if !self.meets_rule(seq, &waiter.wants) {
                continue;
            }
            let waiter = self.waiters.remove(&seq).expect("looked up above");
            if let Some((_, due)) = waiter.told {
                self.places_due.remove(&(due, seq));
            }
            for w in &waiter.wants {
                let line = self.lines.get_mut(&w.key).expect("a waiter's key has a line");
                line.queue.pop_front();
                self.places -= 1;
                line.in_use += w.count;
                line.counted_grant(now_ms);
                match line.queue.front() {
                    Some(&next) => {
                        todo.insert(next);
                    }
                    None => self.queued_keys -= 1,
                }
            }
            granted.push(Granted { seq, wants: waiter.wants, payload: waiter.payload });
        }
        granted
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
