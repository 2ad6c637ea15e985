//! Autopilot scenarios (src/raft/autopilot.rs): dead voters and learners replaced after their threshold and not before, in order, one at a time, never while paused or off.

use super::*;

/// Autopilot's threshold in these scenarios: five default election timeouts.
pub(crate) const DEAD_MS: u64 = 10_000;

pub(crate) fn autopilot_config(id: NodeId) -> RaftConfig {
    RaftConfig { autopilot_dead_ms: Some(DEAD_MS), ..config(id) }
}

impl Net {
    /// Node `id` stops for good.
    pub(crate) fn crash(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.ticking.remove(&id);
    }

    /// Starts node `id` fresh, has leader `l` add it as a learner, and lets it catch up.
    pub(crate) fn add_standby(&mut self, l: NodeId, id: NodeId) {
        let cfg = RaftConfig { autopilot_dead_ms: self.node(l).config().autopilot_dead_ms, ..config(id) };
        self.nodes.insert(id, Raft::new_joining(cfg, 7, self.now));
        self.ticking.insert(id);
        self.at(l).add_learner(id).unwrap();
        self.advance(500);
        assert!(self.node(l).standbys().contains(&id), "learner {id} is no standby");
    }

    /// The autopilot events reported so far (by any node), without their times.
    pub(crate) fn autopilot_events(&self) -> Vec<AutopilotEvent> {
        self.autopilot.iter().map(|(_, _, e)| e.clone()).collect()
    }

    /// Every committed configuration `id` still holds has `voters` voters (each half
    /// of a joint one too).
    pub(crate) fn assert_voter_count(&self, id: NodeId, voters: usize) {
        for m in self.node(id).committed_configs().filter(|m| !m.all_nodes().is_empty()) {
            assert_eq!(m.voters.len(), voters, "{m:?}");
            assert!(m.outgoing.is_empty() || m.outgoing.len() == voters, "{m:?}");
        }
    }
}

/// Three voters (autopilot on) with leader 1 and a caught-up standby, learner 4.
pub(crate) fn autopilot_cluster(cfg: impl Fn(NodeId) -> RaftConfig) -> Net {
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    net.elect(1);
    net.advance(500);
    net.add_standby(1, 4);
    net
}

/// Five voters (autopilot on) with leader 1 and a caught-up standby, learner 6.
pub(crate) fn five_voters_with_standby() -> Net {
    let mut net = Net::with_config(&[1, 2, 3, 4, 5], autopilot_config);
    net.elect(1);
    net.advance(500);
    net.add_standby(1, 6);
    net
}

impl Net {
    /// With leader 1's autopilot paused, `first` crashes, `gap` ms later `second`; once
    /// both are long dead autopilot resumes: the events it reports then.
    fn crash_two_while_paused(&mut self, first: NodeId, gap: u64, second: NodeId) -> Vec<AutopilotEvent> {
        self.at(1).set_autopilot_paused(true);
        self.crash(first);
        self.advance(gap);
        self.crash(second);
        self.advance(DEAD_MS + 1_000);
        self.at(1).set_autopilot_paused(false);
        self.advance(2 * HEARTBEAT_MS);
        self.autopilot_events()
    }
}

/// A crashed follower is replaced by the standby once the leader has not heard from
/// it for `autopilot_dead_ms`, not before; the voter count stays three throughout,
/// and the leader leaves the joint configuration by itself.
#[test]
fn autopilot_replaces_a_dead_voter_after_dead_ms_and_not_before() {
    let mut net = autopilot_cluster(autopilot_config);
    net.crash(2);
    let crashed = net.now;
    net.advance(DEAD_MS - 300);
    assert!(net.autopilot.is_empty(), "replaced after {} ms", net.now - crashed);
    assert!(net.node(1).membership().voters.contains(&2));
    let unreachable = net.node(1).unreachable_ms(2).unwrap();
    assert!((DEAD_MS - 300..DEAD_MS).contains(&unreachable), "{unreachable}");
    net.advance(600);
    let events = net.autopilot_events();
    let [AutopilotEvent::Replacing { dead: 2, standby: 4, unreachable_ms, config_index }] = events[..] else {
        panic!("{events:?}");
    };
    assert!((DEAD_MS..DEAD_MS + STEP_MS).contains(&unreachable_ms), "{unreachable_ms}");
    assert_eq!(net.node(1).entry(config_index).map(|e| e.term), Some(net.node(1).term()));
    net.advance(500);
    let m = net.node(1).committed_membership().1.clone();
    assert!(!m.is_joint() && m.voters == BTreeSet::from([1, 3, 4]) && m.learners.is_empty(), "{m:?}");
    net.assert_voter_count(1, 3);
    // Once healed, nothing more happens.
    net.advance(3 * DEAD_MS);
    assert_eq!(net.autopilot.len(), 1);
    assert!(net.node(1).standbys().is_empty());
}

