//! Memory accounting of the pure lock table: heap bytes and allocations per held lock,
//! counted by a counting allocator, with bounds that fail on a regression
//! (docs/performance.md §6). Deterministic: it counts what the table allocates, not
//! what the process's RSS happens to be.
//!
//! The keys look like the ones `ticketing bench hold` takes (`bench-<10 hex>-h<n>`,
//! 18–24 bytes) and 16 owners share them, as 16 client connections would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ticketing::lock::{Command, Grant, LockState, LockTable, Origin, Output, TableConfig};

/// Counts the calling thread's live heap bytes and allocations (requested sizes; the
/// allocator's own overhead comes on top, about 8 bytes per allocation with glibc).
struct Counting;

thread_local! {
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
    static LIVE_ALLOCS: Cell<isize> = const { Cell::new(0) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize, 1);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize), -1);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize, 0);
        System.realloc(ptr, layout, new_size)
    }
}

fn note(bytes: isize, allocs: isize) {
    // try_with: a thread's counters may be gone while it exits.
    let _ = LIVE_BYTES.try_with(|c| c.set(c.get() + bytes));
    let _ = LIVE_ALLOCS.try_with(|c| c.set(c.get() + allocs));
    if allocs > 0 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Clone, Copy, Debug)]
struct Usage {
    live_bytes: isize,
    live_allocs: isize,
    allocs: usize,
}

fn usage() -> Usage {
    Usage {
        live_bytes: LIVE_BYTES.with(Cell::get),
        live_allocs: LIVE_ALLOCS.with(Cell::get),
        allocs: ALLOCS.with(Cell::get),
    }
}

/// Per held lock: live bytes, live allocations, allocations made while taking it.
fn per_lock(before: Usage, after: Usage, locks: usize) -> (f64, f64, f64) {
    let n = locks as f64;
    (
        (after.live_bytes - before.live_bytes) as f64 / n,
        (after.live_allocs - before.live_allocs) as f64 / n,
        (after.allocs - before.allocs) as f64 / n,
    )
}

const LOCKS: usize = 100_000;
const OWNERS: usize = 16;

fn key(i: usize) -> String {
    format!("bench-19a2b3c4d5-h{i}")
}

fn owner(i: usize) -> String {
    format!("bench-4242-{}", i % OWNERS)
}

fn origin(i: usize) -> Origin {
    Origin { node: 1, incarnation: 7, conn: (i % OWNERS) as u64 + 1, id: i as u32 }
}

// Bounds: what the storage costs today (measured: see each test) plus about 15 %.
// A change that stores a key twice, or an owner per lock, or a timer with a key
// copy, exceeds them.

/// A follower's applied state: one slot (32 bytes), the key's bytes in one
/// allocation, 4–8 bytes of hash index; owners are shared.
#[test]
fn a_held_lock_costs_a_follower_one_allocation_and_under_90_bytes() {
    let mut state = LockState::default();
    let mut effects = Vec::new();
    // Commands are made before counting: the log's copy is not the table's.
    let commands: Vec<Command> = (0..LOCKS)
        .map(|i| Command::Grant {
            key: key(i),
            grant: Grant { owner: owner(i), token: 1 + i as u64, lease_ms: 250_000, origin: origin(i) },
        })
        .collect();
    effects.reserve(8);
    let before = usage();
    for c in &commands {
        state.apply(c, &mut effects);
        effects.clear();
    }
    let after = usage();
    assert_eq!(state.keys_held(), LOCKS);
    let (bytes, live_allocs, allocs) = per_lock(before, after, LOCKS);
    println!("follower: {bytes:.1} bytes, {live_allocs:.3} live allocations, {allocs:.3} allocations per held lock");
    assert!(bytes <= 90.0, "{bytes:.1} bytes per held lock on a follower (bound 90)");
    assert!(live_allocs <= 1.05, "{live_allocs:.3} live allocations per held lock (bound 1.05: the key)");
    assert!(allocs <= 1.1, "{allocs:.3} allocations per lock taken (bound 1.1)");
}

