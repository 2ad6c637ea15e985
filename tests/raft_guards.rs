//! The Raft core's guards, one test each: the reads the transport and the server
//! make of a node, the limits a request or a peer's message is held to, and the
//! rules that keep a leader's bookkeeping honest. Each test names a behaviour a
//! plausible one-line slip would break (docs/safety.md, "Mutation testing").

mod raft_net;

use ticketing::raft::wire::{self, WireError};
use ticketing::raft::{
    Entry, EntryKind, Membership, Message, NodeId, Raft, RaftConfig, RaftError, Role, SnapshotMeta,
};

use raft_net::*;

fn no_check_quorum(id: NodeId) -> RaftConfig {
    RaftConfig { check_quorum: false, ..config(id) }
}

/// Node `id`'s answers to one message stepped in at the net's time.
fn answers(net: &mut Net, id: NodeId, from: NodeId, msg: Message) -> Vec<(NodeId, Message)> {
    let now = net.now;
    let node = net.node_mut(id);
    node.step(from, msg, now);
    node.ready().messages
}

// ----- what the transport and the server read --------------------------------

#[test]
fn last_term_and_entries_read_the_log() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let first = net.node_mut(1).propose(b"a".to_vec()).unwrap();
    net.node_mut(1).propose(b"b".to_vec()).unwrap();
    net.deliver_all();
    net.elect(2);
    net.node_mut(2).propose(b"c".to_vec()).unwrap();
    net.advance(300);
    let term = net.node(2).term();
    assert!(term >= 2);
    for id in [1, 2, 3] {
        assert_eq!(net.node(id).last_term(), term, "node {id}");
    }
    let last = net.node(3).last_index();
    assert_eq!(normal_data(&net.node(3).entries(first, last)), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
}

/// Leader 1 with 100-byte snapshot chunks has compacted its log (a 1,000-byte
/// snapshot at the returned index) while 3 was cut off; the links are still cut.
fn leader_with_a_snapshot_3_lacks() -> (Net, u64) {
    let cfg = |id| RaftConfig { snapshot_chunk_bytes: 100, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    net.elect(1);
    net.isolate(3);
    for i in 0..20u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.advance(300);
    let applied = net.node(1).applied_index();
    assert!(net.node_mut(1).compact(applied, vec![7u8; 1000]));
    (net, applied)
}

#[test]
fn a_snapshot_arriving_in_chunks_is_reported_until_installed() {
    let (mut net, _) = leader_with_a_snapshot_3_lacks();
    assert!(!net.node(3).receiving_snapshot());
    // The chunks past the middle are lost: the assembly stops half way.
    net.mangle = Some(Box::new(|_, _, m| match &m {
        Message::InstallSnapshot { offset, .. } if *offset >= 500 => None,
        _ => Some(m),
    }));
    net.heal();
    net.advance(300);
    assert!(net.node(3).receiving_snapshot());
    assert!(!net.snapshots.contains_key(&3));
    net.mangle = None;
    net.sent.clear();
    net.advance(2000);
    assert_eq!(net.snapshots[&3].len(), 1);
    assert!(!net.node(3).receiving_snapshot());
    // The snapshot covers the whole log: nothing to append until there is more.
    assert_eq!(net.count_sent(1, 3, |m| matches!(m, Message::Append { .. })), 0);
}

#[test]
fn transfer_target_names_the_transfer_under_way_and_a_new_target_replaces_it() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    assert_eq!(net.node(1).transfer_target(), None);
    net.cut_link(1, 3); // the first target never hears of it
    assert_eq!(net.node_mut(1).transfer_leader(Some(3)), Ok(3));
    assert_eq!(net.node(1).transfer_target(), Some(3));
    assert_eq!(net.node_mut(1).transfer_leader(Some(3)), Ok(3));
    assert_eq!(net.node_mut(1).transfer_leader(Some(2)), Ok(2));
    assert_eq!(net.node(1).transfer_target(), Some(2), "the later target replaces the earlier");
    net.deliver_all();
    assert_eq!(net.leaders(), vec![2]);
    assert_eq!(net.node(2).transfer_target(), None);
}

