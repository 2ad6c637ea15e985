//! Named Raft scenarios, each small and named for what it proves, on the
//! synchronous network of `raft_net` (`Net`).

use std::collections::BTreeSet;

use ticketing::raft::{AutopilotEvent, Entry, EntryKind, Message, NodeId, Raft, RaftConfig, RaftError, Role};

mod raft_net;

use raft_net::*;

#[test]
fn single_leader_elected() {
    let mut net = Net::new(&[1, 2, 3]);
    net.advance(3000);
    let leaders = net.leaders();
    assert_eq!(leaders.len(), 1);
    let term = net.node(leaders[0]).term();
    for n in net.nodes.values() {
        assert_eq!(n.term(), term);
        assert_eq!(n.leader_id(), Some(leaders[0]));
    }
}

#[test]
fn proposal_commits_on_every_node() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.node_mut(1).propose(b"x".to_vec()).unwrap();
    net.deliver_all();
    net.advance(300); // one heartbeat carries the new commit index
    for id in [1, 2, 3] {
        assert_eq!(net.applied_data(id), vec![b"x".to_vec()], "node {id}");
    }
}

#[test]
fn leader_re_elected_after_leader_crash() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.nodes.remove(&1);
    net.ticking.remove(&1);
    net.advance(6000);
    let leaders = net.leaders();
    assert_eq!(leaders.len(), 1);
    assert_ne!(leaders[0], 1);
    let idx = net.node_mut(leaders[0]).propose(b"after".to_vec()).unwrap();
    net.deliver_all();
    assert!(net.node(leaders[0]).commit_index() >= idx);
}

/// Raft paper Figure 8: an entry from an earlier term that sits on a
/// majority must not be committed by counting replicas, because a leader
/// with a newer last term can still overwrite it.
#[test]
fn figure8_old_term_entry_not_committed_by_counting() {
    let cfg = |id| RaftConfig { max_append_entries: 1, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3, 4, 5], cfg);
    net.elect(1);
    // (a) S1 replicates X to S2 only.
    for other in [3, 4, 5] {
        net.cut_link(1, other);
    }
    let x = net.node_mut(1).propose(b"X".to_vec()).unwrap();
    let x_term = net.node(1).term();
    net.deliver_all();
    assert_eq!(net.node(2).term_at(x), Some(x_term));
    // (b) S5 wins with S3, S4; its no-op lands at X's index, on S5 only.
    net.heal();
    net.isolate(1);
    net.cut_link(5, 2);
    // S5 crashes right after winning: none of its appends get out.
    net.mangle =
        Some(Box::new(|from, _, m| (from != 5 || !matches!(m, Message::Append { .. })).then_some(m)));
    net.elect(5);
    let s5_term = net.node(5).term();
    assert_eq!(net.node(5).term_at(x), Some(s5_term));
    // (c) S5 is gone for now.
    net.heal();
    net.isolate(5);
    net.cut_link(1, 4);
    // S1 wins a later term with S2, S3 and copies X to S3, but its own
    // no-op (index x + 1) never leaves S1.
    net.mangle = Some(Box::new(move |from, _, m| match m {
        Message::Append { term, prev_index, prev_term, mut entries, commit } if from == 1 => {
            entries.retain(|e| e.index <= x);
            Some(Message::Append { term, prev_index, prev_term, entries, commit })
        }
        m => Some(m),
    }));
    // S3 must not still hold S5's no-op at x for this setup: it never got it.
    assert_eq!(net.node(3).term_at(x), None);
    // S1 still believes it leads term 1; its next heartbeat teaches it better.
    net.ticking = [1].into();
    net.advance(300);
    assert_ne!(net.node(1).role(), Role::Leader);
    net.elect(1);
    net.advance(1000);
    assert_eq!(net.node(3).term_at(x), Some(x_term), "X is on S1, S2, S3: a majority");
    assert!(net.node(1).term() > s5_term);
    assert!(net.node(1).commit_index() < x, "S1 committed an old-term entry by counting replicas");
    // (d) S1 is cut off; S5 (last term newer than X's) wins and overwrites X.
    net.mangle = None;
    net.heal();
    net.isolate(1);
    net.ticking = [5].into();
    net.advance(300); // S5 learns it no longer leads
    net.elect(5);
    net.ticking = [2, 3, 4, 5].into();
    net.advance(1000);
    for id in [2, 3, 4, 5] {
        assert_eq!(net.node(id).term_at(x), Some(s5_term), "node {id}");
        assert!(!net.applied_data(id).contains(&b"X".to_vec()), "node {id} applied X");
    }
    assert!(!net.applied_data(1).contains(&b"X".to_vec()));
}

#[test]
fn stale_leader_in_minority_cannot_commit() {
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    net.elect(1);
    net.cut.extend([
        (1, 3),
        (3, 1),
        (1, 4),
        (4, 1),
        (1, 5),
        (5, 1),
        (2, 3),
        (3, 2),
        (2, 4),
        (4, 2),
        (2, 5),
        (5, 2),
    ]);
    let idx = net.node_mut(1).propose(b"minority".to_vec()).unwrap();
    net.advance(1000);
    assert!(net.node(1).commit_index() < idx);
    // The majority side elects a new leader and moves on.
    net.ticking = [3, 4, 5].into();
    net.advance(5000);
    assert!([3, 4, 5].iter().any(|id| net.node(*id).role() == Role::Leader));
    net.ticking = [1, 2, 3, 4, 5].into();
    assert!(net.node(1).commit_index() < idx);
    // Once healed, the stale leader's entry is discarded, never applied.
    net.heal();
    net.advance(3000);
    for id in [1, 2, 3, 4, 5] {
        assert!(!net.applied_data(id).contains(&b"minority".to_vec()));
    }
    assert_eq!(net.leaders().len(), 1);
}

#[test]
fn rejoining_node_does_not_disrupt_stable_leader_under_prevote() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let term = net.node(1).term();
    net.isolate(3);
    net.advance(20_000); // node 3 times out again and again
    assert_eq!(net.node(3).term(), term, "pre-vote must keep the term");
    net.heal();
    net.advance(3000);
    assert_eq!(net.node(1).role(), Role::Leader);
    assert_eq!(net.node(1).term(), term);
    assert_eq!(net.node(3).leader_id(), Some(1));
}