/// The leader: the applied state plus one lease timer per held lock (24 bytes and a
/// 4-byte position); the projection keeps nothing for a held lock without waiters.
#[test]
fn a_held_lock_costs_the_leader_one_allocation_and_under_125_bytes() {
    let config = TableConfig { node: 1, incarnation: 7, waiters_per_key_max: 16, keys_max: usize::MAX };
    let mut table = LockTable::new(config);
    table.become_leader(0);
    let keys: Vec<String> = (0..LOCKS).map(key).collect();
    let owners: Vec<String> = (0..OWNERS).map(owner).collect();
    let mut out = Output::default();
    out.replies.reserve(4);
    let mut log = Vec::with_capacity(LOCKS);
    let before = usage();
    for (i, key) in keys.iter().enumerate() {
        let unix_us = 1_700_000_000_000_000 + i as u64;
        table.acquire(1, i as u32, 250, 0, key, &owners[i % OWNERS], 0, unix_us, &mut out);
        let command = out.proposals.pop_front().expect("a grant");
        table.apply(&command, 1, &mut out);
        out.replies.clear();
        // The command belongs to the log, not the table: not counted.
        log.push(command);
    }
    let after = usage();
    let log_bytes: isize = log.iter().map(command_heap_bytes).sum();
    let log_allocs = (2 * LOCKS) as isize;
    let after = Usage {
        live_bytes: after.live_bytes - log_bytes,
        live_allocs: after.live_allocs - log_allocs,
        allocs: after.allocs - log_allocs as usize,
    };
    assert_eq!(table.state().keys_held(), LOCKS);
    assert_eq!(table.overrides(), 0, "the projection keeps nothing for applied holds without waiters");
    table.check_invariants();
    let (bytes, live_allocs, allocs) = per_lock(before, after, LOCKS);
    println!(
        "leader: {bytes:.1} bytes, {live_allocs:.3} live allocations, {allocs:.3} allocations per held lock"
    );
    assert!(bytes <= 125.0, "{bytes:.1} bytes per held lock on the leader (bound 125)");
    assert!(live_allocs <= 1.05, "{live_allocs:.3} live allocations per held lock (bound 1.05: the key)");
    assert!(allocs <= 1.1, "{allocs:.3} allocations per lock taken, besides the command (bound 1.1)");

    // Released, every lock gives its memory back but for reusable capacity (slots,
    // index, timer vectors): no key or owner string stays.
    let before_release = usage();
    for (i, command) in log.iter().enumerate() {
        let Command::Grant { key, grant } = command else { unreachable!() };
        table.release(1, i as u32, grant.token, key, &grant.owner, 0, 2_000_000_000_000_000, &mut out);
        let release = out.proposals.pop_front().expect("a release");
        table.apply(&release, 2, &mut out);
        out.replies.clear();
    }
    let released = usage();
    assert_eq!(table.state().keys_held(), 0);
    assert!(table.state().owners().is_empty());
    table.check_invariants();
    let strings = released.live_allocs - before_release.live_allocs;
    assert!(strings <= -(LOCKS as isize), "{strings} allocations freed by releasing {LOCKS} locks");
}

/// A key taken and released over and over (a steady load) allocates nothing in the
/// table once its slot, timers and override map have their capacity.
#[test]
fn a_steady_acquire_release_round_allocates_only_its_command_strings() {
    let config = TableConfig { node: 1, incarnation: 7, waiters_per_key_max: 16, keys_max: usize::MAX };
    let mut table = LockTable::new(config);
    table.become_leader(0);
    let mut out = Output::default();
    out.replies.reserve(4);
    let round = |table: &mut LockTable, out: &mut Output, i: u64| {
        let unix_us = 1_700_000_000_000_000 + i;
        table.acquire(1, 1, 10, 0, "k", "owner", i, unix_us, out);
        let grant = out.proposals.pop_front().expect("a grant");
        table.apply(&grant, i, out);
        let Command::Grant { grant: g, .. } = &grant else { unreachable!() };
        table.release(1, 2, g.token, "k", "owner", 0, unix_us, out);
        let release = out.proposals.pop_front().expect("a release");
        table.apply(&release, i, out);
        out.replies.clear();
        // The lock-table thread reads and clears the counts every round.
        table.stats_mut().clear();
        (grant, release)
    };
    for i in 0..100 {
        round(&mut table, &mut out, i);
    }
    let before = usage();
    let rounds = 1000u64;
    for i in 100..100 + rounds {
        let commands = round(&mut table, &mut out, i);
        drop(commands);
    }
    let after = usage();
    // Per round: the two commands' key and owner strings (4; the log needs them),
    // the key slot and the interned owner (2: nobody holds them between rounds).
    let per_round = (after.allocs - before.allocs) as f64 / rounds as f64;
    println!("steady: {per_round:.2} allocations per acquire+release round");
    assert!(per_round <= 6.0, "{per_round:.2} allocations per round (bound 6)");
    assert_eq!(after.live_bytes, before.live_bytes, "nothing kept between rounds");
}

fn command_heap_bytes(c: &Command) -> isize {
    match c {
        Command::Grant { key, grant } => (key.capacity() + grant.owner.capacity()) as isize,
        _ => 0,
    }
}
