//! Leader election: pre-vote, vote, check-quorum, and becoming leader.
//!
//! Why pre-vote: a node cut off from the cluster keeps timing out; without
//! pre-vote it would bump its term each time and, on rejoining, force the
//! healthy leader to step down. With pre-vote it first asks "would you vote
//! for me?" and only bumps its term when a quorum says yes. Together with the
//! leader lease (followers in contact with a leader ignore vote requests) a
//! rejoining node cannot disrupt a stable leader.

use super::core::Raft;
use super::membership::VoteResult;
use super::message::{EntryKind, Message};
use super::progress::Progress;
use super::{NodeId, Role};

impl Raft {
    /// May this node start an election? Only a voter of both its active and
    /// its committed configuration (docs/operations.md: a joining node never campaigns
    /// until it is a voter in a committed configuration), and not once it is about to
    /// stop (`stop`: leadership won by a node that stops would only move again).
    pub(super) fn can_campaign(&self) -> bool {
        let id = self.cfg.id;
        !self.removed
            && self.stopping.is_none()
            && self.role != Role::Leader
            && self.log.active_membership().is_voter(id)
            && self.log.committed_membership().1.is_voter(id)
    }

    pub(super) fn on_election_timeout(&mut self) {
        if !self.can_campaign() {
            self.reset_election_timer();
            return;
        }
        if self.cfg.pre_vote {
            self.campaign_pre();
        } else {
            self.campaign(false);
        }
    }

    /// Pre-candidate: ask for votes in `term + 1` without changing our term.
    pub(super) fn campaign_pre(&mut self) {
        self.role = Role::PreCandidate;
        self.leader_id = None;
        self.start_tally();
        let msg = Message::PreVote {
            term: self.term + 1,
            last_index: self.log.last_index(),
            last_term: self.log.last_term(),
        };
        self.broadcast_to_voters(msg);
        self.tally(true);
    }

    /// Candidate: bump the term, vote for ourselves, ask everyone.
    /// `transfer` marks an election ordered by the leader (TimeoutNow).
    pub(super) fn campaign(&mut self, transfer: bool) {
        self.enter_term(self.term + 1);
        self.cast_vote(self.cfg.id);
        self.role = Role::Candidate;
        self.leader_id = None;
        self.start_tally();
        let msg = Message::Vote {
            term: self.term,
            last_index: self.log.last_index(),
            last_term: self.log.last_term(),
            transfer,
        };
        self.broadcast_to_voters(msg);
        self.tally(false);
    }

    fn start_tally(&mut self) {
        self.votes.clear();
        self.votes.insert(self.cfg.id, true);
        self.reset_election_timer();
    }

    fn broadcast_to_voters(&mut self, msg: Message) {
        let m = self.log.active_membership();
        let mut voters = m.voters.clone();
        voters.extend(m.outgoing.iter().copied());
        voters.remove(&self.cfg.id);
        for id in voters {
            self.send(id, msg.clone());
        }
    }

    fn tally(&mut self, pre: bool) {
        match self.log.active_membership().vote_result(&self.votes) {
            VoteResult::Won if pre => self.campaign(false),
            VoteResult::Won => self.become_leader(),
            VoteResult::Lost => self.become_follower(self.term, None),
            VoteResult::Pending => {}
        }
    }

    pub(super) fn handle_vote_resp(&mut self, from: NodeId, term: u64, granted: bool, pre: bool) {
        let ok = if pre {
            let asked = self.term + 1;
            self.role == Role::PreCandidate && (term == asked || (!granted && term == self.term))
        } else {
            self.role == Role::Candidate && term == self.term
        };
        if !ok {
            return;
        }
        self.votes.insert(from, granted);
        self.tally(pre);
    }

    /// Answers a (pre-)vote request. Our term already equals `term` for a
    /// real vote; a pre-vote may be for a later term.
    pub(super) fn handle_vote_request(
        &mut self,
        from: NodeId,
        term: u64,
        last_index: u64,
        last_term: u64,
        pre: bool,
        transfer: bool,
    ) {
        if !transfer && self.in_lease_against(from) {
            // Why silence: the candidate is the one out of touch; a reply
            // would only invite it to try again sooner. (A removed candidate
            // was told so before we got here: `answer_non_member`.)
            return;
        }
        let grant = self.may_vote_for(from, term, pre) && self.log.is_up_to_date(last_index, last_term);
        if pre && grant && self.role == Role::PreCandidate && self.outranked_by(from, last_index, last_term) {
            // Why yield: two pre-candidates that grant each other both go on to
            // campaign in the same term and split the vote, and with timeouts
            // spread over only 15 % of the election timeout they can do so
            // round after round (the simulator found clusters leaderless for
            // more than two election timeouts after a heal). The better-placed
            // one goes on; we stand back, without touching term or vote, so
            // its real vote request finds us free. Pre-vote decides nothing,
            // so this only changes who campaigns, never what is safe.
            self.become_follower(self.term, None);
        }
        if grant && !pre {
            self.cast_vote(from);
            self.reset_election_timer();
        }
        // A pre-vote grant echoes the asked term; a rejection tells our own.
        let reply_term = if pre && grant { term } else { self.term };
        let msg = if pre {
            Message::PreVoteResp { term: reply_term, granted: grant }
        } else {
            Message::VoteResp { term: reply_term, granted: grant }
        };
        self.send(from, msg);
    }

