//! Lock-level safety invariants over a whole simulated history (tests/cluster_sim.rs):
//! exclusive locks, and counted and multi-key holds (docs/protocol.md §5.7).
//!
//! Like the Raft `Checker`, it is fed plain facts — "index i committed with this
//! command at t", "client c received this answer at t", "node n proposed an expiry
//! of token x at t", "node n answered request r" — so a test can feed it a hand-built
//! bad history and watch each invariant object. Ground truth is the committed log
//! (replayed in a fresh `LockState`) and the answers clients actually received.
//!
//! Every fact is checked when it arrives; `Err` carries the invariant's number
//! (docs/safety.md, "What the lock-level simulator checks"):
//!
//! - inv1: every node's state is the committed history's; no grant of a held key.
//! - inv2: clients never believe they hold more permits of a key at once than its
//!   capacity (one, for an exclusive key), each within its own lease.
//! - inv3: tokens strictly increase in commit order; each is delivered once.
//! - inv4: one connection's grants of one key in send order; one leader's in arrival
//!   order.
//! - inv5: leases never end early.
//! - inv6: one answer per request, the committed history's; QUERY and POOL reads
//!   reflect a committed state between question and answer.
//! - inv7: a `G` only for a grant the majority committed.
//! - inv8: per key, permits in use within capacity in every committed state.
//! - inv9: a grant is one entry under one token with exactly the keys asked, held
//!   together and ended together; a request is granted at most once.
//! - inv10: a key's capacity never changes while it has holds.
//! - inv11: strict FIFO across keys: a leader never grants a request while one that
//!   reached it earlier and names one of its keys still waits there.
//! - inv12: liveness at quiescence: the oldest waiter whose keys have their counts
//!   free is granted within a bound.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use ticketing::lock::{Command, ConnId, Effect, Grant, HoldGrant, LockState, Origin, Part};
use ticketing::proto::limits::POOL_HOLDERS_LISTED_MAX;
use ticketing::proto::Response;

pub type ReqKey = (ConnId, u32);

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    Acquire {
        key: String,
        owner: String,
        lease_ms: u64,
        wait_ms: u64,
    },
    Release {
        key: String,
        owner: String,
        token: u64,
    },
    Query {
        key: String,
    },
    /// HOLD: keys with their count and capacity, all at once; `place`: told its place
    /// in line while it waits.
    Hold {
        parts: Vec<Part>,
        owner: String,
        lease_ms: u64,
        wait_ms: u64,
        place: bool,
    },
    Pool {
        key: String,
    },
}

impl Asked {
    /// The keys a request for a hold names, each with its count and capacity (an
    /// ACQUIRE: one key, one permit of one); `None` for other requests.
    pub fn parts(&self) -> Option<Vec<Part>> {
        match self {
            Asked::Acquire { key, .. } => Some(plain(key)),
            Asked::Hold { parts, .. } => Some(parts.clone()),
            _ => None,
        }
    }

    pub fn lease_wait(&self) -> Option<(u64, u64)> {
        match self {
            Asked::Acquire { lease_ms, wait_ms, .. } | Asked::Hold { lease_ms, wait_ms, .. } => {
                Some((*lease_ms, *wait_ms))
            }
            _ => None,
        }
    }

    fn owner(&self) -> Option<&str> {
        match self {
            Asked::Acquire { owner, .. } | Asked::Hold { owner, .. } | Asked::Release { owner, .. } => {
                Some(owner)
            }
            _ => None,
        }
    }
}

/// One permit of one key of capacity one: what an ACQUIRE and a v1 grant hold.
pub fn plain(key: &str) -> Vec<Part> {
    vec![Part { key: key.to_owned(), count: 1, capacity: 1 }]
}

/// Held as a key's own holder (one key of capacity 1), not as a pooled hold.
fn is_plain(parts: &[Part]) -> bool {
    matches!(parts, [p] if p.capacity == 1)
}

/// The same keys with the same counts and capacities, in any order.
fn same_parts(a: &[Part], b: &[Part]) -> bool {
    a.len() == b.len() && a.iter().all(|p| b.contains(p))
}

fn part_of<'a>(parts: &'a [Part], key: &str) -> Option<&'a Part> {
    parts.iter().find(|p| p.key == key)
}

fn keys_of(parts: &[Part]) -> Vec<&str> {
    parts.iter().map(|p| p.key.as_str()).collect()
}

#[derive(Clone, Debug)]
struct ReqRec {
    client: u64,
    node: u64,
    asked: Asked,
    sent_ms: u64,
    answered: Option<(Response, u64)>,
    /// Handed to the log (an Append carrying its origin was emitted).
    proposed: bool,
    /// (node, arrival sequence) when the node's lock side took it.
    arrival: Option<(u64, u64)>,
}

/// A grant as it committed.
#[derive(Clone, Debug)]
struct GrantRec {
    parts: Vec<Part>,
    origin: Origin,
    lease_ms: u64,
    index: u64,
    /// Index of the committed entry that ended it (release or expiry), if any.
    ended_at: Option<u64>,
}

