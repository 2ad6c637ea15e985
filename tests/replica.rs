//! `Replica` (the lock table connected to a log) against docs/protocol.md §8 (response matching:
//! `M` / `U`) and §3 (request × key state, linearizable QUERY, releases through the log).
//!
//! The log is faked here and fully scripted: each test decides which asks are appended
//! at which (index, term), which are refused, what commits (the replica's own entry,
//! another term's entry in its place, a no-op), in what order, and when time passes.
//! Every reply the replica ever produces goes through [`H::absorb`], which fails the test
//! the moment a request is answered a second time; tests end by checking that every
//! request they sent was answered exactly once.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use ticketing::lock::{Command, ConnId, Grant, Holder, LockState, Origin, Reply, TableConfig};
use ticketing::proto::{Request, Response};
use ticketing::replica::{AppendGate, LogRole, Replica, ReplicaOutput, ToLog, UNKNOWN_AFTER_MS};

const NODE: u64 = 1;
const INCARNATION: u64 = 1;
/// Another node of the cluster (the leader while this one follows).
const OTHER: u64 = 2;
const OTHER_ADDR: &str = "10.0.0.2:5225";
/// Wall clock at monotonic 0, in Unix µs.
const UNIX0: u64 = 1_700_000_000_000_000;

// ---------------------------------------------------------------------------------
// Harness: the replica, a scripted log, and every reply ever sent.

struct H {
    r: Replica,
    now: u64,
    /// Every reply, in the order the replica produced them.
    replies: Vec<Reply>,
    answered: HashMap<(ConnId, u32), usize>,
    /// Asks of the replica the fake log has not handled yet, in order.
    asks: Vec<ToLog>,
    /// The fake log: index → (term, command; None = no-op). Truncated on overwrite.
    log: BTreeMap<u64, (u64, Option<Command>)>,
}

impl H {
    fn new() -> H {
        Self::with_max(16)
    }

    fn with_max(waiters_per_key_max: usize) -> H {
        H {
            r: Replica::new(TableConfig {
                node: NODE,
                incarnation: INCARNATION,
                waiters_per_key_max,
                keys_max: usize::MAX,
            }),
            now: 0,
            replies: Vec::new(),
            answered: HashMap::new(),
            asks: Vec::new(),
            log: BTreeMap::new(),
        }
    }

    /// A leader of `term` 1 whose no-op (index 1) is committed and applied: serving.
    fn serving_leader() -> H {
        let mut h = H::new();
        h.leader(1, 1);
        h.put(1, 1, None);
        assert!(h.commit_to(1).is_empty());
        assert!(h.r.serving());
        h
    }

    fn unix(&self) -> u64 {
        UNIX0 + self.now * 1000
    }

    /// Takes one call's output: replies are recorded (at most one per request), asks
    /// are queued for the fake log. Returns the replies of this call.
    fn absorb(&mut self, out: ReplicaOutput) -> Vec<Reply> {
        for reply in &out.replies {
            let n = self.answered.entry((reply.conn, reply.id)).or_default();
            *n += 1;
            assert_eq!(*n, 1, "request answered twice: {reply:?}; all: {:?}", self.replies);
        }
        self.replies.extend(out.replies.iter().cloned());
        self.asks.extend(out.to_log);
        out.replies
    }

    fn req(&mut self, conn: ConnId, id: u32, request: Request) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.request(conn, id, request, self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    fn leader(&mut self, term: u64, noop_index: u64) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_role(LogRole::Leader { term, noop_index, new_domain: 0 }, self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    fn follower(&mut self, leader_addr: &str) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_role(
            LogRole::NotLeader { leader_addr: leader_addr.into() },
            self.now,
            self.unix(),
            &mut out,
        );
        self.absorb(out)
    }

    fn rejected(&mut self, seq: u64) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_rejected(seq, &mut out);
        self.absorb(out)
    }

    fn handover(&mut self, active: bool) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_handover(active, self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    /// The log defers command `seq` (planned in `term`), handing it back.
    fn deferred(&mut self, seq: u64, term: u64, command: Command) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_deferred(seq, term, command, &mut out);
        self.absorb(out)
    }

    fn read_ready(&mut self, ctx: u64, index: u64) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_read_ready(ctx, index, self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    fn read_failed(&mut self, ctx: u64) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_read_failed(ctx, &mut out);
        self.absorb(out)
    }