/// `Ready::handover` reports a hand-over that began and was abandoned between two
/// `ready()` calls: its end, `Some(false)`.
#[test]
fn a_transfer_begun_and_abandoned_between_two_readies_reports_its_end() {
    let mut net = Net::with_config(&[1, 2, 3], no_check_quorum);
    net.elect(1);
    net.advance(300);
    net.isolate(1);
    net.at(1).transfer_leader(Some(3)).unwrap();
    let later = net.now + 3 * net.node(1).config().election_ms;
    net.node_mut(1).tick(later);
    let ready = net.node_mut(1).ready();
    assert_eq!(net.node(1).role(), Role::Leader);
    assert_eq!(ready.handover, Some(false));
}

#[test]
fn has_live_leader_holds_on_a_leader_and_for_an_election_timeout_after_contact() {
    let mut net = Net::with_config(&[1, 2, 3], no_check_quorum);
    net.elect(1);
    net.advance(300);
    assert!(net.node(1).has_live_leader());
    assert!(net.node(2).has_live_leader());
    let election = net.node(2).config().election_ms;
    net.isolate(1);
    net.ticking = [1].into();
    net.advance(3 * election);
    assert_eq!(net.node(1).role(), Role::Leader);
    assert!(net.node(1).has_live_leader(), "a leader has one: itself");
    net.at(2);
    assert!(!net.node(2).has_live_leader(), "nothing heard for an election timeout");
}

#[test]
fn a_deposed_leader_keeps_no_leader_state() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    assert!(net.node(1).progress_of(2).is_some());
    net.node_mut(1).transfer_leader(Some(3)).unwrap();
    net.deliver_all();
    assert_eq!(net.leaders(), vec![3]);
    assert_eq!(net.node(1).progress_of(2), None);
    assert_eq!(net.node(1).progress_of(3), None);
    assert_eq!(net.node(1).transfer(), None);
}

/// A leader cut off while the others replaced it learns of its removal from the
/// notice the new leader answers it with: it stops leading and keeps no leader state.
#[test]
fn a_stale_leader_removed_by_notice_stops_leading() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    net.isolate(1);
    net.elect(2);
    net.ticking = [2, 3, 4].into();
    net.at(2).replace_voter(1, 4).unwrap();
    net.advance(2000);
    assert_eq!(net.node(1).role(), Role::Leader, "1 never ticked: it still thinks it leads");
    net.heal();
    net.at(1).propose(b"stale".to_vec()).unwrap();
    net.deliver_all();
    assert!(net.node(1).is_removed());
    assert_ne!(net.node(1).role(), Role::Leader);
    assert_ne!(net.node(1).leader_id(), Some(1));
    assert_eq!(net.node(1).progress_of(2), None);
}

// ----- limits on requests ------------------------------------------------------

#[test]
fn a_lone_voter_commits_at_ready_and_an_entry_may_hold_exactly_the_limit() {
    let mut net = Net::new(&[1]);
    net.elect(1);
    let limit = ticketing::raft::wire::ENTRY_DATA_MAX_BYTES;
    net.at(1).propose(vec![1u8; limit]).unwrap();
    assert_eq!(net.at(1).propose(vec![1u8; limit + 1]), Err(RaftError::EntryTooLarge));
    net.collect();
    assert_eq!(net.applied_data(1), [vec![1u8; limit]]);
}

#[test]
fn membership_requests_name_real_voters() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    let invalid = |r: Result<u64, RaftError>| matches!(r, Err(RaftError::InvalidConfig(_)));
    assert!(invalid(net.at(1).replace_voter(9, 4)), "9 is no voter");
    assert!(invalid(net.at(1).replace_voter(2, 3)), "3 is a voter already");
    assert!(invalid(net.at(1).leave_joint()), "not in joint consensus");
    for target in [4, 9] {
        assert!(
            matches!(net.at(1).transfer_leader(Some(target)), Err(RaftError::InvalidConfig(_))),
            "{target} may not lead"
        );
    }
    // While a change removing 3 and adding 4 is uncommitted, neither may lead.
    net.cut_link(1, 2);
    net.cut_link(1, 3);
    net.at(1).replace_voter(3, 4).unwrap();
    net.deliver_all();
    for target in [3, 4] {
        assert!(
            matches!(net.at(1).transfer_leader(Some(target)), Err(RaftError::InvalidConfig(_))),
            "{target} may not lead"
        );
    }
}

