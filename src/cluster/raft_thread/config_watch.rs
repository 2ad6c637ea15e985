//! Notices that a node's configurations changed, for the work that follows them only.

use crate::raft::Raft;

/// Notices a change of a node's active or committed configuration without copying
/// them every loop turn (they change a few times in a cluster's life).
#[derive(Default)]
pub(super) struct ConfigWatch {
    seen: Option<(crate::raft::Membership, crate::raft::Membership)>,
}

impl ConfigWatch {
    /// True the first time and whenever either configuration differs from the last
    /// call's.
    pub(super) fn changed(&mut self, raft: &Raft) -> bool {
        let (active, committed) = (raft.membership(), raft.committed_membership().1);
        if self.seen.as_ref().is_some_and(|(a, c)| a == active && c == committed) {
            return false;
        }
        self.seen = Some((active.clone(), committed.clone()));
        true
    }
}