    fn snapshot(&mut self, index: u64, state: LockState) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_snapshot(index, state, &mut out);
        self.absorb(out)
    }

    fn tick_at(&mut self, now: u64) -> Vec<Reply> {
        assert!(now >= self.now);
        self.now = now;
        let mut out = ReplicaOutput::default();
        self.r.tick(self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    /// The Append asks not handled yet (ReadIndex asks stay queued).
    fn take_appends(&mut self) -> Vec<(u64, Command)> {
        let mut appends = Vec::new();
        self.asks.retain(|ask| match ask {
            ToLog::Append { seq, command, .. } => {
                appends.push((*seq, command.clone()));
                false
            }
            ToLog::ReadIndex { .. } => true,
        });
        appends
    }

    /// The ReadIndex asks not handled yet.
    fn take_reads(&mut self) -> Vec<u64> {
        let mut reads = Vec::new();
        self.asks.retain(|ask| match ask {
            ToLog::ReadIndex { ctx } => {
                reads.push(*ctx);
                false
            }
            ToLog::Append { .. } => true,
        });
        reads
    }

    fn last_index(&self) -> u64 {
        self.log.last_key_value().map_or(0, |(&i, _)| i)
    }

    /// Writes an entry at `index`, dropping everything after it (a leader's entry
    /// replaces a conflicting suffix).
    fn put(&mut self, index: u64, term: u64, command: Option<Command>) {
        assert!(index > self.r.applied_index(), "committed entries never change");
        self.log.retain(|&i, _| i < index);
        self.log.insert(index, (term, command));
    }

    /// Appends every pending Append ask at the end of the log with `term` and tells the
    /// replica; returns (seq, index, command).
    fn append_all(&mut self, term: u64) -> Vec<(u64, u64, Command)> {
        let appends = self.take_appends();
        self.append(term, appends)
    }

    /// Appends these (seq, command) at the end of the log with `term` and tells the
    /// replica; returns (seq, index, command).
    fn append(&mut self, term: u64, appends: Vec<(u64, Command)>) -> Vec<(u64, u64, Command)> {
        let mut done = Vec::new();
        for (seq, command) in appends {
            let index = self.last_index() + 1;
            self.put(index, term, Some(command.clone()));
            self.r.on_appended(seq, index, term);
            done.push((seq, index, command));
        }
        done
    }

    /// Commits and applies the log up to `index` (from the next unapplied entry).
    fn commit_to(&mut self, index: u64) -> Vec<Reply> {
        let mut replies = Vec::new();
        for i in self.r.applied_index() + 1..=index {
            let (term, command) = self.log.get(&i).cloned().expect("entry present");
            replies.extend(self.commit_one(i, term, command.as_ref()));
        }
        replies
    }

    fn commit_one(&mut self, index: u64, term: u64, command: Option<&Command>) -> Vec<Reply> {
        let mut out = ReplicaOutput::default();
        self.r.on_committed(index, term, command, self.now, self.unix(), &mut out);
        self.absorb(out)
    }

    fn answer(&self, conn: ConnId, id: u32) -> &Response {
        &self
            .replies
            .iter()
            .find(|r| r.conn == conn && r.id == id)
            .unwrap_or_else(|| panic!("({conn}, {id}) not answered"))
            .response
    }

    /// Exactly these requests were answered, each exactly once.
    fn assert_exactly_once(&self, requests: &[(ConnId, u32)]) {
        let want: HashSet<(ConnId, u32)> = requests.iter().copied().collect();
        assert_eq!(want.len(), requests.len(), "duplicate request in the list");
        for r in &want {
            assert_eq!(self.answered.get(r), Some(&1), "{r:?}: {:?}", self.replies);
        }
        for (r, n) in &self.answered {
            assert!(want.contains(r), "unexpected answer to {r:?} ({n})");
        }
        assert_eq!(self.replies.len(), requests.len());
    }
}

fn acq(key: &str, owner: &str, lease_s: u8, wait_ms: u32) -> Request {
    Request::Acquire { lease_s, wait_ms, key: key.into(), owner: owner.into() }
}

fn rel(token: u64, key: &str, owner: &str) -> Request {
    Request::Release { token, key: key.into(), owner: owner.into() }
}

fn query(key: &str) -> Request {
    Request::Query { key: key.into() }
}

fn moved(leader: &str) -> Response {
    Response::Moved { leader: leader.into() }
}

fn token_of(response: &Response) -> u64 {
    match response {
        Response::Granted { token, .. } => *token,
        other => panic!("expected G, got {other:?}"),
    }
}

/// A grant proposed by another node's leader (its origin is not ours).
fn other_grant(key: &str, owner: &str, token: u64, lease_ms: u32) -> Command {
    Command::Grant {
        key: key.into(),
        grant: Grant {
            owner: owner.into(),
            token,
            lease_ms,
            origin: Origin { node: OTHER, incarnation: 1, conn: 1, id: 1 },
        },
    }
}

fn only_reply(replies: &[Reply]) -> (ConnId, u32, Response) {
    assert_eq!(replies.len(), 1, "{replies:?}");
    (replies[0].conn, replies[0].id, replies[0].response.clone())
}

// ---------------------------------------------------------------------------------
// Roles.

#[test]
fn non_leader_answers_moved_with_leader_address_and_appends_nothing() {
    let mut h = H::new();
    // Before any role is known: not a leader, leader unknown.
    assert_eq!(only_reply(&h.req(1, 1, acq("k", "a", 5, 0))), (1, 1, moved("")));
    h.follower(OTHER_ADDR);
    let requests = [acq("k", "a", 5, 0), acq("k", "a", 5, 1000), rel(42, "k", "a"), query("k")];
    for (n, request) in requests.into_iter().enumerate() {
        let id = n as u32 + 2;
        assert_eq!(only_reply(&h.req(1, id, request)), (1, id, moved(OTHER_ADDR)));
    }
    assert!(h.asks.is_empty(), "a follower asked the log: {:?}", h.asks);
    assert_eq!(h.r.waiters(), 0);
    assert!(h.tick_at(60_000).is_empty());
    assert!(h.asks.is_empty());
    h.assert_exactly_once(&[(1, 1), (1, 2), (1, 3), (1, 4), (1, 5)]);
}

#[test]
fn new_leader_holds_requests_until_its_noop_is_applied_then_runs_them_in_arrival_order() {
    let mut h = H::new();
    h.follower(OTHER_ADDR);
    // The old leader's entries and this leader's no-op at 3.
    h.put(1, 1, Some(other_grant("held", "x", UNIX0, 30_000)));
    h.put(2, 1, None);
    h.put(3, 2, None);
    h.leader(2, 3);
    assert!(!h.r.serving());
    assert!(h.req(1, 1, acq("k1", "a", 5, 0)).is_empty());
    assert!(h.req(2, 1, acq("k2", "b", 5, 0)).is_empty());
    assert!(h.req(3, 1, acq("k1", "c", 5, 10_000)).is_empty());
    assert!(h.req(3, 2, rel(UNIX0, "held", "x")).is_empty());
    assert!(h.req(1, 2, query("k1")).is_empty());
    assert!(h.asks.is_empty(), "nothing before the no-op: {:?}", h.asks);
    // Entries before the no-op applied: still held back.
    assert!(h.commit_to(2).is_empty());
    assert!(h.asks.is_empty());
    assert!(!h.r.serving());
    // The no-op applied: served, in arrival order.
    assert!(h.commit_to(3).is_empty());
    assert!(h.r.serving());
    let asks = std::mem::take(&mut h.asks);
    assert_eq!(asks.len(), 4, "{asks:?}");
    let order: Vec<(String, Option<(ConnId, u32)>)> = asks
        .iter()
        .map(|ask| match ask {
            ToLog::Append { command: Command::Grant { key, grant }, .. } => {
                (key.clone(), Some((grant.origin.conn, grant.origin.id)))
            }
            ToLog::Append { command: Command::Release { key, origin, .. }, .. } => {
                (key.clone(), Some((origin.conn, origin.id)))
            }
            ToLog::ReadIndex { .. } => ("query".into(), None),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        order,
        vec![
            ("k1".to_string(), Some((1, 1))),
            ("k2".to_string(), Some((2, 1))),
            // (3, 1) queued behind (1, 1): no ask.
            ("held".to_string(), Some((3, 2))),
            ("query".to_string(), None),
        ]
    );
    let seqs: Vec<u64> = asks
        .iter()
        .filter_map(|a| match a {
            ToLog::Append { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(h.r.waiters(), 1);
}

#[test]
fn held_back_requests_get_moved_when_the_new_leader_steps_down_before_its_noop() {
    let mut h = H::new();
    h.leader(3, 1);
    assert!(h.req(1, 1, acq("k", "a", 5, 0)).is_empty());
    assert!(h.req(1, 2, query("k")).is_empty());
    let replies = h.follower(OTHER_ADDR);
    assert_eq!(replies.len(), 2);
    assert!(replies.iter().all(|r| r.response == moved(OTHER_ADDR)));
    assert!(h.asks.is_empty());
    h.assert_exactly_once(&[(1, 1), (1, 2)]);
}

// ---------------------------------------------------------------------------------
// Answers come from commit + apply.

#[test]
fn grant_and_release_are_answered_only_when_committed_and_applied() {
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("k", "a", 5, 0)).is_empty());
    let appended = h.append_all(1);
    assert_eq!(appended.len(), 1);
    assert!(h.replies.is_empty(), "G at append time: {:?}", h.replies);
    assert!(h.r.state().holder("k").is_none(), "applied before commit");
    let (_, index, _) = appended[0];
    let (conn, id, response) = only_reply(&h.commit_to(index));
    assert_eq!((conn, id), (1, 1));
    let token = token_of(&response);
    assert_eq!(response, Response::Granted { token, lease_ms: 5000 });
    assert_eq!(h.r.state().holder("k").map(|x| x.token), Some(token));

    assert!(h.req(1, 2, rel(token, "k", "a")).is_empty());
    let appended = h.append_all(1);
    assert_eq!(appended.len(), 1);
    assert!(matches!(appended[0].2, Command::Release { next: None, .. }));
    assert_eq!(h.replies.len(), 1, "R at append time");
    assert!(h.r.state().holder("k").is_some());
    assert_eq!(only_reply(&h.commit_to(appended[0].1)), (1, 2, Response::Released));
    assert!(h.r.state().holder("k").is_none());

    // A release that does not match goes through the log too: N only once committed.
    assert!(h.req(1, 3, rel(token, "k", "a")).is_empty());
    let appended = h.append_all(1);
    assert_eq!(appended.len(), 1);
    assert_eq!(h.replies.len(), 2, "N at append time");
    assert_eq!(only_reply(&h.commit_to(appended[0].1)), (1, 3, Response::NotHolder));
    h.assert_exactly_once(&[(1, 1), (1, 2), (1, 3)]);
}

#[test]
fn command_rejected_by_the_log_is_answered_moved_and_never_executed() {
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("k", "a", 5, 0)).is_empty());
    assert!(h.req(2, 1, acq("k2", "b", 5, 0)).is_empty());
    let appends = h.take_appends();
    assert_eq!(appends.len(), 2);
    // Refused while the replica still believes it leads: leader unknown.
    assert_eq!(only_reply(&h.rejected(appends[0].0)), (1, 1, moved("")));
    // Refused after the role change arrived: the new leader's address.
    h.follower(OTHER_ADDR);
    assert_eq!(only_reply(&h.rejected(appends[1].0)), (2, 1, moved(OTHER_ADDR)));
    assert!(h.r.state().holder("k").is_none());
    assert!(h.r.state().holder("k2").is_none());
    // Nothing more, ever: no U for a command that was refused.
    assert!(h.tick_at(UNKNOWN_AFTER_MS + 1000).is_empty());
    assert!(h.rejected(appends[0].0).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1)]);
}

