//! Planned stops (src/raft/stopping.rs): a stopping voter swapped for a standby, a stopping leader handing over first, nothing changed without a standby.

use super::autopilot::*;
use super::*;

/// The configurations committed so far on `id` hold voters {1, 3, 4} in the end.
fn committed_voters(net: &Net, id: NodeId) -> BTreeSet<NodeId> {
    let m = net.node(id).committed_membership().1;
    assert!(!m.is_joint(), "{m:?}");
    m.voters.clone()
}

/// A follower that stops and asks to leave is swapped for the caught-up standby by the
/// leader at once — joint consensus, then the final configuration — and learns it was
/// removed; until then it waits (`awaits_replacement`). Leaving is the stopping node's
/// request: the leader's autopilot being off changes nothing. The voter count stays
/// three throughout.
#[test]
fn a_stopping_follower_that_leaves_is_swapped_for_the_standby_at_once() {
    for autopilot in [Some(DEAD_MS), None] {
        let mut net = autopilot_cluster(|id| RaftConfig { autopilot_dead_ms: autopilot, ..config(id) });
        net.at(2).stop(true);
        assert!(net.node(2).awaits_replacement(), "a standby may take its place");
        let took = net.advance_until(1_000, |n| n.removed.contains(&2)).expect("removed");
        assert!(took <= 3 * STEP_MS, "removed after {took} ms");
        let events = net.autopilot_events();
        assert!(
            matches!(events[..], [AutopilotEvent::ReplacingStopping { leaving: 2, standby: 4, .. }]),
            "{events:?}"
        );
        assert_eq!(committed_voters(&net, 1), BTreeSet::from([1, 3, 4]));
        assert!(net.node(1).committed_membership().1.learners.is_empty());
        net.assert_voter_count(1, 3);
        assert!(!net.node(2).awaits_replacement(), "removed: nothing left to wait for");
    }
}

/// Without a standby nothing changes: no configuration is proposed and the stopping
/// voter has nothing to wait for. A standby that says it stops too is no standby.
#[test]
fn a_stopping_voter_without_a_standby_changes_nothing_and_waits_for_nothing() {
    let mut net = Net::with_config(&[1, 2, 3], autopilot_config);
    net.elect(1);
    net.advance(500);
    net.at(2).stop(true);
    assert!(!net.node(2).awaits_replacement());
    net.advance(2_000);
    assert!(net.autopilot.is_empty());
    assert_eq!(net.node(1).membership().voters, BTreeSet::from([1, 2, 3]));

    let mut net = autopilot_cluster(autopilot_config);
    net.at(4).stop(false);
    net.advance(100);
    assert!(net.node(1).is_peer_stopping(4));
    assert!(net.node(1).standbys().is_empty(), "a stopping learner is no standby");
    net.at(2).stop(true);
    assert!(!net.node(2).awaits_replacement());
    net.advance(2_000);
    assert!(net.autopilot.is_empty(), "{:?}", net.autopilot_events());
}

/// A standby that stops and asks to leave is removed at once: its place is free for
/// the fresh process its process manager starts.
#[test]
fn a_stopping_standby_that_leaves_is_removed_at_once() {
    let mut net = autopilot_cluster(autopilot_config);
    net.at(4).stop(true);
    assert!(!net.node(4).awaits_replacement(), "a learner has no voter's place to hand on");
    net.advance(100);
    assert!(matches!(net.autopilot_events()[..], [AutopilotEvent::RemovingStopping { learner: 4, .. }]));
    assert!(net.node(1).committed_membership().1.learners.is_empty());
    assert_eq!(net.node(1).membership().voters, BTreeSet::from([1, 2, 3]));
}

/// A leader that stops asks to leave too: it tells the others first, hands leadership
/// to a voter that does not stop, and that new leader — once its term's entry commits —
/// swaps the old leader for the standby.
#[test]
fn a_stopping_leader_hands_over_and_its_successor_swaps_it_for_the_standby() {
    let mut net = autopilot_cluster(autopilot_config);
    net.at(1).stop(true);
    net.at(1).transfer_leader(None).unwrap();
    let took = net.advance_until(1_000, |n| n.removed.contains(&1)).expect("removed");
    assert!(took <= 5 * STEP_MS, "removed after {took} ms");
    let new = net.leaders()[0];
    assert_ne!(new, 1);
    assert!(
        net.autopilot.iter().any(|(l, _, e)| *l == new
            && matches!(e, AutopilotEvent::ReplacingStopping { leaving: 1, standby: 4, .. })),
        "{:?}",
        net.autopilot
    );
    let others: BTreeSet<NodeId> = [2, 3, 4].into();
    assert_eq!(committed_voters(&net, new), others);
}