#[test]
fn follower_in_lease_ignores_vote_requests() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let term = net.node(1).term();
    // A vote request for a higher term (no pre-vote) while 2 hears from 1.
    let now = net.now;
    net.node_mut(2).step(
        3,
        Message::Vote { term: term + 5, last_index: 100, last_term: term, transfer: false },
        now,
    );
    assert_eq!(net.node(2).term(), term);
    assert_eq!(net.node(2).voted_for(), Some(1));
}

#[test]
fn follower_log_conflict_resolved_by_conflict_term() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    // Node 1 appends many entries that only it holds (cut from everyone).
    net.isolate(1);
    for i in 0..20u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.deliver_all();
    // 2 leads a later term and commits different entries at the same indexes.
    net.heal();
    net.isolate(1);
    net.elect(2);
    for i in 0..5u8 {
        net.node_mut(2).propose(vec![100 + i]).unwrap();
    }
    net.deliver_all();
    net.heal();
    net.sent.clear();
    net.ticking = [2].into();
    net.advance(1000);
    let last2 = net.node(2).last_index();
    assert_eq!(net.node(1).last_index(), last2);
    for i in 1..=last2 {
        assert_eq!(net.node(1).entry(i), net.node(2).entry(i));
    }
    // With conflict-term hints one rejection skips node 1's whole stale term.
    let rejections = net
        .sent
        .iter()
        .filter(|(f, t, m)| *f == 1 && *t == 2 && matches!(m, Message::AppendResp { success: false, .. }))
        .count();
    assert!(rejections <= 2, "{rejections} rejections: hints not used");
}

#[test]
fn lagging_follower_caught_up_by_chunked_snapshot() {
    let cfg = |id| RaftConfig { snapshot_chunk_bytes: 100, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    net.elect(1);
    net.isolate(3);
    for i in 0..50u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.deliver_all();
    net.advance(300);
    let applied = net.node(1).applied_index();
    let state = vec![7u8; 1000]; // stands for the app's state machine
    assert!(net.node_mut(1).compact(applied, state.clone()));
    assert!(net.node(1).first_index() > 10);
    net.heal();
    net.sent.clear();
    net.advance(2000);
    let chunks = net
        .sent
        .iter()
        .filter(|(f, t, m)| *f == 1 && *t == 3 && matches!(m, Message::InstallSnapshot { .. }))
        .count();
    assert!(chunks >= 10, "1000 bytes in 100-byte chunks, got {chunks}");
    let snaps = &net.snapshots[&3];
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].data, state);
    assert_eq!(snaps[0].meta.index, applied);
    assert_eq!(net.node(3).commit_index(), net.node(1).commit_index());
    // And it keeps replicating afterwards.
    let idx = net.node_mut(1).propose(b"after".to_vec()).unwrap();
    net.advance(500);
    assert!(net.node(3).commit_index() >= idx);
}

#[test]
fn learner_catches_up_and_never_campaigns_or_counts() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    for i in 0..5u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.deliver_all();
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    assert_eq!(net.node(4).last_index(), net.node(1).last_index());
    assert_eq!(net.node(4).role(), Role::Learner);
    assert_eq!(net.applied_data(4).len(), 5);
    // Cut the leader off for long: the learner must never campaign.
    net.sent.clear();
    net.isolate(1);
    net.advance(10_000);
    assert_ne!(net.node(4).role(), Role::Leader);
    assert!(!net.sent.iter().any(|(f, _, m)| *f == 4
        && matches!(
            m,
            // It may answer vote requests; candidates never count a learner.
            Message::PreVote { .. } | Message::Vote { .. }
        )));
    assert_eq!(
        net.node(4).term(),
        net.nodes.values().filter(|n| n.id() != 1).map(|n| n.term()).max().unwrap()
    );
}

#[test]
fn joint_consensus_replaces_a_voter_and_removed_node_reports_removed() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    let joint = net.node_mut(1).replace_voter(3, 4).unwrap();
    assert!(net.node(1).membership().is_joint());
    assert_eq!(net.node_mut(1).add_learner(9), Err(RaftError::ConfigChangePending));
    net.advance(1000);
    let m = net.node(1).committed_membership().1.clone();
    assert!(!m.is_joint(), "leader left joint automatically");
    assert_eq!(m.voters, [1, 2, 4].into());
    assert!(net.node(1).commit_index() > joint);
    assert!(net.removed.contains(&3), "node 3 reports removed");
    assert!(net.node(3).is_removed());
    // The removed node cannot win: even with everyone else silent it stays put.
    net.isolate(1);
    net.ticking = [3].into();
    net.advance(10_000);
    assert_ne!(net.node(3).role(), Role::Leader);
    net.heal();
    net.ticking = [1, 2, 4].into();
    net.advance(3000);
    assert_eq!(net.leaders().len(), 1);
    assert!(net.node(4).is_voter());
}

#[test]
fn leader_that_removes_itself_steps_down_after_commit() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    net.node_mut(1).replace_voter(1, 4).unwrap();
    net.advance(1000);
    assert_ne!(net.node(1).role(), Role::Leader);
    assert!(net.node(1).is_removed());
    net.ticking = [2, 3, 4].into();
    net.advance(5000);
    let leaders = net.leaders();
    assert_eq!(leaders.len(), 1);
    assert_ne!(leaders[0], 1);
}

#[test]
fn leadership_transfer_via_timeout_now_refuses_proposals_meanwhile() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.node_mut(1).propose(b"a".to_vec()).unwrap();
    assert_eq!(net.node_mut(1).transfer_leader(Some(3)), Ok(3));
    assert!(net.node(1).handing_over());
    assert_eq!(net.node_mut(1).propose(b"b".to_vec()), Err(RaftError::HandingOver));
    net.deliver_all();
    assert_eq!(net.node(3).role(), Role::Leader);
    assert_eq!(net.node(1).leader_id(), Some(3));
    assert_eq!(net.leaders(), vec![3]);
    // The start was reported; losing leadership is reported by role_changed alone.
    assert_eq!(net.handovers[&1], vec![true]);
    assert_eq!(net.node(1).handed_to(), None, "the new leader is known: no hint needed");
}
#[test]
fn read_index_answered_only_after_quorum_round() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    net.node_mut(1).read_index(77).unwrap();
    net.collect();
    assert!(net.reads[&1].is_empty(), "no answer before a quorum heartbeat round");
    net.deliver_all();
    assert_eq!(net.reads[&1], vec![(77, net.node(1).commit_index())]);
}