// ----- the peer wire's limits (src/raft/wire.rs) --------------------------------

fn append_of(entries: Vec<Entry>) -> Message {
    Message::Append { term: 1, prev_index: 0, prev_term: 0, entries, commit: 0 }
}

fn normal(index: u64, len: usize) -> Entry {
    Entry { term: 1, index, kind: EntryKind::Normal(vec![index as u8; len].into()) }
}

/// Encodes after bytes already in the buffer, as the transport does, and decodes back.
fn wire_roundtrip(msg: &Message) -> Result<Message, WireError> {
    let mut buf = b"earlier frames".to_vec();
    let start = buf.len();
    wire::encode(msg, &mut buf)?;
    let (back, used) = wire::decode(&buf[start..])?.expect("a whole frame");
    assert_eq!(used, buf.len() - start);
    Ok(back)
}

#[test]
fn the_wire_takes_every_limit_exactly_and_refuses_one_more() {
    let mb = wire::ENTRY_DATA_MAX_BYTES;
    // One entry of exactly the data limit; one byte more is refused.
    let msg = append_of(vec![normal(1, mb)]);
    assert_eq!(wire_roundtrip(&msg), Ok(msg));
    assert!(wire_roundtrip(&append_of(vec![normal(1, mb + 1)])).is_err());
    // A frame of exactly the frame limit: op, four u64s, the count, then per entry
    // term, index, kind and the data's length.
    let overhead = 1 + 4 * 8 + 4 + 16 * (8 + 8 + 1 + 4);
    let mut entries: Vec<Entry> = (1..=15).map(|i| normal(i, mb)).collect();
    entries.push(normal(16, wire::FRAME_LEN_MAX_BYTES - overhead - 15 * mb));
    let msg = append_of(entries.clone());
    assert_eq!(wire_roundtrip(&msg), Ok(msg));
    entries[15] = normal(16, wire::FRAME_LEN_MAX_BYTES - overhead - 15 * mb + 1);
    assert!(matches!(wire_roundtrip(&append_of(entries)), Err(WireError::FrameLen(_))));
    // A snapshot chunk of exactly the chunk limit.
    let meta = SnapshotMeta { index: 9, term: 1, membership: Membership::with_voters(&[1, 2, 3]) };
    let chunk = |len| Message::InstallSnapshot {
        term: 1,
        meta: meta.clone(),
        offset: 0,
        data: vec![5; len],
        done: true,
    };
    let msg = chunk(wire::SNAPSHOT_CHUNK_MAX_BYTES);
    assert_eq!(wire_roundtrip(&msg), Ok(msg));
    assert!(wire_roundtrip(&chunk(wire::SNAPSHOT_CHUNK_MAX_BYTES + 1)).is_err());
    // Exactly the most entries one append may carry.
    let noops = |n: u64| (1..=n).map(|index| Entry { term: 1, index, kind: EntryKind::Noop }).collect();
    let msg = append_of(noops(wire::ENTRIES_PER_APPEND_MAX as u64));
    assert_eq!(wire_roundtrip(&msg), Ok(msg));
    assert!(wire_roundtrip(&append_of(noops(wire::ENTRIES_PER_APPEND_MAX as u64 + 1))).is_err());
    // Exactly the most members a set may name.
    let config = |n: u64| {
        let ids: Vec<NodeId> = (1..=n).collect();
        append_of(vec![Entry { term: 1, index: 1, kind: EntryKind::Config(Membership::with_voters(&ids)) }])
    };
    let msg = config(wire::MEMBERS_PER_SET_MAX as u64);
    assert_eq!(wire_roundtrip(&msg), Ok(msg));
    assert!(wire_roundtrip(&config(wire::MEMBERS_PER_SET_MAX as u64 + 1)).is_err());
}

#[test]
fn wire_errors_say_what_was_wrong() {
    assert_eq!(WireError::FrameLen(0).to_string(), "frame length 0 out of range");
    assert_eq!(WireError::Invalid("entry count").to_string(), "invalid field: entry count");
}

// ----- replication -------------------------------------------------------------

