//! The client workload: groups of threads, each group sharing one official
//! [`Client`] (one owner, one connection per node, pipelined requests), on a handful
//! of keys with short leases and waits: plain ACQUIREs, and beside them counted holds
//! of a stock key and multi-key holds. Holders write to a fenced resource.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ticketing::client::{AcquireError, Client, ReleaseOutcome};

use super::history::{AcqOutcome, Clock, Event, Part, PoolOutcome, QueryOutcome, RelOutcome};
use super::{rng, Rng};
use crate::common::TOKEN;

pub const KEYS: usize = 3;
/// The stock key of the counted holds, and its capacity (holds take 1 or 2 permits).
pub const STOCK: &str = "s0";
pub const STOCK_CAPACITY: u32 = 3;
/// Exclusive keys `m0`.. that only the multi-key holds name.
pub const HOLD_KEYS: usize = 3;

/// Events of the run, in completion order.
pub type Sink = Arc<Mutex<Vec<Event>>>;

/// The protected store: a per-key high-water token, compared and advanced atomically
/// with the write (docs/fencing.md). `token >= high` is accepted: tokens are never reused, so
/// an equal token is the same grant writing again.
pub struct Fence {
    state: Mutex<(u64, HashMap<String, u64>)>,
    clock: Clock,
    sink: Sink,
}

impl Fence {
    pub fn new(clock: Clock, sink: Sink) -> Fence {
        Fence { state: Mutex::new((0, HashMap::new())), clock, sink }
    }

    pub fn write(&self, client: u32, thread: u32, key: &str, token: u64, zombie: bool) -> bool {
        let mut st = self.state.lock().unwrap();
        let high = st.1.get(key).copied().unwrap_or(0);
        let accepted = token >= high;
        if accepted {
            st.1.insert(key.to_owned(), token);
        }
        st.0 += 1;
        let event = Event::Write {
            seq: st.0,
            client,
            thread,
            key: key.to_owned(),
            token,
            at: self.clock.now(),
            accepted,
            zombie,
        };
        self.sink.lock().unwrap().push(event);
        accepted
    }
}

/// The cluster's client addresses; `gen` changes when a node is replaced.
pub struct Topology {
    pub gen: AtomicU64,
    pub addrs: Mutex<Vec<String>>,
}

pub struct Shared {
    pub clock: Clock,
    pub sink: Sink,
    pub fence: Fence,
    pub topology: Topology,
    pub stop: AtomicBool,
    /// Holders that will pause longer than their lease before their last write.
    pub pause_budget: AtomicU32,
}

struct Group {
    client: Mutex<(u64, Option<Client>)>,
}

fn build(shared: &Shared, group: u32) -> Client {
    let addrs = shared.topology.addrs.lock().unwrap().clone();
    Client::builder().addrs(addrs).auth_token(TOKEN).owner(format!("g{group}")).build().expect("client")
}

impl Group {
    fn client(&self, shared: &Shared, group: u32) -> Client {
        let gen = shared.topology.gen.load(Ordering::SeqCst);
        let mut c = self.client.lock().unwrap();
        if c.0 != gen || c.1.is_none() {
            *c = (gen, Some(build(shared, group)));
        }
        c.1.clone().unwrap()
    }
}

/// `groups` × `threads` workers of plain ACQUIREs (groups 0..), then `hold_groups` ×
/// `threads` workers of counted and multi-key holds (the groups after them; their own
/// clients, so the ACQUIRE workers' random choices are those of a run without holds).
pub fn start(
    shared: Arc<Shared>,
    groups: u32,
    hold_groups: u32,
    threads: u32,
    seed: u64,
) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for g in 0..groups + hold_groups {
        let group = Arc::new(Group { client: Mutex::new((u64::MAX, None)) });
        for t in 0..threads {
            let (shared, group) = (shared.clone(), group.clone());
            let rng = rng(seed ^ ((g as u64) << 32 | t as u64).wrapping_mul(0x9E37_79B9));
            handles.push(
                std::thread::Builder::new()
                    .name(format!("worker-{g}-{t}"))
                    .spawn(move || {
                        if g < groups {
                            worker(&shared, &group, g, t, rng)
                        } else {
                            hold_worker(&shared, &group, g, t, rng)
                        }
                    })
                    .unwrap(),
            );
        }
    }
    handles
}