#[test]
fn read_index_never_answered_by_deposed_leader() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    net.isolate(1);
    net.node_mut(1).read_index(5).unwrap();
    net.ticking = [2, 3].into();
    net.advance(5000);
    assert!(net.leaders().iter().any(|id| *id != 1));
    net.heal();
    net.ticking = [1, 2, 3].into();
    net.advance(1000);
    assert!(net.reads[&1].is_empty());
    assert!(net.node_mut(1).read_index(6).is_err());
}

#[test]
fn group_commit_one_append_per_follower_for_100_proposals() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    for i in 0..100u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    let rd = net.node_mut(1).ready();
    let appends: Vec<_> = rd
        .messages
        .iter()
        .filter(|(_, m)| matches!(m, Message::Append { entries, .. } if !entries.is_empty()))
        .collect();
    assert_eq!(appends.len(), 2, "one AppendEntries per follower");
    for (_, m) in appends {
        if let Message::Append { entries, .. } = m {
            assert_eq!(entries.len(), 100);
        }
    }
}

/// At a steady low rate (one entry every 4 ms) the next entry's append carries the
/// commit index of the one before: followers learn every commit within the
/// commit-notice delay, and the leader sends no heartbeat but the periodic ones
/// (before, every committed entry cost each follower a heartbeat of its own).
#[test]
fn followers_learn_commits_from_the_next_append_not_from_a_heartbeat_per_entry() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    let notice_ms = net.node(1).config().commit_notice_ms();
    let heartbeat_ms = net.node(1).config().heartbeat_ms;
    assert_eq!(notice_ms, 20, "a tenth of the default heartbeat");
    let sent_before = net.sent.len();
    let start = net.now;
    let duration_ms = 1000;
    // (time, leader's commit index then), one per ms.
    let mut leader_commits: Vec<(u64, u64)> = Vec::new();
    let mut entries = 0u64;
    while net.now < start + duration_ms {
        if (net.now - start).is_multiple_of(4) {
            net.node_mut(1).propose(vec![1]).unwrap();
            entries += 1;
        }
        net.advance_1ms(1);
        leader_commits.push((net.now, net.node(1).commit_index()));
        // What the leader had committed `notice_ms` ago, every follower has now.
        let due = leader_commits.iter().rev().find(|(t, _)| *t + notice_ms <= net.now).map_or(0, |(_, c)| *c);
        for id in [2, 3] {
            assert!(
                net.node(id).commit_index() >= due,
                "t={} node {id}: commit {} < {due}",
                net.now,
                net.node(id).commit_index()
            );
        }
    }
    let heartbeats = net.sent[sent_before..]
        .iter()
        .filter(|(from, _, m)| *from == 1 && matches!(m, Message::Heartbeat { .. }))
        .count() as u64;
    // Periodic heartbeats to two followers, plus at most one commit notice each at the end.
    let periodic = 2 * (duration_ms / heartbeat_ms + 1);
    assert!(entries >= 250);
    assert!(heartbeats <= periodic + 2, "{heartbeats} heartbeats for {entries} entries in {duration_ms} ms");
    // The stream ends: the last commit still reaches the followers, by a notice.
    net.advance_1ms(notice_ms);
    let commit = net.node(1).commit_index();
    for id in [2, 3] {
        assert_eq!(net.node(id).commit_index(), commit, "node {id}");
        assert_eq!(net.applied_data(id).len() as u64, entries, "node {id}");
    }
}

/// A lone entry (nothing follows it) reaches the followers' commit index by one
/// heartbeat, sent `commit_notice_ms` after the leader committed it, not at once
/// and not a whole heartbeat period later.
#[test]
fn a_lone_commit_reaches_followers_after_the_commit_notice_delay() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    // Start just after a periodic heartbeat, so none falls in the delay.
    let heartbeat_answered =
        |net: &Net| net.sent.last().is_some_and(|(_, _, m)| matches!(m, Message::HeartbeatResp { .. }));
    for _ in 0..1000 {
        if heartbeat_answered(&net) {
            break;
        }
        net.advance_1ms(1);
    }
    assert!(heartbeat_answered(&net));
    let notice_ms = net.node(1).config().commit_notice_ms();
    let idx = net.node_mut(1).propose(b"x".to_vec()).unwrap();
    net.deliver_all();
    let t0 = net.now;
    assert_eq!(net.node(1).commit_index(), idx);
    for id in [2, 3] {
        assert_eq!(net.node(id).last_index(), idx, "node {id} holds the entry");
        assert!(net.node(id).commit_index() < idx, "node {id} does not know it committed yet");
    }
    let sent_before = net.sent.len();
    while [2, 3].iter().any(|id| net.node(*id).commit_index() < idx) {
        assert!(net.now < t0 + notice_ms, "followers learned the commit only at {} ms", net.now - t0);
        net.advance_1ms(1);
    }
    assert_eq!(net.now - t0, notice_ms);
    let from_leader: Vec<_> = net.sent[sent_before..].iter().filter(|(from, _, _)| *from == 1).collect();
    assert_eq!(from_leader.len(), 2, "one heartbeat per follower: {from_leader:?}");
    assert!(from_leader
        .iter()
        .all(|(_, _, m)| matches!(m, Message::Heartbeat { commit, .. } if *commit == idx)));
    for id in [2, 3] {
        assert_eq!(net.applied_data(id), vec![b"x".to_vec()], "node {id}");
    }
}

