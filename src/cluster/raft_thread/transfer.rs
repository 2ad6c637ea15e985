//! Leadership transfers run by the Raft thread: `admin transfer-leader`, and the
//! hand-over before this node stops.

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

    /// This node's stop (SIGTERM): hands leadership to the best voter that could take
    /// over — heard within an election timeout over an outbound link that is up — or
    /// starts nothing when none could (why: a hand-over to a node that cannot answer
    /// only delays the stop by an election timeout, then fails).
    pub(super) fn hand_over_for_stop(&mut self) -> StopHandover {
        if !self.raft.is_leader() {
            return StopHandover::NotLeader;
        }
        let Some(to) = self.raft.reachable_successor(|id| self.outbound.contains_key(&id)) else {
            return StopHandover::NoneReachable;
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
