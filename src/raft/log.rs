//! The in-memory Raft log: a snapshot followed by the entries after it.
//!
//! Layout: `snapshot.meta.index` is the last index folded into the snapshot;
//! `entries[k].index == snapshot.meta.index + 1 + k`. The log also remembers
//! the commit index, how far committed entries have been handed to the
//! application (`handed`), and the index of every config entry it holds, so
//! the active (latest appended) and committed configurations are cheap.

use std::sync::Arc;

use super::membership::Membership;
use super::message::{Entry, EntryKind, Snapshot, SnapshotMeta};

/// The log of one node. Volatile by design (docs/operations.md).
#[derive(Debug, Clone)]
pub struct RaftLog {
    /// Shared so a leader can keep streaming it while compacting further.
    snapshot: Arc<Snapshot>,
    entries: Vec<Entry>,
    committed: u64,
    /// Committed entries up to here were handed out via `take_committed`
    /// (or are covered by an installed snapshot).
    handed: u64,
    /// Config entries present in `entries`: (index, membership), ascending.
    configs: Vec<(u64, Membership)>,
}

impl RaftLog {
    /// An empty log whose base (index 0, term 0) has `membership`.
    pub fn new(membership: Membership) -> RaftLog {
        RaftLog {
            snapshot: Arc::new(Snapshot {
                meta: SnapshotMeta { index: 0, term: 0, membership },
                data: Vec::new(),
            }),
            entries: Vec::new(),
            committed: 0,
            handed: 0,
            configs: Vec::new(),
        }
    }

    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// First index still held as an entry (may be `last_index() + 1`).
    pub fn first_index(&self) -> u64 {
        self.snapshot.meta.index + 1
    }

    pub fn last_index(&self) -> u64 {
        self.snapshot.meta.index + self.entries.len() as u64
    }

    pub fn last_term(&self) -> u64 {
        self.entries.last().map_or(self.snapshot.meta.term, |e| e.term)
    }

    pub fn committed(&self) -> u64 {
        self.committed
    }

    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Term of the entry at `index`, if known (the snapshot point counts).
    pub fn term_at(&self, index: u64) -> Option<u64> {
        if index == self.snapshot.meta.index {
            return Some(self.snapshot.meta.term);
        }
        self.entry(index).map(|e| e.term)
    }

    pub fn entry(&self, index: u64) -> Option<&Entry> {
        if index < self.first_index() {
            return None;
        }
        self.entries.get((index - self.first_index()) as usize)
    }