/// `next_deadline_ms` names every timer of the core: a cluster whose nodes are ticked
/// only when it says so sends exactly the messages, at exactly the times, of one
/// whose nodes are ticked every millisecond, and `has_live_leader` turns at the same
/// moments — through an election, proposals and commit notices, reads, a leadership
/// transfer, a cut-off leader stepping down (CheckQuorum), the others' leases ending
/// and a new election, the heal, and a transfer abandoned at its deadline.
#[test]
fn ticking_only_at_the_next_deadline_changes_nothing() {
    type Trace = Vec<(u64, usize, Vec<(Role, u64, u64, bool, bool)>)>;
    fn run(tick_when_due: bool) -> (Trace, Vec<(NodeId, NodeId, Message)>, usize) {
        let mut net = Net::new(&[1, 2, 3]);
        net.tick_when_due = tick_when_due;
        let mut trace = Trace::new();
        let mut ticks = 0;
        let mut step = |net: &mut Net, ms: u64| {
            for _ in 0..ms {
                let due =
                    net.nodes.values().filter(|n| n.next_deadline_ms().is_some_and(|d| net.now + 1 >= d));
                ticks += if net.tick_when_due { due.count() } else { net.nodes.len() };
                net.advance_1ms(1);
                let states = net
                    .nodes
                    .values()
                    .map(|n| (n.role(), n.term(), n.commit_index(), n.has_live_leader(), n.handing_over()))
                    .collect();
                trace.push((net.now, net.sent.len(), states));
            }
        };
        step(&mut net, 3000);
        let leader = net.leaders()[0];
        for i in 0..20u8 {
            net.at(leader).propose(vec![i]).unwrap();
            if i % 5 == 0 {
                net.at(leader).read_index(u64::from(i)).unwrap();
            }
            step(&mut net, 7);
        }
        step(&mut net, 500);
        net.at(leader).transfer_leader(None).unwrap();
        step(&mut net, 1000);
        let second = net.leaders()[0];
        assert_ne!(second, leader, "the transfer happened");
        // The followers' last answers (and contact with their leader) fall between
        // two heartbeats, so CheckQuorum and the leases end off the heartbeat grid.
        step(&mut net, 253);
        net.at(second).propose(b"before the cut".to_vec()).unwrap();
        step(&mut net, 1);
        net.isolate(second);
        step(&mut net, 6000);
        let others: Vec<NodeId> = net.leaders().into_iter().filter(|l| *l != second).collect();
        assert_eq!(others.len(), 1, "the others elected a leader");
        assert_ne!(net.node(second).role(), Role::Leader, "the cut-off leader stepped down");
        net.heal();
        step(&mut net, 2000);
        let third = net.leaders()[0];
        // A transfer to a node the leader cannot reach is abandoned at its deadline.
        let target = if second == third { leader } else { second };
        step(&mut net, 71);
        net.at(third).propose(b"not for the target".to_vec()).unwrap();
        net.cut_link(third, target);
        step(&mut net, 13);
        net.at(third).transfer_leader(Some(target)).unwrap();
        step(&mut net, 1);
        assert!(net.node(third).handing_over());
        step(&mut net, 2500);
        assert!(!net.node(third).handing_over(), "the transfer was abandoned");
        assert_eq!(net.leaders(), vec![third]);
        net.heal();
        step(&mut net, 1000);
        net.at(third).propose(b"last".to_vec()).unwrap();
        step(&mut net, 500);
        for n in net.nodes.values() {
            assert_eq!(n.commit_index(), net.node(third).commit_index());
        }
        (trace, net.sent, ticks)
    }
    let (every_ms, sent_every_ms, ticks_every_ms) = run(false);
    let (when_due, sent_when_due, ticks_when_due) = run(true);
    for (a, b) in every_ms.iter().zip(&when_due) {
        assert_eq!(a, b, "the runs part at t={} ms", a.0);
    }
    assert_eq!(sent_every_ms, sent_when_due);
    assert!(
        ticks_when_due * 20 < ticks_every_ms,
        "{ticks_when_due} ticks when due, {ticks_every_ms} every ms"
    );
}

/// Garbage from the network is ignored, never a panic.
#[test]
fn nonsense_messages_do_not_panic() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let now = net.now;
    let term = net.node(1).term();
    let junk = [
        Message::AppendResp {
            term,
            success: false,
            index: u64::MAX,
            conflict_term: Some(u64::MAX),
            hint_index: u64::MAX,
        },
        Message::AppendResp { term, success: true, index: u64::MAX, conflict_term: None, hint_index: 0 },
        Message::InstallSnapshotResp { term, index: 1, next_offset: u64::MAX, done: false },
        Message::HeartbeatResp { term, read_seq: u64::MAX },
        Message::Removed { term, config_index: 0 },
    ];
    for m in junk {
        net.node_mut(1).step(2, m.clone(), now);
        net.node_mut(1).step(99, m, now);
    }
    let follower_junk = [
        Message::Append {
            term,
            prev_index: u64::MAX,
            prev_term: 0,
            entries: vec![Entry { term, index: 0, kind: EntryKind::Noop }],
            commit: u64::MAX,
        },
        Message::Append { term, prev_index: u64::MAX, prev_term: 0, entries: vec![], commit: u64::MAX },
        Message::InstallSnapshot {
            term,
            meta: ticketing::raft::SnapshotMeta { index: u64::MAX, term, membership: Default::default() },
            offset: u64::MAX,
            data: vec![1],
            done: true,
        },
        Message::Heartbeat { term, commit: u64::MAX, read_seq: 0 },
    ];
    for m in follower_junk {
        net.node_mut(2).step(1, m, now);
    }
    net.advance(1000);
    assert_eq!(net.leaders(), vec![1]);
    let idx = net.node_mut(1).propose(b"still fine".to_vec()).unwrap();
    net.advance(500);
    assert!(net.node(2).commit_index() >= idx);
}

// ----- liveness fixes: every node ticks in these scenarios --------------------------

use std::cell::{Cell, RefCell};
use std::rc::Rc;

const ELECTION_MAX_MS: u64 = 2300;
const HEARTBEAT_MS: u64 = 200;

/// Three voters; the leader l replaces follower f (cut off all along) by node 4 and
/// the change commits without f; f has pre-campaigned meanwhile. Returns (net, l, f,
/// the other follower g).
fn replace_a_cut_off_voter() -> (Net, NodeId, NodeId, NodeId) {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let fs = net.followers_of(l);
    let (f, g) = (fs[0], fs[1]);
    net.add_joining(4);
    net.node_mut(l).add_learner(4).unwrap();
    net.advance(500);
    net.isolate(f);
    net.node_mut(l).replace_voter(f, 4).unwrap();
    net.advance(5000); // long enough for f to time out and pre-campaign
    (net, l, f, g)
}

/// A voter that was cut off while it was removed keeps pre-campaigning
/// with its old configuration. The leader (in its lease) must still answer it `Removed`
/// — the removal check comes before the lease check — so it stops within two election
/// timeouts of the partition healing, and the leader keeps its term.
#[test]
fn removed_voter_partitioned_during_its_removal_stops_after_the_heal() {
    let (mut net, l, f, _) = replace_a_cut_off_voter();
    let m = net.node(l).committed_membership().1.clone();
    assert!(!m.is_joint() && !m.contains(f));
    assert!(!net.node(f).is_removed());
    let term = net.node(l).term();
    net.heal();
    let took = net.advance_until(2 * ELECTION_MAX_MS, |n| n.node(f).is_removed());
    assert!(took.is_some(), "node {f} still believes it is a member after two election timeouts");
    assert_eq!(net.leaders(), vec![l]);
    assert_eq!(net.node(l).term(), term, "the removed node disturbed the leader");
    net.sent.clear();
    net.advance(10_000);
    assert!(!net
        .sent
        .iter()
        .any(|(from, _, m)| *from == f && matches!(m, Message::PreVote { .. } | Message::Vote { .. })));
}