/// Without a caught-up standby nothing happens: no learner at all, then a learner that
/// answers heartbeats but receives no appends (more than `STANDBY_LAG_MAX` behind).
/// Once it can catch up, the dead voter is replaced.
#[test]
fn autopilot_waits_for_a_caught_up_standby() {
    let mut net = Net::with_config(&[1, 2, 3], autopilot_config);
    net.elect(1);
    net.advance(500);
    net.crash(2);
    net.advance(2 * DEAD_MS);
    assert!(net.autopilot.is_empty());
    for i in 0..(ticketing::raft::STANDBY_LAG_MAX + 10) {
        net.at(1).propose(i.to_be_bytes().to_vec()).unwrap();
    }
    net.advance(STEP_MS);
    // Learner 4 gets heartbeats but not the log.
    net.mangle = Some(Box::new(|_, to, m| {
        (to != 4 || !matches!(m, Message::Append { .. } | Message::InstallSnapshot { .. })).then_some(m)
    }));
    net.nodes.insert(4, Raft::new_joining(autopilot_config(4), 7, net.now));
    net.ticking.insert(4);
    net.at(1).add_learner(4).unwrap();
    net.advance(2 * DEAD_MS);
    assert!(net.node(1).unreachable_ms(4).unwrap() < 2 * HEARTBEAT_MS, "the learner answers heartbeats");
    assert!(net.node(1).standbys().is_empty());
    assert!(net.autopilot.is_empty(), "{:?}", net.autopilot);
    net.mangle = None;
    net.advance(1_000);
    assert_eq!(
        net.autopilot_events()
            .first()
            .map(|e| matches!(e, AutopilotEvent::Replacing { dead: 2, standby: 4, .. })),
        Some(true),
        "{:?}",
        net.autopilot
    );
    net.advance(500);
    assert_eq!(net.node(1).committed_membership().1.voters, BTreeSet::from([1, 3, 4]));
    net.assert_voter_count(1, 3);
}

/// Five voters: 2 crashed; 3 is cut off from the leader for less than
/// `autopilot_dead_ms` (shaky). 2 is not replaced while 3 is shaky, although the
/// leader and two healthy voters are a majority. Once 3 is dead too, the two are
/// replaced one at a time, the longest unreachable first, each by its own change,
/// and the voter count stays five.
#[test]
fn autopilot_waits_while_another_voter_is_shaky_and_heals_two_dead_one_at_a_time() {
    let mut net = five_voters_with_standby();
    net.add_standby(1, 7);
    net.crash(2);
    let crashed = net.now;
    net.advance(DEAD_MS - 3_000);
    net.isolate(3);
    net.advance(DEAD_MS - 1_000); // 2 is dead, 3 has been unreachable about 9 s
    assert!(net.node(1).unreachable_ms(2).unwrap() >= DEAD_MS);
    assert!(net.autopilot.is_empty(), "replaced while voter 3 was shaky: {:?}", net.autopilot);
    net.advance(1_500); // now 3 is dead as well
    let events = net.autopilot_events();
    let replacing: Vec<(NodeId, NodeId)> = events
        .iter()
        .filter_map(|e| match e {
            AutopilotEvent::Replacing { dead, standby, .. } => Some((*dead, *standby)),
            _ => None,
        })
        .collect();
    assert_eq!(replacing, vec![(2, 6), (3, 7)], "{events:?}");
    // Voter 3 turned dead up to a heartbeat period before it was cut off plus DEAD_MS.
    let three_dead = crashed + 2 * DEAD_MS - 3_000 - HEARTBEAT_MS;
    assert!(net.autopilot[0].1 >= three_dead, "before voter 3 was dead: {:?}", net.autopilot);
    let configs: Vec<_> = net.node(1).committed_configs().cloned().collect();
    let first_done = configs.iter().position(|m| !m.is_joint() && m.voters.contains(&6)).unwrap();
    let second_started = configs.iter().position(|m| m.voters.contains(&7)).unwrap();
    assert!(first_done < second_started, "the second change began before the first ended: {configs:?}");
    net.advance(500);
    let m = net.node(1).committed_membership().1.clone();
    assert_eq!(m.voters, BTreeSet::from([1, 4, 5, 6, 7]));
    assert!(!m.is_joint());
    net.assert_voter_count(1, 5);
}

