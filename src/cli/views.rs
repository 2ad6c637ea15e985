//! The views of every node (`status`, `top`): each node asked its STATUS at once on a
//! connection of its own, the members listed by node id from the leader's configuration,
//! and a member that does not answer — or whose address answers as another process —
//! shown unreachable; once a majority has answered, the silent ones get a short wait.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commands::parse_status;
use super::{why_unanswered, Budget, Failed};
use crate::client::{ClientError, Direct};

/// Once a majority of the nodes of a view has answered, how long the others still get
/// (or as long again as the majority took, if that is longer): a node that stays
/// silent costs a view this, not the command's whole budget.
pub(super) const STRAGGLER_WAIT: Duration = Duration::from_millis(500);

/// A node's STATUS fields.
pub(super) type Fields = BTreeMap<String, String>;

/// When a view stops waiting for nodes that have not answered: at the end of its
/// `budget` from `started`; or, once the answers that came (at the instants `answered`,
/// in the order they came) make a majority of the `total` nodes of the view together
/// with the `already` that answered before this round, [`STRAGGLER_WAIT`] later — or as
/// long again as the majority took, if that is longer — never past the budget.
pub(super) fn give_up_at(
    started: Instant,
    budget: Duration,
    total: usize,
    already: usize,
    answered: &[Instant],
) -> Instant {
    let end = started + budget;
    let quorum = total / 2 + 1;
    let majority_at = match quorum.checked_sub(already + 1) {
        None => Some(started),
        Some(nth) => answered.get(nth).copied(),
    };
    match majority_at {
        Some(at) => end.min(at + STRAGGLER_WAIT.max(at.saturating_duration_since(started))),
        None => end,
    }
}

/// Why a node gave no answer: the error, and the line that says so.
pub(super) struct Unanswered {
    pub(super) error: ClientError,
    pub(super) why: String,
}

/// What one node said, or why it said nothing, and when.
pub(super) struct Answer<T> {
    pub(super) addr: String,
    pub(super) reply: Result<T, Unanswered>,
    /// When the answer (or the failure) came; for a silent node, when the view gave up.
    pub(super) at: Instant,
}

/// How one node is asked: its address and the time it has.
pub(super) type Ask<T> = Arc<dyn Fn(&str, Duration) -> Result<T, ClientError> + Send + Sync>;

/// Asks each of `addrs` with `ask`, all at once (a thread each), and collects the
/// answers until all came or [`give_up_at`] (`total` and `already` as it takes them) —
/// a node still silent then is left to its thread, which ends within the budget.
pub(super) fn ask_each<T: Send + 'static>(
    addrs: &[String],
    budget: Duration,
    total: usize,
    already: usize,
    ask: Ask<T>,
) -> Vec<Answer<T>> {
    let started = Instant::now();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut replies: Vec<Option<(Result<T, ClientError>, Instant)>> = addrs.iter().map(|_| None).collect();
    for (i, addr) in addrs.iter().enumerate() {
        let (tx, ask, addr) = (tx.clone(), Arc::clone(&ask), addr.clone());
        let spawned = std::thread::Builder::new().name("ticketing-ask".into()).spawn(move || {
            let reply = ask(&addr, budget);
            let _ = tx.send((i, reply, Instant::now()));
        });
        if let Err(e) = spawned {
            replies[i] = Some((Err(ClientError::Protocol(format!("cannot start a thread: {e}"))), started));
        }
    }
    drop(tx);
    let mut answered: Vec<Instant> = Vec::new();
    while replies.iter().any(Option::is_none) {
        let until = give_up_at(started, budget, total, already, &answered);
        match rx.recv_deadline(until) {
            Ok((i, reply, at)) => {
                if reply.is_ok() {
                    answered.push(at);
                }
                replies[i] = Some((reply, at));
            }
            Err(_) => break,
        }
    }
    let gave_up = Instant::now();
    let waited = gave_up.saturating_duration_since(started).as_secs_f64();
    addrs
        .iter()
        .zip(replies)
        .map(|(addr, reply)| {
            let (reply, at) = match reply {
                Some((Ok(value), at)) => (Ok(value), at),
                Some((Err(error), at)) => (Err(Unanswered { why: why_unanswered(addr, &error), error }), at),
                None => {
                    let why = format!(
                        "{addr}: no answer within {waited:.1} s ({} of the {total} nodes answered sooner)",
                        already + answered.len()
                    );
                    (Err(Unanswered { error: ClientError::NoAnswer, why }), gave_up)
                }
            };
            Answer { addr: addr.clone(), reply, at }
        })
        .collect()
}

