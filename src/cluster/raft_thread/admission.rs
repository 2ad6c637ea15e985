//! Whose messages the Raft thread steps: members, the learner being added, a
//! stranger asking for a vote; and the admission it publishes for the peer port.

use std::collections::BTreeSet;

use mio::Token;

use super::RaftLoop;

impl RaftLoop {
    /// Only members speak Raft: a node that is not (or no longer) one may have a
    /// connection still open, but nothing it sends is stepped — except what a stranger
    /// may say (`super::stranger`), on the connection it opened. Nothing at all before
    /// a peer accepted one of our connections.
    pub(super) fn may_step(&self, peer: u64, token: Token, msg: &crate::raft::Message) -> bool {
        if !self.admitted {
            return false;
        }
        if self.may_speak(peer) {
            return true;
        }
        let inbound = self.outbound.get(&peer) != Some(&token);
        inbound
            && self.is_stranger(peer)
            && crate::cluster::stranger::stranger_may_step(&self.raft, peer, msg)
    }

    /// A node no configuration of ours names or ever named (see `super::stranger`).
    pub(super) fn is_stranger(&self, peer: u64) -> bool {
        !self.ever_committed.contains(&peer)
            && crate::cluster::stranger::is_stranger(&self.raft, peer, |id| self.may_speak(id))
    }

    /// May `peer`'s messages be stepped? Members of the active or committed
    /// configuration and the learner being added may speak; before this node knows any
    /// configuration, its configured peers and the leader they named.
    pub(super) fn may_speak(&self, peer: u64) -> bool {
        self.view.may_speak(peer, |id| self.vouched_ids.contains(&id))
    }

    pub(super) fn publish(&mut self) {
        self.view.publish(&self.raft);
        // What follows depends only on the configurations (and an admin change under
        // way): recomputed when one of them changed, not every turn.
        let adding = self.admin.as_ref().map(|job| job.new_node());
        let configs_changed = self.admission_watch.changed(&self.raft);
        if !configs_changed && adding == self.admission_adding {
            return;
        }
        self.admission_adding = adding;
        // Every configuration committed in the log this node holds (a node that caught up
        // in one batch never saw the earlier ones as "the" committed configuration).
        for config in self.raft.committed_configs() {
            self.ever_committed.extend(config.all_nodes());
        }
        let (_, committed) = self.raft.committed_membership();
        let mut members = self.raft.membership().all_nodes();
        members.extend(committed.all_nodes());
        members.extend(self.admin.as_ref().map(|job| job.new_node()));
        let retired: BTreeSet<u64> = self.ever_committed.difference(&members).copied().collect();
        let config_known = !members.is_empty();
        self.view.set_admission(members, retired, config_known);
    }
}