/// `Removed` is not a one-shot notice. The first one after the heal is
/// lost (and the node cannot reach the other member): the leader answers the next
/// pre-vote again.
#[test]
fn leader_answers_every_message_of_a_removed_node_with_removed() {
    let (mut net, l, f, g) = replace_a_cut_off_voter();
    let term = net.node(l).term();
    net.heal();
    net.cut_link(f, g);
    let dropped = Rc::new(Cell::new(0));
    let d = dropped.clone();
    net.mangle = Some(Box::new(move |_, to, m| {
        if to == f && matches!(m, Message::Removed { .. }) && d.get() == 0 {
            d.set(1);
            return None;
        }
        Some(m)
    }));
    let took = net.advance_until(3 * ELECTION_MAX_MS, |n| n.node(f).is_removed());
    assert_eq!(dropped.get(), 1, "the first notice was not even sent");
    assert!(took.is_some(), "a lost Removed was never repeated");
    assert_eq!(net.leaders(), vec![l]);
    assert_eq!(net.node(l).term(), term);
}

/// A pre-vote grant that arrives after the node went back to following
/// a live leader must not raise its term (which would depose that leader through the
/// next answer it sends). etcd ignores such grants too.
#[test]
fn late_prevote_grant_does_not_raise_the_term_of_a_follower() {
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    let l = net.wait_leader();
    let fs = net.followers_of(l);
    let (a, b) = (fs[0], fs[1]);
    let term = net.node(l).term();
    // a hears nobody and says nothing, except that it grants b's pre-vote (stashed);
    // b stops hearing the leader and pre-campaigns. The leader keeps a quorum.
    let stash: Rc<RefCell<Vec<Message>>> = Rc::default();
    let s = stash.clone();
    net.mangle = Some(Box::new(move |from, to, m| {
        if from != a {
            return Some(m);
        }
        if to == b && matches!(m, Message::PreVoteResp { granted: true, .. }) && s.borrow().is_empty() {
            s.borrow_mut().push(m);
        }
        None
    }));
    net.cut.insert((l, a));
    net.cut.insert((l, b));
    let took = net.advance_until(3 * ELECTION_MAX_MS, |_| !stash.borrow().is_empty());
    assert!(took.is_some(), "a never granted b's pre-vote");
    assert_eq!(net.node(b).role(), Role::PreCandidate);
    // b hears the leader again and follows it; then the stale grant arrives.
    net.cut.remove(&(l, b));
    net.advance(HEARTBEAT_MS + STEP_MS);
    assert_eq!(net.node(b).role(), Role::Follower);
    assert_eq!(net.node(b).leader_id(), Some(l));
    let grant = stash.borrow_mut().pop().unwrap();
    let now = net.now;
    net.node_mut(b).step(a, grant, now);
    net.advance(2000);
    assert_eq!(net.node(b).term(), term, "the late grant raised b's term");
    assert_eq!(net.leaders(), vec![l]);
    assert_eq!(net.node(l).term(), term, "the leader was deposed");
}

/// CheckQuorum counts only answers heard within the last election
/// timeout. Whenever the partition starts relative to the leader's timers, a leader
/// left in a minority steps down within an election timeout plus one heartbeat.
#[test]
fn minority_leader_steps_down_within_election_timeout_plus_one_heartbeat() {
    let mut worst = 0;
    for offset in (0..ELECTION_MAX_MS).step_by(100) {
        let mut net = Net::new(&[1, 2, 3, 4, 5]);
        let l = net.wait_leader();
        net.advance(3000 + offset);
        assert_eq!(net.leaders(), vec![l]);
        let fs = net.followers_of(l);
        let minority = [l, fs[0]];
        for a in net.nodes.keys().copied().collect::<Vec<_>>() {
            for b in net.nodes.keys().copied().collect::<Vec<_>>() {
                if minority.contains(&a) != minority.contains(&b) {
                    net.cut.insert((a, b));
                }
            }
        }
        let took = net.advance_until(3 * ELECTION_MAX_MS, |n| n.node(l).role() != Role::Leader).unwrap();
        worst = worst.max(took);
        assert!(
            took <= 2000 + HEARTBEAT_MS + STEP_MS,
            "offset {offset}: the minority leader led {took} ms after losing its quorum"
        );
    }
    eprintln!("slowest step-down: {worst} ms");
}