// ---------------------------------------------------------------------------------
// A leader handing leadership over (a transfer, or its own removal).

/// Keys of the Grant commands among `appends`, in order.
fn granted_keys(appends: &[(u64, Command)]) -> Vec<String> {
    appends
        .iter()
        .map(|(_, c)| match c {
            Command::Grant { key, .. } => key.clone(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn requests_during_a_handover_wait_and_run_in_arrival_order_when_it_ends_still_leading() {
    let mut h = H::serving_leader();
    assert!(h.handover(true).is_empty());
    assert!(h.r.handing_over());
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    assert!(h.req(2, 1, acq("b", "y", 5, 0)).is_empty());
    assert!(h.req(1, 2, query("a")).is_empty());
    assert!(h.asks.is_empty(), "nothing goes to the log during a hand-over: {:?}", h.asks);
    // The transfer was abandoned: this node still leads.
    assert!(h.handover(false).is_empty());
    let appends = h.take_appends();
    assert_eq!(granted_keys(&appends), vec!["a", "b"]);
    assert_eq!(h.take_reads().len(), 1);
    h.append(1, appends);
    let replies = h.commit_to(3);
    assert_eq!(replies.len(), 2);
    h.assert_exactly_once(&[(1, 1), (2, 1)]);
}

#[test]
fn requests_during_a_handover_are_answered_moved_when_another_node_leads() {
    let mut h = H::serving_leader();
    h.handover(true);
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    assert!(h.req(1, 2, rel(7, "a", "x")).is_empty());
    let replies = h.follower(OTHER_ADDR);
    assert_eq!(replies.len(), 2);
    assert!(replies.iter().all(|r| r.response == moved(OTHER_ADDR)));
    assert!(h.asks.is_empty());
    assert!(!h.r.handing_over());
    assert!(h.tick_at(UNKNOWN_AFTER_MS + 1000).is_empty(), "no U: nothing was appended");
    h.assert_exactly_once(&[(1, 1), (1, 2)]);
}

/// The race: commands were on their way to the log when the hand-over began. The log
/// defers them (and, through its gate, everything after the first deferred one); the
/// replica proposes them again in planning order when the hand-over ends — once each.
#[test]
fn deferred_commands_are_proposed_again_in_planning_order_when_the_handover_ends() {
    let mut h = H::serving_leader();
    for (conn, key) in [(1, "a"), (2, "b"), (3, "c")] {
        assert!(h.req(conn, 1, acq(key, "x", 5, 0)).is_empty());
    }
    let appends = h.take_appends();
    assert_eq!(granted_keys(&appends), vec!["a", "b", "c"]);
    // The log appends "a", then the hand-over begins: "b" and "c" are deferred.
    let (seq_a, cmd_a) = appends[0].clone();
    h.put(2, 1, Some(cmd_a));
    h.r.on_appended(seq_a, 2, 1);
    h.handover(true);
    for (seq, command) in appends[1..].iter().cloned() {
        assert!(h.deferred(seq, 1, command).is_empty());
    }
    // Planned during the hand-over: waits behind them.
    assert!(h.req(4, 1, acq("d", "x", 5, 0)).is_empty());
    assert!(h.asks.is_empty());
    assert!(h.handover(false).is_empty());
    let again = h.take_appends();
    assert_eq!(granted_keys(&again), vec!["b", "c", "d"]);
    assert_eq!(again[0].0, appends[1].0, "same seq: the same command, not a new one");
    h.append(1, again);
    h.commit_to(h.last_index());
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1), (4, 1)]);
}

/// A deferral that reaches the replica before the notice of the hand-over (or after
/// its end) is proposed again at once; one that comes during the hand-over waits.
#[test]
fn deferred_command_without_a_known_handover_is_proposed_again_at_once() {
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    let (seq, command) = h.take_appends().remove(0);
    assert!(h.deferred(seq, 1, command.clone()).is_empty());
    assert_eq!(h.take_appends(), vec![(seq, command.clone())]);
    h.handover(true);
    assert!(h.deferred(seq, 1, command.clone()).is_empty());
    assert!(h.take_appends().is_empty());
    h.handover(false);
    assert_eq!(h.take_appends(), vec![(seq, command)]);
}

#[test]
fn deferred_commands_are_answered_moved_when_another_node_leads_and_never_proposed_again() {
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    let (seq, command) = h.take_appends().remove(0);
    h.handover(true);
    assert!(h.deferred(seq, 1, command.clone()).is_empty());
    assert_eq!(only_reply(&h.follower(OTHER_ADDR)), (1, 1, moved(OTHER_ADDR)));
    // A late deferral or rejection of it changes nothing.
    assert!(h.deferred(seq, 1, command).is_empty());
    assert!(h.rejected(seq).is_empty());
    assert!(h.asks.is_empty());
    // Leading again in a later term does not resurrect it.
    h.leader(2, 3);
    assert!(h.asks.is_empty());
    h.assert_exactly_once(&[(1, 1)]);
}

#[test]
fn new_leader_that_hands_over_before_its_noop_applies_keeps_holding_requests() {
    let mut h = H::new();
    h.leader(2, 1);
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    h.handover(true);
    h.put(1, 2, None);
    assert!(h.commit_to(1).is_empty());
    assert!(h.r.serving());
    assert!(h.asks.is_empty(), "held: the hand-over is still under way");
    h.handover(false);
    assert_eq!(granted_keys(&h.take_appends()), vec!["a"]);
}

#[test]
fn append_gate_defers_everything_after_the_first_deferred_command_until_it_is_appended() {
    let mut g = AppendGate::default();
    assert!(g.admit(1));
    g.appended(1);
    g.deferred(2);
    assert!(g.admit(2), "the deferred command itself may come back");
    assert!(!g.admit(3) && !g.admit(9), "later ones wait behind it");
    g.deferred(3);
    g.appended(2);
    assert!(g.admit(3) && !g.admit(4), "3 was deferred too: 4 waits for it");
    g.appended(3);
    assert!(g.admit(4));
    g.deferred(5);
    g.reset();
    assert!(g.admit(6));
}

// ---------------------------------------------------------------------------------
// After losing leadership: the log resolves what was appended (docs/protocol.md §8).

#[test]
fn deposed_leader_gives_the_real_answer_when_its_entry_commits_with_the_same_term() {
    let mut h = H::serving_leader();
    // k is held by a (committed at 2).
    h.req(1, 1, acq("k", "a", 5, 0));
    let (_, i, _) = h.append_all(1)[0];
    let token = token_of(&only_reply(&h.commit_to(i)).2);
    // G, R and N proposed at (3, 1), (4, 1), (5, 1), none committed yet.
    h.req(2, 1, acq("k2", "b", 5, 0));
    h.req(1, 2, rel(token, "k", "a"));
    h.req(3, 1, rel(token + 1, "k", "c"));
    let appended = h.append_all(1);
    assert_eq!(appended.iter().map(|a| a.1).collect::<Vec<_>>(), vec![3, 4, 5]);
    // Leadership lost: appended commands are NOT answered M.
    h.now = 1000;
    assert!(h.follower(OTHER_ADDR).is_empty());
    assert!(h.tick_at(3000).is_empty());
    // The new leader commits them at the same (index, term), then its own no-op.
    let replies = h.commit_to(5);
    assert_eq!(replies.len(), 3);
    assert!(token_of(h.answer(2, 1)) > token);
    assert_eq!(h.answer(1, 2), &Response::Released);
    assert_eq!(h.answer(3, 1), &Response::NotHolder);
    h.put(6, 2, None);
    assert!(h.commit_to(6).is_empty());
    // Past the U deadline: nothing more.
    assert!(h.tick_at(1000 + UNKNOWN_AFTER_MS + 1).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1), (1, 2), (3, 1)]);
}

