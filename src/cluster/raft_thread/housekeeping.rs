//! The Raft thread's periodic bookkeeping: one dialer per member (and none for nodes
//! that left), and the leader's records of every member in the replicated state.

use log::info;
use mio::Token;

use super::limits::{LINGER_ELECTION_TIMEOUTS, RECORD_REPROPOSE_MS};
use super::RaftLoop;
use crate::lock::codec::encode_command;
use crate::lock::Command;

impl RaftLoop {
    pub(super) fn members(&self) -> std::collections::BTreeSet<u64> {
        let m = self.raft.membership();
        m.voters.iter().chain(m.outgoing.iter()).chain(m.learners.iter()).copied().collect()
    }

    pub(super) fn leader_addr(&self) -> String {
        self.raft.leader_id().map(|id| self.view.addr_of(id)).unwrap_or_default()
    }

    /// Keeps one dialer per member (and none for nodes that left), and has the
    /// leader record every member's address in the replicated state.
    pub(super) fn housekeeping(&mut self, now: u64) {
        self.view.publish_autopilot(&self.raft);
        let me = self.raft.id();
        let members = self.members();
        // Dial every member, and the leader even when this node's log does not list it
        // yet (a learner catching up must be able to answer it).
        let mut wanted = members.clone();
        wanted.extend(self.raft.leader_id());
        // A joining node that knows no configuration dials the leader a member named
        // (`join.rs`): the leader accepts that link once it adds this node, and a link
        // of our own is what lets this node step anything (`admitted`).
        if members.is_empty() {
            for (id, addr) in self.view.vouched_leaders() {
                self.view.learn_addr(id, &addr);
                wanted.insert(id);
            }
        }
        for &id in wanted.iter().filter(|id| **id != me) {
            self.dial(id);
        }
        // A joining node that has not received a configuration yet keeps the dialers
        // of its configured peers: they are how it finds the cluster.
        let joining = self.raft.membership().voters.is_empty();
        // Connections from nodes that may no longer speak (removed, or never members)
        // are closed; they are refused at their next handshake. Our own links to them
        // linger (below).
        // A stranger's connection stays while it may still be heard: this node has no
        // live leader, or follows it.
        let stranger_heard = |peer: u64| {
            self.is_stranger(peer) && (!self.raft.has_live_leader() || self.raft.leader_id() == Some(peer))
        };
        let silenced: Vec<Token> = self
            .conns
            .iter()
            .filter(|(t, c)| {
                self.outbound.get(&c.peer) != Some(*t) && !self.may_speak(c.peer) && !stranger_heard(c.peer)
            })
            .map(|(t, _)| *t)
            .collect();
        for token in silenced {
            self.close_quietly(token);
        }
        let pending_new = self.admin.as_ref().map(|job| job.new_node());
        let linger_ms = LINGER_ELECTION_TIMEOUTS * self.raft.config().election_ms;
        let in_use = |id: &u64| self.last_used.get(id).is_some_and(|t| now < t + linger_ms);
        let gone: Vec<u64> = self
            .redial
            .keys()
            .copied()
            .filter(|id| !joining && !wanted.contains(id) && Some(*id) != pending_new && !in_use(id))
            .collect();
        // Bounded: only peers with a dialer, or talked to lately (strangers answered on
        // their own connections have no dialer).
        let redial = &self.redial;
        self.last_used.retain(|id, t| redial.contains_key(id) || now < *t + linger_ms);
        for id in gone {
            // Dropping the sender ends the dialer; the connection goes too.
            self.redial.remove(&id);
            self.dialing.remove(&id);
            self.last_used.remove(&id);
            if let Some(queue) = self.waiting.remove(&id) {
                self.dropped(id, queue.count, "the node left the cluster");
            }
            if let Some(token) = self.outbound.remove(&id) {
                self.close_quietly(token);
            }
            self.view.set_link_up(id, false);
            if self.retired.insert(id) {
                info!("node {id} left the cluster");
            }
        }
        if self.raft.is_leader() && self.raft.commit_index() >= self.noop_index(self.raft.term()) {
            for id in members.iter().copied().chain(std::iter::once(me)) {
                self.record_member(id, now);
            }
        }
    }

    /// Leader: records member `id` (its process incarnation and address) in the log
    /// when the log has no full record of it yet. Every member then refuses that NodeId
    /// from any other process, including members that join later.
    fn record_member(&mut self, id: u64, now: u64) {
        let incarnation =
            if id == self.raft.id() { Some(self.kit.incarnation()) } else { self.view.seen_incarnation(id) };
        let recorded = self.view.record_of(id);
        let complete = recorded.as_ref().is_some_and(|r| r.incarnation != 0 || incarnation.is_none());
        let recent = self.record_proposed.get(&id).is_some_and(|t| now < t + RECORD_REPROPOSE_MS);
        if complete || recent {
            return;
        }
        let addr = self.view.addr_of(id);
        if crate::proto::addr::check_client_addr(&addr).is_err() {
            return;
        }
        self.record_proposed.insert(id, now);
        self.propose_command(&Command::SetMember { node: id, incarnation: incarnation.unwrap_or(0), addr });
    }

    pub(super) fn propose_command(&mut self, command: &Command) {
        let mut data = Vec::with_capacity(64);
        encode_command(&mut data, command);
        let _ = self.raft.propose(data);
    }
}