/// The in-flight window is a real bound. A follower whose append
/// answers are all lost (its heartbeat answers arrive) gets at most `max_inflight`
/// appends with entries; heartbeat answers only trigger empty probes.
#[test]
fn inflight_window_is_a_bound_heartbeat_answers_do_not_free_slots() {
    let cfg = |id| RaftConfig { max_inflight: 2, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    let l = net.wait_leader();
    let f = net.followers_of(l)[0];
    net.node_mut(l).propose(b"warm".to_vec()).unwrap();
    net.advance(500);
    let last = net.node(l).last_index();
    assert_eq!(net.node(l).progress_of(f).unwrap().0, last, "follower in sync before the test");
    net.lose_from(f, |m| matches!(m, Message::AppendResp { .. }));
    net.sent.clear();
    for i in 0..20u8 {
        net.node_mut(l).propose(vec![i]).unwrap();
        net.advance(100);
    }
    let appends =
        net.count_sent(l, f, |m| matches!(m, Message::Append { entries, .. } if !entries.is_empty()));
    assert!(appends <= 2, "{appends} appends in flight with a window of 2");
    // Once answers flow again the follower catches up.
    net.mangle = None;
    net.advance(1000);
    assert_eq!(net.node(f).last_index(), net.node(l).last_index());
}

/// A snapshot chunk whose answer has not come is not sent again on
/// every heartbeat answer (it is resent only after half an election timeout).
#[test]
fn snapshot_chunk_in_flight_is_not_resent_on_every_heartbeat_answer() {
    let cfg = |id| RaftConfig { snapshot_chunk_bytes: 100, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    let l = net.wait_leader();
    let f = net.followers_of(l)[0];
    net.isolate(f);
    for i in 0..20u8 {
        net.node_mut(l).propose(vec![i]).unwrap();
    }
    net.advance(300);
    let applied = net.node(l).applied_index();
    assert!(net.node_mut(l).compact(applied, vec![7u8; 1000]));
    // The follower's snapshot answers are lost; its heartbeat answers are not.
    net.lose_from(f, |m| matches!(m, Message::InstallSnapshotResp { .. }));
    net.heal();
    net.sent.clear();
    net.advance(1000);
    let chunks = net.count_sent(l, f, |m| matches!(m, Message::InstallSnapshot { .. }));
    assert!(chunks <= 2, "{chunks} copies of one chunk in one second (heartbeat every 200 ms)");
    net.mangle = None;
    net.advance(3000);
    assert_eq!(net.node(f).snapshot_meta().index, applied, "the snapshot still gets through");
}

/// A late duplicate of the first chunk does not throw away what the
/// follower has assembled since.
#[test]
fn late_duplicate_first_chunk_does_not_reset_snapshot_assembly() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let f = net.followers_of(l)[0];
    let term = net.node(l).term();
    let meta = ticketing::raft::SnapshotMeta {
        index: 100,
        term,
        membership: ticketing::raft::Membership::with_voters(&[1, 2, 3]),
    };
    let data: Vec<u8> = (0..300).map(|i| i as u8).collect();
    let chunk = |k: usize, done| Message::InstallSnapshot {
        term,
        meta: meta.clone(),
        offset: (k * 100) as u64,
        data: data[k * 100..(k + 1) * 100].to_vec(),
        done,
    };
    let now = net.now;
    for m in [chunk(0, false), chunk(1, false), chunk(0, false)] {
        net.node_mut(f).step(l, m, now);
    }
    let rd = net.node_mut(f).ready();
    let wants: Vec<u64> = rd
        .messages
        .iter()
        .filter_map(|(_, m)| match m {
            Message::InstallSnapshotResp { next_offset, .. } => Some(*next_offset),
            _ => None,
        })
        .collect();
    assert_eq!(wants, vec![100, 200, 200], "the duplicate first chunk reset the buffer");
    net.node_mut(f).step(l, chunk(2, true), now);
    let rd = net.node_mut(f).ready();
    assert_eq!(rd.snapshot.map(|s| s.data), Some(data));
}

/// A voter that was cut off while the configuration changed does not know a new voter
/// when it asks for votes. It tells the candidate `Removed` (which the candidate
/// ignores: its configuration is newer) but still votes: refusing would leave the two
/// surviving voters of {L, g, 4} without a leader forever once L is gone.
#[test]
fn lagging_voter_votes_for_a_new_voter_it_has_not_heard_of() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let fs = net.followers_of(l);
    let (g, h) = (fs[0], fs[1]);
    net.isolate(g);
    net.add_joining(4);
    net.node_mut(l).add_learner(4).unwrap();
    net.advance(500);
    net.node_mut(l).replace_voter(h, 4).unwrap();
    net.advance(1000);
    let m = net.node(l).committed_membership().1.clone();
    assert_eq!(m.voters, [l, g, 4].into());
    assert!(!net.node(g).membership().contains(4), "g must not know node 4");
    net.nodes.remove(&l);
    net.heal();
    let took = net.advance_until(10_000, |n| !n.leaders().is_empty());
    assert!(took.is_some(), "g and 4 never elected a leader");
    assert_eq!(net.leaders(), vec![4]);
    assert!(!net.node(4).is_removed());
    net.advance(1000);
    assert!(net.node(g).membership().contains(4), "the new leader caught g up");
}

// ----- planned hand-over ------------------------------------------------------------

/// Three voters; the leader replaces follower `old` by node 4 and the change commits.
/// Returns (net, leader).
fn with_new_voter_4() -> (Net, NodeId, NodeId) {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let old = net.followers_of(l)[0];
    net.add_joining(4);
    net.node_mut(l).add_learner(4).unwrap();
    net.advance(500);
    net.node_mut(l).replace_voter(old, 4).unwrap();
    net.advance(1000);
    let m = net.node(l).committed_membership().1.clone();
    assert!(!m.is_joint() && m.voters.contains(&4) && !m.contains(old));
    (net, l, old)
}

/// With no target named, the leader hands over to a caught-up voter, preferring one
/// of long standing to the newcomer (old code: `max((match, id))`, so ties went to the
/// highest id — the newcomer).
#[test]
fn transfer_without_target_prefers_a_voter_of_long_standing_to_the_newcomer() {
    let (mut net, l, _) = with_new_voter_4();
    let veteran = *net.node(l).committed_membership().1.voters.iter().find(|v| **v != l && **v != 4).unwrap();
    assert_eq!(net.node(l).progress_of(4).unwrap().0, net.node(l).last_index());
    assert_eq!(net.node(l).successor(), Some(veteran));
    assert_eq!(net.node_mut(l).transfer_leader(None), Ok(veteran));
    let took = net.advance_until(1000, |n| n.leaders() == vec![veteran]);
    assert!(took.is_some(), "the veteran did not take over");
}

/// A target that lags is caught up first; TimeoutNow goes out only when its match
/// index is the leader's last index, and then it takes over at once.
#[test]
fn transfer_catches_the_target_up_before_timeout_now() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let t = net.followers_of(l)[0];
    net.cut_link(l, t);
    for i in 0..10u8 {
        net.node_mut(l).propose(vec![i]).unwrap();
    }
    net.advance(300);
    assert!(net.node(l).progress_of(t).unwrap().0 < net.node(l).last_index());
    net.sent.clear();
    assert_eq!(net.node_mut(l).transfer_leader(Some(t)), Ok(t));
    net.advance(STEP_MS);
    assert_eq!(net.count_sent(l, t, |m| matches!(m, Message::TimeoutNow { .. })), 0);
    assert_eq!(net.node(l).transfer().unwrap().timeout_now_ms, None);
    net.heal();
    let took = net.advance_until(1000, |n| n.leaders() == vec![t]);
    assert!(took.is_some(), "the lagging target never took over");
    assert_eq!(net.node(t).last_index(), net.node(t).commit_index());
}