/// A node about to stop never campaigns: its election timeout passes and a
/// `TimeoutNow` arrives, and it stays a follower; the others elect one of themselves,
/// with its vote. And no leader hands leadership to it.
#[test]
fn a_stopping_node_never_campaigns_and_is_never_handed_leadership() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(500);
    net.at(2).stop(false);
    net.advance(50);
    assert_eq!(net.node(1).successor(), Some(3));
    assert_eq!(net.node(1).reachable_successor(|_| true), Some(3));
    // TimeoutNow reaches it all the same (sent by a leader that did not know): nothing.
    let term = net.node(1).term();
    let now = net.now;
    net.node_mut(2).step(1, Message::TimeoutNow { term }, now);
    net.deliver_all();
    assert_eq!(net.node(2).role(), Role::Follower);
    assert_eq!(net.node(2).term(), term);
    // The leader dies: only 3 campaigns, and wins with 2's vote.
    net.crash(1);
    net.advance(6_000);
    assert_eq!(net.leaders(), vec![3]);
    assert!(!net
        .sent
        .iter()
        .any(|(f, _, m)| *f == 2 && matches!(m, Message::PreVote { .. } | Message::Vote { .. })));
}

/// When every node is told to stop at once, leadership does not move to a node that
/// stops too. The leader's transfer, started before it heard the others, goes to the
/// next voter when its target says it stops (which ignores `TimeoutNow`), and is
/// abandoned when that one stops too: nobody but the first leader ever leads, and
/// with no voter left to take over `successor()` is `None`.
#[test]
fn when_all_stop_at_once_leadership_does_not_move_to_a_node_that_stops() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(500);
    net.sent.clear();
    net.at(1).stop(false);
    assert_eq!(net.node_mut(1).transfer_leader(Some(2)), Ok(2));
    net.at(2).stop(false);
    net.at(3).stop(false);
    net.advance(50);
    assert_eq!(net.leaders(), vec![1]);
    assert!(net.node(1).transfer().is_none(), "the hand-over was abandoned");
    assert_eq!(net.handovers[&1], vec![true, false]);
    assert_eq!(net.node(1).successor(), None);
    let timeout_nows: Vec<NodeId> = net
        .sent
        .iter()
        .filter(|(f, _, m)| *f == 1 && matches!(m, Message::TimeoutNow { .. }))
        .map(|(_, to, _)| *to)
        .collect();
    assert_eq!(timeout_nows, vec![2, 3], "retargeted once, then abandoned");
    net.advance(5_000);
    assert!(net.nodes.values().all(|n| n.role() != Role::Candidate));
    assert_eq!(net.leaders(), vec![1]);
}

/// `Stopping` is said again every heartbeat period (a lost one, or a leader elected
/// later, hears the next), and it is judged without its term: a later term neither
/// deposes the leader nor moves anyone's term.
#[test]
fn stopping_is_repeated_each_heartbeat_and_judged_without_its_term() {
    let mut net = autopilot_cluster(autopilot_config);
    net.lose_from(2, |m| matches!(m, Message::Stopping { .. }));
    net.at(2).stop(true);
    net.advance(100);
    assert!(!net.node(1).is_peer_stopping(2));
    net.mangle = None;
    let took = net.advance_until(1_000, |n| n.node(1).is_peer_stopping(2)).unwrap();
    assert!(took <= HEARTBEAT_MS, "heard after {took} ms");
    net.advance_until(1_000, |n| n.removed.contains(&2)).expect("removed");

    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(500);
    let term = net.node(1).term();
    let now = net.now;
    net.node_mut(1).step(3, Message::Stopping { term: term + 50, leave: false }, now);
    net.deliver_all();
    assert_eq!((net.node(1).role(), net.node(1).term()), (Role::Leader, term));
    assert!(net.node(1).is_peer_stopping(3));
    // From a node no configuration names: not recorded.
    net.node_mut(1).step(9, Message::Stopping { term, leave: true }, now);
    assert!(!net.node(1).is_peer_stopping(9));
}

/// A core ticked only at its `next_deadline_ms` repeats `Stopping` on time: the next
/// repetition is a deadline.
#[test]
fn a_stopping_node_repeats_its_news_when_ticked_only_when_due() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(500);
    net.tick_when_due = true;
    net.at(2).stop(false);
    net.sent.clear();
    net.advance_1ms(3 * HEARTBEAT_MS);
    // The first one, then one at the end of each period.
    let to_leader = net.count_sent(2, 1, |m| matches!(m, Message::Stopping { .. }));
    assert_eq!(to_leader, 4, "sent {to_leader} times in three heartbeat periods");
}