#[test]
fn deposed_leader_answers_moved_when_its_entry_is_overwritten_by_another_term() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k1", "a", 5, 0));
    h.req(2, 1, acq("k2", "b", 5, 0));
    h.req(3, 1, acq("k3", "c", 5, 0));
    let appended = h.append_all(1);
    assert_eq!(appended.iter().map(|a| (a.1, 1)).collect::<Vec<_>>(), vec![(2, 1), (3, 1), (4, 1)]);
    assert!(h.follower(OTHER_ADDR).is_empty());
    // The new leader (term 2) kept (2, 1) but replaced 3.. with its no-op and a grant.
    h.put(3, 2, None);
    h.put(4, 2, Some(other_grant("k3", "z", UNIX0 + 10_000_000, 7000)));
    assert_eq!(h.r.state().keys_held(), 0);
    token_of(&only_reply(&h.commit_to(2)).2);
    assert_eq!(only_reply(&h.commit_to(3)), (2, 1, moved(OTHER_ADDR)));
    assert_eq!(only_reply(&h.commit_to(4)), (3, 1, moved(OTHER_ADDR)));
    // The replacing entry was applied: k3 is z's, not c's.
    assert_eq!(h.r.state().holder_ref("k3").map(|x| x.owner), Some("z"));
    assert!(h.tick_at(UNKNOWN_AFTER_MS + 1).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1)]);
}

/// Raft may cut a deposed leader's log back (a conflicting entry of a newer term
/// replaces its suffix) and this node may then lead again and append new commands at
/// the indexes its old, never-committed commands had. The old ones were overwritten.
#[test]
fn old_entry_at_an_index_reused_by_a_later_leadership_is_answered_moved() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k1", "a", 5, 0));
    h.req(2, 1, acq("k2", "b", 5, 0));
    h.req(3, 1, acq("k3", "c", 5, 0));
    let appended = h.append_all(1);
    assert_eq!(appended.iter().map(|a| a.1).collect::<Vec<_>>(), vec![2, 3, 4]);
    h.follower(OTHER_ADDR);
    // Term 2's leader (whose log ended at 1) replaced 2.. with its no-op, then died.
    h.put(2, 2, None);
    // This node wins term 3; its no-op goes at 3.
    h.put(3, 3, None);
    assert!(h.leader(3, 3).is_empty());
    assert_eq!(only_reply(&h.commit_to(2)), (1, 1, moved("")));
    assert_eq!(only_reply(&h.commit_to(3)), (2, 1, moved("")));
    assert!(h.r.serving());
    // (3, 1)'s old entry at (4, 1) is still unresolved; a new command lands at 4.
    h.req(4, 1, acq("k4", "d", 5, 0));
    let appended = h.append_all(3);
    assert_eq!(appended[0].1, 4);
    let replies = h.commit_to(4);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(h.answer(3, 1), &moved(""));
    token_of(h.answer(4, 1));
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1), (4, 1)]);
}