/// A transfer whose target cannot take over is abandoned after one election timeout:
/// the leader reports the end of the hand-over and accepts proposals again.
#[test]
fn transfer_is_abandoned_after_an_election_timeout_and_proposals_resume() {
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    let l = net.wait_leader();
    let t = net.followers_of(l)[0];
    net.isolate(t);
    net.node_mut(l).transfer_leader(Some(t)).unwrap();
    let started = net.node(l).transfer().unwrap().started_ms;
    net.advance(1000);
    assert_eq!(net.node_mut(l).propose(b"x".to_vec()), Err(RaftError::HandingOver));
    let took = net.advance_until(3000, |n| n.node(l).transfer().is_none()).unwrap();
    assert!(net.now - started <= 2000 + STEP_MS, "abandoned after {took} ms more");
    assert_eq!(net.leaders(), vec![l]);
    assert_eq!(net.handovers[&l], vec![true, false]);
    assert!(net.node_mut(l).propose(b"y".to_vec()).is_ok());
}

/// A stopping leader hands over only to a voter it could reach: one heard within the
/// last election timeout and that the transport has a link to (`linked`).
#[test]
fn reachable_successor_is_a_voter_heard_within_an_election_timeout_and_linked() {
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    let l = net.wait_leader();
    let followers = net.followers_of(l);
    let best = net.node(l).successor().unwrap();
    assert_eq!(net.node(l).reachable_successor(|_| true), Some(best));
    let other = *followers.iter().find(|f| **f != best).unwrap();
    assert_eq!(net.node(l).reachable_successor(|id| id == other), Some(other));
    assert_eq!(net.node(l).reachable_successor(|_| false), None);
    // Two of four followers silent past an election timeout: the leader keeps its
    // quorum, and only the two it still hears may take over.
    net.isolate(followers[0]);
    net.isolate(followers[1]);
    net.advance(2300);
    assert_eq!(net.leaders(), vec![l]);
    let heard = net.node(l).reachable_successor(|_| true).unwrap();
    assert!(followers[2..].contains(&heard), "{heard} was not heard from");
    assert_eq!(net.node(l).reachable_successor(|id| followers[..2].contains(&id)), None);
}

/// A lost TimeoutNow is sent again while the target keeps answering in the old term.
#[test]
fn lost_timeout_now_is_sent_again() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let t = net.followers_of(l)[0];
    let lost = Rc::new(Cell::new(false));
    let flag = lost.clone();
    net.mangle = Some(Box::new(move |_, _, m| {
        if matches!(m, Message::TimeoutNow { .. }) && !flag.get() {
            flag.set(true);
            return None;
        }
        Some(m)
    }));
    net.node_mut(l).transfer_leader(Some(t)).unwrap();
    let took = net.advance_until(2000, |n| n.leaders() == vec![t]);
    assert!(lost.get());
    assert!(took.is_some_and(|ms| ms <= 2 * HEARTBEAT_MS), "took {took:?}");
}

/// From the moment it appends a configuration without itself, a leader refuses
/// proposals (they would end Indeterminate when it leaves); it reports the hand-over.
#[test]
fn leader_refuses_proposals_once_it_appended_a_configuration_without_itself() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    net.add_joining(4);
    net.node_mut(l).add_learner(4).unwrap();
    net.advance(500);
    // The final configuration (without l) never leaves l: it cannot commit.
    net.mangle = Some(Box::new(move |from, _, m| match &m {
        Message::Append { entries, .. } if from == l => {
            let leaves = entries
                .iter()
                .any(|e| matches!(&e.kind, EntryKind::Config(c) if !c.is_joint() && !c.contains(l)));
            (!leaves).then_some(m)
        }
        _ => Some(m),
    }));
    net.node_mut(l).replace_voter(l, 4).unwrap();
    assert!(net.node_mut(l).propose(b"during joint".to_vec()).is_ok(), "still a voter while joint");
    net.advance(500);
    assert!(!net.node(l).membership().is_voter(l));
    assert_eq!(net.leaders(), vec![l]);
    assert!(net.node(l).handing_over());
    assert_eq!(net.node_mut(l).propose(b"after".to_vec()), Err(RaftError::HandingOver));
    assert_eq!(net.node_mut(l).transfer_leader(None), Err(RaftError::HandingOver));
    assert_eq!(net.handovers[&l], vec![true]);
}

/// A leader that removes itself hands over with TimeoutNow to a caught-up voter of
/// long standing (not the newcomer), which leads without waiting for an election
/// timeout; the old leader keeps that node as its hint for clients.
#[test]
fn leader_that_removes_itself_hands_over_to_a_voter_of_long_standing() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    net.add_joining(4);
    net.node_mut(l).add_learner(4).unwrap();
    net.advance(500);
    net.node_mut(l).replace_voter(l, 4).unwrap();
    let took = net.advance_until(2000, |n| n.leaders().iter().any(|x| *x != l)).unwrap();
    let new = net.leaders()[0];
    assert_ne!(new, 4, "leadership went to the newcomer");
    assert!(took <= 2 * HEARTBEAT_MS, "no leader for {took} ms");
    assert!(net.node(l).is_removed());
    assert_eq!(net.node(l).handed_to(), Some(new));
    let timeout_nows: Vec<NodeId> = net
        .sent
        .iter()
        .filter(|(f, _, m)| *f == l && matches!(m, Message::TimeoutNow { .. }))
        .map(|(_, to, _)| *to)
        .collect();
    assert_eq!(timeout_nows, vec![new]);
}

// ----- elections after a heal ----------------------------------------------------

/// The leader lease does not hold against the leader itself: a leader that stepped
/// down (here CheckQuorum, its followers' answers lost) and asks for votes is answered
/// even by a follower whose lease a late heartbeat of that leader just renewed.
#[test]
fn follower_answers_the_pre_vote_of_its_former_leader_inside_the_lease() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let f = net.followers_of(l)[0];
    let term = net.node(l).term();
    for other in net.followers_of(l) {
        net.cut.insert((other, l));
    }
    net.advance_until(3 * ELECTION_MAX_MS, |n| n.node(l).role() != Role::Leader).unwrap();
    net.heal();
    // A heartbeat the leader sent before stepping down arrives late.
    let now = net.now;
    net.node_mut(f).step(l, Message::Heartbeat { term, commit: 0, read_seq: 0 }, now);
    assert_eq!(net.node(f).leader_id(), Some(l));
    let (last_index, last_term) = (net.node(l).last_index(), net.node(l).last_term());
    net.node_mut(f).step(l, Message::PreVote { term: term + 1, last_index, last_term }, now);
    let rd = net.node_mut(f).ready();
    let answers: Vec<&Message> = rd
        .messages
        .iter()
        .filter(|(to, m)| *to == l && matches!(m, Message::PreVoteResp { .. }))
        .map(|(_, m)| m)
        .collect();
    assert_eq!(answers, vec![&Message::PreVoteResp { term: term + 1, granted: true }]);
}

