//! The log's half of deferral: [`AppendGate`] keeps a leader's appends in the order
//! the replica planned them across a hand-over.

use std::collections::BTreeSet;

/// The log's half of deferral (it lives with the Raft core, e.g. on the Raft thread):
/// keeps a leader's appends in the order the replica planned them across a hand-over.
///
/// A leader that hands leadership over refuses proposals (`RaftError::HandingOver`);
/// the log then answers the replica [`Replica::on_deferred`](super::Replica::on_deferred) and the replica proposes
/// the command again later. Commands the replica sent before it heard of the hand-over
/// are still on their way; were one of them taken while an earlier one is deferred, the
/// log would hold them out of order (a later token before an earlier one). So while any
/// deferred command has not come back and been appended, every later one is deferred
/// too — `admit` says no.
///
/// Use, for each `ToLog::Append { seq, term, command }` on a leader of `term`:
/// `if !gate.admit(seq)` → `gate.deferred(seq)`, deferred; else propose: `Ok` →
/// `gate.appended(seq)`, `Err(HandingOver)` → `gate.deferred(seq)`, deferred; a refusal
/// for any other reason → rejected. `reset` when leadership is lost or a new term
/// begins (the replica answers what it held).
#[derive(Debug, Default, Clone)]
pub struct AppendGate {
    /// Commands deferred and not appended since. Bounded by the replica's outstanding
    /// commands: each comes back once the hand-over ends.
    waiting: BTreeSet<u64>,
}

impl AppendGate {
    /// May command `seq` be proposed now? Not while an earlier command waits.
    pub fn admit(&self, seq: u64) -> bool {
        self.waiting.first().is_none_or(|w| seq <= *w)
    }

    /// Command `seq` was deferred.
    pub fn deferred(&mut self, seq: u64) {
        self.waiting.insert(seq);
    }

    /// Command `seq` was appended.
    pub fn appended(&mut self, seq: u64) {
        self.waiting.remove(&seq);
    }

    /// Leadership ended or a new term began: nothing waits any more.
    pub fn reset(&mut self) {
        self.waiting.clear();
    }
}
