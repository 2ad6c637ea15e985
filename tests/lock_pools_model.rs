//! Random histories of ACQUIREs, counted and multi-key HOLDs, releases, time and closed
//! connections against the lock table, checked after every step from what callers see
//! (answers) and what the log holds (commands), not from the table's own bookkeeping:
//! permits held within capacity on every key, tokens strictly increasing, no request
//! granted while an earlier one naming one of its keys still waits, every grant of all
//! its keys at once, and the oldest waiter granted once its keys have the permits.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ticketing::lock::{Command, LockTable, Output, Part, TableConfig};
use ticketing::proto::Response;

const UNIX0: u64 = 1_700_000_000_000_000;
const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
const CAPACITIES: [u32; 4] = [1, 1, 2, 3];
const CONNS: u64 = 5;
const LEASE_S: u8 = 2;

#[derive(Clone, Debug)]
enum Op {
    /// An ACQUIRE of a key of capacity 1 (k0 or k1).
    Acquire {
        conn: u64,
        key: usize,
        wait_ms: u32,
    },
    /// A HOLD: key indexes with a count draw each.
    Hold {
        conn: u64,
        keys: Vec<(usize, u32)>,
        wait_ms: u32,
        place: bool,
    },
    /// Release the n-th hold (in token order) by its owner.
    Release {
        nth: usize,
    },
    /// Time passes.
    Advance {
        ms: u64,
    },
    Close {
        conn: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let wait = prop_oneof![Just(0u32), Just(500), Just(3_000)];
    prop_oneof![
        2 => (0..CONNS, 0usize..2, wait.clone()).prop_map(|(conn, key, wait_ms)| Op::Acquire { conn, key, wait_ms }),
        4 => (0..CONNS, proptest::collection::vec((0usize..4, 0u32..3), 1..=3), wait, any::<bool>()).prop_map(
            |(conn, mut keys, wait_ms, place)| {
                keys.sort_by_key(|k| k.0);
                keys.dedup_by_key(|k| k.0);
                Op::Hold { conn, keys, wait_ms, place }
            }
        ),
        3 => (0usize..6).prop_map(|nth| Op::Release { nth }),
        2 => prop_oneof![Just(100u64), Just(600), Just(2_100)].prop_map(|ms| Op::Advance { ms }),
        1 => (0..CONNS).prop_map(|conn| Op::Close { conn }),
    ]
}

/// A request as the caller made it: its keys and counts, in submission order.
#[derive(Clone, Debug)]
struct Asked {
    seq: u64,
    /// The connection that asked (shown when a rule breaks).
    #[allow(dead_code)]
    conn: u64,
    parts: Vec<(usize, u32)>,
}

#[derive(Default)]
struct Watch {
    /// Requests queued (no answer yet), by (conn, id).
    waiting: BTreeMap<(u64, u32), Asked>,
    /// Holds as answers and commands show them: token → (owner conn, parts).
    holds: BTreeMap<u64, (u64, Vec<(usize, u32)>)>,
    asked: BTreeMap<(u64, u32), Asked>,
    last_token: u64,
    grants: u64,
    /// RELEASEs answered `R`.
    released: Vec<(u64, u32)>,
}

impl Watch {
    fn in_use(&self, key: usize) -> u32 {
        self.holds.values().flat_map(|(_, p)| p).filter(|(k, _)| *k == key).map(|(_, c)| c).sum()
    }

    fn fits(&self, parts: &[(usize, u32)]) -> bool {
        parts.iter().all(|&(k, c)| self.in_use(k) + c <= CAPACITIES[k])
    }

    /// A grant of request (conn, id) under `token`.
    fn granted(&mut self, conn: u64, id: u32, token: u64) -> Result<(), String> {
        let asked = self
            .asked
            .get(&(conn, id))
            .cloned()
            .ok_or(format!("a grant for an unknown request ({conn}, {id})"))?;
        if token <= self.last_token {
            return Err(format!("token {token} after {}", self.last_token));
        }
        self.last_token = token;
        self.waiting.remove(&(conn, id));
        for w in self.waiting.values().filter(|w| w.seq < asked.seq) {
            if w.parts.iter().any(|(k, _)| asked.parts.iter().any(|(j, _)| j == k)) {
                return Err(format!(
                    "request {asked:?} granted while the earlier {w:?} waits on one of its keys"
                ));
            }
        }
        self.holds.insert(token, (conn, asked.parts.clone()));
        self.grants += 1;
        for &(k, _) in &asked.parts {
            if self.in_use(k) > CAPACITIES[k] {
                return Err(format!(
                    "{} permits of {} held, capacity {}",
                    self.in_use(k),
                    KEYS[k],
                    CAPACITIES[k]
                ));
            }
        }
        Ok(())
    }
}

struct Driver {
    table: LockTable,
    now: u64,
    next_id: u32,
    seq: u64,
}

impl Driver {
    fn unix(&self) -> u64 {
        UNIX0 + self.now * 1000
    }