/// Paused autopilot never replaces; resumed, it does at once.
#[test]
fn paused_autopilot_replaces_nothing() {
    let mut net = autopilot_cluster(autopilot_config);
    net.at(1).set_autopilot_paused(true);
    assert!(net.node(1).autopilot_paused());
    net.crash(2);
    net.advance(3 * DEAD_MS);
    assert!(net.autopilot.is_empty());
    assert!(net.node(1).membership().voters.contains(&2));
    net.at(1).set_autopilot_paused(false);
    assert!(!net.node(1).autopilot_paused());
    net.advance(2 * HEARTBEAT_MS);
    assert!(matches!(net.autopilot_events()[..], [AutopilotEvent::Replacing { dead: 2, standby: 4, .. }]));
}

/// `autopilot_dead_ms: None` turns autopilot off: a dead voter and a dead learner stay.
#[test]
fn autopilot_off_replaces_nothing() {
    let mut net = autopilot_cluster(|id| RaftConfig { autopilot_dead_ms: None, ..config(id) });
    net.add_standby(1, 5);
    net.crash(2);
    net.crash(5);
    net.advance(3 * DEAD_MS);
    assert!(net.autopilot.is_empty());
    let m = net.node(1).membership().clone();
    assert!(m.voters.contains(&2) && m.learners.contains(&5));
}

/// A learner unheard for `autopilot_dead_ms` is removed (and not before); voters stay.
#[test]
fn autopilot_removes_a_dead_learner() {
    let mut net = autopilot_cluster(autopilot_config);
    net.crash(4);
    net.advance(DEAD_MS - 300);
    assert!(net.autopilot.is_empty());
    net.advance(600);
    let events = net.autopilot_events();
    assert!(matches!(events[..], [AutopilotEvent::RemovingLearner { learner: 4, .. }]), "{events:?}");
    net.advance(500);
    let m = net.node(1).committed_membership().1.clone();
    assert!(m.learners.is_empty() && m.voters == BTreeSet::from([1, 2, 3]), "{m:?}");
}

/// Of several dead learners, autopilot removes the one unheard longest first; of
/// learners unheard equally long, the lowest id.
#[test]
fn autopilot_removes_the_longest_dead_learner_first() {
    for (first, second, gap, removed) in [(5, 4, 1_000, 5), (4, 5, 1_000, 4), (5, 4, 0, 4)] {
        let mut net = autopilot_cluster(autopilot_config);
        net.add_standby(1, 5);
        let events = net.crash_two_while_paused(first, gap, second);
        assert!(
            matches!(events[..], [AutopilotEvent::RemovingLearner { learner, .. }, ..] if learner == removed),
            "{first} crashed {gap} ms before {second}: {events:?}"
        );
    }
}

/// Of several dead voters, autopilot replaces the one unheard longest first; of voters
/// unheard equally long, the lowest id.
#[test]
fn autopilot_replaces_the_longest_dead_voter_first() {
    for (first, second, gap, replaced) in [(3, 2, 1_000, 3), (2, 3, 1_000, 2), (3, 2, 0, 2)] {
        let mut net = five_voters_with_standby();
        let events = net.crash_two_while_paused(first, gap, second);
        assert!(
            matches!(events[..], [AutopilotEvent::Replacing { dead, standby: 6, .. }, ..] if dead == replaced),
            "{first} crashed {gap} ms before {second}: {events:?}"
        );
    }
}