/// A follower that lacks the previous entry tells the leader where its log ends.
#[test]
fn a_rejection_for_a_missing_entry_hints_just_past_the_followers_log() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    let last = net.node(2).last_index();
    let term = net.node(1).term();
    let append = Message::Append { term, prev_index: last + 10, prev_term: term, entries: vec![], commit: 0 };
    let out = answers(&mut net, 2, 1, append);
    assert!(
        out.iter().any(|(to, m)| *to == 1
            && matches!(m, Message::AppendResp { success: false, index, hint_index, .. }
                if *index == last + 10 && *hint_index == last + 1)),
        "{out:?}"
    );
}

/// Told that the follower's entry at the rejected index is of an older term, the
/// leader retries just past its own last entry of that term.
#[test]
fn a_conflict_term_rejection_retries_past_the_leaders_last_entry_of_that_term() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    for i in 0..3u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.deliver_all();
    let term1 = net.node(1).term();
    let last_of_term1 = net.node(1).last_index();
    net.at(1).transfer_leader(Some(3)).unwrap();
    net.deliver_all();
    net.node_mut(3).propose(b"later".to_vec()).unwrap();
    net.deliver_all();
    // The next leader, 2, never hears 3's answers: its view of 3 stays a probe.
    net.lose_from(3, |m| matches!(m, Message::AppendResp { .. }));
    net.at(3).transfer_leader(Some(2)).unwrap();
    net.deliver_all();
    assert_eq!(net.leaders(), vec![2]);
    for i in 0..3u8 {
        net.node_mut(2).propose(vec![10 + i]).unwrap();
    }
    net.deliver_all();
    let (matched, next) = net.node(2).progress_of(3).unwrap();
    assert!(matched < last_of_term1 && next > last_of_term1 + 1, "({matched}, {next})");
    let term = net.node(2).term();
    let reject = Message::AppendResp {
        term,
        success: false,
        index: next - 1,
        conflict_term: Some(term1),
        hint_index: 2,
    };
    let out = answers(&mut net, 2, 3, reject);
    let retry = out.iter().find_map(|(to, m)| match m {
        Message::Append { prev_index, .. } if *to == 3 => Some(*prev_index),
        _ => None,
    });
    assert_eq!(retry, Some(last_of_term1));
}

#[test]
fn a_leader_fills_the_whole_window_in_one_ready() {
    let cfg = |id| RaftConfig { max_append_entries: 5, max_inflight: 4, ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    net.elect(1);
    net.advance(300);
    for i in 0..40u8 {
        net.node_mut(1).propose(vec![i]).unwrap();
    }
    net.sent.clear();
    net.collect();
    let appends =
        net.count_sent(1, 2, |m| matches!(m, Message::Append { entries, .. } if !entries.is_empty()));
    assert_eq!(appends, 4, "four appends of five entries: the window");
}

#[test]
fn a_new_peer_is_first_probed_at_the_leaders_last_entry() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    net.add_joining(4);
    net.sent.clear();
    let index = net.node_mut(1).add_learner(4).unwrap();
    net.deliver_all();
    let first = net.sent.iter().find_map(|(f, t, m)| match m {
        Message::Append { prev_index, .. } if *f == 1 && *t == 4 => Some(*prev_index),
        _ => None,
    });
    assert_eq!(first, Some(index));
}

/// A learner turns follower the moment it appends a configuration naming it a
/// voter, and back to learner when that entry is overwritten.
#[test]
fn roles_follow_appended_and_overwritten_configurations() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    assert_eq!(net.node(4).role(), Role::Learner);
    // Only 4 hears of the change that makes it a voter.
    net.cut_link(1, 2);
    net.cut_link(1, 3);
    net.node_mut(1).replace_voter(3, 4).unwrap();
    net.deliver_all();
    assert!(net.node(4).membership().is_voter(4));
    assert_eq!(net.node(4).role(), Role::Follower);
    // 2 leads a later term without that entry and overwrites it on 4.
    net.isolate(1);
    net.elect(2);
    net.ticking = [2, 3, 4].into();
    net.advance(500);
    assert!(!net.node(4).membership().is_voter(4));
    assert_eq!(net.node(4).role(), Role::Learner);
}

// ----- snapshots ---------------------------------------------------------------

