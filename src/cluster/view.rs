//! What the Raft thread publishes about the cluster for the other threads: WELCOME
//! and STATUS are answered from here, without asking the Raft thread.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use crate::proto::handshake::role;
use crate::raft::{Raft, Role};

/// A consistent copy of the Raft facts STATUS reports.
#[derive(Clone, Debug, Default)]
pub struct RaftFacts {
    pub role: Option<Role>,
    pub term: u64,
    pub leader_id: Option<u64>,
    pub commit_index: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
}

#[derive(Debug, Default)]
pub struct ClusterView {
    facts: Mutex<RaftFacts>,
    /// Client addresses of members: from the configuration and from peer hellos.
    addrs: Mutex<BTreeMap<u64, String>>,
    /// Incarnations seen per node id: a different one under the same id is a
    /// restarted process, refused (SPEC §6).
    incarnations: Mutex<HashMap<u64, u64>>,
    /// Set once this node learned it was removed from the cluster.
    pub removed: AtomicBool,
}

impl ClusterView {
    pub fn new(addrs: impl IntoIterator<Item = (u64, String)>) -> ClusterView {
        ClusterView {
            addrs: Mutex::new(addrs.into_iter().collect()),
            ..Default::default()
        }
    }

    pub fn publish(&self, raft: &Raft) {
        let membership = raft.membership();
        let mut voters: Vec<u64> = membership.voters.iter().copied().collect();
        for id in &membership.outgoing {
            if !voters.contains(id) {
                voters.push(*id);
            }
        }
        voters.sort_unstable();
        let facts = RaftFacts {
            role: Some(raft.role()),
            term: raft.term(),
            leader_id: raft.leader_id(),
            commit_index: raft.commit_index(),
            voters,
            learners: membership.learners.iter().copied().collect(),
        };
        *self.facts.lock().unwrap_or_else(|p| p.into_inner()) = facts;
    }

    pub fn facts(&self) -> RaftFacts {
        self.facts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn learn_addr(&self, id: u64, addr: &str) {
        if !addr.is_empty() {
            self.addrs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, addr.to_owned());
        }
    }

    /// A member's client address; empty when unknown.
    pub fn addr_of(&self, id: u64) -> String {
        self.addrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// Records `incarnation` for `id`; false if `id` was seen with another one.
    pub fn check_incarnation(&self, id: u64, incarnation: u64) -> bool {
        let mut seen = self.incarnations.lock().unwrap_or_else(|p| p.into_inner());
        *seen.entry(id).or_insert(incarnation) == incarnation
    }

    /// The WELCOME role letter and leader address.
    pub fn welcome_role(&self) -> (u8, String) {
        let facts = self.facts();
        let letter = match facts.role {
            Some(Role::Leader) => role::LEADER,
            Some(Role::Candidate) | Some(Role::PreCandidate) => role::CANDIDATE,
            Some(Role::Learner) => role::LEARNER,
            Some(Role::Follower) | None => role::FOLLOWER,
        };
        let leader = facts
            .leader_id
            .map(|id| self.addr_of(id))
            .unwrap_or_default();
        (letter, leader)
    }

    /// `id@addr` for each id, comma-separated.
    pub fn members_text(&self, ids: &[u64]) -> String {
        ids.iter()
            .map(|id| format!("{id}@{}", self.addr_of(*id)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// STATUS's name for a role.
pub fn role_name(role: Option<Role>) -> &'static str {
    match role {
        Some(Role::Leader) => "leader",
        Some(Role::Candidate) | Some(Role::PreCandidate) => "candidate",
        Some(Role::Learner) => "learner",
        Some(Role::Follower) | None => "follower",
    }
}
