//! Lock-level safety invariants over a whole simulated history (tests/cluster_sim.rs).
//!
//! Like the Raft `Checker`, it is fed plain facts — "index i committed with this
//! command at t", "client c received this answer at t", "node n proposed an expiry
//! of token x at t" — so a test can feed it a hand-built bad history and watch each
//! invariant object. Ground truth is the committed log (replayed in a fresh
//! `LockState`) and the answers clients actually received.
//!
//! Every fact is checked when it arrives; `Err` carries the invariant's number.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use ticketing::lock::{Command, ConnId, Effect, LockState, Origin};
use ticketing::proto::Response;

pub type ReqKey = (ConnId, u32);

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    Acquire { key: String, owner: String, lease_ms: u64, wait_ms: u64 },
    Release { key: String, owner: String, token: u64 },
    Query { key: String },
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
    key: String,
    origin: Origin,
    lease_ms: u64,
    index: u64,
    /// Index of the committed entry that ended it (release or expiry), if any.
    ended_at: Option<u64>,
}

/// One client's exclusive window on a key: [start, min(release sent, deadline)].
#[derive(Clone, Debug)]
struct Window {
    key: String,
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
    pub grants_committed: u64,
    pub g_received: u64,
    pub expiries: u64,
    pub handoffs: u64,
}

fn fail<T>(msg: String) -> Result<T, String> {
    Err(msg)
}

/// Origins a command answers, with the grant (token, key) if it carries one.
fn grants_in(command: &Command) -> Vec<(&str, &ticketing::lock::Grant)> {
    match command {
        Command::Grant { key, grant } => vec![(key.as_str(), grant)],
        Command::Release { key, next, .. } | Command::Expire { key, next, .. } => {
            next.iter().map(|g| (key.as_str(), g)).collect()
        }
        Command::SetDomain { .. } | Command::SetMember { .. } => vec![],
        // This checker reasons about exclusive keys; the simulation drives ACQUIRE and
        // RELEASE only, whose commands are the ones above.
        Command::Hold { .. } | Command::End { .. } => {
            panic!("a counted or multi-key hold in a simulation of exclusive locks: {command:?}")
        }
    }
}

/// Inv 3 and inv 1 on the state before `command`: each grant's token is above the last
/// one, and its key is free once the command's own release (if any) has run.
fn impossible_grant(index: u64, before: &LockState, command: &Command) -> Result<(), String> {
    let last = before.last_token();
    for (key, g) in grants_in(command) {
        if g.token <= last {
            return fail(format!(
                "inv3: token {} granted at {index} is not above the last token {last}",
                g.token
            ));
        }
        let holder = before.holder(key);
        let freed = match (command, &holder) {
            (_, None) => true,
            (Command::Release { owner, token, .. }, Some(h)) => h.owner == *owner && h.token == *token,
            (Command::Expire { token, .. }, Some(h)) => h.token == *token,
            _ => false,
        };
        if !freed {
            return fail(format!(
                "inv1: impossible grant committed at {index}: token {} on {key:?} (last token {last}, holder {holder:?})",
                g.token
            ));
        }
    }
    Ok(())
}