/// What an ACQUIRE or HOLD that was not granted is recorded as.
fn failed(e: AcquireError) -> AcqOutcome {
    match e {
        AcquireError::Busy => AcqOutcome::Busy,
        AcquireError::Timeout => AcqOutcome::Timeout,
        AcquireError::NotLeader { .. } => AcqOutcome::NotLeader,
        AcquireError::Unavailable { .. } => AcqOutcome::Unavailable,
        AcquireError::Overloaded => AcqOutcome::Overloaded,
        AcquireError::Invalid(w) => AcqOutcome::Invalid(w),
        AcquireError::Indeterminate(i) => AcqOutcome::Indeterminate(format!("{:?}", i.cause())),
        other => AcqOutcome::Invalid(format!("{other:?}")),
    }
}

fn worker(shared: &Shared, group: &Group, g: u32, t: u32, mut rng: Rng) {
    let clock = shared.clock;
    let push = |e: Event| shared.sink.lock().unwrap().push(e);
    while !shared.stop.load(Ordering::SeqCst) {
        let client = group.client(shared, g);
        let key = format!("k{}", rng.below(KEYS as u64));
        if rng.below(10) == 0 {
            let invoke = clock.now();
            let outcome = match client.query(&key) {
                Ok(Some(h)) => QueryOutcome::Holder(h.token),
                Ok(None) => QueryOutcome::Free,
                Err(e) => QueryOutcome::Failed(format!("{e:?}")),
            };
            push(Event::Query { client: g, thread: t, key, invoke, complete: clock.now(), outcome });
            continue;
        }
        let lease = Duration::from_secs(1 + rng.below(3));
        let wait = Duration::from_millis([0, 300, 1000, 2000, 3000][rng.below(5) as usize]);
        let invoke = clock.now();
        let result = client.acquire(&key, lease, wait);
        let complete = clock.now();
        let base = |outcome| Event::Acquire {
            client: g,
            thread: t,
            key: key.clone(),
            lease_ms: lease.as_millis() as u64,
            wait_ms: wait.as_millis() as u64,
            invoke,
            complete,
            outcome,
        };
        let lock = match result {
            Ok(lock) => lock,
            Err(e) => {
                let outcome = failed(e);
                let contended = matches!(outcome, AcqOutcome::Busy | AcqOutcome::Timeout);
                push(base(outcome));
                if !contended {
                    // sleep: the workload's pacing after an uncontended failure.
                    std::thread::sleep(Duration::from_millis(20 + rng.below(80)));
                }
                continue;
            }
        };
        let token = lock.token();
        let deadline = lock.deadline();
        let sent = deadline - lock.lease();
        push(base(AcqOutcome::Granted { token, sent: clock.at(sent), deadline: clock.at(deadline) }));
        // A careful holder writes only before its local deadline, with a margin.
        let margin = Duration::from_millis(20);
        let in_time = |now: Instant| now + margin < deadline;
        if in_time(Instant::now()) {
            shared.fence.write(g, t, &key, token, false);
        }
        let zombie = shared
            .pause_budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
            .is_ok();
        if zombie {
            // The holder checked its deadline, then stalled past it (a GC pause, a
            // stopped VM) and writes anyway: only the fence can stop this write.
            let checked = in_time(Instant::now());
            // sleep: the zombie holder's stall past its lease (the fault being tested).
            std::thread::sleep(lease + Duration::from_millis(300 + rng.below(1200)));
            if checked {
                shared.fence.write(g, t, &key, token, true);
            }
        } else {
            // sleep: the holder's time in its critical section before it writes.
            std::thread::sleep(Duration::from_millis(rng.below(120)));
            if in_time(Instant::now()) {
                shared.fence.write(g, t, &key, token, false);
            }
        }
        let invoke = clock.now();
        let outcome = match lock.release() {
            Ok(ReleaseOutcome::Released) => RelOutcome::Released,
            Ok(ReleaseOutcome::NotHolder) => RelOutcome::NotHolder,
            // Whether this release or the lease ended the hold is unknown: judged as a
            // release without an outcome.
            Ok(other) => RelOutcome::Failed(format!("{other:?}")),
            Err(e) => RelOutcome::Failed(format!("{e:?}")),
        };
        push(Event::Release { client: g, thread: t, key, token, invoke, complete: clock.now(), outcome });
    }
}