/// Two pre-candidates that grant each other must not both campaign in the same term
/// (a split vote costs an election timeout, and can repeat): the one whose log ranks
/// lower (or, equal logs, whose id is higher) stands back when it hears the other.
#[test]
fn pre_candidates_that_grant_each_other_do_not_split_the_vote() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let term = net.node(l).term();
    net.nodes.remove(&l);
    // Hold the two survivors' messages until both have timed out: they pre-campaign
    // at the same moment, as nodes whose timers were reset by the same heartbeat do.
    let held: Rc<RefCell<Vec<(NodeId, NodeId, Message)>>> = Rc::default();
    let h = held.clone();
    net.mangle = Some(Box::new(move |from, to, m| {
        h.borrow_mut().push((from, to, m));
        None
    }));
    let both = |n: &Net| n.nodes.values().all(|r| r.role() == Role::PreCandidate);
    net.advance_until(3 * ELECTION_MAX_MS, both).unwrap();
    net.mangle = None;
    let now = net.now;
    for (from, to, m) in held.borrow_mut().drain(..) {
        if let Some(n) = net.nodes.get_mut(&to) {
            n.step(from, m, now);
        }
    }
    net.deliver_all();
    assert_eq!(
        net.leaders().len(),
        1,
        "split vote: {:?}",
        net.nodes.values().map(|n| n.role()).collect::<Vec<_>>()
    );
    assert_eq!(net.node(net.leaders()[0]).term(), term + 1);
}

/// A pre-candidate whose log is the best but whose term is behind (the other voter
/// already voted in that term) learns the term from the rejection and asks again at
/// once instead of leaving the cluster leaderless for one more election timeout.
#[test]
fn pre_candidate_that_learns_a_higher_term_asks_again_at_once() {
    let mut net = Net::new(&[1, 2, 3]);
    let l = net.wait_leader();
    let fs = net.followers_of(l);
    let (a, b) = (fs[0], fs[1]);
    // a gets more of the log than b; then the leader, before it crashes, wins b's
    // vote in a later term that a never hears of.
    net.cut.insert((l, b));
    net.node_mut(l).propose(b"x".to_vec()).unwrap();
    net.advance(100);
    net.advance(ELECTION_MAX_MS); // b's lease runs out
    let term = net.node(a).term();
    let (li, lt) = (net.node(l).last_index(), net.node(l).last_term());
    net.nodes.remove(&l);
    let now = net.now;
    net.node_mut(b).step(
        l,
        Message::Vote { term: term + 1, last_index: li, last_term: lt, transfer: false },
        now,
    );
    assert_eq!((net.node(b).term(), net.node(b).voted_for()), (term + 1, Some(l)));
    assert!(net.node(a).last_index() > net.node(b).last_index());
    net.sent.clear();
    let asked = net.advance_until(3 * ELECTION_MAX_MS, |n| {
        n.sent.iter().any(|(f, _, m)| *f == a && matches!(m, Message::PreVote { .. }))
    });
    assert!(asked.is_some());
    let took = net.advance_until(3 * ELECTION_MAX_MS, |n| n.leaders() == vec![a]).unwrap();
    assert!(took <= 2 * STEP_MS, "a led {took} ms after its first pre-vote was refused");
}

/// A leader deposed by a later term's answer to its heartbeat (here a follower that
/// voted in a later term the others never heard of) asks for votes again at once:
/// its followers keep their lease on it and would ignore any other candidate for an
/// election timeout, so waiting for its own timeout would leave the cluster
/// leaderless that long.
#[test]
fn leader_deposed_by_a_later_terms_answer_is_elected_again_at_once() {
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    let l = net.wait_leader();
    let term = net.node(l).term();
    let fs = net.followers_of(l);
    let (x, y) = (fs[0], fs[1]);
    // x votes for y in term + 1 (a transfer vote: it ignores the lease), and y never
    // campaigns further.
    let (li, lt) = (net.node(l).last_index(), net.node(l).last_term());
    let now = net.now;
    net.node_mut(x).step(
        y,
        Message::Vote { term: term + 1, last_index: li, last_term: lt, transfer: true },
        now,
    );
    assert_eq!(net.node(x).term(), term + 1);
    net.sent.clear();
    // The next heartbeat's answer from x deposes the leader, which leads again within
    // that round trip, in a later term.
    let took = net
        .advance_until(3 * ELECTION_MAX_MS, |n| n.leaders() == vec![l] && n.node(l).term() > term + 1)
        .unwrap();
    assert!(
        net.sent.iter().any(|(f, t, m)| *f == x
            && *t == l
            && matches!(m, Message::HeartbeatResp { term: t2, .. } if *t2 == term + 1)),
        "x's answer with the later term"
    );
    assert!(took <= HEARTBEAT_MS + 2 * STEP_MS, "the deposed leader led again only {took} ms later");
    assert!(net.nodes.values().all(|n| n.leader_id() == Some(l) || n.id() == l));
}

/// A committed entry is final: the log refuses to cut at or below the commit index and
/// stops the node, naming the invariant (a follower cuts a conflicting suffix only
/// above it; src/raft/log.rs). Above the commit index the same cut is allowed.
#[test]
#[should_panic(expected = "invariant violated: committed entries are never truncated")]
fn cutting_a_committed_entry_violates_an_invariant() {
    let mut log = ticketing::raft::log::RaftLog::new(ticketing::raft::Membership::with_voters(&[1, 2, 3]));
    for index in 1..=3 {
        log.append(Entry { term: 1, index, kind: EntryKind::Normal(vec![index as u8].into()) });
    }
    assert!(log.commit_to(2));
    log.truncate_from(3);
    assert_eq!(log.last_index(), 2);
    log.check_invariants();
    log.truncate_from(2);
}

#[path = "raft_scenarios/stopping.rs"]
mod stopping;

#[path = "raft_scenarios/autopilot.rs"]
mod autopilot;
