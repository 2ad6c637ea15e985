//! An `admin transfer-leader` request waiting for its answer.

use crossbeam_channel::Sender;

use crate::messages::WriterMsg;
use crate::proto::Response;

/// An `admin transfer-leader` waiting for another node to lead.
pub(super) struct TransferWait {
    pub(super) id: u32,
    pub(super) reply: Sender<WriterMsg>,
    /// The voter leadership is being handed to.
    pub(super) to: u64,
    /// Answered by then whatever happened (the core abandons a hand-over after an
    /// election timeout; this leaves the target one more to win its election).
    pub(super) deadline_ms: u64,
}

impl TransferWait {
    pub(super) fn answer(&self, response: Response) {
        // The reader counted the request as pending.
        let _ = self.reply.send(WriterMsg::Reply { id: self.id, response, counted: true });
    }
}
