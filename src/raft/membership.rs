//! Cluster membership and quorum math, including joint consensus.
//!
//! A configuration is `voters` (in joint consensus: the incoming set),
//! `outgoing` (non-empty only while joint) and `learners`. A decision needs a
//! majority of `voters` AND, while joint, a majority of `outgoing` (Raft
//! thesis §4.3). Learners never count.

use std::collections::{BTreeMap, BTreeSet};

use super::NodeId;

/// A membership configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    /// Voters; while joint, the incoming (new) voter set.
    pub voters: BTreeSet<NodeId>,
    /// The outgoing (old) voter set; non-empty only in joint consensus.
    pub outgoing: BTreeSet<NodeId>,
    /// Receive the log, never vote, never count for commit.
    pub learners: BTreeSet<NodeId>,
}

/// Outcome of an election so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteResult {
    Won,
    Lost,
    Pending,
}

impl Membership {
    /// A simple (non-joint) configuration with these voters and no learners.
    pub fn with_voters(voters: &[NodeId]) -> Membership {
        Membership { voters: voters.iter().copied().collect(), ..Membership::default() }
    }

    /// True while in joint consensus (C_old,new).
    pub fn is_joint(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// A voter in either half.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.outgoing.contains(&id)
    }

    /// A voter (either half) or a learner.
    pub fn contains(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.learners.contains(&id)
    }

    /// Every node the configuration mentions, ascending.
    pub fn all_nodes(&self) -> BTreeSet<NodeId> {
        let mut all = self.voters.clone();
        all.extend(self.outgoing.iter().copied());
        all.extend(self.learners.iter().copied());
        all
    }

    /// Number of distinct nodes mentioned (used for size estimates).
    pub fn node_count(&self) -> usize {
        self.voters.len() + self.outgoing.len() + self.learners.len()
    }

    /// The highest index replicated on a quorum, given each voter's match
    /// index. Joint: the smaller of both halves' answers.
    pub fn committed_index(&self, match_of: impl Fn(NodeId) -> u64) -> u64 {
        let incoming = majority_index(&self.voters, &match_of);
        if !self.is_joint() {
            return incoming;
        }
        incoming.min(majority_index(&self.outgoing, &match_of))
    }

    /// Whether the nodes for which `yes` holds form a quorum.
    pub fn has_quorum(&self, yes: impl Fn(NodeId) -> bool) -> bool {
        let half_ok = |set: &BTreeSet<NodeId>| {
            set.is_empty() || set.iter().filter(|id| yes(**id)).count() > set.len() / 2
        };
        !self.voters.is_empty() && half_ok(&self.voters) && half_ok(&self.outgoing)
    }

    /// Tallies votes (`true` = granted) over both halves.
    pub fn vote_result(&self, votes: &BTreeMap<NodeId, bool>) -> VoteResult {
        let incoming = half_result(&self.voters, votes);
        let outgoing = if self.is_joint() { half_result(&self.outgoing, votes) } else { VoteResult::Won };
        match (incoming, outgoing) {
            (VoteResult::Lost, _) | (_, VoteResult::Lost) => VoteResult::Lost,
            (VoteResult::Won, VoteResult::Won) => VoteResult::Won,
            _ => VoteResult::Pending,
        }
    }
}

/// The largest index that a majority of `set` has reached; 0 for an empty set
/// (why: a leader with no voters must never commit anything).
fn majority_index(set: &BTreeSet<NodeId>, match_of: &impl Fn(NodeId) -> u64) -> u64 {
    if set.is_empty() {
        return 0;
    }
    let mut matches: Vec<u64> = set.iter().map(|id| match_of(*id)).collect();
    matches.sort_unstable_by(|a, b| b.cmp(a));
    matches[set.len() / 2]
}

fn half_result(set: &BTreeSet<NodeId>, votes: &BTreeMap<NodeId, bool>) -> VoteResult {
    if set.is_empty() {
        return VoteResult::Lost;
    }
    let quorum = set.len() / 2 + 1;
    let granted = set.iter().filter(|id| votes.get(id) == Some(&true)).count();
    let rejected = set.iter().filter(|id| votes.get(id) == Some(&false)).count();
    if granted >= quorum {
        VoteResult::Won
    } else if rejected > set.len() - quorum {
        VoteResult::Lost
    } else {
        VoteResult::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joint(old: &[NodeId], new: &[NodeId]) -> Membership {
        Membership {
            voters: new.iter().copied().collect(),
            outgoing: old.iter().copied().collect(),
            learners: BTreeSet::new(),
        }
    }

    #[test]
    fn majority_of_three_commits_the_middle_value() {
        let m = Membership::with_voters(&[1, 2, 3]);
        let matches = [(1, 9), (2, 5), (3, 2)];
        let f = |id| matches.iter().find(|(n, _)| *n == id).unwrap().1;
        assert_eq!(m.committed_index(f), 5);
    }

    #[test]
    fn joint_commit_needs_both_majorities() {
        let m = joint(&[1, 2, 3], &[1, 2, 4]);
        // Old half {1,2,3}: 1,3 at 10 → 10. New half {1,2,4}: only 1 at 10 → 3.
        let f = |id| match id {
            1 => 10,
            2 => 3,
            3 => 10,
            _ => 0,
        };
        assert_eq!(m.committed_index(f), 3);
    }

    #[test]
    fn learners_do_not_count() {
        let mut m = Membership::with_voters(&[1, 2, 3]);
        m.learners.insert(4);
        m.learners.insert(5);
        assert!(!m.has_quorum(|id| id == 1 || id >= 4));
        assert!(m.has_quorum(|id| id <= 2));
    }

    #[test]
    fn joint_vote_lost_when_one_half_lost() {
        let m = joint(&[1, 2, 3], &[1, 4, 5]);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, true), (3, true), (4, false), (5, false)].into();
        assert_eq!(m.vote_result(&votes), VoteResult::Lost);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, true), (4, true)].into();
        assert_eq!(m.vote_result(&votes), VoteResult::Won);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, true)].into();
        assert_eq!(m.vote_result(&votes), VoteResult::Pending);
    }

    #[test]
    fn node_count_counts_every_set() {
        let mut m = joint(&[1, 2], &[3, 4, 5]);
        m.learners.insert(6);
        assert_eq!(m.node_count(), 6);
        assert_eq!(Membership::default().node_count(), 0);
    }

    /// A vote is lost only once too many voters refused for the rest to make a
    /// majority: one refusal of three, or two of five, leaves it open.
    #[test]
    fn vote_is_pending_until_a_majority_is_out_of_reach() {
        let three = Membership::with_voters(&[1, 2, 3]);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, false)].into();
        assert_eq!(three.vote_result(&votes), VoteResult::Pending);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, false), (3, false)].into();
        assert_eq!(three.vote_result(&votes), VoteResult::Lost);
        let five = Membership::with_voters(&[1, 2, 3, 4, 5]);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, false), (3, false)].into();
        assert_eq!(five.vote_result(&votes), VoteResult::Pending);
        let votes: BTreeMap<NodeId, bool> = [(1, true), (2, false), (3, false), (4, false)].into();
        assert_eq!(five.vote_result(&votes), VoteResult::Lost);
    }

    #[test]
    fn empty_voter_set_never_commits_or_wins() {
        let m = Membership::default();
        assert_eq!(m.committed_index(|_| 100), 0);
        assert!(!m.has_quorum(|_| true));
        assert_eq!(m.vote_result(&BTreeMap::new()), VoteResult::Lost);
    }
}
