//! The `Raft` struct: its state, constructors, accessors, role transitions, timers,
//! `ready()` and the application's requests (`propose`, `compact`).
//!
//! Protocol logic lives next door, by concept: `inputs.rs` (the `tick` and `step`
//! doors and routing by term), `election.rs` (pre-vote, vote,
//! check-quorum), `replication.rs` (append, heartbeat, commit),
//! `snapshot.rs` (compaction and chunked install), `reconfig.rs`
//! (membership, leadership transfer, ReadIndex), `autopilot.rs` (replacing
//! dead voters, removing dead learners), `stopping.rs` (a planned stop: telling the
//! others, swapping a standby in for a voter that leaves).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::log::RaftLog;
use super::membership::Membership;
use super::message::{Entry, EntryKind, Message, Snapshot, SnapshotMeta};
use super::progress::Progress;
use super::rng::SplitMix64;
use super::{AutopilotEvent, NodeId, RaftConfig, RaftError, Ready, Role, RoleChange};

/// A ReadIndex request waiting for a quorum to confirm round `seq`.
#[derive(Debug, Clone)]
pub(super) struct PendingRead {
    pub ctx: u64,
    pub index: u64,
    pub seq: u64,
}

/// A leadership transfer under way on a leader (see [`Raft::transfer_leader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The voter that is to take over.
    pub to: NodeId,
    /// When the transfer started, in the core's milliseconds.
    pub started_ms: u64,
    /// When it is abandoned if `to` has not taken over: one election timeout
    /// after the start.
    pub deadline_ms: u64,
    /// When `TimeoutNow` was last sent to `to`; `None` while `to` is still
    /// catching up.
    pub timeout_now_ms: Option<u64>,
}

/// One Raft node. See the module docs of `raft` for the model.
#[derive(Debug)]
pub struct Raft {
    pub(super) cfg: RaftConfig,
    pub(super) rng: SplitMix64,
    pub(super) now_ms: u64,

    pub(super) term: u64,
    pub(super) voted_for: Option<NodeId>,
    pub(super) role: Role,
    pub(super) leader_id: Option<NodeId>,
    pub(super) log: RaftLog,

    pub(super) election_deadline_ms: u64,
    pub(super) heartbeat_deadline_ms: u64,
    /// When we last heard from the leader of our term (lease rule).
    pub(super) leader_contact_ms: u64,

    /// Candidate / pre-candidate: answers so far.
    pub(super) votes: BTreeMap<NodeId, bool>,

    /// Leader only: one entry per other node in the active or committed config.
    pub(super) progress: BTreeMap<NodeId, Progress>,
    pub(super) transfer: Option<Transfer>,
    /// The node this (former) leader last sent `TimeoutNow` to, until a
    /// leader is known again: where its clients should look next.
    pub(super) handed_to: Option<NodeId>,
    /// Counts leadership transfers begun, so `ready()` reports one that began
    /// and ended between two calls.
    pub(super) handover_epoch: u64,
    /// (handing over, epoch) as last reported by `ready()`.
    reported_handover: (bool, u64),
    /// ReadIndex round counter (monotonic for the node's lifetime).
    pub(super) read_seq: u64,
    pub(super) pending_reads: Vec<PendingRead>,
    /// Reads asked before this term's no-op committed.
    pub(super) waiting_reads: Vec<u64>,
    pub(super) heartbeat_requested: bool,

    /// Follower: snapshot being received (meta, the node sending it, bytes so far).
    pub(super) incoming_snapshot: Option<(SnapshotMeta, NodeId, Vec<u8>)>,