/// A peer's answer claiming to hold more than the leader's log is ignored.
#[test]
fn a_snapshot_answer_beyond_the_leaders_log_is_ignored() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    let (last, term) = (net.node(1).last_index(), net.node(1).term());
    let lie = Message::InstallSnapshotResp { term, index: last + 100, next_offset: 0, done: true };
    answers(&mut net, 1, 2, lie);
    assert_eq!(net.node(1).progress_of(2).map(|(matched, _)| matched), Some(last));
}

/// The answer to an older snapshot does not move the chunk of the one in flight.
#[test]
fn an_answer_about_another_snapshot_sends_no_chunk() {
    let (mut net, applied) = leader_with_a_snapshot_3_lacks();
    net.heal();
    net.lose_from(1, |m| matches!(m, Message::InstallSnapshot { .. }));
    net.sent.clear();
    net.advance(250);
    assert!(net.count_sent(1, 3, |m| matches!(m, Message::InstallSnapshot { .. })) >= 1, "a chunk in flight");
    net.sent.clear();
    let term = net.node(1).term();
    let older = Message::InstallSnapshotResp { term, index: applied - 1, next_offset: 0, done: false };
    let out = answers(&mut net, 1, 3, older);
    assert!(!out.iter().any(|(_, m)| matches!(m, Message::InstallSnapshot { .. })), "{out:?}");
}

fn chunk(term: u64, meta: &SnapshotMeta, offset: u64, len: usize, done: bool) -> Message {
    Message::InstallSnapshot { term, meta: meta.clone(), offset, data: vec![offset as u8; len], done }
}

/// A snapshot is assembled from one sender's chunks only, and may be larger than one
/// chunk's square (two chunks of 40 000 bytes).
#[test]
fn snapshot_chunks_continue_only_their_senders_snapshot() {
    let meta = SnapshotMeta { index: 10, term: 1, membership: Membership::with_voters(&[1, 2, 3]) };
    let mut node = Raft::new_bootstrap(config(3), &[1, 2, 3], 42, 0);
    node.step(1, chunk(1, &meta, 0, 40_000, false), 10);
    node.step(2, chunk(2, &meta, 40_000, 40_000, true), 20);
    let ready = node.ready();
    assert!(ready.snapshot.is_none(), "another node's chunk continued the snapshot");
    assert!(ready
        .messages
        .iter()
        .any(|(to, m)| *to == 2
            && matches!(m, Message::InstallSnapshotResp { next_offset: 0, done: false, .. })));

    let mut node = Raft::new_bootstrap(config(3), &[1, 2, 3], 42, 0);
    node.step(1, chunk(1, &meta, 0, 40_000, false), 10);
    node.step(1, chunk(1, &meta, 40_000, 40_000, true), 20);
    let installed = node.ready().snapshot.expect("installed");
    assert_eq!(installed.data.len(), 80_000);
    assert_eq!(installed.meta, meta);
}

// ----- hand-over ---------------------------------------------------------------

#[test]
fn successor_ranks_reachable_then_caught_up_voters() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    // Neither holds the last entry: the lowest id of two equals.
    net.cut_link(1, 2);
    net.cut_link(1, 3);
    net.node_mut(1).propose(b"x".to_vec()).unwrap();
    net.deliver_all();
    assert_eq!(net.node(1).successor(), Some(2));
    // 3 catches up: it goes first.
    net.heal();
    net.cut_link(1, 2);
    net.advance(100);
    assert_eq!(net.node(1).successor(), Some(3));
    // 2, caught up but silent for an election timeout, ranks below 3 even when 3 lags.
    net.heal();
    net.advance(300);
    net.cut_link(1, 2);
    net.advance(net.node(1).config().election_ms + 500);
    net.cut_link(1, 3);
    net.node_mut(1).propose(b"y".to_vec()).unwrap();
    net.deliver_all();
    assert_eq!(net.node(1).role(), Role::Leader);
    assert_eq!(net.node(1).successor(), Some(3));
}

