//! The two input doors of `Raft` — `tick` (time) and `step` (a message) — and how a
//! message is routed: by its term first (a higher term is adopted or refused, a lower
//! one answered so the sender catches up), then to the handler of its kind in
//! `election.rs`, `replication.rs`, `snapshot.rs` or `reconfig.rs`.

use super::core::Raft;
use super::message::Message;
use super::{NodeId, Role};

impl Raft {
    /// Drives timers: elections (non-leaders), heartbeats, check-quorum,
    /// transfer timeouts and autopilot (leader).
    pub fn tick(&mut self, now_ms: u64) {
        self.tick_inner(now_ms);
        self.debug_check_invariants();
    }

    fn tick_inner(&mut self, now_ms: u64) {
        self.advance_clock(now_ms);
        if self.removed {
            return;
        }
        self.tick_stopping();
        if self.role == Role::Leader {
            self.tick_leader();
        } else if self.now_ms >= self.election_deadline_ms {
            self.on_election_timeout();
        }
    }

    /// The earliest time (the core's milliseconds) at which `tick` has
    /// something to do or `ready()` something to send that no input causes:
    /// a heartbeat, a commit notice, an election timeout, a transfer deadline,
    /// a peer whose last answer leaves the CheckQuorum window, a peer turning
    /// dead for autopilot, the end of a follower's lease on its leader
    /// (`has_live_leader` turns false), the next `Stopping` of a node about to
    /// stop. `None`
    /// when no timer runs (a removed node). A caller may sleep until then,
    /// waking for inputs meanwhile: ticking earlier changes nothing, ticking at
    /// that time does what a tick on any finer grid would have done by then.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        if self.removed {
            return None;
        }
        let now = self.now_ms;
        // Moments when a condition turns, kept only while still ahead: past
        // ones are not consumed by a tick and would make the caller spin.
        let ahead = |t: u64| (t > now).then_some(t);
        let deadlines: [Option<u64>; 6] = if self.role == Role::Leader {
            let election = self.cfg.election_ms;
            let quorum_check = if self.cfg.check_quorum {
                self.progress.values().filter_map(|p| ahead(p.last_heard_ms.saturating_add(election))).min()
            } else {
                None
            };
            [
                Some(self.heartbeat_deadline_ms),
                self.next_commit_notice_ms(),
                self.transfer.map(|t| t.deadline_ms),
                quorum_check,
                self.autopilot_deadline_ms(),
                self.stopping_deadline_ms(),
            ]
        } else {
            let lease_end = self
                .leader_id
                .and_then(|_| ahead(self.leader_contact_ms.saturating_add(self.cfg.election_ms)));
            [Some(self.election_deadline_ms), lease_end, self.stopping_deadline_ms(), None, None, None]
        };
        deadlines.into_iter().flatten().min()
    }

    /// Handles one message from `from`. Stale, duplicated or malformed
    /// messages are ignored (or answered so the sender can catch up); this
    /// never panics on network input.
    pub fn step(&mut self, from: NodeId, msg: Message, now_ms: u64) {
        self.step_inner(from, msg, now_ms);
        self.debug_check_invariants();
    }

    fn step_inner(&mut self, from: NodeId, msg: Message, now_ms: u64) {
        self.advance_clock(now_ms);
        if self.removed || from == self.cfg.id {
            return;
        }
        if self.answer_non_member(from, &msg) {
            return;
        }
        if let Message::Stopping { leave, .. } = msg {
            // Why before the term rules: it says something about the sender's process,
            // and a term it carries must neither depose a leader nor be refused as old.
            self.handle_stopping(from, leave);
            return;
        }
        let term = msg.term();
        if term > self.term && !self.on_higher_term(from, &msg) {
            return;
        }
        if term < self.term {
            self.on_lower_term(from, &msg);
            return;
        }
        self.dispatch(from, msg);
    }

    fn dispatch(&mut self, from: NodeId, msg: Message) {
        match msg {
            Message::PreVote { term, last_index, last_term } => {
                self.handle_vote_request(from, term, last_index, last_term, true, false)
            }
            Message::Vote { term, last_index, last_term, transfer } => {
                self.handle_vote_request(from, term, last_index, last_term, false, transfer)
            }
            Message::PreVoteResp { term, granted } => self.handle_vote_resp(from, term, granted, true),
            Message::VoteResp { term, granted } => self.handle_vote_resp(from, term, granted, false),
            Message::Append { prev_index, prev_term, entries, commit, .. } => {
                if self.accept_leader(from) {
                    self.handle_append(from, prev_index, prev_term, entries, commit);
                }
            }
            Message::Heartbeat { commit, read_seq, .. } => {
                if self.accept_leader(from) {
                    self.handle_heartbeat(from, commit, read_seq);
                }
            }
            Message::InstallSnapshot { meta, offset, data, done, .. } => {
                if self.accept_leader(from) {
                    self.handle_snapshot_chunk(from, meta, offset, data, done);
                }
            }
            Message::TimeoutNow { .. } => {
                if self.accept_leader(from) {
                    self.handle_timeout_now();
                }
            }
            Message::AppendResp { success, index, conflict_term, hint_index, .. } => {
                self.handle_append_resp(from, success, index, conflict_term, hint_index)
            }
            Message::HeartbeatResp { read_seq, .. } => self.handle_heartbeat_resp(from, read_seq),
            Message::InstallSnapshotResp { index, next_offset, done, .. } => {
                self.handle_snapshot_resp(from, index, next_offset, done)
            }
            Message::Removed { config_index, .. } => self.handle_removed(config_index),
            // Handled before the term rules (`step_inner`).
            Message::Stopping { .. } => {}
        }
    }

    /// A message carries a higher term. Returns false if it must be dropped.
    fn on_higher_term(&mut self, from: NodeId, msg: &Message) -> bool {
        match msg {
            // Why: a pre-vote is a question about the future; answering it
            // must not change our term (that is the point of pre-vote).
            Message::PreVote { .. } => true,
            // A grant echoes the term we asked about: not a newer term. Why
            // drop a grant we no longer wait for: adopting its term would
            // make a node that went back to following a live leader depose
            // it with its next answer (etcd ignores such grants too). A
            // rejection carries the voter's real term, which we adopt (else a
            // node stuck in an older term could never win nor learn better).
            Message::PreVoteResp { term, granted: true } => {
                self.role == Role::PreCandidate && *term == self.term + 1
            }
            // A rejection from a voter in a later term: adopt its term and ask
            // again at once, for the term after it. Why not wait for the next
            // timeout: our log may well be the best (the voter refused only
            // because it already voted in its term), and waiting would leave
            // the cluster leaderless for one more election timeout. Bounded:
            // each retry needs a strictly higher term.
            Message::PreVoteResp { term, granted: false } if self.role == Role::PreCandidate => {
                self.become_follower(*term, None);
                if self.can_campaign() {
                    self.campaign_pre();
                }
                false
            }
            Message::Vote { transfer, .. } if !*transfer && self.in_lease_against(from) => false,
            // Why: a removal notice from a node that moved on must not drag
            // us into its term; it is judged by its config index alone.
            Message::Removed { .. } => true,
            _ => {
                let leader = msg.is_from_leader().then_some(from);
                // Deposed by a later term's answer to our replication (a candidate
                // that campaigned while we won, or a node that moved on), not by a
                // vote request or a newer leader, and not while handing over.
                let deposed = self.role == Role::Leader
                    && !self.handing_over()
                    && matches!(
                        msg,
                        Message::AppendResp { .. }
                            | Message::HeartbeatResp { .. }
                            | Message::InstallSnapshotResp { .. }
                    );
                self.become_follower(msg.term(), leader);
                if deposed && self.cfg.pre_vote && self.can_campaign() {
                    // Such a leader asks at once whether it may lead again. Why not
                    // wait for the election timeout: our followers keep their lease
                    // on us for an election timeout and ignore every other
                    // candidate meanwhile — we are the one node they still answer
                    // (`in_lease_against`), so waiting would leave the cluster
                    // leaderless that long (the simulator found two elections back
                    // to back over the liveness bound). Pre-vote decides nothing:
                    // voters that follow another live leader ignore it, a better
                    // log refuses it.
                    self.campaign_pre();
                }
                true
            }
        }
    }

    /// A message from an older term: tell a stale leader or candidate about
    /// our term so it steps down; ignore the rest.
    fn on_lower_term(&mut self, from: NodeId, msg: &Message) {
        let term = self.term;
        match msg {
            Message::Append { .. }
            | Message::Heartbeat { .. }
            | Message::InstallSnapshot { .. }
            | Message::TimeoutNow { .. } => self.send(from, Message::HeartbeatResp { term, read_seq: 0 }),
            Message::PreVote { .. } => self.send(from, Message::PreVoteResp { term, granted: false }),
            Message::Vote { .. } => self.send(from, Message::VoteResp { term, granted: false }),
            Message::Removed { config_index, .. } => self.handle_removed(*config_index),
            _ => {}
        }
    }

    /// A leader-only message in our current term. Returns false if we must
    /// ignore it (we lead this term ourselves: two leaders in one term are
    /// impossible unless the sender is broken).
    fn accept_leader(&mut self, from: NodeId) -> bool {
        if self.role == Role::Leader {
            return false;
        }
        if (self.role != Role::Follower && self.role != Role::Learner) || self.leader_id != Some(from) {
            self.become_follower(self.term, Some(from));
        }
        self.leader_contact_ms = self.now_ms;
        self.reset_election_timer();
        true
    }
}
