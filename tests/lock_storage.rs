//! The lock table's compact storage (docs/architecture.md §2) under a leader whose
//! commands are applied late, as in a cluster: after every step its bookkeeping holds
//! (owner references, pinned slots, overrides, timers: `LockTable::check_invariants`),
//! and a snapshot encoded in slices while commands keep being applied decodes to the
//! state it began with.

use std::collections::VecDeque;

use proptest::prelude::*;
use ticketing::lock::codec::decode_snapshot;
use ticketing::lock::{Command, LockState, LockTable, Output, TableConfig};
use ticketing::proto::Response;

const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
const OWNERS: [&str; 3] = ["x", "y", "z"];
const UNIX0: u64 = 1_700_000_000_000_000;

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        conn: u64,
        key: usize,
        owner: usize,
        lease_s: u8,
        wait: bool,
    },
    /// Release the `pick`-th grant seen so far (perhaps no longer current).
    Release {
        conn: u64,
        pick: usize,
    },
    /// Apply the oldest `n` proposals not applied yet.
    Apply(usize),
    Advance(u64),
    Close(u64),
    /// Begin a snapshot, or encode `n` more key slots of the one under way.
    Snapshot(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..4u64, 0..5usize, 0..3usize, 1..4u8, any::<bool>())
            .prop_map(|(conn, key, owner, lease_s, wait)| Op::Acquire { conn, key, owner, lease_s, wait }),
        3 => (1..4u64, any::<usize>()).prop_map(|(conn, pick)| Op::Release { conn, pick }),
        4 => (1..4usize).prop_map(Op::Apply),
        2 => (1..2500u64).prop_map(Op::Advance),
        1 => (1..4u64).prop_map(Op::Close),
        3 => (1..3usize).prop_map(Op::Snapshot),
    ]
}

struct Leader {
    table: LockTable,
    now_ms: u64,
    pending: VecDeque<Command>,
    /// (key, owner, token) of every grant answered.
    grants: Vec<(String, String, u64)>,
    /// The state a snapshot under way began with.
    snapshot_of: Option<LockState>,
    snapshots: usize,
    next_id: u32,
}

impl Leader {
    fn take(&mut self, out: Output) {
        for r in out.replies {
            if let Response::Granted { token, .. } = r.response {
                // Which key: the grant command with this token.
                let found = self.grants_in_log(token);
                self.grants.push(found);
            }
        }
        self.pending.extend(out.proposals);
    }

    fn grants_in_log(&self, token: u64) -> (String, String, u64) {
        let holder = self.table.state().holders().find(|(_, h)| h.token == token);
        let (key, h) = holder.expect("a granted token is held when its answer is made");
        (key.to_owned(), h.owner.to_owned(), token)
    }

    fn apply(&mut self, n: usize) {
        for _ in 0..n {
            let Some(command) = self.pending.pop_front() else { return };
            let mut out = Output::default();
            self.table.apply(&command, self.now_ms, &mut out);
            self.take(out);
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        let unix_us = UNIX0 + self.now_ms * 1000;
        let mut out = Output::default();
        self.next_id += 1;
        match op {
            Op::Acquire { conn, key, owner, lease_s, wait } => {
                let wait_ms = if *wait { 1500 } else { 0 };
                let (key, owner) = (KEYS[*key], OWNERS[*owner]);
                self.table.acquire(
                    *conn,
                    self.next_id,
                    *lease_s,
                    wait_ms,
                    key,
                    owner,
                    self.now_ms,
                    unix_us,
                    &mut out,
                );
            }
            Op::Release { conn, pick } => {
                if self.grants.is_empty() {
                    return Ok(());
                }
                let (key, owner, token) = self.grants[pick % self.grants.len()].clone();
                self.table.release(*conn, self.next_id, token, &key, &owner, self.now_ms, unix_us, &mut out);
            }
            Op::Apply(n) => self.apply(*n),
            Op::Advance(ms) => {
                self.now_ms += ms;
                let unix_us = UNIX0 + self.now_ms * 1000;
                self.table.tick(self.now_ms, unix_us, &mut out);
            }
            Op::Close(conn) => {
                let unix_us = UNIX0 + self.now_ms * 1000;
                self.table.conn_closed(*conn, self.now_ms, unix_us, &mut out);
            }
            Op::Snapshot(slots) => {
                if self.snapshot_of.is_none() {
                    self.snapshot_of = Some(self.table.state().clone());
                    self.table.begin_snapshot();
                } else if let Some(bytes) = self.table.snapshot_step(*slots) {
                    let began = self.snapshot_of.take().expect("under way");
                    let decoded = decode_snapshot(&bytes).map_err(|e| format!("snapshot: {e}"))?;
                    if decoded != began {
                        return Err(format!("snapshot decodes to {decoded:?}, began with {began:?}"));
                    }
                    self.snapshots += 1;
                }
            }
        }
        self.take(out);
        // Panics, naming the invariant, if one is broken.
        self.table.check_invariants();
        Ok(())
    }
}

fn run(ops: &[Op]) -> Result<(), String> {
    let config = TableConfig { node: 1, incarnation: 1, waiters_per_key_max: 4, keys_max: usize::MAX };
    let mut table = LockTable::new(config);
    table.become_leader(0);
    let mut l = Leader {
        table,
        now_ms: 0,
        pending: VecDeque::new(),
        grants: Vec::new(),
        snapshot_of: None,
        snapshots: 0,
        next_id: 0,
    };
    for (i, op) in ops.iter().enumerate() {
        l.step(op).map_err(|e| format!("step {i} {op:?}: {e}"))?;
    }
    // Everything applied and every lease run out: nothing may stay behind.
    for _ in 0..20 {
        l.step(&Op::Apply(usize::MAX))?;
        l.step(&Op::Advance(5_000))?;
    }
    l.step(&Op::Snapshot(usize::MAX))?;
    l.step(&Op::Snapshot(usize::MAX))?;
    let t = &l.table;
    if t.state().keys_held() != 0 || t.overrides() != 0 || !t.state().owners().is_empty() || t.waiters() != 0
    {
        return Err(format!(
            "left behind: {} held, {} overrides, {} owners, {} waiters",
            t.state().keys_held(),
            t.overrides(),
            t.state().owners().len(),
            t.waiters()
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn storage_bookkeeping_and_sliced_snapshots_hold_with_late_applies(ops in proptest::collection::vec(op(), 1..150)) {
        if let Err(e) = run(&ops) {
            prop_assert!(false, "{}", e);
        }
    }
}