impl GrantRec {
    fn names(&self, key: &str) -> bool {
        part_of(&self.parts, key).is_some()
    }
}

/// One client's window on the permits a G gave it: [start, min(release sent, deadline)].
#[derive(Clone, Debug)]
struct Window {
    parts: Vec<Part>,
    client: u64,
    start: u64,
    deadline: u64,
    release_sent: Option<u64>,
}

impl Window {
    fn end(&self) -> u64 {
        self.release_sent.map_or(self.deadline, |r| r.min(self.deadline))
    }
}

/// A request a node's lock side took and has not yet answered, granted or dropped.
#[derive(Clone, Debug)]
struct Waiting {
    arrival: u64,
    parts: Vec<Part>,
}

#[derive(Default)]
pub struct LockChecker {
    /// The committed log: index i at log[i - 1] = (term, command).
    log: Vec<(u64, Option<Command>)>,
    /// states[i] = the replayed state after index i (states[0] is empty).
    states: Vec<LockState>,
    /// index → first simulated ms at which some node's Raft saw it committed.
    commit_ms: BTreeMap<u64, u64>,
    /// Highest index whose commit time is recorded.
    commit_known: u64,
    /// token → the committed grant.
    grants: BTreeMap<u64, GrantRec>,
    /// Request → (token, index) of its committed grant.
    granted_requests: BTreeMap<ReqKey, (u64, u64)>,
    /// Request → the answer its committed command gives (from the replay's effects).
    committed_answer: BTreeMap<ReqKey, (Response, u64)>,
    requests: BTreeMap<ReqKey, ReqRec>,
    /// Requests answered with something that says "not executed / not acquired".
    not_executed: BTreeSet<ReqKey>,
    /// token → the request whose G carried it.
    g_tokens: BTreeMap<u64, ReqKey>,
    windows: BTreeMap<u64, Window>,
    /// (conn, key) → id of the last grant committed for that connection and key.
    fifo_conn: BTreeMap<(ConnId, String), u32>,
    /// (node, incarnation, key) → arrival seq of the last grant committed from there.
    fifo_arrival: BTreeMap<(u64, u64, String), u64>,
    /// node → token → ms at which that node applied the grant.
    node_grant_applied: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// node → ms at which it last started serving as leader.
    node_serving_since: BTreeMap<u64, u64>,
    /// node → the requests for holds it took and still owes an answer or a grant.
    waiting: BTreeMap<u64, BTreeMap<ReqKey, Waiting>>,
    /// Waiters the quiescence check found due (oldest on their keys, counts free), and
    /// since when.
    due_since: BTreeMap<ReqKey, u64>,
    pub grants_committed: u64,
    /// Of those, pooled ones (counted, or of several keys), and of several keys.
    pub pooled_grants: u64,
    pub multi_key_grants: u64,
    pub g_received: u64,
    pub expiries: u64,
    pub handoffs: u64,
    pub pool_reads: u64,
    /// Waiters the quiescence check found due (and then saw granted or answered).
    pub due_at_quiescence: u64,
}

fn fail<T>(msg: String) -> Result<T, String> {
    Err(msg)
}

/// The grants a command makes, each with its keys.
pub fn grants_in(command: &Command) -> Vec<(Vec<Part>, &Grant)> {
    match command {
        Command::Grant { key, grant } => vec![(plain(key), grant)],
        Command::Release { key, next, .. } | Command::Expire { key, next, .. } => {
            next.iter().map(|g| (plain(key), g)).collect()
        }
        Command::Hold { hold } => vec![(hold.parts.clone(), &hold.grant)],
        Command::End { next, .. } => next.iter().map(|h| (h.parts.clone(), &h.grant)).collect(),
        Command::SetDomain { .. } | Command::SetMember { .. } => vec![],
    }
}

/// The command without its grants: the release or expiry it starts with.
fn ending_of(command: &Command) -> Option<Command> {
    Some(match command {
        Command::Release { key, owner, token, origin, .. } => Command::Release {
            key: key.clone(),
            owner: owner.clone(),
            token: *token,
            origin: *origin,
            next: None,
        },
        Command::Expire { key, token, .. } => Command::Expire { key: key.clone(), token: *token, next: None },
        Command::End { key, token, owner, origin, .. } => Command::End {
            key: key.clone(),
            token: *token,
            owner: owner.clone(),
            origin: *origin,
            next: vec![],
        },
        _ => return None,
    })
}

/// Whether `state` holds grant `token` on every key of `parts` (and `any`: on any).
fn held_in(state: &LockState, parts: &[Part], token: u64, any: bool) -> bool {
    if is_plain(parts) {
        return state.holder_ref(&parts[0].key).is_some_and(|h| h.token == token);
    }
    match state.pooled_holder(token) {
        Some(h) => any || same_parts(&h.parts, parts),
        None => false,
    }
}