    /// Entries `lo..=hi`, at most `max_count` of them and, beyond the first,
    /// at most `max_bytes` of payload. Empty if `lo` is not held.
    pub fn slice(&self, lo: u64, hi: u64, max_count: usize, max_bytes: usize) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut index = lo;
        while index <= hi && out.len() < max_count.max(1) {
            let Some(entry) = self.entry(index) else {
                break;
            };
            bytes = bytes.saturating_add(entry.payload_bytes());
            // Why "beyond the first": one oversized entry must still make progress.
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(entry.clone());
            index += 1;
        }
        out
    }

    /// Appends one entry at `last_index() + 1`.
    pub fn append(&mut self, entry: Entry) {
        assert_eq!(entry.index, self.last_index() + 1, "log append out of order");
        if let EntryKind::Config(m) = &entry.kind {
            self.configs.push((entry.index, m.clone()));
        }
        self.entries.push(entry);
    }

    /// Drops every entry at `index` and above. Committed entries are final, so
    /// truncating one is a bug in the caller.
    pub fn truncate_from(&mut self, index: u64) {
        crate::invariant!(
            index > self.committed,
            "committed entries are never truncated",
            "truncating from {index} with commit index {}",
            self.committed
        );
        if index > self.last_index() {
            return;
        }
        let keep = (index - self.first_index()) as usize;
        self.entries.truncate(keep);
        self.configs.retain(|(i, _)| *i < index);
    }

    /// Advances the commit index (never backwards, never beyond the log).
    pub fn commit_to(&mut self, index: u64) -> bool {
        let index = index.min(self.last_index());
        if index <= self.committed {
            return false;
        }
        self.set_committed(index);
        true
    }

    /// The one place the commit index changes.
    fn set_committed(&mut self, index: u64) {
        crate::invariant!(
            index >= self.committed,
            "commit index never decreases",
            "from {} to {index}",
            self.committed
        );
        crate::invariant!(
            index <= self.last_index(),
            "commit index at most the last index",
            "commit {index}, last index {}",
            self.last_index()
        );
        self.committed = index;
    }

    /// The one place the handed-out (applied) index changes.
    fn set_handed(&mut self, index: u64) {
        crate::invariant!(
            index <= self.committed,
            "applied index at most the commit index",
            "applied {index}, commit {}",
            self.committed
        );
        self.handed = index;
    }

    /// Committed entries not yet handed out, in order.
    pub fn take_committed(&mut self) -> Vec<Entry> {
        let lo = self.handed + 1;
        let out: Vec<Entry> = (lo..=self.committed).filter_map(|i| self.entry(i).cloned()).collect();
        self.set_handed(self.committed);
        out
    }

    /// The latest appended configuration: the one in force on this node.
    pub fn active_membership(&self) -> &Membership {
        self.configs.last().map_or(&self.snapshot.meta.membership, |(_, m)| m)
    }

    /// Index of the latest appended config entry (the snapshot index when the
    /// log holds none).
    pub fn active_config_index(&self) -> u64 {
        self.configs.last().map_or(self.snapshot.meta.index, |(i, _)| *i)
    }

    /// The latest configuration at or below the commit index, with its index.
    pub fn committed_membership(&self) -> (u64, &Membership) {
        self.configs
            .iter()
            .rev()
            .find(|(i, _)| *i <= self.committed)
            .map_or((self.snapshot.meta.index, &self.snapshot.meta.membership), |(i, m)| (*i, m))
    }

    /// Every committed configuration this log still knows: the snapshot's, then each
    /// config entry up to the commit index.
    pub fn committed_configs(&self) -> impl Iterator<Item = &Membership> {
        let committed = self.committed;
        std::iter::once(&self.snapshot.meta.membership)
            .chain(self.configs.iter().filter(move |(i, _)| *i <= committed).map(|(_, m)| m))
    }

    /// Whether `id` is a voter in every configuration this log still knows
    /// (the snapshot's and every config entry's): a voter of long standing,
    /// not one added by a change the log still holds.
    pub fn voter_throughout(&self, id: u64) -> bool {
        self.snapshot.meta.membership.is_voter(id) && self.configs.iter().all(|(_, m)| m.is_voter(id))
    }

    /// Whether a log ending at (`last_index`, `last_term`) is at least as up
    /// to date as ours (Raft §5.4.1).
    pub fn is_up_to_date(&self, last_index: u64, last_term: u64) -> bool {
        last_term > self.last_term() || (last_term == self.last_term() && last_index >= self.last_index())
    }

    /// First index of the run of `term` that ends at `index` (bounded below by
    /// the first held entry). Used for the follower's conflict hint.
    pub fn first_index_of_term_run(&self, index: u64, term: u64) -> u64 {
        let mut i = index;
        while i > self.first_index() && self.term_at(i - 1) == Some(term) {
            i -= 1;
        }
        i
    }

    /// Last index holding an entry of `term`, if any (leader side of the hint).
    pub fn last_index_of_term(&self, term: u64) -> Option<u64> {
        self.entries.iter().rev().find(|e| e.term <= term).filter(|e| e.term == term).map(|e| e.index)
    }

    /// Folds entries `..=index` into a snapshot with `data`. Only handed-out
    /// (applied) entries may be compacted. Returns false if nothing changed.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> bool {
        if index <= self.snapshot.meta.index || index > self.handed || index > self.committed {
            return false;
        }
        let Some(term) = self.term_at(index) else {
            return false;
        };
        let membership = self.membership_at(index).clone();
        let drop = (index - self.snapshot.meta.index) as usize;
        self.entries.drain(..drop);
        self.configs.retain(|(i, _)| *i > index);
        self.snapshot = Arc::new(Snapshot { meta: SnapshotMeta { index, term, membership }, data });
        true
    }

    /// Replaces the log's prefix with a snapshot received from the leader.
    /// Keeps the suffix when our log has the snapshot's last entry (Raft §7);
    /// otherwise discards the whole log. Returns false (no change) when the
    /// snapshot is not ahead of our commit index.
    pub fn install_snapshot(&mut self, snapshot: Snapshot) -> bool {
        let meta = &snapshot.meta;
        if meta.index <= self.committed {
            return false;
        }
        if self.term_at(meta.index) == Some(meta.term) {
            let drop = (meta.index - self.snapshot.meta.index) as usize;
            self.entries.drain(..drop);
            self.configs.retain(|(i, _)| *i > meta.index);
        } else {
            // Why clear the configs too: a kept config of a discarded entry
            // would make this node act on a configuration it no longer has
            // (found by the simulator: a later leader built a change on it).
            self.entries.clear();
            self.configs.clear();
        }
        self.snapshot = Arc::new(snapshot);
        self.set_committed(self.snapshot.meta.index);
        self.set_handed(self.snapshot.meta.index);
        true
    }

    /// Walks the whole log (O(entries)): entries numbered on from the snapshot with
    /// terms that never go down, the snapshot ≤ applied ≤ commit ≤ last index, and
    /// the remembered config entries exactly those of the log. Run after each change
    /// in debug builds, and by the simulators after every step.
    pub fn check_invariants(&self) {
        let base = &self.snapshot.meta;
        crate::invariant!(
            base.index <= self.handed && self.handed <= self.committed && self.committed <= self.last_index(),
            "snapshot <= applied <= commit <= last index",
            "snapshot {}, applied {}, commit {}, last {}",
            base.index,
            self.handed,
            self.committed,
            self.last_index()
        );
        let mut term = base.term;
        let mut configs = self.configs.iter();
        for (k, e) in self.entries.iter().enumerate() {
            crate::invariant!(
                e.index == base.index + 1 + k as u64 && e.term >= term,
                "log entries numbered on with terms that never go down",
                "entry {} of term {} after term {term} (expected index {})",
                e.index,
                e.term,
                base.index + 1 + k as u64
            );
            term = e.term;
            if let EntryKind::Config(m) = &e.kind {
                crate::invariant!(
                    configs.next().is_some_and(|(i, c)| *i == e.index && c == m),
                    "the log's configs are its config entries",
                    "config entry {} not remembered as such",
                    e.index
                );
            }
        }
        crate::invariant!(
            configs.next().is_none(),
            "the log's configs are its config entries",
            "a remembered config without its entry"
        );
    }

    /// The configuration in force at `index` (latest config entry `<= index`).
    fn membership_at(&self, index: u64) -> &Membership {
        self.configs
            .iter()
            .rev()
            .find(|(i, _)| *i <= index)
            .map_or(&self.snapshot.meta.membership, |(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(term: u64, index: u64) -> Entry {
        Entry { term, index, kind: EntryKind::Normal(vec![index as u8].into()) }
    }

    fn log_with_terms(terms: &[u64]) -> RaftLog {
        let mut log = RaftLog::new(Membership::with_voters(&[1, 2, 3]));
        for (k, t) in terms.iter().enumerate() {
            log.append(entry(*t, k as u64 + 1));
        }
        log
    }

    #[test]
    fn compaction_keeps_terms_and_suffix() {
        let mut log = log_with_terms(&[1, 1, 2, 2, 3]);
        log.commit_to(4);
        assert_eq!(log.take_committed().len(), 4);
        assert!(log.compact(3, b"snap".to_vec()));
        assert_eq!(log.first_index(), 4);
        assert_eq!(log.term_at(3), Some(2));
        assert_eq!(log.term_at(2), None);
        assert_eq!(log.last_index(), 5);
        assert!(!log.compact(5, vec![]), "entry 5 was not handed out");
    }

    /// `slice` stops at `hi`, after `max_count` entries, and before the entry that
    /// takes the payload past `max_bytes` — but never before the first entry.
    #[test]
    fn slice_keeps_to_its_bounds() {
        let mut log = RaftLog::new(Membership::with_voters(&[1, 2, 3]));
        for index in 1..=5 {
            log.append(Entry { term: 1, index, kind: EntryKind::Normal(vec![0; 100].into()) });
        }
        let indexes = |s: Vec<Entry>| s.iter().map(|e| e.index).collect::<Vec<_>>();
        assert_eq!(indexes(log.slice(2, 3, usize::MAX, usize::MAX)), [2, 3]);
        assert_eq!(indexes(log.slice(1, 5, 2, usize::MAX)), [1, 2]);
        assert_eq!(indexes(log.slice(1, 5, usize::MAX, 200)), [1, 2], "exactly the byte cap");
        assert_eq!(indexes(log.slice(1, 5, usize::MAX, 250)), [1, 2]);
        assert_eq!(indexes(log.slice(1, 5, usize::MAX, 10)), [1], "one oversized entry still goes");
    }

    #[test]
    fn conflict_hints() {
        let log = log_with_terms(&[1, 1, 2, 2, 2, 4]);
        assert_eq!(log.first_index_of_term_run(5, 2), 3);
        assert_eq!(log.last_index_of_term(2), Some(5));
        assert_eq!(log.last_index_of_term(3), None);
    }

    /// The hint never points below the first held entry, even when the snapshot's
    /// last entry is of the same term.
    #[test]
    fn conflict_hint_stops_at_the_first_held_entry() {
        let mut log = log_with_terms(&[1, 1, 2, 2, 2]);
        log.commit_to(3);
        log.take_committed();
        assert!(log.compact(3, vec![]));
        assert_eq!(log.first_index(), 4);
        assert_eq!(log.term_at(3), Some(2));
        assert_eq!(log.first_index_of_term_run(5, 2), 4);
    }

    /// A voter of long standing is one in the snapshot's configuration and in every
    /// configuration entry after it.
    #[test]
    fn voter_throughout_means_in_every_configuration_held() {
        let mut log = log_with_terms(&[1]);
        log.append(Entry { term: 1, index: 2, kind: EntryKind::Config(Membership::with_voters(&[1, 2, 4])) });
        assert!(log.voter_throughout(1));
        assert!(!log.voter_throughout(3), "left in the entry");
        assert!(!log.voter_throughout(4), "added by the entry");
        assert!(!log.voter_throughout(9));
    }

    /// Only an applied entry past the snapshot may be compacted.
    #[test]
    fn compaction_takes_only_applied_entries_past_the_snapshot() {
        let mut log = log_with_terms(&[1, 1, 2, 2, 3]);
        log.commit_to(4);
        log.take_committed();
        log.commit_to(5);
        assert!(!log.compact(5, vec![]), "committed but not handed out");
        assert!(log.compact(3, b"first".to_vec()));
        assert!(!log.compact(3, b"again".to_vec()), "not past the snapshot");
        assert_eq!(log.snapshot().data, b"first");
    }

    /// A snapshot installed over a log holding its last entry keeps exactly the
    /// configuration entries after it.
    #[test]
    fn an_installed_snapshot_keeps_the_configurations_after_it() {
        let a = Membership::with_voters(&[1, 2, 4]);
        let b = Membership::with_voters(&[1, 2, 5]);
        let mut log = RaftLog::new(Membership::with_voters(&[1, 2, 3]));
        log.append(entry(1, 1));
        log.append(entry(1, 2));
        log.append(Entry { term: 1, index: 3, kind: EntryKind::Config(a.clone()) });
        log.append(entry(1, 4));
        log.append(Entry { term: 1, index: 5, kind: EntryKind::Config(b.clone()) });
        let meta = SnapshotMeta { index: 3, term: 1, membership: a };
        assert!(log.install_snapshot(Snapshot { meta, data: vec![] }));
        assert_eq!((log.first_index(), log.last_index()), (4, 5));
        assert_eq!(log.active_membership(), &b);
        log.check_invariants();
    }

    #[test]
    fn the_invariant_walk_refuses_a_commit_index_past_the_log() {
        let mut log = log_with_terms(&[1, 1]);
        log.committed = 3;
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.check_invariants()));
        assert!(walked.is_err());
    }

    #[test]
    fn config_history_follows_truncation() {
        let mut log = log_with_terms(&[1]);
        let m = Membership::with_voters(&[1, 2, 4]);
        log.append(Entry { term: 1, index: 2, kind: EntryKind::Config(m.clone()) });
        assert_eq!(log.active_membership(), &m);
        assert_eq!(log.committed_membership().1.voters.len(), 3);
        log.truncate_from(2);
        assert_eq!(log.active_membership(), &Membership::with_voters(&[1, 2, 3]));
    }

    #[test]
    fn install_snapshot_keeps_matching_suffix() {
        let mut log = log_with_terms(&[1, 1, 2]);
        let snap = Snapshot {
            meta: SnapshotMeta { index: 2, term: 1, membership: Membership::with_voters(&[1, 2, 3]) },
            data: vec![9],
        };
        assert!(log.install_snapshot(snap));
        assert_eq!(log.last_index(), 3);
        assert_eq!(log.committed(), 2);
        assert_eq!(log.handed(), 2);
    }

    #[test]
    fn install_snapshot_over_divergent_log_forgets_its_configs() {
        let mut log = log_with_terms(&[1]);
        log.append(Entry { term: 1, index: 2, kind: EntryKind::Config(Membership::with_voters(&[1, 2, 9])) });
        log.append(entry(1, 3));
        let snap_members = Membership::with_voters(&[1, 2, 3]);
        let snap = Snapshot {
            meta: SnapshotMeta {
                index: 1,
                term: 7, // differs from our term 1 at index 1: discard all
                membership: snap_members.clone(),
            },
            data: vec![],
        };
        assert!(log.install_snapshot(snap));
        assert_eq!(log.last_index(), 1);
        assert_eq!(log.active_membership(), &snap_members);
    }
}
