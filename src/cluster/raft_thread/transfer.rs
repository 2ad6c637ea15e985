//! Leadership transfers run by the Raft thread: `admin transfer-leader`, and this
//! node's stop: telling the others, the hand-over, and what it logs when a standby
//! took its place.

use crossbeam_channel::Sender;
use log::info;

use super::limits::TRANSFER_WAITERS_MAX;
use super::transfer_wait::TransferWait;
use super::RaftLoop;
use crate::messages::{StopHandover, WriterMsg};
use crate::proto::{ErrorCode, Response};

fn refused(message: String) -> Response {
    Response::Error { code: ErrorCode::Refused, message }
}

impl RaftLoop {
    /// `admin transfer-leader`: asks the core to hand leadership over. Requests
    /// meanwhile wait on the lock side (`FromLog::Handover`), and are answered or
    /// redirected when the hand-over ends; `reply` is answered then (`step_transfers`).
    pub(super) fn start_transfer(&mut self, target: Option<u64>, reply: (u32, Sender<WriterMsg>), now: u64) {
        let (id, reply) = reply;
        let answer = |response: Response| {
            let _ = reply.send(WriterMsg::Reply { id, response, counted: true });
        };
        let me = self.raft.id();
        let to = match self.raft.transfer_leader(target) {
            Ok(to) => to,
            Err(crate::raft::RaftError::NotLeader { .. }) => {
                return answer(Response::Moved { leader: self.leader_addr() });
            }
            Err(crate::raft::RaftError::HandingOver) => {
                return answer(refused(format!(
                    "node {me} is leaving the configuration and hands leadership over by itself when \
                     that change commits"
                )));
            }
            Err(e) => {
                let why = match target {
                    Some(id) => format!("cannot hand leadership to node {id}: {e}"),
                    None => format!("cannot hand leadership over: {e}"),
                };
                return answer(refused(why));
            }
        };
        info!("handing leadership over to node {to}");
        if to == me {
            return answer(leader_text(&self.view.members_text(&[me])));
        }
        if self.transfers.len() >= TRANSFER_WAITERS_MAX {
            return answer(refused("too many leadership transfers waiting".into()));
        }
        let deadline_ms = now + 2 * self.raft.config().election_ms;
        self.transfers.push(TransferWait { id, reply, to, deadline_ms });
    }

    /// This node's stop (SIGTERM), first step: the core tells every other member
    /// (`Raft::stop`); with `leave` the leader will swap a standby in for this voter.
    pub(super) fn begin_stop(&mut self, leave: bool, now: u64) {
        self.raft.stop(leave);
        let voters = self.raft.membership().voters.clone();
        self.stop_began.get_or_insert((now, voters));
    }

    /// This node learned it is no longer a member. While it stops after asking to
    /// leave, that is the planned end: said once, at info, with the node that took its
    /// place. Otherwise a warning (it was replaced while cut off, or by an operator).
    pub(super) fn log_removal(&self, now: u64) {
        let Some((began, before)) = self.stop_began.as_ref().filter(|_| self.raft.stopping() == Some(true))
        else {
            info!(
                "this node is no longer a member of the cluster (replaced while it was cut off, or by an \
                 operator); it stops, and its process manager starts a fresh standby"
            );
            return;
        };
        let took: Vec<u64> = self.raft.membership().voters.difference(before).copied().collect();
        let after = now.saturating_sub(*began);
        if took.is_empty() {
            info!("left the cluster before stopping ({after} ms after the stop began)");
        } else {
            info!(
                "left the cluster before stopping: {} took this node's place as a voter, {after} ms after \
                 the stop began",
                took.iter()
                    .map(|id| format!("node {id} ({})", self.view.addr_of(*id)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    /// This node's stop (SIGTERM): hands leadership to the best voter that could take
    /// over — heard within an election timeout over an outbound link that is up, and
    /// not stopping itself — or starts nothing when none could (why: a hand-over to a
    /// node that cannot answer only delays the stop by an election timeout, then
    /// fails; one to a node that stops too only moves leadership once more).
    pub(super) fn hand_over_for_stop(&mut self) -> StopHandover {
        if !self.raft.is_leader() {
            return StopHandover::NotLeader;
        }
        let Some(to) = self.raft.reachable_successor(|id| self.outbound.contains_key(&id)) else {
            let me = self.raft.id();
            let voters = &self.raft.membership().voters;
            let others_stop = voters.iter().any(|id| *id != me)
                && voters.iter().all(|id| *id == me || self.raft.is_peer_stopping(*id));
            return if others_stop { StopHandover::OthersStopping } else { StopHandover::NoneReachable };
        };
        match self.raft.transfer_leader(Some(to)) {
            Ok(to) => {
                info!("handing leadership over to node {to} before stopping");
                StopHandover::Started(to)
            }
            Err(crate::raft::RaftError::NotLeader { .. }) => StopHandover::NotLeader,
            Err(crate::raft::RaftError::HandingOver) => StopHandover::Leaving,
            Err(e) => StopHandover::Refused(format!("cannot hand leadership to node {to}: {e}")),
        }
    }

    /// Answers the `admin transfer-leader` requests whose hand-over ended.
    pub(super) fn step_transfers(&mut self, now: u64) {
        if self.transfers.is_empty() {
            return;
        }
        let me = self.raft.id();
        let response = match self.raft.leader_id() {
            Some(leader) if leader != me => leader_text(&self.view.members_text(&[leader])),
            Some(_) if !self.raft.handing_over() => {
                let to = self.transfers[0].to;
                refused(format!(
                    "node {to} did not take over within an election timeout; node {me} still leads"
                ))
            }
            _ if self.transfers.iter().any(|t| now > t.deadline_ms) => {
                refused(format!("node {me} stopped leading and no new leader is known yet"))
            }
            _ => return,
        };
        for wait in self.transfers.drain(..) {
            wait.answer(response.clone());
        }
    }
}

/// The answer to a completed `admin transfer-leader`: the leader as `ID@ADDR`.
fn leader_text(leader: &str) -> Response {
    Response::Status { text: format!("leader={leader}\n") }
}