#[test]
fn unresolved_command_is_answered_unknown_once_5s_after_losing_leadership_and_late_commit_stays_silent() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k1", "a", 5, 0));
    h.req(2, 1, acq("k2", "b", 5, 0));
    h.req(3, 1, acq("k3", "c", 5, 0));
    h.req(4, 1, acq("k4", "d", 5, 0));
    let mut appends = h.take_appends();
    assert_eq!(appends.len(), 4);
    // Three are appended at 2, 3, 4; the fourth's append is never acknowledged in time.
    for (n, (seq, command)) in appends.drain(..3).enumerate() {
        let index = n as u64 + 2;
        h.put(index, 1, Some(command));
        h.r.on_appended(seq, index, 1);
    }
    let (late_seq, late_command) = appends.pop().expect("fourth");
    h.now = 1000;
    assert!(h.follower(OTHER_ADDR).is_empty());
    let deadline = 1000 + UNKNOWN_AFTER_MS;
    assert_eq!(h.r.next_deadline(), Some(deadline));
    assert!(h.tick_at(deadline - 1).is_empty());
    let replies = h.tick_at(deadline);
    assert_eq!(replies.len(), 4, "{replies:?}");
    assert!(replies.iter().all(|r| r.response == Response::Unknown));
    assert_eq!(h.r.next_deadline(), None);
    assert!(h.tick_at(deadline + 60_000).is_empty());
    // Later the log resolves them. The late append is acknowledged at (5, 1); the new
    // leader (term 2) kept 2 and 3 and replaced 4.. with its own entries.
    h.put(5, 1, Some(late_command));
    h.r.on_appended(late_seq, 5, 1);
    h.put(4, 2, None);
    h.put(5, 2, None);
    // Committed as appended (applied, silent) and overwritten (silent).
    assert!(h.commit_to(5).is_empty());
    assert_eq!(h.r.state().holder_ref("k1").map(|x| x.owner), Some("a"));
    assert_eq!(h.r.state().holder_ref("k2").map(|x| x.owner), Some("b"));
    assert!(h.r.state().holder("k3").is_none());
    assert!(h.r.state().holder("k4").is_none());
    assert!(h.rejected(late_seq).is_empty());
    assert!(h.tick_at(deadline + 120_000).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1), (4, 1)]);
}

#[test]
fn unknown_deadline_counts_from_losing_leadership_and_a_refused_late_append_stays_silent() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k1", "a", 5, 0));
    let (seq, _) = h.take_appends().pop().expect("one");
    h.tick_at(40_000);
    assert!(h.follower("").is_empty());
    assert_eq!(h.r.next_deadline(), Some(40_000 + UNKNOWN_AFTER_MS));
    // A leader address learned later does not move the deadline.
    assert!(h.follower(OTHER_ADDR).is_empty());
    assert!(h.tick_at(40_000 + UNKNOWN_AFTER_MS - 1).is_empty());
    assert_eq!(only_reply(&h.tick_at(40_000 + UNKNOWN_AFTER_MS)), (1, 1, Response::Unknown));
    assert!(h.rejected(seq).is_empty());
    h.assert_exactly_once(&[(1, 1)]);
}

// ---------------------------------------------------------------------------------
// Hand-off and waiters.

#[test]
fn handoff_release_with_a_waiter_is_one_append_answering_r_and_g() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k", "a", 5, 0));
    let (_, i, _) = h.append_all(1)[0];
    let t1 = token_of(&only_reply(&h.commit_to(i)).2);
    h.tick_at(100);
    assert!(h.req(2, 1, acq("k", "b", 7, 10_000)).is_empty());
    assert!(h.asks.is_empty(), "a waiter is not proposed");
    assert_eq!(h.r.waiters(), 1);
    h.tick_at(200);
    assert!(h.req(1, 2, rel(t1, "k", "a")).is_empty());
    let appended = h.append_all(1);
    assert_eq!(appended.len(), 1, "hand-off is ONE entry: {appended:?}");
    let (_, index, command) = &appended[0];
    match command {
        Command::Release { key, owner, token, origin, next: Some(next) } => {
            assert_eq!((key.as_str(), owner.as_str(), *token), ("k", "a", t1));
            assert_eq!((origin.conn, origin.id), (1, 2));
            assert_eq!((next.origin.conn, next.origin.id), (2, 1));
            assert_eq!(next.owner, "b");
            assert!(next.token > t1);
        }
        other => panic!("expected a release with hand-off, got {other:?}"),
    }
    assert_eq!(h.r.waiters(), 0);
    assert_eq!(h.replies.len(), 1, "nothing before the commit");
    let replies = h.commit_to(*index);
    assert_eq!(replies.len(), 2);
    assert_eq!(h.answer(1, 2), &Response::Released);
    let t2 = token_of(h.answer(2, 1));
    assert!(t2 > t1);
    assert_eq!(h.answer(2, 1), &Response::Granted { token: t2, lease_ms: 7000 });
    assert_eq!(h.r.state().holder("k"), Some(Holder { owner: "b".into(), token: t2, lease_ms: 7000 }));
    h.assert_exactly_once(&[(1, 1), (2, 1), (1, 2)]);
}

#[test]
fn waiters_never_proposed_get_moved_when_leadership_is_lost() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k", "a", 5, 0));
    let (_, i, _) = h.append_all(1)[0];
    h.commit_to(i);
    assert!(h.req(2, 1, acq("k", "b", 5, 10_000)).is_empty());
    assert!(h.req(3, 1, acq("k", "c", 5, 10_000)).is_empty());
    assert_eq!(h.r.waiters(), 2);
    assert!(h.asks.is_empty());
    let replies = h.follower(OTHER_ADDR);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(h.answer(2, 1), &moved(OTHER_ADDR));
    assert_eq!(h.answer(3, 1), &moved(OTHER_ADDR));
    assert_eq!(h.r.waiters(), 0);
    assert!(h.asks.is_empty());
    // Their waits elapsing later changes nothing.
    assert!(h.tick_at(20_000).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1)]);
}

