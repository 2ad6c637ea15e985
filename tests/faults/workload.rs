//! The client workload: groups of threads, each group sharing one official
//! [`Client`] (one owner, one connection per node, pipelined requests), on a handful
//! of keys with short leases and waits. Holders write to a fenced resource.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ticketing::client::{AcquireError, Client, ReleaseOutcome};

use super::history::{AcqOutcome, Clock, Event, QueryOutcome, RelOutcome};
use super::{rng, Rng};
use crate::common::TOKEN;

pub const KEYS: usize = 3;

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

pub fn start(shared: Arc<Shared>, groups: u32, threads: u32, seed: u64) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for g in 0..groups {
        let group = Arc::new(Group { client: Mutex::new((u64::MAX, None)) });
        for t in 0..threads {
            let (shared, group) = (shared.clone(), group.clone());
            let rng = rng(seed ^ ((g as u64) << 32 | t as u64).wrapping_mul(0x9E37_79B9));
            handles.push(
                std::thread::Builder::new()
                    .name(format!("worker-{g}-{t}"))
                    .spawn(move || worker(&shared, &group, g, t, rng))
                    .unwrap(),
            );
        }
    }
    handles
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
                let outcome = match e {
                    AcquireError::Busy => AcqOutcome::Busy,
                    AcquireError::Timeout => AcqOutcome::Timeout,
                    AcquireError::NotLeader { .. } => AcqOutcome::NotLeader,
                    AcquireError::Unavailable { .. } => AcqOutcome::Unavailable,
                    AcquireError::Overloaded => AcqOutcome::Overloaded,
                    AcquireError::Invalid(w) => AcqOutcome::Invalid(w),
                    AcquireError::Indeterminate(i) => AcqOutcome::Indeterminate(format!("{:?}", i.cause())),
                    other => AcqOutcome::Invalid(format!("{other:?}")),
                };
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