/// A voter last heard exactly one election timeout ago counts as unheard: it is no
/// reachable successor, and ranks below a voter that answers.
#[test]
fn a_voter_unheard_for_an_election_timeout_is_not_reachable() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    // 2 holds the last entry, 3 does not but keeps answering; then 2 falls silent.
    net.mangle =
        Some(Box::new(|f, t, m| (!(f == 1 && t == 3 && matches!(m, Message::Append { .. }))).then_some(m)));
    net.node_mut(1).propose(b"x".to_vec()).unwrap();
    net.deliver_all();
    net.cut_link(1, 2);
    net.advance(100);
    assert!(net.node(1).progress_of(3).unwrap().0 < net.node(1).last_index());
    let election = net.node(1).config().election_ms;
    let unheard = net.node(1).unreachable_ms(2).unwrap();
    let edge = net.now + (election - unheard);
    net.node_mut(1).advance_clock(edge - 1);
    assert_eq!(net.node(1).reachable_successor(|id| id == 2), Some(2));
    assert_eq!(net.node(1).successor(), Some(2), "heard and caught up");
    net.node_mut(1).advance_clock(edge);
    assert_eq!(net.node(1).unreachable_ms(2), Some(election));
    assert_eq!(net.node(1).reachable_successor(|id| id == 2), None);
    assert_eq!(net.node(1).successor(), Some(3));
}

/// While the target keeps answering, `TimeoutNow` goes out again at most once per
/// heartbeat interval.
#[test]
fn timeout_now_is_repeated_once_per_heartbeat_interval() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    net.lose_from(1, |m| matches!(m, Message::TimeoutNow { .. }));
    net.sent.clear();
    net.at(1).transfer_leader(Some(3)).unwrap();
    net.collect();
    let term = net.node(1).term();
    let answer = || Message::HeartbeatResp { term, read_seq: 0 };
    assert_eq!(net.count_sent(1, 3, |m| matches!(m, Message::TimeoutNow { .. })), 1);
    for _ in 0..3 {
        let out = answers(&mut net, 1, 3, answer());
        assert!(!out.iter().any(|(_, m)| matches!(m, Message::TimeoutNow { .. })), "{out:?}");
    }
    let start = net.now;
    assert!(net.node(1).handing_over());
    net.now = start + net.node(1).config().heartbeat_ms;
    let again = answers(&mut net, 1, 3, answer());
    assert!(again.iter().any(|(to, m)| *to == 3 && matches!(m, Message::TimeoutNow { .. })), "{again:?}");
}

/// A leader that removes itself reports its hand-over once, though it appends two
/// configurations (joint, then the final one) while handing over.
#[test]
fn a_leader_removing_itself_reports_the_hand_over_once() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.add_joining(4);
    net.node_mut(1).add_learner(4).unwrap();
    net.advance(500);
    net.node_mut(1).replace_voter(1, 4).unwrap();
    net.advance(1000);
    assert!(net.node(1).is_removed());
    assert_eq!(net.handovers[&1], vec![true]);
}

// ----- reads -------------------------------------------------------------------

/// A read asked before the new leader's no-op commits waits for it, then is answered.
#[test]
fn a_read_asked_before_the_noop_commits_is_answered_after_it() {
    let mut net = Net::new(&[1, 2, 3]);
    net.lose_from(1, |m| matches!(m, Message::Append { .. }));
    net.elect(1);
    assert!(net.node(1).commit_index() < net.node(1).last_index(), "the no-op is not committed");
    net.node_mut(1).read_index(5).unwrap();
    net.mangle = None;
    net.advance(1000);
    let commit = net.node(1).commit_index();
    assert_eq!(net.node(1).term_at(commit), Some(net.node(1).term()));
    assert!(net.reads[&1].iter().any(|(ctx, _)| *ctx == 5), "{:?}", net.reads[&1]);
}

// ----- terms -------------------------------------------------------------------

#[test]
fn messages_of_other_terms_get_the_answers_they_need() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    let term = net.node(2).term();
    assert!(term >= 1);
    // A later term's pre-vote refusal to a follower: it adopts the term, no campaign.
    let out = answers(&mut net, 2, 3, Message::PreVoteResp { term: term + 1, granted: false });
    assert!(!out.iter().any(|(_, m)| matches!(m, Message::PreVote { .. })), "{out:?}");
    assert_eq!(net.node(2).term(), term + 1);
    let term = term + 1;
    // A removal notice is judged by its config index, never by its term.
    answers(&mut net, 2, 1, Message::Removed { term: term + 5, config_index: 0 });
    assert_eq!(net.node(2).term(), term);
    assert!(!net.node(2).is_removed());
    // Older vote requests are refused with our term, so the sender catches up.
    let pre = Message::PreVote { term: 0, last_index: 0, last_term: 0 };
    let out = answers(&mut net, 2, 3, pre);
    assert!(out.contains(&(3, Message::PreVoteResp { term, granted: false })), "{out:?}");
    let vote = Message::Vote { term: 0, last_index: 0, last_term: 0, transfer: false };
    let out = answers(&mut net, 2, 3, vote);
    assert!(out.contains(&(3, Message::VoteResp { term, granted: false })), "{out:?}");
    // An older term's removal notice with a newer configuration removes us.
    answers(&mut net, 2, 1, Message::Removed { term: 0, config_index: 100 });
    assert!(net.node(2).is_removed());
}