    pub(super) msgs: Vec<(NodeId, Message)>,
    pub(super) read_states: Vec<(u64, u64)>,
    pub(super) installed_snapshot: Option<Snapshot>,
    reported: Option<RoleChange>,
    /// Our committed configuration has included us at some point.
    pub(super) ever_member: bool,
    pub(super) removed: bool,
    /// Autopilot is paused (`set_autopilot_paused`).
    pub(super) autopilot_paused: bool,
    /// Autopilot decisions not yet handed out by `ready()`.
    pub(super) autopilot_events: Vec<AutopilotEvent>,
    /// `Some(leave)` once this node is about to stop (`stop`).
    pub(super) stopping: Option<bool>,
    /// When this node last told the others it is stopping.
    pub(super) stopping_sent_ms: u64,
    /// Members that said they are about to stop, and whether each asked to leave.
    pub(super) stopping_peers: BTreeMap<NodeId, bool>,
}

impl Raft {
    /// A founding member of a new cluster with `voters` (which must contain
    /// `cfg.id`). Every founder starts with the same committed entry 1 (term
    /// 0) holding the initial configuration, so nodes that join later learn
    /// the founding membership from the log like any other change.
    pub fn new_bootstrap(cfg: RaftConfig, voters: &[NodeId], seed: u64, now_ms: u64) -> Raft {
        let mut raft = Raft::new_empty(cfg, seed, now_ms);
        raft.log.append(Entry {
            term: 0,
            index: 1,
            kind: EntryKind::Config(Membership::with_voters(voters)),
        });
        raft.log.commit_to(1);
        raft.check_removed();
        raft.refresh_role();
        raft
    }

    /// An empty node joining an existing cluster: it knows no configuration,
    /// so it neither votes nor campaigns until the leader's log or snapshot
    /// makes it a voter in a committed configuration.
    pub fn new_joining(cfg: RaftConfig, seed: u64, now_ms: u64) -> Raft {
        Raft::new_empty(cfg, seed, now_ms)
    }

    fn new_empty(cfg: RaftConfig, seed: u64, now_ms: u64) -> Raft {
        let mut raft = Raft {
            rng: SplitMix64::new(seed ^ cfg.id.rotate_left(32)),
            cfg,
            now_ms,
            term: 0,
            voted_for: None,
            role: Role::Learner,
            leader_id: None,
            log: RaftLog::new(Membership::default()),
            election_deadline_ms: 0,
            heartbeat_deadline_ms: 0,
            leader_contact_ms: 0,
            votes: BTreeMap::new(),
            progress: BTreeMap::new(),
            transfer: None,
            handed_to: None,
            handover_epoch: 0,
            reported_handover: (false, 0),
            read_seq: 0,
            pending_reads: Vec::new(),
            waiting_reads: Vec::new(),
            heartbeat_requested: false,
            incoming_snapshot: None,
            msgs: Vec::new(),
            read_states: Vec::new(),
            installed_snapshot: None,
            reported: None,
            ever_member: false,
            removed: false,
            autopilot_paused: false,
            autopilot_events: Vec::new(),
            stopping: None,
            stopping_sent_ms: 0,
            stopping_peers: BTreeMap::new(),
        };
        raft.reset_election_timer();
        raft
    }