pub fn origins_in(command: &Command) -> Vec<Origin> {
    let mut v: Vec<Origin> = grants_in(command).iter().map(|(_, g)| g.origin).collect();
    if let Command::Release { origin, .. } = command {
        v.push(*origin);
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
            // A real release (key, owner and token of a G this client got) ends the
            // client's window: it stops using the lock now.
            if let Some(rk) = self.g_tokens.get(token) {
                let g_req = &self.requests[rk];
                let same = g_req.client == client
                    && matches!(&g_req.asked, Asked::Acquire { key: gk, owner: o, .. } if o == owner && gk == k);
                if same {
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

    /// Node `node`'s lock side took request `key` (its `seq`-th request).
    pub fn arrived(&mut self, key: ReqKey, node: u64, seq: u64) {
        if let Some(r) = self.requests.get_mut(&key) {
            r.arrival = Some((node, seq));
        }
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
        if let Command::Expire { key, token, .. } = command {
            // Inv 5, leader side: the lease timer runs from the later of the grant's
            // apply on this node and this node's start of serving.
            if let Some(g) = self.grants.get(token) {
                let applied =
                    self.node_grant_applied.get(&node).and_then(|m| m.get(token)).copied().unwrap_or(0);
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
            impossible_grant(index, &state, cmd)?;
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
                Effect::Granted { token, .. } => Some(*token),
                _ => None,
            })
            .collect();
        for (key, g) in grants_in(cmd) {
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
                    "inv1: impossible grant committed at {index}: token {} on {key:?} (last token {prev_last}, holder {:?})",
                    g.token,
                    self.states.last().unwrap().holder(key)
                ));
            }
            if self.grants.contains_key(&g.token) {
                return fail(format!("inv3: token {} granted twice", g.token));
            }
            self.grants.insert(
                g.token,
                GrantRec {
                    key: key.to_owned(),
                    origin: g.origin,
                    lease_ms: u64::from(g.lease_ms),
                    index,
                    ended_at: None,
                },
            );
            self.grants_committed += 1;
            // Inv 4: one connection's requests for one key are granted in send order,
            // and one leader's waiters on one key in arrival order.
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
            if let Some((_, seq)) = self.requests.get(&(g.origin.conn, g.origin.id)).and_then(|r| r.arrival) {
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
        if state.last_token() < prev_last {
            return fail(format!("inv3: last token went back from {prev_last} to {}", state.last_token()));
        }
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
                Effect::PoolGranted { .. } | Effect::PoolEnded { .. } => {
                    return fail(format!("a pooled hold in a simulation of exclusive locks at {index}"));
                }
                Effect::Ended { token, .. } => {
                    let key = self.grants.get(token).map(|g| g.key.clone()).unwrap_or_default();
                    if let Some(g) = self.grants.get_mut(token) {
                        g.ended_at = Some(index);
                    }
                    if let Command::Expire { .. } = cmd {
                        self.expiries += 1;
                        // Inv 5, client side: never before the client's own deadline.
                        let g = &self.grants[token];
                        if let Some(r) = self.requests.get(&(g.origin.conn, g.origin.id)) {
                            let deadline = r.sent_ms + g.lease_ms;
                            if commit_ms < deadline {
                                return fail(format!(
                                    "inv5: expiry of token {token} on {key:?} committed at {commit_ms} ms, before the client's deadline {deadline} ms"
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
                Effect::Granted { .. } => {}
            }
        }
        if matches!(cmd, Command::Release { next: Some(_), .. } | Command::Expire { next: Some(_), .. }) {
            self.handoffs += 1;
        }
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
        match (response, &rec.asked) {
            (Response::Granted { token, lease_ms }, Asked::Acquire { key: k, lease_ms: l, .. }) => {
                // Inv 7: a G only for a grant committed in the majority history.
                match &committed {
                    Some((Response::Granted { token: t, lease_ms: lm }, _))
                        if t == token && lm == lease_ms && u64::from(*lm) == *l => {}
                    other => {
                        return fail(format!(
                            "inv7: {what} got G {token} but the committed history says {other:?}"
                        ))
                    }
                }
                if let Some(other) = self.g_tokens.get(token) {
                    return fail(format!("inv3: token {token} delivered in G to {other:?} and {key:?}"));
                }
                // Inv 2: no other client's window on this key is still open. (A G that
                // arrives after the client's own deadline opens no window at all.)
                let deadline = rec.sent_ms + *l;
                for (t, w) in &self.windows {
                    if w.key == *k && w.end() > now && deadline > now {
                        return fail(format!(
                            "inv2: {what} got G {token} on {k:?} at {now} ms while client {} holds token {t} until {} ms",
                            w.client,
                            w.end()
                        ));
                    }
                }
                self.g_tokens.insert(*token, key);
                self.windows.insert(
                    *token,
                    Window {
                        key: k.clone(),
                        client: rec.client,
                        start: now,
                        deadline: rec.sent_ms + *l,
                        release_sent: None,
                    },
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
            (Response::Busy | Response::Timeout, Asked::Acquire { wait_ms, .. }) => {
                if let Some(c) = &committed {
                    return fail(format!("inv6: {what} got {response:?} but was committed: {c:?}"));
                }
                if *response == Response::Timeout && (*wait_ms == 0 || now < rec.sent_ms + wait_ms) {
                    return fail(format!("inv6: {what} got T at {now} ms, before its wait elapsed"));
                }
                self.not_executed.insert(key);
            }
            (Response::Moved { .. }, _) => {
                if let Some(c) = &committed {
                    return fail(format!("inv6: {what} got M but was committed: {c:?}"));
                }
                self.not_executed.insert(key);
            }
            (Response::Unknown, Asked::Acquire { .. } | Asked::Release { .. }) => {
                if !rec.proposed {
                    return fail(format!("inv6: {what} got U but was never proposed"));
                }
            }
            (Response::Holder { token, .. }, Asked::Query { key: k }) => {
                // Linearizable read: the hold was committed before the answer and not
                // ended before the question.
                let Some(g) = self.grants.get(token).filter(|g| g.key == *k) else {
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
                    if g.key != *k {
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
            _ => return fail(format!("inv6: {what} got a disallowed answer {response:?}")),
        }
        self.requests.get_mut(&key).unwrap().answered = Some((response.clone(), now));
        Ok(())
    }
}