    /// A fellow pre-candidate ranks above us: a voter of our configuration
    /// whose log is more up to date, or as up to date and its id lower.
    fn outranked_by(&self, from: NodeId, last_index: u64, last_term: u64) -> bool {
        let theirs = (last_term, last_index, std::cmp::Reverse(from));
        let ours = (self.log.last_term(), self.log.last_index(), std::cmp::Reverse(self.cfg.id));
        self.log.active_membership().is_voter(from) && theirs > ours
    }

    /// Why no "am I a voter?" check: a new voter whose log still says
    /// "learner" must be able to vote, or a cluster where it and one old
    /// voter survive deadlocks (found by the simulator). This is safe: a
    /// candidate only counts votes of voters in ITS configuration, and the
    /// up-to-date check still applies (Raft thesis §4.2: servers answer
    /// RPCs without consulting their current configuration).
    fn may_vote_for(&self, from: NodeId, term: u64, pre: bool) -> bool {
        if self.removed {
            return false;
        }
        let free = self.voted_for.is_none() && self.leader_id.is_none();
        self.voted_for == Some(from) || free || (pre && term > self.term)
    }

    /// Answers `Removed` to a node that neither our committed nor our active
    /// configuration contains, and returns true if the message must then be
    /// dropped. Runs before anything else looks at the message — terms, the
    /// leader lease — because a removed voter that missed its removal keeps
    /// pre-campaigning with its old configuration, and the lease would
    /// otherwise silence every answer it could get.
    ///
    /// - A leader answers every message of such a node, each time (a notice
    ///   may be lost), and drops it. Why this is safe: the leader's log holds
    ///   every committed configuration, so a node missing from both of its
    ///   configurations is leaving or gone, never one whose vote or answer
    ///   the leader needs.
    /// - Other nodes answer vote requests only, and then handle them as usual.
    ///   Why not drop them: our log may lag, and the candidate may be a new
    ///   voter we have not heard of yet; it needs our vote (the candidate
    ///   counts only votes of its own configuration, and ignores a notice
    ///   whose configuration is older than its own).
    pub(super) fn answer_non_member(&mut self, from: NodeId, msg: &Message) -> bool {
        if matches!(msg, Message::Removed { .. }) {
            return false;
        }
        let leader = self.role == Role::Leader;
        if !leader && !matches!(msg, Message::PreVote { .. } | Message::Vote { .. }) {
            return false;
        }
        let (config_index, committed) = self.log.committed_membership();
        let known = committed.contains(from) || self.log.active_membership().contains(from);
        if known || config_index == 0 {
            return false;
        }
        let term = self.term;
        self.send(from, Message::Removed { term, config_index });
        leader
    }

    pub(super) fn handle_removed(&mut self, config_index: u64) {
        // Why both conditions: the notice is only news if its committed
        // config is newer than ours, and only means "removed" if ours once
        // contained us (a joining node was never a member yet).
        if self.ever_member && config_index > self.log.committed_membership().0 {
            self.mark_removed();
        }
    }

    pub(super) fn handle_timeout_now(&mut self) {
        if self.can_campaign() {
            self.campaign(true);
        }
    }

    pub(super) fn become_leader(&mut self) {
        debug_assert_eq!(self.role, Role::Candidate);
        self.role = Role::Leader;
        self.leader_id = Some(self.cfg.id);
        self.progress.clear();
        self.sync_progress();
        let next = self.log.last_index() + 1;
        let now = self.now_ms;
        for p in self.progress.values_mut() {
            *p = Progress::new(next, now);
        }
        self.heartbeat_deadline_ms = self.now_ms + self.cfg.heartbeat_ms;
        // Why a no-op: a leader may only commit entries of its own term
        // (Raft §5.4.2); the no-op lets it commit (and learn the commit
        // index) without waiting for a client.
        self.append_as_leader(EntryKind::Noop);
    }

    /// Leader timers: heartbeats, check-quorum, transfer timeout, autopilot.
    pub(super) fn tick_leader(&mut self) {
        if self.now_ms >= self.heartbeat_deadline_ms {
            self.heartbeat_deadline_ms = self.now_ms + self.cfg.heartbeat_ms;
            self.broadcast_heartbeat();
        }
        // Why on every tick and by time of last answer (not a flag reset once
        // per election timeout): answers from before a partition must not
        // count at the next check, or a minority leader would lead for up to
        // two election timeouts, appending requests that can never commit.
        if self.cfg.check_quorum && !self.quorum_recently_active() {
            self.become_follower(self.term, None);
            return;
        }
        if self.transfer.as_ref().is_some_and(|t| self.now_ms >= t.deadline_ms) {
            // Abandoned: the target did not take over within an election
            // timeout. We lead on; `ready()` reports the end of the hand-over.
            self.transfer = None;
        }
        self.tick_leaving();
        self.tick_autopilot();
    }

    /// A quorum of the active configuration answered within the last
    /// election timeout (we count ourselves).
    fn quorum_recently_active(&self) -> bool {
        let id = self.cfg.id;
        let since = self.now_ms.saturating_sub(self.cfg.election_ms);
        self.log
            .active_membership()
            .has_quorum(|n| n == id || self.progress.get(&n).is_some_and(|p| p.last_heard_ms > since))
    }
}