/// Each of `addrs`' STATUS, asked at once within `budget` ([`ask_each`]).
pub(super) fn ask_status(
    direct: &Direct,
    addrs: &[String],
    budget: Duration,
    total: usize,
    already: usize,
) -> Vec<Answer<Fields>> {
    let direct = direct.clone();
    let ask: Ask<Fields> = Arc::new(move |addr: &str, budget: Duration| {
        direct.status_of(addr, budget).map(|text| parse_status(&text).into_iter().collect())
    });
    ask_each(addrs, budget, total, already, ask)
}

/// One member of a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Member {
    pub(super) id: u64,
    pub(super) addr: String,
    pub(super) voter: bool,
}

/// The voters, then the standbys (Raft learners) that a cluster node's STATUS lists.
pub(super) fn members(fields: &Fields) -> Vec<Member> {
    let mut out: Vec<Member> = Vec::new();
    for (name, voter) in [("voters", true), ("learners", false)] {
        for entry in fields.get(name).map(String::as_str).unwrap_or("").split(',') {
            let Some((id, addr)) = entry.split_once('@') else { continue };
            let Ok(id) = id.parse::<u64>() else { continue };
            if !addr.is_empty() && !out.iter().any(|m| m.id == id) {
                out.push(Member { id, addr: addr.to_owned(), voter });
            }
        }
    }
    out
}

/// What people read for a role: a Raft learner is a `standby` (the wire's STATUS says
/// `learner`, docs/protocol.md §6.1).
pub(super) fn role_word(role: &str) -> &str {
    match role {
        "learner" => "standby",
        other => other,
    }
}

/// Whose configuration a view lists: the node and how it saw itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Source {
    pub(super) id: String,
    pub(super) role: String,
    pub(super) term: u64,
}

/// One row of a view: a member (or a node asked that is none), by node id.
#[derive(Debug)]
pub(super) struct Row {
    /// The node id (`-` for an address that answered nothing and is no member's).
    pub(super) id: String,
    pub(super) addr: String,
    /// Its own STATUS (role as people read it: [`role_word`]), or why it gave none.
    pub(super) status: Result<Fields, String>,
    /// When its answer came.
    pub(super) at: Instant,
}

impl Row {
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.status.as_ref().ok()?.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub(super) fn number(&self, name: &str) -> Option<u64> {
        self.field(name)?.parse().ok()
    }

    /// Its role as people read it, or `unreachable`.
    pub(super) fn role(&self) -> &str {
        match &self.status {
            Ok(_) => role_word(self.field("role").unwrap_or("-")),
            Err(_) => "unreachable",
        }
    }
}

/// A view of the cluster: its rows, whose configuration listed them, and the row of
/// the node that says it leads.
#[derive(Debug)]
pub(super) struct View {
    pub(super) rows: Vec<Row>,
    /// `None` when no node that answered knows a configuration (a standalone node, or
    /// nodes waiting to be founded): the rows are the nodes asked.
    pub(super) source: Option<Source>,
    pub(super) leader: Option<usize>,
}

impl View {
    /// Rows that answered.
    pub(super) fn answering(&self) -> usize {
        self.rows.iter().filter(|r| r.status.is_ok()).count()
    }

    /// The text of a row's `leader` field, marked when the leader it names is a row
    /// of this view that does not answer (a node's belief that is out of date).
    pub(super) fn leader_of(&self, row: &Row) -> Option<String> {
        let leader = row.field("leader")?;
        let gone = row.field("leader_id").is_some_and(|id| {
            self.rows.iter().any(|r| r.id == id && r.status.is_err()) && row.role() != "standalone"
        });
        Some(if gone { format!("{leader} (unreachable)") } else { leader.to_owned() })
    }

    /// When no node that answered leads: whose list of members this is.
    pub(super) fn whose(&self) -> Option<String> {
        match (&self.source, self.leader) {
            (Some(s), None) => Some(format!(
                "no node answering leads: the members are those node {} ({}, term {}) lists",
                s.id,
                role_word(&s.role),
                s.term
            )),
            _ => None,
        }
    }
}

/// The answer whose configuration a view lists: the leader's (the highest term if two
/// say they lead), else the member's with the highest term, then commit index.
fn source_of(answers: &[Answer<Fields>]) -> Option<&Fields> {
    let number = |f: &Fields, name: &str| f.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    answers
        .iter()
        .filter_map(|a| a.reply.as_ref().ok())
        .filter(|f| !members(f).is_empty() && f.get("role").is_some_and(|r| r != "standalone"))
        .max_by_key(|f| {
            (f.get("role").is_some_and(|r| r == "leader"), number(f, "term"), number(f, "commit_index"))
        })
}