/// A voter unheard for an election timeout is no longer healthy: while one is shaky
/// (neither healthy nor dead), autopilot replaces no dead voter, even at the millisecond
/// the shakiness begins.
#[test]
fn autopilot_waits_while_a_voter_is_unheard_for_an_election_timeout() {
    let mut net = five_voters_with_standby();
    let election_ms = net.node(1).config().election_ms;
    net.at(1).set_autopilot_paused(true);
    net.crash(2);
    net.advance(DEAD_MS + 1_000);
    net.crash(3);
    while net.node(1).unreachable_ms(3).unwrap() < election_ms - 1 {
        net.advance_1ms(1);
    }
    net.at(1).set_autopilot_paused(false);
    net.advance_1ms(1);
    assert_eq!(net.node(1).unreachable_ms(3), Some(election_ms));
    assert!(net.autopilot.is_empty(), "{:?}", net.autopilot_events());
    // Once 3 is dead too, three of five are healthy: the longest dead goes first.
    net.advance(DEAD_MS);
    assert!(matches!(
        net.autopilot_events()[..],
        [AutopilotEvent::Replacing { dead: 2, standby: 6, .. }, ..]
    ));
}

/// A new leader counts from its election: a voter that died before it waits a full
/// `autopilot_dead_ms` after the election (the leader knows nothing older).
#[test]
fn a_new_leader_waits_a_full_dead_ms_before_replacing() {
    let mut net = autopilot_cluster(autopilot_config);
    net.crash(2);
    net.advance(DEAD_MS / 2);
    net.at(1).transfer_leader(Some(3)).unwrap();
    net.advance(500);
    assert_eq!(net.leaders(), vec![3]);
    let elected = net.now;
    net.advance(DEAD_MS - 800);
    assert!(net.autopilot.is_empty(), "replaced {} ms after the election", net.now - elected);
    net.advance(1_000);
    assert!(matches!(net.autopilot_events()[..], [AutopilotEvent::Replacing { dead: 2, standby: 4, .. }]));
}

/// Accessors: only the leader answers `unreachable_ms` (not for itself or a stranger)
/// and lists standbys.
#[test]
fn autopilot_accessors_are_leader_only() {
    let net = autopilot_cluster(autopilot_config);
    assert_eq!(net.node(1).unreachable_ms(1), None);
    assert_eq!(net.node(1).unreachable_ms(99), None);
    assert!(net.node(1).unreachable_ms(2).is_some_and(|ms| ms < 2 * HEARTBEAT_MS));
    assert_eq!(net.node(1).standbys(), vec![4]);
    assert_eq!(net.node(2).unreachable_ms(3), None);
    assert!(net.node(2).standbys().is_empty());
    assert_eq!(net.node(1).config().autopilot_dead_ms, Some(DEAD_MS));
    assert_eq!(RaftConfig::new(1).autopilot_dead_ms, Some(ticketing::raft::AUTOPILOT_DEAD_MS_DEFAULT));
}

/// A learner is a standby while the leader heard it within the last election timeout,
/// and not a millisecond longer.
#[test]
fn a_standby_is_one_heard_within_an_election_timeout() {
    let mut net = autopilot_cluster(autopilot_config);
    let election_ms = net.node(1).config().election_ms;
    net.crash(4);
    let mut seen_at_bound = false;
    for _ in 0..2 * election_ms {
        net.advance_1ms(1);
        let unheard = net.node(1).unreachable_ms(4).unwrap();
        assert_eq!(net.node(1).standbys().contains(&4), unheard < election_ms, "unheard for {unheard} ms");
        seen_at_bound |= unheard == election_ms;
    }
    assert!(seen_at_bound);
}

/// A core ticked only at its `next_deadline_ms` takes the autopilot decision at the
/// same moment as one ticked every millisecond: the moment a voter turns dead is a
/// deadline.
#[test]
fn autopilot_decides_on_time_when_ticked_only_when_due() {
    // A dead time that is no multiple of the heartbeat: the moment the voter turns
    // dead falls between two heartbeat deadlines, so only its own deadline wakes the
    // core on time.
    let dead_ms = DEAD_MS + 37;
    let run = |tick_when_due: bool| {
        let mut net = autopilot_cluster(|id| RaftConfig { autopilot_dead_ms: Some(dead_ms), ..config(id) });
        net.tick_when_due = tick_when_due;
        net.advance_1ms(37);
        net.crash(2);
        net.advance_1ms(dead_ms + 2 * HEARTBEAT_MS);
        net.autopilot.clone()
    };
    let every_ms = run(false);
    assert_eq!(every_ms.len(), 1, "{every_ms:?}");
    assert_eq!(every_ms, run(true));
}