/// A leader ignores a vote request from a node that skipped pre-vote while the
/// leader's lease holds, however long it has led.
#[test]
fn a_long_standing_leader_ignores_a_disruptive_vote_request() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(5000);
    let term = net.node(1).term();
    let last_index = net.node(1).last_index();
    let vote = Message::Vote { term: term + 1, last_index: last_index + 5, last_term: term, transfer: false };
    answers(&mut net, 1, 3, vote);
    assert_eq!(net.node(1).role(), Role::Leader);
    assert_eq!(net.node(1).term(), term);
}

/// A follower's lease on its leader ends exactly one election timeout after the
/// last contact: from that millisecond a vote request is answered.
#[test]
fn a_followers_lease_ends_one_election_timeout_after_contact() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    net.isolate(1);
    net.ticking.clear();
    // The first millisecond without a live leader is the lease's end.
    while net.node(2).has_live_leader() {
        net.now += 1;
        net.at(2);
    }
    let term = net.node(2).term();
    let last_index = net.node(2).last_index();
    let vote = Message::Vote { term: term + 1, last_index: last_index + 5, last_term: term, transfer: false };
    let out = answers(&mut net, 2, 3, vote);
    assert!(out.contains(&(3, Message::VoteResp { term: term + 1, granted: true })), "{out:?}");
}

// ----- timers ------------------------------------------------------------------

/// Ticked only when due, through a dead voter's replacement: no tick leaves a
/// deadline at or before its own time (the `Net` asserts it after every tick).
#[test]
fn autopilot_deadlines_move_past_each_tick() {
    let dead_ms = 3_000;
    let cfg = move |id| RaftConfig { autopilot_dead_ms: Some(dead_ms), ..config(id) };
    let mut net = Net::with_config(&[1, 2, 3], cfg);
    net.elect(1);
    net.advance(500);
    net.tick_when_due = true;
    // 3 dies with no standby to take its place: it stays dead past its deadline.
    net.nodes.remove(&3);
    net.ticking.remove(&3);
    net.advance_1ms(dead_ms + 500);
    assert!(net.node(1).committed_membership().1.is_voter(3));
    net.nodes.insert(4, Raft::new_joining(cfg(4), 7, net.now));
    net.ticking.insert(4);
    net.at(1).add_learner(4).unwrap();
    net.advance_1ms(2_000);
    assert!(net.node(1).committed_membership().1.is_voter(4), "the standby replaced 3");
}

/// A paused autopilot sets no timer: the leader's next deadline is the one it has
/// with autopilot off, through a dead voter's whole dead time.
#[test]
fn a_paused_autopilot_sets_no_timer() {
    let dead_ms = 3_050; // not a multiple of the heartbeat interval
    let paused_net = || {
        let cfg = move |id| RaftConfig { autopilot_dead_ms: Some(dead_ms), ..config(id) };
        let mut net = Net::with_config(&[1, 2, 3], cfg);
        net.elect(1);
        net.at(1).set_autopilot_paused(true);
        net
    };
    let mut paused = paused_net();
    let mut off = Net::new(&[1, 2, 3]);
    off.elect(1);
    for net in [&mut paused, &mut off] {
        net.advance(500);
        net.nodes.remove(&3);
        net.ticking.remove(&3);
    }
    for _ in 0..(dead_ms + 500) / 10 {
        paused.advance(10);
        off.advance(10);
        assert_eq!(paused.node(1).next_deadline_ms(), off.node(1).next_deadline_ms(), "at {}", paused.now);
    }
}

// ----- elections ---------------------------------------------------------------