/// The view the `answers` make: a row per member of [`source_of`]'s configuration, by
/// node id — a member whose address answers as another node id (a new process where a
/// dead one ran) is unreachable, and the other process gets a row of its own — then a
/// row per other node that answered, then per address that did not and is no member's.
pub(super) fn view_of(answers: &[Answer<Fields>], now: Instant) -> View {
    let source = source_of(answers);
    let mut used = vec![false; answers.len()];
    let mut rows: Vec<Row> = Vec::new();
    let shown = |f: &Fields| {
        let mut f = f.clone();
        if let Some(role) = f.get_mut("role") {
            *role = role_word(role).to_owned();
        }
        f
    };
    for member in source.map(members).unwrap_or_default() {
        let id = member.id.to_string();
        let at = answers.iter().position(|a| a.addr == member.addr);
        let row = match at.map(|i| (i, &answers[i])) {
            Some((i, Answer { reply: Ok(f), at, .. })) if f.get("node_id") == Some(&id) => {
                used[i] = true;
                Row { id, addr: member.addr, status: Ok(shown(f)), at: *at }
            }
            Some((_, Answer { reply: Ok(f), at, .. })) => {
                let other = f.get("node_id").map(String::as_str).unwrap_or("?");
                let why =
                    format!("{}: answers as node {other}, another process: node {id} is gone", member.addr);
                Row { id, addr: member.addr, status: Err(why), at: *at }
            }
            Some((i, Answer { reply: Err(u), at, .. })) => {
                used[i] = true;
                Row { id, addr: member.addr, status: Err(u.why.clone()), at: *at }
            }
            None => {
                let why = format!("{}: not asked", member.addr);
                Row { id, addr: member.addr, status: Err(why), at: now }
            }
        };
        rows.push(row);
    }
    for (i, answer) in answers.iter().enumerate() {
        if used[i] {
            continue;
        }
        match &answer.reply {
            Ok(f) => {
                let id = f.get("node_id").cloned().unwrap_or_else(|| "-".into());
                // The same node under another address (an alias): one row.
                if rows.iter().any(|r| r.id == id && r.status.is_ok()) {
                    continue;
                }
                rows.push(Row { id, addr: answer.addr.clone(), status: Ok(shown(f)), at: answer.at });
            }
            Err(u) => {
                if rows.iter().any(|r| r.addr == answer.addr) {
                    continue;
                }
                rows.push(Row {
                    id: "-".into(),
                    addr: answer.addr.clone(),
                    status: Err(u.why.clone()),
                    at: answer.at,
                });
            }
        }
    }
    let leader = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r.role(), "leader" | "standalone"))
        .max_by_key(|(_, r)| r.number("term").unwrap_or(0))
        .map(|(i, _)| i);
    let source = source.map(|f| Source {
        id: f.get("node_id").cloned().unwrap_or_default(),
        role: f.get("role").cloned().unwrap_or_default(),
        term: f.get("term").and_then(|t| t.parse().ok()).unwrap_or(0),
    });
    View { rows, source, leader }
}

/// Asks `given` their STATUS at once, then the members the best answer lists that were
/// not among them; the answers and the view they make. Within `budget` when every node
/// is silent; well within it once a majority answers ([`give_up_at`]).
pub(super) fn gather(direct: &Direct, given: &[String], budget: Budget) -> (Vec<Answer<Fields>>, View) {
    let left = || budget.length.saturating_sub(budget.started.elapsed());
    let mut answers = ask_status(direct, given, left(), given.len(), 0);
    let listed = source_of(&answers).map(members).unwrap_or_default();
    let missing: Vec<String> = listed
        .iter()
        .map(|m| m.addr.clone())
        .filter(|addr| !answers.iter().any(|a| a.addr == *addr))
        .collect();
    if !missing.is_empty() {
        let total = answers.len() + missing.len();
        let already = answers.iter().filter(|a| a.reply.is_ok()).count();
        answers.extend(ask_status(direct, &missing, left(), total, already));
    }
    let view = view_of(&answers, Instant::now());
    (answers, view)
}

/// A command whose one node did not answer: what failed (said as for every command),
/// then why.
pub(super) fn report_unanswered(command: &str, unanswered: &Unanswered, budget: Budget) {
    eprintln!("ticketing {command}: {}", Failed::Read(&unanswered.error).headline(budget));
    eprintln!("  {}", unanswered.why);
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
