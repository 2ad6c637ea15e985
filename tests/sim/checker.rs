//! Safety invariants over a whole simulated history.
//!
//! The checker is fed plain facts ("node n is leader in term t", "node n
//! holds entry (i, t) with content c", …) so that tests can also feed it a
//! hand-built bad history and watch it object.

use std::collections::{HashMap, HashSet};

use ticketing::raft::{Membership, NodeId};

/// A broken invariant, with enough words to find it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

fn fail<T>(msg: String) -> Result<T, Violation> {
    Err(Violation(msg))
}

#[derive(Default)]
pub struct Checker {
    /// term → the one leader of that term (election safety).
    leaders: HashMap<u64, NodeId>,
    /// (index, term) → (content hash, previous entry's term) (log matching).
    entries: HashMap<(u64, u64), (u64, u64)>,
    /// index → (entry term, term in which its commit was first observed).
    committed: HashMap<u64, (u64, u64)>,
    /// index → cumulative hash of the applied sequence `1..=index`.
    applied: HashMap<u64, u64>,
    last_commit: HashMap<NodeId, u64>,
    seen_leader: HashSet<(NodeId, u64)>,
    /// id → index of the first committed configuration seen containing it.
    member_since: HashMap<NodeId, u64>,
    /// id → lowest term in which a committed config without it was seen.
    removed_at: HashMap<NodeId, u64>,
    /// The cluster's size: every committed configuration has exactly this many
    /// voters (each half of a joint one too). Membership changes replace voters,
    /// never add or drop one (autopilot and admin replacement alike).
    pub voters_expected: Option<usize>,
}

impl Checker {
    /// Election safety: at most one leader per term, over all history.
    /// Also: a node removed by a committed config never leads a later term.
    pub fn leader(&mut self, id: NodeId, term: u64) -> Result<(), Violation> {
        match self.leaders.get(&term) {
            Some(other) if *other != id => {
                return fail(format!("election safety: {other} and {id} both lead term {term}"))
            }
            _ => {
                self.leaders.insert(term, id);
            }
        }
        if let Some(t) = self.removed_at.get(&id) {
            if term > *t {
                return fail(format!("removed node {id} leads term {term} (removed in term {t})"));
            }
        }
        Ok(())
    }

    /// True the first time (id, term) is reported as leader.
    pub fn first_time_leader(&mut self, id: NodeId, term: u64) -> bool {
        self.seen_leader.insert((id, term))
    }

    /// Log matching: one (index, term) ⇒ one content and one predecessor
    /// term (so, by induction, one prefix).
    pub fn log_entry(
        &mut self,
        id: NodeId,
        index: u64,
        term: u64,
        content: u64,
        prev_term: u64,
    ) -> Result<(), Violation> {
        match self.entries.get(&(index, term)) {
            Some(&(c, p)) if (c, p) != (content, prev_term) => fail(format!(
                "log matching: node {id} holds ({index}, {term}) with content {content:x}/prev {prev_term}, \
                 another node had {c:x}/prev {p}"
            )),
            Some(_) => Ok(()),
            None => {
                self.entries.insert((index, term), (content, prev_term));
                Ok(())
            }
        }
    }

    /// Commit index never decreases; records newly committed entries.
    /// `term_of(i)` is the node's term at index i if it still holds it.
    pub fn commit(
        &mut self,
        id: NodeId,
        commit: u64,
        node_term: u64,
        term_of: impl Fn(u64) -> Option<u64>,
    ) -> Result<(), Violation> {
        let last = self.last_commit.get(&id).copied().unwrap_or(0);
        if commit < last {
            return fail(format!("commit index of node {id} went back from {last} to {commit}"));
        }
        self.last_commit.insert(id, commit);
        for i in last + 1..=commit {
            let Some(t) = term_of(i) else { continue };
            match self.committed.get(&i) {
                Some(&(ct, _)) if ct != t => {
                    return fail(format!("node {id} committed ({i}, {t}) but ({i}, {ct}) was committed"))
                }
                Some(_) => {}
                None => {
                    self.committed.insert(i, (t, node_term));
                }
            }
        }
        Ok(())
    }

    /// Leader completeness: a new leader of `term` holds every entry that
    /// was committed in an earlier term (except those in its snapshot).
    pub fn leader_log(
        &self,
        id: NodeId,
        term: u64,
        first_index: u64,
        term_of: impl Fn(u64) -> Option<u64>,
    ) -> Result<(), Violation> {
        for (&i, &(t, observed)) in &self.committed {
            if observed < term && i >= first_index && term_of(i) != Some(t) {
                return fail(format!(
                    "leader completeness: leader {id} of term {term} lacks ({i}, {t}) committed in term {observed}"
                ));
            }
        }
        Ok(())
    }

    /// State-machine safety: every node's applied sequence is a prefix of one
    /// global sequence (compared by cumulative hash at each index).
    pub fn applied(&mut self, id: NodeId, index: u64, cumulative: u64) -> Result<(), Violation> {
        match self.applied.get(&index) {
            Some(&h) if h != cumulative => {
                fail(format!("state machine safety: node {id} applied a different sequence up to {index}"))
            }
            Some(_) => Ok(()),
            None => {
                self.applied.insert(index, cumulative);
                Ok(())
            }
        }
    }

    /// Checks a node's committed configuration: 3 or 5 voters when not
    /// joint; remembers who was removed (and when).
    pub fn committed_config(
        &mut self,
        id: NodeId,
        term: u64,
        config_index: u64,
        m: &Membership,
    ) -> Result<(), Violation> {
        if m.voters.is_empty() && m.outgoing.is_empty() {
            return Ok(()); // a joining node that knows no configuration yet
        }
        if !m.is_joint() && m.voters.len() != 3 && m.voters.len() != 5 {
            return fail(format!("node {id}: committed config has {} voters", m.voters.len()));
        }
        if let Some(n) = self.voters_expected {
            if m.voters.len() != n || (m.is_joint() && m.outgoing.len() != n) {
                return fail(format!("node {id}: committed config {m:?} does not have {n} voters"));
            }
        }
        for n in m.all_nodes() {
            let since = self.member_since.entry(n).or_insert(config_index);
            *since = (*since).min(config_index);
        }
        // Committed configs form one history ordered by index: a member of
        // an earlier one that a later one lacks was removed for good.
        for (gone, since) in &self.member_since {
            if *since < config_index && !m.contains(*gone) {
                let t = self.removed_at.entry(*gone).or_insert(term);
                *t = (*t).min(term);
            }
        }
        Ok(())
    }

    /// At most one configuration change in flight on a leader.
    pub fn uncommitted_configs(&self, id: NodeId, count: usize) -> Result<(), Violation> {
        if count > 1 {
            return fail(format!("leader {id} has {count} uncommitted config entries"));
        }
        Ok(())
    }

    /// The commit index last reported for `id` (0 if never).
    pub fn last_commit(&self, id: NodeId) -> u64 {
        self.last_commit.get(&id).copied().unwrap_or(0)
    }

    pub fn is_removed(&self, id: NodeId) -> bool {
        self.removed_at.contains_key(&id)
    }
}