/// The keys of one HOLD: half the time 1 or 2 permits of the stock; otherwise 2 or 3 of
/// the exclusive keys `m0`–`m2` that only holds use, in a random order (so the sets
/// cross each other), a third of those with one of the ACQUIRE workers' keys as well
/// (crossing the plain ACQUIREs, without taking much of their keys' time), a quarter
/// with 1 or 2 permits of the stock.
fn hold_parts(rng: &mut Rng) -> Vec<Part> {
    let stock =
        |rng: &mut Rng| Part { key: STOCK.into(), count: 1 + rng.below(2) as u32, capacity: STOCK_CAPACITY };
    if rng.below(2) == 0 {
        return vec![stock(rng)];
    }
    let mut keys: Vec<usize> = (0..HOLD_KEYS).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    keys.truncate(2 + rng.below(2) as usize);
    let mut parts: Vec<Part> =
        keys.iter().map(|k| Part { key: format!("m{k}"), count: 1, capacity: 1 }).collect();
    if rng.below(3) == 0 {
        let at = rng.below(parts.len() as u64 + 1) as usize;
        parts.insert(at, Part { key: format!("k{}", rng.below(KEYS as u64)), count: 1, capacity: 1 });
    }
    if rng.below(4) == 0 {
        let at = rng.below(parts.len() as u64 + 1) as usize;
        parts.insert(at, stock(rng));
    }
    parts
}

/// A worker of holds: a HOLD (`hold_parts`), and once granted a fenced write to each of
/// its exclusive keys and a POOL read of each of its keys while its local deadline is
/// ahead, 0–120 ms in its critical section, and the one release that ends them all.
fn hold_worker(shared: &Shared, group: &Group, g: u32, t: u32, mut rng: Rng) {
    let clock = shared.clock;
    let push = |e: Event| shared.sink.lock().unwrap().push(e);
    while !shared.stop.load(Ordering::SeqCst) {
        let client = group.client(shared, g);
        let parts = hold_parts(&mut rng);
        let lease = Duration::from_secs(1 + rng.below(2));
        let wait = Duration::from_millis([0, 300, 1000, 2000, 3000][rng.below(5) as usize]);
        let hold = parts.iter().fold(client.hold(lease, wait), |h, p| h.permits(&p.key, p.count, p.capacity));
        let invoke = clock.now();
        let result = hold.acquire();
        let complete = clock.now();
        let base = |outcome| Event::Hold {
            client: g,
            thread: t,
            parts: parts.clone(),
            lease_ms: lease.as_millis() as u64,
            wait_ms: wait.as_millis() as u64,
            invoke,
            complete,
            outcome,
        };
        let lock = match result {
            Ok(lock) => lock,
            Err(e) => {
                let outcome = failed(e);
                let contended = matches!(outcome, AcqOutcome::Busy | AcqOutcome::Timeout);
                push(base(outcome));
                if !contended {
                    // sleep: the workload's pacing after an uncontended failure.
                    std::thread::sleep(Duration::from_millis(20 + rng.below(80)));
                }
                continue;
            }
        };
        let token = lock.token();
        let deadline = lock.deadline();
        let sent = deadline - lock.lease();
        push(base(AcqOutcome::Granted { token, sent: clock.at(sent), deadline: clock.at(deadline) }));
        let in_time = |now: Instant| now + Duration::from_millis(20) < deadline;
        for p in parts.iter().filter(|p| p.capacity == 1) {
            if in_time(Instant::now()) {
                shared.fence.write(g, t, &p.key, token, false);
            }
        }
        for p in &parts {
            if !in_time(Instant::now()) {
                break;
            }
            let invoke = clock.now();
            let outcome = match client.pool(&p.key) {
                Ok(info) => PoolOutcome::Seen {
                    capacity: info.capacity,
                    in_use: info.in_use,
                    holds: info.holds,
                    tokens: info.holders.iter().map(|h| h.token).collect(),
                },
                Err(e) => PoolOutcome::Failed(format!("{e:?}")),
            };
            push(Event::Pool {
                client: g,
                thread: t,
                key: p.key.clone(),
                invoke,
                complete: clock.now(),
                outcome,
            });
        }
        // sleep: the holder's time in its critical section.
        std::thread::sleep(Duration::from_millis(rng.below(120)));
        let key = lock.key().to_owned();
        let invoke = clock.now();
        let outcome = match lock.release() {
            Ok(ReleaseOutcome::Released) => RelOutcome::Released,
            Ok(ReleaseOutcome::NotHolder) => RelOutcome::NotHolder,
            Ok(other) => RelOutcome::Failed(format!("{other:?}")),
            Err(e) => RelOutcome::Failed(format!("{e:?}")),
        };
        push(Event::Release { client: g, thread: t, key, token, invoke, complete: clock.now(), outcome });
    }
}
