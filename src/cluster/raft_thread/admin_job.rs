//! A membership change in progress on a leader (`admin replace`, or a JOIN): what it
//! adds, the phase it is in, its deadline, and how it answers.

use crossbeam_channel::Sender;
use log::{info, warn};

use crate::messages::WriterMsg;
use crate::proto::{ErrorCode, Response};

/// Refused JOINs, said at most this often.
static JOIN_REFUSED_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::every(30_000);

/// A membership change in progress on this leader (one at a time).
pub struct AdminJob {
    pub(super) id: u32,
    pub(super) kind: JobKind,
    /// The node being added.
    pub(super) new: u64,
    pub(super) addr: String,
    pub(super) reply: Sender<WriterMsg>,
    pub(super) phase: AdminPhase,
    pub(super) deadline_ms: u64,
    /// This job dialed the node and adds it (not a standby that was there before):
    /// a replacement that fails takes its learner out again.
    pub(super) added_learner: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JobKind {
    /// `admin replace`: swap voter `old` for the new node.
    Replace { old: u64 },
    /// JOIN: add the node as a standby learner.
    Join,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AdminPhase {
    /// Waiting for the new node to accept our connection.
    Dialing,
    /// JOIN: the learner's configuration is appended, waiting for its commit.
    Adding,
    /// The new node is a learner, receiving the snapshot and the log.
    CatchingUp,
    /// Joint consensus old → new is in the log.
    Swapping,
}

impl AdminJob {
    pub fn replace(id: u32, old: u64, new: u64, addr: String, reply: Sender<WriterMsg>) -> AdminJob {
        AdminJob {
            id,
            kind: JobKind::Replace { old },
            new,
            addr,
            reply,
            phase: AdminPhase::Dialing,
            deadline_ms: 0,
            added_learner: false,
        }
    }

    pub fn join(id: u32, node: u64, addr: String, reply: Sender<WriterMsg>) -> AdminJob {
        AdminJob {
            id,
            kind: JobKind::Join,
            new: node,
            addr,
            reply,
            phase: AdminPhase::Dialing,
            deadline_ms: 0,
            added_learner: false,
        }
    }

    /// The node this job adds.
    pub fn new_node(&self) -> u64 {
        self.new
    }

    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// True for an operator's replacement (the autopilot waits for it).
    pub fn is_replace(&self) -> bool {
        matches!(self.kind, JobKind::Replace { .. })
    }

    pub(super) fn what(&self) -> String {
        match self.kind {
            JobKind::Replace { old } => format!("replace {old} by {}", self.new),
            JobKind::Join => format!("join of node {} at {}", self.new, self.addr),
        }
    }

    pub(super) fn answer(&self, response: Response) {
        // The reader counted the request as pending.
        let _ = self.reply.send(WriterMsg::Reply { id: self.id, response, counted: true });
    }

    /// Refuses it with `why`. An operator's `admin replace` refused is a warning; a
    /// JOIN refused (a change under way, the standby places taken) is routine: the
    /// joining node asks again and says why it waits, so the leader says it at info,
    /// at most every 30 s.
    pub(super) fn refuse(&self, why: String) {
        match self.kind {
            JobKind::Join => {
                if let Some(n) = JOIN_REFUSED_LOG.allow() {
                    info!("{}: refused: {why}{}", self.what(), crate::lograte::suppressed_note(n));
                }
            }
            JobKind::Replace { .. } => warn!("{}: refused: {why}", self.what()),
        }
        self.answer(Response::Error { code: ErrorCode::Refused, message: why });
    }
}