    /// Applies every proposal (a standalone node); what the log ended is taken out of
    /// the watch's holds, and every answer is checked.
    fn run(&mut self, mut out: Output, w: &mut Watch) -> Result<(), String> {
        let mut replies = Vec::new();
        loop {
            replies.append(&mut out.replies);
            let Some(c) = out.proposals.pop_front() else { break };
            match &c {
                Command::Expire { token, .. } | Command::End { token, owner: None, .. } => {
                    w.holds.remove(token);
                }
                _ => {}
            }
            self.table.apply(&c, self.now, &mut out);
        }
        for r in replies {
            let key = (r.conn, r.id);
            match r.response {
                Response::Granted { token, .. } => w.granted(r.conn, r.id, token)?,
                Response::Released => w.released.push(key),
                Response::InLine { .. } => {
                    if !w.waiting.contains_key(&key) {
                        return Err(format!("a place in line for {key:?}, which does not wait"));
                    }
                }
                Response::Timeout | Response::Moved { .. } => {
                    w.waiting.remove(&key);
                }
                Response::Busy => {
                    w.waiting.remove(&key);
                }
                other => return Err(format!("unexpected answer {other:?} to {key:?}")),
            }
        }
        self.table.check_invariants();
        Ok(())
    }

    fn ask(&mut self, conn: u64, parts: Vec<(usize, u32)>, w: &mut Watch) -> u32 {
        self.next_id += 1;
        self.seq += 1;
        let asked = Asked { seq: self.seq, conn, parts };
        w.asked.insert((conn, self.next_id), asked.clone());
        w.waiting.insert((conn, self.next_id), asked);
        self.next_id
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_keep_every_rule_of_counted_and_multi_key_holds(ops in proptest::collection::vec(op(), 1..120)) {
        let config = TableConfig { node: 1, incarnation: 1, waiters_per_key_max: 3, keys_max: 1_000 };
        let mut table = LockTable::new(config);
        table.become_leader(0);
        let mut d = Driver { table, now: 0, next_id: 0, seq: 0 };
        let mut w = Watch::default();
        for op in ops {
            let mut out = Output::default();
            let (now, unix) = (d.now, d.unix());
            match op {
                Op::Acquire { conn, key, wait_ms } => {
                    let id = d.ask(conn, vec![(key, 1)], &mut w);
                    d.table.acquire(conn, id, LEASE_S, wait_ms, KEYS[key], format!("c{conn}"), now, unix, &mut out);
                }
                Op::Hold { conn, keys, wait_ms, place } => {
                    let parts: Vec<(usize, u32)> = keys.iter().map(|&(k, c)| (k, 1 + c % CAPACITIES[k])).collect();
                    let id = d.ask(conn, parts.clone(), &mut w);
                    let parts = parts
                        .iter()
                        .map(|&(k, count)| Part { key: KEYS[k].to_owned(), count, capacity: CAPACITIES[k] })
                        .collect();
                    d.table.hold(conn, id, LEASE_S, wait_ms, &format!("c{conn}"), parts, place, now, unix, &mut out);
                }
                Op::Release { nth } => {
                    let Some((&token, (conn, parts))) = w.holds.iter().nth(nth) else { continue };
                    let (conn, key) = (*conn, KEYS[parts[0].0]);
                    d.next_id += 1;
                    let id = d.next_id;
                    d.table.release(conn, id, token, key, format!("c{conn}"), now, unix, &mut out);
                    // Its permits are free for the grants the same command makes.
                    w.holds.remove(&token);
                    w.released.clear();
                    d.run(std::mem::take(&mut out), &mut w).map_err(TestCaseError::fail)?;
                    prop_assert!(w.released.contains(&(conn, id)), "the release of a held token was not answered R");
                }
                Op::Advance { ms } => {
                    d.now += ms;
                    let (now, unix) = (d.now, d.unix());
                    d.table.tick(now, unix, &mut out);
                }
                Op::Close { conn } => {
                    d.table.conn_closed(conn, now, unix, &mut out);
                    w.waiting.retain(|(c, _), _| *c != conn);
                }
            }
            d.run(out, &mut w).map_err(TestCaseError::fail)?;
            // Liveness: the oldest waiter is granted once its keys have the permits.
            if let Some(oldest) = w.waiting.values().min_by_key(|a| a.seq) {
                prop_assert!(!w.fits(&oldest.parts), "the oldest waiter {:?} fits and still waits", oldest);
            }
            prop_assert_eq!(w.waiting.len(), d.table.waiters(), "waiters");
        }
    }
}