#[test]
fn waiters_of_one_leadership_get_moved_when_a_new_term_starts_on_the_same_node() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k", "a", 5, 0));
    let (_, i, _) = h.append_all(1)[0];
    h.commit_to(i);
    assert!(h.req(2, 1, acq("k", "b", 5, 10_000)).is_empty());
    h.put(3, 2, None);
    assert_eq!(only_reply(&h.leader(2, 3)), (2, 1, moved("")));
    assert!(h.commit_to(3).is_empty());
    assert!(h.r.serving());
    assert_eq!(h.r.waiters(), 0);
    h.assert_exactly_once(&[(1, 1), (2, 1)]);
}

// ---------------------------------------------------------------------------------
// QUERY is linearizable.

#[test]
fn query_waits_for_read_index_and_for_apply_up_to_it() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k", "a", 5, 0));
    let (_, i, _) = h.append_all(1)[0];
    let t1 = token_of(&only_reply(&h.commit_to(i)).2);
    assert_eq!(h.r.applied_index(), 2);

    // QUERY asks the log; it is not answered from local state.
    assert!(h.req(9, 1, query("k")).is_empty());
    assert!(h.req(9, 2, query("k2")).is_empty());
    let reads = h.take_reads();
    assert_eq!(reads.len(), 2);
    assert!(h.take_appends().is_empty(), "a read appends nothing");
    // Meanwhile a release of k and a grant of k2 get committed at 3 and 4 (not yet
    // applied here), and the log confirms the reads at read index 4.
    h.req(1, 2, rel(t1, "k", "a"));
    h.req(2, 1, acq("k2", "b", 5, 0));
    let appended = h.append_all(1);
    assert_eq!(appended.iter().map(|a| a.1).collect::<Vec<_>>(), vec![3, 4]);
    assert!(h.read_ready(reads[0], 4).is_empty(), "applied 2 < read index 4");
    assert!(h.read_ready(reads[1], 4).is_empty());
    // Applying 3 is not enough.
    assert_eq!(only_reply(&h.commit_to(3)), (1, 2, Response::Released));
    assert!(!h.answered.contains_key(&(9, 1)));
    // Applying 4 answers both, reflecting 3 and 4.
    let replies = h.commit_to(4);
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!(h.answer(9, 1), &Response::Free);
    let t2 = token_of(h.answer(2, 1));
    assert_eq!(
        h.answer(9, 2),
        &Response::Holder { token: t2, remaining_ms: 5000, waiters: 0, owner: "b".into() }
    );

    // A read index already applied: answered at once, with the lease's remaining time.
    h.tick_at(1500);
    h.req(9, 3, query("k2"));
    let ctx = h.take_reads()[0];
    assert_eq!(
        only_reply(&h.read_ready(ctx, 4)),
        (9, 3, Response::Holder { token: t2, remaining_ms: 3500, waiters: 0, owner: "b".into() })
    );
    h.assert_exactly_once(&[(1, 1), (9, 1), (9, 2), (1, 2), (2, 1), (9, 3)]);
}

#[test]
fn query_is_answered_moved_when_the_read_fails_or_leadership_is_lost() {
    let mut h = H::serving_leader();
    // The log cannot confirm leadership.
    h.req(9, 1, query("k"));
    let ctx = h.take_reads()[0];
    assert_eq!(only_reply(&h.read_failed(ctx)), (9, 1, moved("")));
    assert!(h.read_ready(ctx, 1).is_empty(), "a failed read stays failed");
    // One read still waiting for its ReadIndex, one confirmed but waiting for apply.
    h.req(9, 2, query("k"));
    h.req(9, 3, query("k"));
    let reads = h.take_reads();
    h.req(1, 1, acq("k", "a", 5, 0));
    h.append_all(1);
    assert!(h.read_ready(reads[1], 2).is_empty());
    let replies = h.follower(OTHER_ADDR);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(h.answer(9, 2), &moved(OTHER_ADDR));
    assert_eq!(h.answer(9, 3), &moved(OTHER_ADDR));
    // Late answers from the log for them change nothing.
    assert!(h.read_ready(reads[0], 2).is_empty());
    assert!(h.read_failed(reads[1]).is_empty());
    // The acquire was appended: answered from its commit, not M.
    token_of(&only_reply(&h.commit_to(2)).2);
    // A follower does not read locally.
    assert_eq!(only_reply(&h.req(9, 4, query("k"))), (9, 4, moved(OTHER_ADDR)));
    assert!(h.asks.is_empty());
    h.assert_exactly_once(&[(9, 1), (9, 2), (9, 3), (1, 1), (9, 4)]);
}

// ---------------------------------------------------------------------------------
// Followers and snapshots.

#[test]
fn follower_applies_the_leaders_commands_silently_and_its_state_matches() {
    // The leader: node 2, standalone-like (every append commits at once).
    let mut leader = Replica::new(TableConfig {
        node: OTHER,
        incarnation: 1,
        waiters_per_key_max: 16,
        keys_max: usize::MAX,
    });
    let mut follower = H::new();
    follower.follower(OTHER_ADDR);
    let mut out = ReplicaOutput::default();
    leader.on_role(LogRole::Leader { term: 1, noop_index: 0, new_domain: 0 }, 0, UNIX0, &mut out);
    let mut index = 0;
    let mut leader_replies = Vec::new();
    /// The leader's log commits on append; the follower applies each entry right after.
    fn run(
        leader: &mut Replica,
        follower: &mut H,
        out: &mut ReplicaOutput,
        index: &mut u64,
        now: u64,
    ) -> Vec<Reply> {
        while !out.to_log.is_empty() {
            for ask in std::mem::take(&mut out.to_log) {
                match ask {
                    ToLog::Append { seq, command, .. } => {
                        *index += 1;
                        leader.on_appended(seq, *index, 1);
                        leader.on_committed(*index, 1, Some(&command), now, UNIX0 + now, out);
                        follower.now = now;
                        follower.put(*index, 1, Some(command.clone()));
                        assert!(follower.commit_to(*index).is_empty());
                        assert_eq!(follower.r.state(), leader.state());
                        assert_eq!(follower.r.applied_index(), *index);
                    }
                    ToLog::ReadIndex { ctx } => leader.on_read_ready(ctx, *index, now, UNIX0 + now, out),
                }
            }
        }
        std::mem::take(&mut out.replies)
    }
    // Conn ids that collide with nothing on the follower but still: no replies there.
    leader.request(1, 1, acq("k", "a", 1, 0), 0, UNIX0, &mut out);
    leader.request(2, 1, acq("k", "b", 1, 5000), 0, UNIX0, &mut out);
    leader.request(3, 1, acq("j", "c", 2, 0), 0, UNIX0, &mut out);
    leader_replies.extend(run(&mut leader, &mut follower, &mut out, &mut index, 0));
    let t1 = match &leader_replies[0].response {
        Response::Granted { token, .. } => *token,
        other => panic!("{other:?}"),
    };
    leader.request(1, 2, rel(t1, "k", "a"), 100, UNIX0 + 100, &mut out);
    leader.request(3, 2, rel(1, "j", "c"), 100, UNIX0 + 100, &mut out);
    leader_replies.extend(run(&mut leader, &mut follower, &mut out, &mut index, 100));
    // Leases run out on the leader: expiries are committed entries too.
    leader.tick(5000, UNIX0 + 5000, &mut out);
    leader_replies.extend(run(&mut leader, &mut follower, &mut out, &mut index, 5000));
    assert_eq!(leader.state().keys_held(), 0);
    assert!(index >= 6, "grant, grant, release+hand-off, N, expiries: {index}");
    assert_eq!(follower.r.state(), leader.state());
    assert!(follower.replies.is_empty(), "{:?}", follower.replies);
    assert!(follower.asks.is_empty());
    assert_eq!(leader_replies.len(), 5, "G, G, R + G, N: {leader_replies:?}");
}