/// A pre-candidate refused by a majority at its own term gives up at once.
#[test]
fn a_pre_vote_refused_by_a_majority_at_our_term_is_lost() {
    let mut node = Raft::new_bootstrap(config(3), &[1, 2, 3], 42, 0);
    node.tick(5_000);
    assert_eq!(node.role(), Role::PreCandidate);
    let term = node.term();
    node.step(1, Message::PreVoteResp { term, granted: false }, 5_001);
    node.step(2, Message::PreVoteResp { term, granted: false }, 5_002);
    assert_eq!(node.role(), Role::Follower);
    assert_eq!(node.term(), term);
}

/// A voter that has appended a configuration without itself does not campaign,
/// though the committed configuration still names it.
#[test]
fn a_node_its_appended_configuration_leaves_out_never_campaigns() {
    let mut node = Raft::new_bootstrap(config(3), &[1, 2, 3], 42, 0);
    let without_3 = Entry { term: 1, index: 2, kind: EntryKind::Config(Membership::with_voters(&[1, 2])) };
    node.step(
        1,
        Message::Append { term: 1, prev_index: 1, prev_term: 0, entries: vec![without_3], commit: 1 },
        10,
    );
    assert!(node.committed_membership().1.is_voter(3));
    assert!(!node.membership().is_voter(3));
    node.ready();
    for t in 1..=10 {
        node.tick(t * 1_000);
    }
    let out = node.ready().messages;
    assert!(!out.iter().any(|(_, m)| matches!(m, Message::PreVote { .. } | Message::Vote { .. })), "{out:?}");
    assert_ne!(node.role(), Role::PreCandidate);
}

/// Of two pre-candidates with equal logs, the one with the higher id stands back
/// when asked by the other, and only that one.
#[test]
fn of_two_pre_candidates_the_lower_id_goes_on() {
    let pre_candidate = |id| {
        let mut node = Raft::new_bootstrap(config(id), &[1, 2, 3], 42, 0);
        node.tick(5_000);
        assert_eq!(node.role(), Role::PreCandidate);
        node
    };
    let ask = |node: &Raft| Message::PreVote {
        term: node.term() + 1,
        last_index: node.last_index(),
        last_term: node.last_term(),
    };
    let (mut two, mut three) = (pre_candidate(2), pre_candidate(3));
    let (from_two, from_three) = (ask(&two), ask(&three));
    three.step(2, from_two, 5_001);
    two.step(3, from_three, 5_001);
    assert_eq!(three.role(), Role::Follower, "3 stands back for 2");
    assert_eq!(two.role(), Role::PreCandidate, "2 goes on");
}

/// What a node does with a message from a node its configurations do not name: a
/// leader answers `Removed` to anything and drops it; a follower answers `Removed` to a
/// vote request only (and then handles the request as usual).
#[test]
fn a_stranger_is_told_it_was_removed_by_a_leader_always_and_by_a_follower_when_it_asks_for_votes() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.advance(300);
    let term = net.node(1).term();
    let removed = |out: &[(NodeId, Message)]| {
        out.iter().any(|(to, m)| *to == 9 && matches!(m, Message::Removed { .. }))
    };
    let out = answers(&mut net, 1, 9, Message::HeartbeatResp { term, read_seq: 0 });
    assert!(removed(&out), "{out:?}");
    let pre_vote = Message::PreVote { term: term + 1, last_index: 100, last_term: term };
    let out = answers(&mut net, 2, 9, pre_vote);
    assert!(removed(&out), "{out:?}");
    let reply = Message::AppendResp { term, success: true, index: 1, conflict_term: None, hint_index: 0 };
    let out = answers(&mut net, 2, 9, reply);
    assert!(!removed(&out), "{out:?}");
    // A notice about our own committed configuration is no news.
    let (config_index, _) = net.node(2).committed_membership();
    answers(&mut net, 2, 1, Message::Removed { term, config_index });
    assert!(!net.node(2).is_removed());
}

/// A new leader probes each peer just after its own last entry (the one before its
/// no-op).
#[test]
fn a_new_leader_probes_after_its_last_entry() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let first = net.sent.iter().find_map(|(f, t, m)| match m {
        Message::Append { prev_index, .. } if *f == 1 && *t == 2 => Some(*prev_index),
        _ => None,
    });
    assert_eq!(first, Some(1), "the founding configuration is entry 1");
}
