//! The applied lock state and its pure `apply`.

use std::collections::{BTreeMap, HashMap};

use super::command::{Command, Grant, Origin};
use crate::proto::Response;

/// The current holder of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub token: u64,
    pub lease_ms: u32,
}

/// What applying a command did, for the node that drives the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Answer the request behind `origin` (on the node it came from).
    Reply(Origin, Response),
    /// `key` now has a holder with this token and lease (start its lease timer).
    Granted { key: String, token: u64, lease_ms: u32 },
    /// `key`'s hold `token` ended (released or expired).
    Ended { key: String, token: u64 },
}

/// A cluster member as the log records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberRecord {
    /// Its client address.
    pub addr: String,
    /// The process that runs this node id; 0 while not known.
    pub incarnation: u64,
}

/// Holders of all held keys and the highest token ever granted. Every node holds the
/// same `LockState` after applying the same commands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockState {
    holders: HashMap<String, Holder>,
    last_token: u64,
    /// The fencing domain; 0 until the first leader recorded one.
    domain: u64,
    /// Cluster members (address and incarnation), replicated so that every node (and
    /// every future leader) can reach every member and knows which process runs it.
    members: BTreeMap<u64, MemberRecord>,
}

impl LockState {
    /// A state from its parts (a decoded snapshot); `None` if a key appears twice.
    pub fn from_parts(holders: Vec<(String, Holder)>, last_token: u64, domain: u64) -> Option<LockState> {
        let count = holders.len();
        let holders: HashMap<String, Holder> = holders.into_iter().collect();
        (holders.len() == count).then_some(LockState {
            holders,
            last_token,
            domain,
            members: BTreeMap::new(),
        })
    }

    /// The same state with these member records (a decoded snapshot).
    pub fn with_members(mut self, members: BTreeMap<u64, MemberRecord>) -> LockState {
        self.members = members;
        self
    }

    /// Recorded cluster members, by node id.
    pub fn members(&self) -> &BTreeMap<u64, MemberRecord> {
        &self.members
    }

    /// The fencing domain (0 until recorded).
    pub fn domain(&self) -> u64 {
        self.domain
    }

    pub fn holder(&self, key: &str) -> Option<&Holder> {
        self.holders.get(key)
    }

    pub fn holders(&self) -> impl Iterator<Item = (&String, &Holder)> {
        self.holders.iter()
    }

    pub fn keys_held(&self) -> usize {
        self.holders.len()
    }

    /// The highest token ever granted in this domain (0 before the first grant).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Applies one committed command. Pure and deterministic: the result depends only
    /// on the state and the command, never on the node or the time.
    ///
    /// The leader's projection guarantees that a proposed grant finds its key free and
    /// its token above `last_token`; should that ever not hold, the grant is refused
    /// (the waiter is told `B`) rather than breaking mutual exclusion or monotonicity.
    pub fn apply(&mut self, command: &Command, effects: &mut Vec<Effect>) {
        match command {
            Command::Grant { key, grant } => self.grant_if_free(key, grant, effects),
            Command::SetMember { node, incarnation, addr } => {
                let record = self.members.entry(*node).or_default();
                // A node id belongs to the first process recorded for it; a record for
                // another process changes nothing.
                if *incarnation != 0 && record.incarnation != 0 && record.incarnation != *incarnation {
                    return;
                }
                if record.incarnation == 0 {
                    record.incarnation = *incarnation;
                }
                record.addr.clone_from(addr);
            }
            Command::SetDomain { domain } => {
                // The first recorded domain stays: a domain is never replaced.
                if self.domain == 0 {
                    self.domain = *domain;
                }
            }
            Command::Release { key, owner, token, origin, next } => {
                let matches =
                    matches!(self.holders.get(key), Some(h) if h.owner == *owner && h.token == *token);
                if matches {
                    self.holders.remove(key);
                    effects.push(Effect::Ended { key: key.clone(), token: *token });
                    effects.push(Effect::Reply(*origin, Response::Released));
                } else {
                    effects.push(Effect::Reply(*origin, Response::NotHolder));
                }
                if let Some(next) = next {
                    self.grant_if_free(key, next, effects);
                }
            }
            Command::Expire { key, token, next } => {
                if matches!(self.holders.get(key), Some(h) if h.token == *token) {
                    self.holders.remove(key);
                    effects.push(Effect::Ended { key: key.clone(), token: *token });
                }
                if let Some(next) = next {
                    self.grant_if_free(key, next, effects);
                }
            }
        }
    }

    fn grant_if_free(&mut self, key: &str, grant: &Grant, effects: &mut Vec<Effect>) {
        if self.holders.contains_key(key) || grant.token <= self.last_token {
            debug_assert!(false, "projection proposed an impossible grant on {key:?}");
            effects.push(Effect::Reply(grant.origin, Response::Busy));
            return;
        }
        self.last_token = grant.token;
        self.holders.insert(
            key.to_owned(),
            Holder { owner: grant.owner.clone(), token: grant.token, lease_ms: grant.lease_ms },
        );
        effects.push(Effect::Granted { key: key.to_owned(), token: grant.token, lease_ms: grant.lease_ms });
        effects.push(Effect::Reply(
            grant.origin,
            Response::Granted { token: grant.token, lease_ms: grant.lease_ms },
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: u64, incarnation: u64, addr: &str) -> Command {
        Command::SetMember { node, incarnation, addr: addr.into() }
    }

    #[test]
    fn a_node_id_belongs_to_the_first_process_recorded_for_it() {
        let mut state = LockState::default();
        let mut effects = Vec::new();
        // An address without an incarnation (an older version's record), then the
        // process, then a move of that process to another address.
        state.apply(&member(3, 0, "a:1"), &mut effects);
        state.apply(&member(3, 42, "a:1"), &mut effects);
        state.apply(&member(3, 42, "b:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "b:1".into(), incarnation: 42 });
        // Another process under the same id changes nothing, not even the address.
        state.apply(&member(3, 43, "evil:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "b:1".into(), incarnation: 42 });
        // An incarnation-less record still moves the address of the recorded process.
        state.apply(&member(3, 0, "c:1"), &mut effects);
        assert_eq!(state.members()[&3], MemberRecord { addr: "c:1".into(), incarnation: 42 });
        assert!(effects.is_empty());
    }
}