    // ----- accessors -------------------------------------------------------

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }
    pub fn config(&self) -> &RaftConfig {
        &self.cfg
    }
    pub fn role(&self) -> Role {
        self.role
    }
    pub fn term(&self) -> u64 {
        self.term
    }
    pub fn leader_id(&self) -> Option<NodeId> {
        self.leader_id
    }
    pub fn voted_for(&self) -> Option<NodeId> {
        self.voted_for
    }
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }
    pub fn commit_index(&self) -> u64 {
        self.log.committed()
    }
    /// Committed entries up to here have been handed out by `ready()`.
    pub fn applied_index(&self) -> u64 {
        self.log.handed()
    }
    pub fn first_index(&self) -> u64 {
        self.log.first_index()
    }
    pub fn last_index(&self) -> u64 {
        self.log.last_index()
    }
    pub fn last_term(&self) -> u64 {
        self.log.last_term()
    }
    /// Term of the entry at `index` (the snapshot point included), if held.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.log.term_at(index)
    }
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        self.log.entry(index)
    }
    /// Entries `lo..=hi` that are still held (not compacted).
    pub fn entries(&self, lo: u64, hi: u64) -> Vec<Entry> {
        self.log.slice(lo, hi, usize::MAX, usize::MAX)
    }
    /// The configuration in force here: the latest appended config entry.
    pub fn membership(&self) -> &Membership {
        self.log.active_membership()
    }
    /// The latest committed configuration and its index.
    pub fn committed_membership(&self) -> (u64, &Membership) {
        self.log.committed_membership()
    }
    /// Every committed configuration the log still holds, oldest first.
    pub fn committed_configs(&self) -> impl Iterator<Item = &Membership> {
        self.log.committed_configs()
    }
    /// A configuration change is appended but not committed yet.
    pub fn config_change_pending(&self) -> bool {
        self.log.active_config_index() > self.log.committed()
    }
    pub fn snapshot_meta(&self) -> &SnapshotMeta {
        &self.log.snapshot().meta
    }
    pub fn is_voter(&self) -> bool {
        self.membership().is_voter(self.cfg.id)
    }
    /// True while an InstallSnapshot is arriving in chunks (not yet installed).
    pub fn receiving_snapshot(&self) -> bool {
        self.incoming_snapshot.is_some()
    }

    pub fn is_removed(&self) -> bool {
        self.removed
    }
    /// Leader only: (match index, next index) of a peer.
    pub fn progress_of(&self, id: NodeId) -> Option<(u64, u64)> {
        self.progress.get(&id).map(|p| (p.matched, p.next))
    }
    /// Leader only: the leadership transfer under way, if any.
    pub fn transfer(&self) -> Option<Transfer> {
        self.transfer
    }
    /// Leader only: the peer a leadership transfer is heading to.
    pub fn transfer_target(&self) -> Option<NodeId> {
        self.transfer.as_ref().map(|t| t.to)
    }
    /// True while this leader hands leadership over — a transfer is under
    /// way, or it appended a configuration in which it is no voter — and
    /// therefore refuses proposals with [`RaftError::HandingOver`].
    pub fn handing_over(&self) -> bool {
        self.role == Role::Leader
            && (self.transfer.is_some() || !self.log.active_membership().is_voter(self.cfg.id))
    }
    /// True if this node leads, or heard from the leader of its term within
    /// the last election timeout (as of the latest `tick`/`step`). The
    /// transport lets a node its configuration does not name ask for votes
    /// only while this is false (docs/protocol-cluster.md §2).
    pub fn has_live_leader(&self) -> bool {
        match self.role {
            Role::Leader => true,
            _ => {
                self.leader_id.is_some()
                    && self.now_ms < self.leader_contact_ms.saturating_add(self.cfg.election_ms)
            }
        }
    }
    /// How long ago (ms, as of the latest `tick`/`step`) this node last heard
    /// from a leader; `None` on the leader itself, or before it ever heard
    /// from one. Kept when the leader is lost: how old this node's view is.
    pub fn leader_heard_ms(&self) -> Option<u64> {
        match self.role {
            Role::Leader => None,
            _ if self.leader_contact_ms == 0 => None,
            _ => Some(self.now_ms.saturating_sub(self.leader_contact_ms)),
        }
    }
    /// After this node stopped leading by handing over, the node it sent
    /// `TimeoutNow` to, until it learns who leads: a hint for redirecting
    /// clients (it is not known to lead yet).
    pub fn handed_to(&self) -> Option<NodeId> {
        self.handed_to
    }

    // ----- role transitions ------------------------------------------------

    /// Becomes a follower (or learner) in `term`, following `leader` if known.
    pub(super) fn become_follower(&mut self, term: u64, leader: Option<NodeId>) {
        if term > self.term {
            self.enter_term(term);
        }
        // Why keep the target only while no leader is known: it is a hint for
        // the moment between our stepping down and the new leader's first
        // message.
        let handed = self.transfer.filter(|t| t.timeout_now_ms.is_some()).map(|t| t.to);
        self.handed_to = if leader.is_some() { None } else { handed.or(self.handed_to) };
        self.role = Role::Follower;
        self.leader_id = leader;
        if leader.is_some() {
            self.leader_contact_ms = self.now_ms;
        }
        self.clear_leader_state();
        self.votes.clear();
        self.reset_election_timer();
        self.refresh_role();
    }

    /// Moves to the later `term`, in which this node has not voted yet. The one place
    /// the term changes.
    pub(super) fn enter_term(&mut self, term: u64) {
        crate::invariant!(
            term > self.term,
            "term never decreases",
            "node {} in term {} told to enter term {term}",
            self.cfg.id,
            self.term
        );
        self.term = term;
        self.voted_for = None;
    }

    /// Casts this node's vote of the current term for `to`. The one place a vote is
    /// cast: a second vote in one term would let two candidates win it.
    pub(super) fn cast_vote(&mut self, to: NodeId) {
        crate::invariant!(
            self.voted_for.is_none_or(|v| v == to),
            "at most one vote per term",
            "node {} voted for {:?} in term {} and would vote for {to}",
            self.cfg.id,
            self.voted_for,
            self.term
        );
        self.voted_for = Some(to);
    }

    fn clear_leader_state(&mut self) {
        self.progress.clear();
        self.transfer = None;
        // Why: a deposed leader must never answer a read; the app learns
        // from `role_changed` that these reads are abandoned.
        self.pending_reads.clear();
        self.waiting_reads.clear();
        self.heartbeat_requested = false;
    }

    /// Follower ⇄ Learner according to the active configuration.
    pub(super) fn refresh_role(&mut self) {
        if self.role == Role::Leader {
            return;
        }
        let voter = self.is_voter() && !self.removed;
        self.role = match (self.role, voter) {
            (Role::Learner, true) => Role::Follower,
            (_, false) => Role::Learner,
            (role, true) => role,
        };
    }

    /// Marks the node removed once a committed configuration that no longer
    /// contains it follows one that did.
    pub(super) fn check_removed(&mut self) {
        let (_, committed) = self.log.committed_membership();
        if committed.contains(self.cfg.id) {
            self.ever_member = true;
        } else if self.ever_member && !self.removed {
            self.mark_removed();
        }
    }

    pub(super) fn mark_removed(&mut self) {
        self.removed = true;
        if self.role == Role::Leader {
            self.role = Role::Follower;
            self.leader_id = None;
            self.clear_leader_state();
        }
        self.role = Role::Learner;
    }

    // ----- timers ----------------------------------------------------------

    /// Moves the core's clock to `now_ms` without running any timer (`tick`
    /// does that). For a caller that does not tick on a fixed grid: requests
    /// (`propose`, `read_index`, `transfer_leader`, membership changes) stamp
    /// times from this clock, and `has_live_leader` reads it.
    pub fn advance_clock(&mut self, now_ms: u64) {
        // Why max: the caller promises a monotonic clock; if it slips we keep
        // our own time monotonic rather than re-arm timers into the past.
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Election timeout uniform in [election_ms, election_ms * 23/20).
    pub(super) fn reset_election_timer(&mut self) {
        let base = self.cfg.election_ms;
        let timeout = self.rng.range(base, base * 3 / 20);
        self.election_deadline_ms = self.now_ms.saturating_add(timeout);
    }

    /// The lease holds against a vote request from `from`. Why not against
    /// our own leader: a leader never asks for votes, so its request proves it
    /// stepped down (e.g. CheckQuorum), and the lease — which its own late or
    /// queued heartbeats may have just renewed — would only keep the cluster
    /// leaderless for another election timeout.
    pub(super) fn in_lease_against(&self, from: NodeId) -> bool {
        self.in_lease() && self.leader_id != Some(from)
    }

    /// Followers that heard from a live leader within the election timeout
    /// ignore vote requests, so a node rejoining after a partition cannot
    /// unseat a healthy leader (etcd's "leader lease" with CheckQuorum).
    pub(super) fn in_lease(&self) -> bool {
        if !self.cfg.check_quorum {
            return false;
        }
        match self.role {
            Role::Leader => true,
            _ => {
                self.leader_id.is_some()
                    && self.now_ms < self.leader_contact_ms.saturating_add(self.cfg.election_ms)
            }
        }
    }

    // ----- outputs ---------------------------------------------------------

    pub(super) fn send(&mut self, to: NodeId, msg: Message) {
        self.msgs.push((to, msg));
    }

    /// Drains everything produced since the last call. On a leader this is
    /// also when AppendEntries are built (group commit).
    pub fn ready(&mut self) -> Ready {
        if self.role == Role::Leader {
            self.maybe_commit();
        }
        if self.role == Role::Leader {
            self.flush_replication();
        }
        let committed = self.log.take_committed();
        self.debug_check_invariants();
        Ready {
            messages: std::mem::take(&mut self.msgs),
            snapshot: self.installed_snapshot.take(),
            committed,
            read_states: std::mem::take(&mut self.read_states),
            role_changed: self.role_change(),
            handover: self.handover_change(),
            removed: self.removed,
            autopilot: std::mem::take(&mut self.autopilot_events),
        }
    }

    /// `Some(now)` when the hand-over state of this leader changed since the
    /// last call (or a hand-over began and ended in between: `Some(false)`).
    /// A node that stopped leading reports nothing: `role_changed` says it.
    fn handover_change(&mut self) -> Option<bool> {
        let now = (self.handing_over(), self.handover_epoch);
        let last = std::mem::replace(&mut self.reported_handover, now);
        if self.role != Role::Leader || now == last {
            return None;
        }
        Some(now.0)
    }

    fn role_change(&mut self) -> Option<RoleChange> {
        let now = RoleChange { role: self.role, term: self.term, leader: self.leader_id };
        if self.reported == Some(now) {
            return None;
        }
        self.reported = Some(now);
        Some(now)
    }

    // ----- application requests --------------------------------------------

    /// Appends `data` to the leader's log and returns its index. Nothing is
    /// sent until the next `ready()`.
    pub fn propose(&mut self, data: impl Into<std::sync::Arc<[u8]>>) -> Result<u64, RaftError> {
        self.check_can_propose()?;
        let data = data.into();
        if data.len() > super::wire::ENTRY_DATA_MAX_BYTES {
            return Err(RaftError::EntryTooLarge);
        }
        Ok(self.append_as_leader(EntryKind::Normal(data)))
    }

    pub(super) fn check_can_propose(&self) -> Result<(), RaftError> {
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader { leader: self.leader_id });
        }
        if self.handing_over() {
            return Err(RaftError::HandingOver);
        }
        Ok(())
    }

    /// Appends an entry of the current term to the leader's log.
    pub(super) fn append_as_leader(&mut self, kind: EntryKind) -> u64 {
        debug_assert_eq!(self.role, Role::Leader);
        let index = self.log.last_index() + 1;
        let is_config = matches!(kind, EntryKind::Config(_));
        self.log.append(Entry { term: self.term, index, kind });
        if is_config {
            self.sync_progress();
            // No `handover_epoch` bump when this configuration leaves us out: a
            // hand-over begun so ends only when we stop leading, and a node that
            // stopped leading reports none, so its start is told by the change of
            // `handing_over()` alone.
        }
        index
    }

    /// Leader: keep one `Progress` per other node of the active or committed
    /// configuration. Why both: nodes leaving in an uncommitted change still
    /// need the log until the change commits (so they learn of it), and new
    /// ones need it from the moment it is appended.
    pub(super) fn sync_progress(&mut self) {
        let mut wanted: BTreeSet<NodeId> = self.log.active_membership().all_nodes();
        let (config_index, committed) = self.log.committed_membership();
        wanted.extend(committed.all_nodes());
        wanted.remove(&self.cfg.id);
        let gone: Vec<NodeId> = self.progress.keys().filter(|id| !wanted.contains(id)).copied().collect();
        for id in gone {
            self.progress.remove(&id);
            let term = self.term;
            self.send(id, Message::Removed { term, config_index });
        }
        let next = self.log.last_index() + 1;
        for id in wanted {
            let now = self.now_ms;
            self.progress.entry(id).or_insert_with(|| Progress::new(next, now));
        }
    }

    /// Hands the core a snapshot of the application state at
    /// `applied_index` (which must have been handed out by `ready()`); the
    /// core keeps it to serve InstallSnapshot and drops entries up to it.
    /// Returns false if nothing changed (index too old or not yet applied).
    pub fn compact(&mut self, applied_index: u64, snapshot: Vec<u8>) -> bool {
        let compacted = self.log.compact(applied_index, snapshot);
        self.debug_check_invariants();
        compacted
    }

    // ----- invariants ------------------------------------------------------
    //
    // Cheap ones are asserted where the state changes: `enter_term` (term never
    // decreases), `cast_vote` (one vote per term), `log.rs` (commit never decreases,
    // commit <= last index, applied <= commit, committed entries never truncated),
    // `replication.rs` (a leader never truncates its log).

    /// Walks the whole node (O(log + peers)): the log's invariants, and on a leader
    /// every peer's match index within its log. Runs after every input in debug
    /// builds; the simulators call it after every step in both profiles.
    pub fn check_invariants(&self) {
        self.log.check_invariants();
        if self.role == Role::Leader {
            for (id, p) in &self.progress {
                crate::invariant!(
                    p.matched <= self.log.last_index(),
                    "a peer's match index within the leader's log",
                    "node {} in term {}: peer {id} matched {}, last index {}",
                    self.cfg.id,
                    self.term,
                    p.matched,
                    self.log.last_index()
                );
            }
        }
    }

    /// [`Raft::check_invariants`] in debug builds only: the walk is O(log).
    pub(super) fn debug_check_invariants(&self) {
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    pub(super) fn snapshot_arc(&self) -> Arc<Snapshot> {
        Arc::clone(self.log.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_election_deadline(id: NodeId, seed: u64) -> Option<u64> {
        Raft::new_bootstrap(RaftConfig::new(id), &[1, 2, 3], seed, 0).next_deadline_ms()
    }

    /// Nodes started with one seed must not time out in step, and a node's timers
    /// depend on every bit of its seed.
    #[test]
    fn every_node_and_seed_draws_its_own_election_timer() {
        assert_ne!(first_election_deadline(1, 42), first_election_deadline(2, 42));
        assert_ne!(first_election_deadline(1, 0), first_election_deadline(1, 1 << 32));
    }

    /// A lone voter that leads, with a peer's match index past its log: the state
    /// no input can build, which the invariant walk must refuse.
    fn corrupt_leader() -> Raft {
        let mut raft = Raft::new_bootstrap(RaftConfig::new(1), &[1], 7, 0);
        for t in 1..100 {
            raft.tick(t * 100);
            if raft.role() == Role::Leader {
                break;
            }
        }
        assert_eq!(raft.role(), Role::Leader);
        raft.ready(); // commits the no-op: nothing left that would prune peers
        let mut wrong = Progress::new(1, 0);
        wrong.matched = raft.last_index() + 1;
        raft.progress.insert(2, wrong);
        raft
    }

    #[test]
    fn the_invariant_walk_refuses_a_match_index_past_the_leaders_log() {
        let raft = corrupt_leader();
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| raft.check_invariants()));
        assert!(walked.is_err());
    }

    /// In debug builds every input ends with the walk.
    #[test]
    #[cfg(debug_assertions)]
    fn debug_builds_walk_the_invariants_after_every_input() {
        let mut raft = corrupt_leader();
        let ready = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| raft.ready()));
        assert!(ready.is_err());
    }
}