#[test]
fn snapshot_replaces_state_and_answers_unknown_for_own_pending_at_or_below_it() {
    let mut h = H::serving_leader();
    h.req(1, 1, acq("k1", "a", 5, 0));
    h.req(2, 1, acq("k2", "b", 5, 0));
    h.req(3, 1, acq("k3", "c", 5, 0));
    let appended = h.append_all(1);
    assert_eq!(appended.iter().map(|a| a.1).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert!(h.follower(OTHER_ADDR).is_empty());
    // The leader sends a snapshot at 3: this node cannot learn what happened at 2, 3.
    let state = LockState::from_parts(
        vec![("other".into(), Holder { owner: "z".into(), token: UNIX0 + 1, lease_ms: 9000 })],
        UNIX0 + 1,
        0,
    )
    .expect("valid");
    let replies = h.snapshot(3, state.clone());
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(h.answer(1, 1), &Response::Unknown);
    assert_eq!(h.answer(2, 1), &Response::Unknown);
    assert_eq!(h.r.state(), &state);
    assert_eq!(h.r.applied_index(), 3);
    // The entry at 4 is still resolved from the log.
    let (_, _, command) = appended[2].clone();
    let token = match &command {
        Command::Grant { grant, .. } => grant.token,
        other => panic!("{other:?}"),
    };
    assert!(token > UNIX0 + 1);
    h.log.clear();
    h.put(4, 1, Some(command));
    assert_eq!(only_reply(&h.commit_to(4)), (3, 1, Response::Granted { token, lease_ms: 5000 }));
    assert!(h.tick_at(UNKNOWN_AFTER_MS + 1).is_empty());
    h.assert_exactly_once(&[(1, 1), (2, 1), (3, 1)]);
}

// ---------------------------------------------------------------------------------
// Lease timers.

#[test]
fn lease_timers_run_only_on_a_serving_leader_which_restarts_every_lease_in_full() {
    let mut h = H::new();
    h.follower(OTHER_ADDR);
    h.put(1, 1, Some(other_grant("k", "x", UNIX0 + 1, 10_000)));
    h.put(2, 1, Some(other_grant("j", "y", UNIX0 + 2, 3_000)));
    assert!(h.commit_to(2).is_empty());
    assert_eq!(h.r.next_deadline(), None, "no timers on a follower");
    assert!(h.tick_at(60_000).is_empty());
    assert!(h.asks.is_empty(), "a follower never expires a lease");
    assert_eq!(h.r.state().keys_held(), 2);
    // Elected at 60 s: not serving yet, still no timers.
    h.put(3, 2, None);
    h.leader(2, 3);
    assert_eq!(h.r.next_deadline(), None);
    assert!(h.tick_at(61_000).is_empty());
    assert!(h.asks.is_empty());
    // Serving from 62 s: both leases restart in full.
    h.now = 62_000;
    h.commit_to(3);
    assert!(h.r.serving());
    assert_eq!(h.r.next_deadline(), Some(62_000 + 3_000));
    h.req(9, 1, query("k"));
    h.req(9, 2, query("j"));
    for ctx in h.take_reads() {
        h.read_ready(ctx, 3);
    }
    assert_eq!(
        h.answer(9, 1),
        &Response::Holder { token: UNIX0 + 1, remaining_ms: 10_000, waiters: 0, owner: "x".into() }
    );
    assert_eq!(
        h.answer(9, 2),
        &Response::Holder { token: UNIX0 + 2, remaining_ms: 3_000, waiters: 0, owner: "y".into() }
    );
    // j's lease runs out on this leader: an Expire is proposed.
    assert!(h.tick_at(64_999).is_empty());
    assert!(h.asks.is_empty());
    h.tick_at(65_000);
    let appended = h.append_all(2);
    assert_eq!(appended.len(), 1);
    assert!(matches!(
        &appended[0].2,
        Command::Expire { key, token, next: None } if key == "j" && *token == UNIX0 + 2
    ));
    h.commit_to(4);
    assert!(h.r.state().holder("j").is_none());
    assert_eq!(h.r.next_deadline(), Some(72_000));
    // Deposed: timers stop.
    h.follower(OTHER_ADDR);
    assert_eq!(h.r.next_deadline(), None);
    assert!(h.tick_at(100_000).is_empty());
    assert!(h.asks.is_empty());
    assert_eq!(h.r.state().holder("k").map(|x| x.token), Some(UNIX0 + 1));
    h.assert_exactly_once(&[(9, 1), (9, 2)]);
}

/// TOP KEYS walks the queues at most once per TOP_KEYS_CACHE_MS, whoever asks: askers
/// in between get the same list, cut to their n; a follower answers M.
#[test]
fn top_keys_are_made_at_most_once_per_cache_period() {
    use ticketing::replica::TOP_KEYS_CACHE_MS;
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("a", "x", 5, 0)).is_empty());
    let appended = h.append_all(1);
    token_of(&only_reply(&h.commit_to(appended[0].1)).2);
    assert!(h.req(2, 2, acq("a", "y", 5, 60_000)).is_empty(), "y queues");
    let keys = |r: Response| match r {
        Response::TopKeys { keys } => keys.into_iter().map(|k| (k.key, k.waiters)).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(keys(h.r.top_keys(10, h.now)), vec![("a".to_string(), 1)]);
    assert!(h.req(3, 3, acq("a", "z", 5, 60_000)).is_empty(), "z queues too");
    h.now += TOP_KEYS_CACHE_MS - 1;
    assert_eq!(keys(h.r.top_keys(10, h.now)), vec![("a".to_string(), 1)], "the same list");
    h.now += 1;
    assert_eq!(keys(h.r.top_keys(10, h.now)), vec![("a".to_string(), 2)], "made anew");
    h.follower("10.0.0.2:5225");
    assert_eq!(h.r.top_keys(10, h.now), moved("10.0.0.2:5225"));
}