/// Whether `state` holds the grant `token` of `parts` on every one of its keys: what a
/// node applying it must see before it times its lease.
pub fn holds_grant(state: &LockState, parts: &[Part], token: u64) -> bool {
    held_in(state, parts, token, false)
}

/// Permits of `key` free in `state` for a request stating `capacity` (none when the
/// key has another).
fn free_permits(state: &LockState, key: &str, capacity: u32) -> u32 {
    if state.holder_ref(key).is_some() {
        return 0;
    }
    match state.slot_of(key).and_then(|s| state.pool_key(s)) {
        Some(pk) if pk.capacity == capacity => pk.capacity - pk.in_use,
        Some(_) => 0,
        None => capacity,
    }
}

/// Inv 1, 3, 8, 9 and 10 on the state just before grant `g` of `parts` applies:
/// its token is above the last one, and each key has room for its count, of the
/// capacity it has.
fn grant_fits(index: u64, state: &LockState, parts: &[Part], g: &Grant) -> Result<(), String> {
    let last = state.last_token();
    if g.token <= last {
        return fail(format!(
            "inv3: token {} granted at {index} is not above the last token {last}",
            g.token
        ));
    }
    for (i, p) in parts.iter().enumerate() {
        if parts[..i].iter().any(|q| q.key == p.key) {
            return fail(format!("inv9: grant of token {} at {index} names {:?} twice", g.token, p.key));
        }
        if p.count == 0 || p.count > p.capacity {
            return fail(format!(
                "inv8: grant of token {} at {index} takes {} of {:?}, capacity {}",
                g.token, p.count, p.key, p.capacity
            ));
        }
        let holder = state.holder_ref(&p.key).map(|h| h.to_holder());
        let pool = state.slot_of(&p.key).and_then(|s| state.pool_key(s));
        match (holder, pool) {
            (Some(h), _) if p.capacity != 1 => {
                return fail(format!(
                    "inv10: grant of token {} at {index} states capacity {} of {:?}, held with capacity 1 by token {}",
                    g.token, p.capacity, p.key, h.token
                ))
            }
            (Some(h), _) if is_plain(parts) => {
                return fail(format!(
                    "inv1: impossible grant committed at {index}: token {} on {:?} (last token {last}, holder {h:?})",
                    g.token, p.key
                ))
            }
            (Some(h), _) => {
                return fail(format!(
                    "inv8: grant of token {} at {index} takes 1 of {:?}, capacity 1, held by token {}",
                    g.token, p.key, h.token
                ))
            }
            (None, Some(pk)) if pk.capacity != p.capacity => {
                return fail(format!(
                    "inv10: grant of token {} at {index} states capacity {} of {:?}, which has capacity {} and {} holds",
                    g.token, p.capacity, p.key, pk.capacity, pk.holds
                ))
            }
            (None, Some(pk)) if pk.in_use + p.count > pk.capacity => {
                let what = if is_plain(parts) { "inv1: impossible grant" } else { "inv8: over capacity" };
                return fail(format!(
                    "{what}: grant of token {} at {index} takes {} of {:?} with {} of {} in use",
                    g.token, p.count, p.key, pk.in_use, pk.capacity
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks every grant of `command` against the state it meets — after the command's
/// own release or expiry and the grants before it in the same entry — so that the
/// checker names the broken invariant where applying would stop the node (a panic).
fn grants_fit(index: u64, before: &LockState, command: &Command) -> Result<(), String> {
    let grants = grants_in(command);
    if grants.is_empty() {
        return Ok(());
    }
    let ending = ending_of(command);
    if let ([(parts, g)], None) = (grants.as_slice(), &ending) {
        // One grant on the state as it is: nothing to apply first.
        return grant_fits(index, before, parts, g);
    }
    let mut state = before.clone();
    let mut effects = Vec::new();
    if let Some(ending) = ending {
        state.apply(&ending, &mut effects);
    }
    for (parts, g) in grants {
        grant_fits(index, &state, &parts, g)?;
        state.apply(&Command::Hold { hold: HoldGrant { grant: g.clone(), parts } }, &mut effects);
    }
    Ok(())
}

pub fn origins_in(command: &Command) -> Vec<Origin> {
    let mut v: Vec<Origin> = grants_in(command).iter().map(|(_, g)| g.origin).collect();
    match command {
        Command::Release { origin, .. } => v.push(*origin),
        Command::End { origin: Some(origin), .. } => v.push(*origin),
        _ => {}
    }
    v
}

impl LockChecker {
    pub fn new() -> LockChecker {
        LockChecker { states: vec![LockState::default()], ..Default::default() }
    }

    pub fn committed_len(&self) -> u64 {
        self.log.len() as u64
    }

    pub fn state_at(&self, index: u64) -> Option<&LockState> {
        self.states.get(index as usize)
    }

    /// Some node's Raft has `commit_index` at `now`.
    pub fn raft_commit(&mut self, commit_index: u64, now: u64) {
        while self.commit_known < commit_index {
            self.commit_known += 1;
            self.commit_ms.insert(self.commit_known, now);
        }
    }

    /// A client sent a request on connection `conn` attached to `node`.
    pub fn sent(&mut self, key: ReqKey, client: u64, node: u64, asked: Asked, now: u64) {
        if let Asked::Release { key: k, owner, token } = &asked {
            // A real release (a key, the owner and the token of a G this client got)
            // ends the client's window: it stops using the permits now.
            if let Some(rk) = self.g_tokens.get(token) {
                let g_req = &self.requests[rk];
                let names = g_req.asked.parts().is_some_and(|p| part_of(&p, k).is_some());
                if g_req.client == client && g_req.asked.owner() == Some(owner.as_str()) && names {
                    if let Some(w) = self.windows.get_mut(token) {
                        if w.release_sent.is_none() {
                            w.release_sent = Some(now);
                        }
                    }
                }
            }
        }
        self.requests.insert(
            key,
            ReqRec { client, node, asked, sent_ms: now, answered: None, proposed: false, arrival: None },
        );
    }

    /// Node `node`'s lock side took request `key` (its `seq`-th request). A request
    /// for a hold waits there until the node answers it, grants it or drops it.
    pub fn arrived(&mut self, key: ReqKey, node: u64, seq: u64) {
        if let Some(r) = self.requests.get_mut(&key) {
            r.arrival = Some((node, seq));
            if let Some(parts) = r.asked.parts() {
                self.waiting.entry(node).or_default().insert(key, Waiting { arrival: seq, parts });
            }
        }
    }

    /// Node `node` answered request `key` (before it reached the client, if ever).
    /// A place in line is news, not an answer: the request still waits.
    pub fn node_answered(&mut self, node: u64, key: ReqKey, response: &Response) {
        if !matches!(response, Response::InLine { .. }) {
            if let Some(w) = self.waiting.get_mut(&node) {
                w.remove(&key);
            }
        }
    }

    /// Node `node` saw connection `conn` close: its waiters leave their lines.
    pub fn node_conn_closed(&mut self, node: u64, conn: ConnId) {
        if let Some(w) = self.waiting.get_mut(&node) {
            w.retain(|k, _| k.0 != conn);
        }
    }

    /// Node `node` is gone, and its waiters with it.
    pub fn node_gone(&mut self, node: u64) {
        self.waiting.remove(&node);
    }

    /// A node's lock side handed `command` to its log.
    pub fn proposed(&mut self, node: u64, command: &Command, now: u64) -> Result<(), String> {
        for o in origins_in(command) {
            if o.node != node {
                return fail(format!(
                    "inv6: node {node} proposed a command answering node {}'s request",
                    o.node
                ));
            }
            if let Some(r) = self.requests.get_mut(&(o.conn, o.id)) {
                r.proposed = true;
            }
        }
        for (parts, g) in grants_in(command) {
            self.fifo_across_keys(node, &parts, g)?;
        }
        let expiry = match command {
            Command::Expire { key, token, .. } | Command::End { key, token, owner: None, .. } => {
                Some((key, *token))
            }
            _ => None,
        };
        if let Some((key, token)) = expiry {
            // Inv 5, leader side: the lease timer runs from the later of the grant's
            // apply on this node and this node's start of serving.
            if let Some(g) = self.grants.get(&token) {
                let applied =
                    self.node_grant_applied.get(&node).and_then(|m| m.get(&token)).copied().unwrap_or(0);
                let serving = self.node_serving_since.get(&node).copied().unwrap_or(0);
                let earliest = applied.max(serving) + g.lease_ms;
                if now < earliest {
                    return fail(format!(
                        "inv5: node {node} proposed expiry of token {token} on {key:?} at {now} ms, before {earliest} ms (applied {applied}, serving since {serving}, lease {})",
                        g.lease_ms
                    ));
                }
            }
        }
        Ok(())
    }

    /// Inv 11: node `node` grants the request behind `g`; no request that reached the
    /// node earlier and names one of its keys may still wait there. (Within one
    /// node's lines: waiters never outlive a leadership — they get `M` — so arrival
    /// order at one node is the order its lines see.)
    fn fifo_across_keys(&mut self, node: u64, parts: &[Part], g: &Grant) -> Result<(), String> {
        let rk = (g.origin.conn, g.origin.id);
        let waiting = self.waiting.entry(node).or_default();
        let own = waiting.remove(&rk).map(|w| w.arrival);
        let arrival = own
            .or_else(|| self.requests.get(&rk).and_then(|r| r.arrival).filter(|a| a.0 == node).map(|a| a.1));
        let Some(arrival) = arrival else { return Ok(()) };
        for (wk, w) in waiting.iter() {
            if w.arrival >= arrival {
                continue;
            }
            if let Some(p) = w.parts.iter().find(|p| part_of(parts, &p.key).is_some()) {
                return fail(format!(
                    "inv11: node {node} granted request {rk:?} (arrival {arrival}, keys {:?}, token {}) while request {wk:?} (arrival {}, keys {:?}) that names {:?} still waits there",
                    keys_of(parts),
                    g.token,
                    w.arrival,
                    keys_of(&w.parts),
                    p.key
                ));
            }
        }
        Ok(())
    }

    /// Inv 12, at quiescence (faults healed, no new requests): on the serving leader
    /// `node`, every waiting request that is the oldest there on each of its keys and
    /// finds each with its count free in the committed state is granted within
    /// `bound_ms`. Call it every step of a calm world; `None`: no leader serves.
    pub fn waiters_served(&mut self, node: Option<u64>, now: u64, bound_ms: u64) -> Result<(), String> {
        let Some(node) = node else {
            self.due_since.clear();
            return Ok(());
        };
        let state = self.states.last().expect("states[0] is empty");
        let mut queue: Vec<(&ReqKey, &Waiting)> = self.waiting.get(&node).into_iter().flatten().collect();
        queue.sort_by_key(|(_, w)| w.arrival);
        let mut named: BTreeSet<&str> = BTreeSet::new();
        let mut due = BTreeMap::new();
        for (rk, w) in queue {
            let oldest = w.parts.iter().all(|p| !named.contains(p.key.as_str()));
            let free = w.parts.iter().all(|p| free_permits(state, &p.key, p.capacity) >= p.count);
            if oldest && free {
                let since = self.due_since.get(rk).copied().unwrap_or_else(|| {
                    self.due_at_quiescence += 1;
                    now
                });
                if now > since + bound_ms {
                    return fail(format!(
                        "inv12: liveness: request {rk:?} (arrival {}, keys {:?}) is the oldest waiting on node {node} for each of its keys, whose counts have been free since {since} ms, and is still not granted at {now} ms",
                        w.arrival,
                        w.parts
                    ));
                }
                due.insert(*rk, since);
            }
            named.extend(w.parts.iter().map(|p| p.key.as_str()));
        }
        self.due_since = due;
        Ok(())
    }

    /// Node `node` applied the grant of `token` at `now`.
    pub fn node_applied_grant(&mut self, node: u64, token: u64, now: u64) {
        self.node_grant_applied.entry(node).or_default().insert(token, now);
    }

    /// Node `node` started serving as leader at `now`.
    pub fn node_serving(&mut self, node: u64, now: u64) {
        self.node_serving_since.insert(node, now);
    }

    /// Some node applied committed entry `index`. The first report extends the truth;
    /// later ones must agree with it.
    pub fn committed(
        &mut self,
        index: u64,
        term: u64,
        command: Option<&Command>,
        now: u64,
    ) -> Result<(), String> {
        let len = self.log.len() as u64;
        if index <= len {
            let (t, c) = &self.log[index as usize - 1];
            if *t != term || c.as_ref() != command {
                return fail(format!(
                    "inv1: index {index} applied as (term {term}, {command:?}) but committed as (term {t}, {c:?})"
                ));
            }
            return Ok(());
        }
        if index != len + 1 {
            return fail(format!("inv1: index {index} applied while the committed history ends at {len}"));
        }
        let commit_ms = match self.commit_ms.get(&index) {
            Some(ms) => *ms,
            None => return fail(format!("inv7: index {index} applied but no Raft ever committed it")),
        };
        let mut state = self.states.last().unwrap().clone();
        let mut effects = Vec::new();
        if let Some(cmd) = command {
            // Checked before applying: the state's own defence against such a grant
            // is an invariant that stops the node (a panic), and the checker must
            // say which of its invariants broke, as an error, in both profiles.
            grants_fit(index, &state, cmd)?;
            state.apply(cmd, &mut effects);
            self.replay_checks(index, cmd, &effects, &state, commit_ms, now)?;
        }
        self.log.push((term, command.cloned()));
        self.states.push(state);
        Ok(())
    }

    fn replay_checks(
        &mut self,
        index: u64,
        cmd: &Command,
        effects: &[Effect],
        state: &LockState,
        commit_ms: u64,
        _now: u64,
    ) -> Result<(), String> {
        let prev_last = self.states.last().unwrap().last_token();
        let granted: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Granted { token, .. } | Effect::PoolGranted { token, .. } => Some(*token),
                _ => None,
            })
            .collect();
        let grants = grants_in(cmd);
        for (parts, g) in &grants {
            // Inv 3: tokens strictly increase in commit order over all keys.
            if g.token <= prev_last {
                return fail(format!(
                    "inv3: token {} granted at {index} is not above the last token {prev_last}",
                    g.token
                ));
            }
            // Inv 1: the leader's projection must never propose a grant that apply
            // refuses (the "impossible grant" path: the key is held).
            if !granted.contains(&g.token) {
                return fail(format!(
                    "inv1: impossible grant committed at {index}: token {} on {:?} (last token {prev_last})",
                    g.token,
                    keys_of(parts)
                ));
            }
            if self.grants.contains_key(&g.token) {
                return fail(format!("inv3: token {} granted twice", g.token));
            }
            // Inv 9: one grant per request, of exactly the keys it asked.
            let rk = (g.origin.conn, g.origin.id);
            if let Some((token, at)) = self.granted_requests.get(&rk) {
                return fail(format!(
                    "inv9: request {rk:?} granted twice: token {token} at {at} and token {} ({:?}) at {index} (a grant split across entries?)",
                    g.token,
                    keys_of(parts)
                ));
            }
            if let Some(asked) = self.requests.get(&rk).and_then(|r| r.asked.parts()) {
                if !same_parts(&asked, parts) {
                    return fail(format!(
                        "inv9: grant of token {} at {index} is of {parts:?}, the request {rk:?} asked {asked:?}",
                        g.token
                    ));
                }
            }
            self.granted_requests.insert(rk, (g.token, index));
            self.grants.insert(
                g.token,
                GrantRec {
                    parts: parts.clone(),
                    origin: g.origin,
                    lease_ms: u64::from(g.lease_ms),
                    index,
                    ended_at: None,
                },
            );
            self.grants_committed += 1;
            if !is_plain(parts) {
                self.pooled_grants += 1;
            }
            if parts.len() > 1 {
                self.multi_key_grants += 1;
            }
            // Inv 4: one connection's requests for one key are granted in send order,
            // and one leader's waiters on one key in arrival order.
            for key in keys_of(parts) {
                let ck = (g.origin.conn, key.to_owned());
                if let Some(prev) = self.fifo_conn.get(&ck) {
                    if *prev >= g.origin.id {
                        return fail(format!(
                            "inv4: conn {} key {key:?}: request {} granted after request {prev}",
                            g.origin.conn, g.origin.id
                        ));
                    }
                }
                self.fifo_conn.insert(ck, g.origin.id);
                if let Some((_, seq)) = self.requests.get(&rk).and_then(|r| r.arrival) {
                    let ak = (g.origin.node, g.origin.incarnation, key.to_owned());
                    if let Some(prev) = self.fifo_arrival.get(&ak) {
                        if *prev >= seq {
                            return fail(format!(
                                "inv4: node {} key {key:?}: a request that arrived {seq}th granted after one that arrived {prev}th",
                                g.origin.node
                            ));
                        }
                    }
                    self.fifo_arrival.insert(ak, seq);
                }
            }
        }
        if state.last_token() < prev_last {
            return fail(format!("inv3: last token went back from {prev_last} to {}", state.last_token()));
        }
        let expiry = matches!(cmd, Command::Expire { .. } | Command::End { owner: None, .. });
        for e in effects {
            match e {
                Effect::Reply(o, response) => {
                    let k = (o.conn, o.id);
                    if self.committed_answer.contains_key(&k) {
                        return fail(format!(
                            "inv6: request {k:?} is answered by two committed entries (second at {index})"
                        ));
                    }
                    if self.not_executed.contains(&k) {
                        let got = &self.requests[&k].answered;
                        return fail(format!(
                            "inv6: request {k:?} was answered {got:?} (not executed) but committed at {index}"
                        ));
                    }
                    self.committed_answer.insert(k, (response.clone(), index));
                }
                Effect::Ended { token, .. } | Effect::PoolEnded { token } => {
                    let Some(g) = self.grants.get_mut(token) else { continue };
                    g.ended_at = Some(index);
                    // Inv 9: a hold ends on all of its keys at once.
                    if held_in(state, &g.parts, *token, true) {
                        return fail(format!(
                            "inv9: hold {token} ended at {index} but still holds some of {:?}",
                            keys_of(&g.parts)
                        ));
                    }
                    if expiry {
                        self.expiries += 1;
                        // Inv 5, client side: never before the client's own deadline.
                        let g = &self.grants[token];
                        if let Some(r) = self.requests.get(&(g.origin.conn, g.origin.id)) {
                            let deadline = r.sent_ms + g.lease_ms;
                            if commit_ms < deadline {
                                return fail(format!(
                                    "inv5: expiry of token {token} on {:?} committed at {commit_ms} ms, before the client's deadline {deadline} ms",
                                    keys_of(&g.parts)
                                ));
                            }
                        }
                        let grant_commit = self.commit_ms.get(&g.index).copied().unwrap_or(0);
                        if commit_ms < grant_commit + g.lease_ms {
                            return fail(format!(
                                "inv5: expiry of token {token} committed at {commit_ms} ms, less than a lease after its grant committed ({grant_commit} ms)"
                            ));
                        }
                    }
                }
                Effect::Granted { .. } | Effect::PoolGranted { .. } => {}
            }
        }
        // Inv 9: every grant holds all of its keys once applied, under its one token.
        for (parts, g) in &grants {
            if !held_in(state, parts, g.token, false) {
                return fail(format!(
                    "inv9: grant of token {} at {index} does not hold all of {:?} once applied",
                    g.token,
                    keys_of(parts)
                ));
            }
        }
        let handoff = match cmd {
            Command::Release { next, .. } | Command::Expire { next, .. } => next.is_some(),
            Command::End { next, .. } => !next.is_empty(),
            _ => false,
        };
        self.handoffs += u64::from(handoff);
        Ok(())
    }

    /// Node `node` has applied up to `index` and holds `state`: it must be the
    /// replayed state at that index.
    pub fn node_state(&self, node: u64, index: u64, state: &LockState) -> Result<(), String> {
        match self.states.get(index as usize) {
            Some(truth) if truth == state => Ok(()),
            Some(truth) => fail(format!(
                "inv1: node {node} at index {index} holds {state:?}, the committed history gives {truth:?}"
            )),
            None => fail(format!(
                "inv1: node {node} claims index {index}, committed history ends at {}",
                self.log.len()
            )),
        }
    }

    /// The client behind `key` received `response` at `now`.
    pub fn received(&mut self, key: ReqKey, response: &Response, now: u64) -> Result<(), String> {
        let Some(rec) = self.requests.get(&key) else {
            return fail(format!("inv6: answer {response:?} to unknown request {key:?}"));
        };
        if let Some((prev, at)) = &rec.answered {
            return fail(format!(
                "inv6: request {key:?} answered twice: {prev:?} at {at} ms, then {response:?}"
            ));
        }
        let rec = rec.clone();
        let committed = self.committed_answer.get(&key).cloned();
        let what = format!("request {key:?} {:?} sent at {} ms", rec.asked, rec.sent_ms);
        let lease_wait = rec.asked.lease_wait();
        match (response, &rec.asked) {
            (Response::Granted { token, lease_ms }, Asked::Acquire { .. } | Asked::Hold { .. }) => {
                let (l, _) = lease_wait.expect("a request for a hold");
                // Inv 7: a G only for a grant committed in the majority history.
                match &committed {
                    Some((Response::Granted { token: t, lease_ms: lm }, _))
                        if t == token && lm == lease_ms && u64::from(*lm) == l => {}
                    other => {
                        return fail(format!(
                            "inv7: {what} got G {token} but the committed history says {other:?}"
                        ))
                    }
                }
                if let Some(other) = self.g_tokens.get(token) {
                    return fail(format!("inv3: token {token} delivered in G to {other:?} and {key:?}"));
                }
                let parts = rec.asked.parts().expect("a request for a hold");
                // Inv 2: with the windows still open, no key has more permits believed
                // held than its capacity. (A G that arrives after the client's own
                // deadline opens no window at all.)
                let deadline = rec.sent_ms + l;
                if deadline > now {
                    self.permits_believed(&what, *token, &parts, now)?;
                }
                self.g_tokens.insert(*token, key);
                self.windows.insert(
                    *token,
                    Window { parts, client: rec.client, start: now, deadline, release_sent: None },
                );
                self.g_received += 1;
            }
            (Response::Released | Response::NotHolder, Asked::Release { .. }) => {
                if committed.as_ref().map(|c| &c.0) != Some(response) {
                    return fail(format!(
                        "inv6: {what} got {response:?}, the committed history says {committed:?}"
                    ));
                }
            }
            (Response::Busy | Response::Timeout, Asked::Acquire { .. } | Asked::Hold { .. }) => {
                let (_, wait_ms) = lease_wait.expect("a request for a hold");
                if let Some(c) = &committed {
                    return fail(format!("inv6: {what} got {response:?} but was committed: {c:?}"));
                }
                if *response == Response::Timeout && (wait_ms == 0 || now < rec.sent_ms + wait_ms) {
                    return fail(format!("inv6: {what} got T at {now} ms, before its wait elapsed"));
                }
                self.not_executed.insert(key);
            }
            (Response::InLine { .. }, Asked::Hold { place: true, .. }) => {
                // News before the one answer (it may arrive after the grant committed:
                // it was sent while the request waited): the request is not answered.
                return Ok(());
            }
            (Response::Error { message, .. }, Asked::Acquire { .. } | Asked::Hold { .. }) => {
                // The one refusal a valid request can get: a capacity other than the
                // key's while it has holders or waiters (inv10, server side).
                if let Some(c) = &committed {
                    return fail(format!("inv6: {what} got E but was committed: {c:?}"));
                }
                if !message.contains("capacity") {
                    return fail(format!("inv6: {what} got E {message:?}"));
                }
                self.not_executed.insert(key);
            }
            (Response::Moved { .. }, _) => {
                if let Some(c) = &committed {
                    return fail(format!("inv6: {what} got M but was committed: {c:?}"));
                }
                self.not_executed.insert(key);
            }
            (Response::Unknown, Asked::Acquire { .. } | Asked::Release { .. } | Asked::Hold { .. }) => {
                if !rec.proposed {
                    return fail(format!("inv6: {what} got U but was never proposed"));
                }
            }
            (Response::Holder { token, .. }, Asked::Query { key: k }) => {
                // Linearizable read: the hold was committed before the answer and not
                // ended before the question.
                let Some(g) = self.grants.get(token).filter(|g| g.names(k)) else {
                    return fail(format!("inv6: {what} got H {token}, never committed on {k:?}"));
                };
                let granted = self.commit_ms[&g.index];
                let ended = g.ended_at.map(|i| self.commit_ms[&i]);
                if granted > now || ended.is_some_and(|e| e < rec.sent_ms) {
                    return fail(format!(
                        "inv6: {what} got H {token} at {now} ms; hold committed {granted} ms, ended {ended:?}"
                    ));
                }
            }
            (Response::Free, Asked::Query { key: k }) => {
                for (t, g) in &self.grants {
                    if !g.names(k) {
                        continue;
                    }
                    let granted = self.commit_ms[&g.index];
                    let ended = g.ended_at.map(|i| self.commit_ms[&i]);
                    if granted < rec.sent_ms && ended.is_none_or(|e| e > now) {
                        return fail(format!(
                            "inv6: {what} got F at {now} ms but token {t} held it throughout (committed {granted} ms, ended {ended:?})"
                        ));
                    }
                }
            }
            (Response::Pool { .. }, Asked::Pool { key: k }) => {
                self.pool_read(&what, k, response, rec.sent_ms, now)?;
                self.pool_reads += 1;
            }
            _ => return fail(format!("inv6: {what} got a disallowed answer {response:?}")),
        }
        self.requests.get_mut(&key).unwrap().answered = Some((response.clone(), now));
        Ok(())
    }

    /// Inv 2 (and 10, as clients see it): a G of `token` for `parts` at `now`, on top of
    /// the windows still open, keeps every key within its capacity.
    fn permits_believed(&self, what: &str, token: u64, parts: &[Part], now: u64) -> Result<(), String> {
        for p in parts {
            let mut believed = p.count;
            let mut others = Vec::new();
            for (t, w) in &self.windows {
                let Some(q) = part_of(&w.parts, &p.key).filter(|_| w.end() > now) else { continue };
                if q.capacity != p.capacity {
                    return fail(format!(
                        "inv10: {what} got G {token} for capacity {} of {:?} at {now} ms while client {} holds token {t} of it with capacity {} until {} ms",
                        p.capacity,
                        p.key,
                        w.client,
                        q.capacity,
                        w.end()
                    ));
                }
                believed += q.count;
                others.push(format!("client {} token {t} ({} until {} ms)", w.client, q.count, w.end()));
            }
            if believed > p.capacity {
                return fail(format!(
                    "inv2: {what} got G {token} on {:?} at {now} ms: {believed} permits of capacity {} believed held, {} by {}",
                    p.key,
                    p.capacity,
                    believed - p.count,
                    others.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Inv 6 for POOL: the answer's capacity, permits in use, holds and holders are
    /// those of a committed state current at some moment between question and answer.
    /// (Waiters and lease times left are the leader's own, not the log's.)
    fn pool_read(&self, what: &str, key: &str, answer: &Response, sent: u64, now: u64) -> Result<(), String> {
        let last = self.log.len() as u64;
        let mut first = last;
        while first > 0 && self.commit_ms.get(&first).is_some_and(|&ms| ms > sent) {
            first -= 1;
        }
        if (first..=last).any(|i| pool_matches(&self.states[i as usize], key, answer, &self.grants)) {
            return Ok(());
        }
        fail(format!(
            "inv6: {what} got {answer:?} at {now} ms, which no committed state from index {first} to {last} gives (last: {:?})",
            self.states[last as usize]
        ))
    }
}

/// Whether the POOL answer `answer` describes `key` in `state`.
fn pool_matches(state: &LockState, key: &str, answer: &Response, grants: &BTreeMap<u64, GrantRec>) -> bool {
    let Response::Pool { capacity, in_use, holds, holders, .. } = answer else { return false };
    let lease = |t: u64| grants.get(&t).map_or(u64::MAX, |g| g.lease_ms);
    let listed: Vec<(u64, u32, &str)> =
        holders.iter().map(|h| (h.token, h.count, h.owner.as_str())).collect();
    if holders.iter().any(|h| u64::from(h.remaining_ms) > lease(h.token)) {
        return false;
    }
    if let Some(h) = state.holder_ref(key) {
        return (*capacity, *in_use, *holds) == (1, 1, 1) && listed == [(h.token, 1, h.owner)];
    }
    let Some((slot, pk)) = state.slot_of(key).and_then(|s| Some((s, state.pool_key(s)?))) else {
        return *in_use == 0 && *holds == 0 && holders.is_empty();
    };
    let owners: Vec<(u64, u32, String)> = state
        .pooled_on(slot)
        .take(POOL_HOLDERS_LISTED_MAX)
        .map(|(t, _, count)| (t, count, state.pooled_holder(t).map(|h| h.owner).unwrap_or_default()))
        .collect();
    let expected: Vec<(u64, u32, &str)> = owners.iter().map(|(t, c, o)| (*t, *c, o.as_str())).collect();
    (*capacity, *in_use, *holds) == (pk.capacity, pk.in_use, pk.holds) && listed == expected
}