// ---------------------------------------------------------------------------------
// What the lock-table thread reads of the replica, and snapshots in slices.

#[test]
fn the_replica_says_which_node_it_is_and_whether_the_log_makes_it_leader() {
    let mut h = H::new();
    assert_eq!(h.r.node(), NODE);
    let config = TableConfig { node: OTHER, incarnation: 1, waiters_per_key_max: 16, keys_max: usize::MAX };
    assert_eq!(Replica::new(config).node(), OTHER);
    assert!(!h.r.is_leader(), "a new replica leads nothing");
    h.leader(1, 1);
    // Leading before its no-op is applied: a leader, not serving yet.
    assert!(h.r.is_leader() && !h.r.serving());
    h.follower(OTHER_ADDR);
    assert!(!h.r.is_leader());
}

/// Grants `key` to `owner` through the log and returns its token.
fn granted(h: &mut H, conn: ConnId, key: &str, owner: &str) -> u64 {
    assert!(h.req(conn, 1, acq(key, owner, 30, 0)).is_empty());
    let appended = h.append_all(1);
    let (_, _, response) = only_reply(&h.commit_to(appended[0].1));
    token_of(&response)
}

#[test]
fn a_snapshot_in_slices_is_the_state_at_its_beginning_whatever_is_applied_meanwhile() {
    let mut h = H::serving_leader();
    assert!(!h.r.snapshot_in_progress());
    assert_eq!(h.r.snapshot_step(1), None, "no snapshot under way");
    for (conn, key) in [(1, "a"), (2, "b"), (3, "c")] {
        granted(&mut h, conn, key, "o");
    }
    let at_begin = h.r.snapshot();
    let index = h.r.applied_index();
    h.r.begin_snapshot();
    assert!(h.r.snapshot_in_progress());
    // Applied while the snapshot is encoded: not in it.
    granted(&mut h, 4, "d", "o");
    assert!(h.r.applied_index() > index);
    let mut steps = 0;
    let (at, bytes) = loop {
        steps += 1;
        if let Some(done) = h.r.snapshot_step(1) {
            break done;
        }
        assert!(h.r.snapshot_in_progress() && steps < 100);
    };
    assert!(steps > 1, "one slot per step: several steps");
    assert_eq!((at, bytes), (index, at_begin));
    assert!(!h.r.snapshot_in_progress());
    assert_eq!(h.r.snapshot_step(1), None);
}

#[test]
fn the_tables_figures_are_the_replicas_own() {
    let mut h = H::serving_leader();
    granted(&mut h, 1, "a", "o");
    granted(&mut h, 2, "b", "o");
    assert_eq!(h.r.table_stats().grants_immediate, 2);
    h.r.table_stats().grants_immediate = 0;
    assert_eq!(h.r.table_stats().grants_immediate, 0, "the figures are the table's, kept between calls");
}

/// A lease that runs out during a hand-over: its Expire is planned (the table's timer
/// fired) but waits like every other new command, and goes to the log when the
/// hand-over ends with this node still leading.
#[test]
fn an_expiry_planned_during_a_handover_waits_for_its_end() {
    let mut h = H::serving_leader();
    assert!(h.req(1, 1, acq("k", "a", 1, 0)).is_empty());
    let appended = h.append_all(1);
    let token = token_of(&only_reply(&h.commit_to(appended[0].1)).2);
    h.handover(true);
    h.tick_at(h.now + 1_001);
    assert_eq!(h.take_appends(), Vec::new(), "nothing goes to the log during a hand-over");
    h.handover(false);
    let appends = h.take_appends();
    assert!(
        matches!(&appends[..], [(_, Command::Expire { key, token: t, next: None })] if key == "k" && *t == token),
        "{appends:?}"
    );
}

/// The first leader of a cluster records the fencing domain it drew, once its no-op is
/// applied; a leader that finds a domain recorded proposes none.
#[test]
fn the_first_leader_records_its_domain_and_a_later_one_keeps_it() {
    let mut h = H::new();
    let mut out = ReplicaOutput::default();
    h.r.on_role(LogRole::Leader { term: 1, noop_index: 1, new_domain: 77 }, h.now, h.unix(), &mut out);
    h.absorb(out);
    h.put(1, 1, None);
    h.commit_to(1);
    let appends = h.take_appends();
    assert!(matches!(&appends[..], [(_, Command::SetDomain { domain: 77 })]), "{appends:?}");
    h.put(2, 1, Some(Command::SetDomain { domain: 77 }));
    h.commit_to(2);
    assert_eq!(h.r.state().domain(), 77);
    // A later leadership, with another domain drawn: the recorded one stays.
    h.follower(OTHER_ADDR);
    let mut out = ReplicaOutput::default();
    h.r.on_role(LogRole::Leader { term: 2, noop_index: 3, new_domain: 99 }, h.now, h.unix(), &mut out);
    h.absorb(out);
    h.put(3, 2, None);
    h.commit_to(3);
    assert_eq!(h.take_appends(), Vec::new(), "no second domain proposed");
}

/// A closed connection's waiters leave their queues: the key goes to the next one.
#[test]
fn a_closed_connections_waiter_is_skipped_when_the_key_is_handed_on() {
    let mut h = H::serving_leader();
    let token = granted(&mut h, 1, "k", "a");
    assert!(h.req(2, 2, acq("k", "gone", 5, 60_000)).is_empty());
    assert!(h.req(3, 3, acq("k", "next", 5, 60_000)).is_empty());
    h.r.conn_closed(2, 0, 0, &mut Default::default());
    assert!(h.req(1, 4, rel(token, "k", "a")).is_empty());
    let appends = h.take_appends();
    assert!(
        matches!(&appends[..], [(_, Command::Release { next: Some(g), .. })] if g.owner == "next"),
        "{appends:?}"
    );
}

#[path = "replica/model.rs"]
mod model;
