//! Deterministic simulation of Raft clusters (3 and 5 nodes) over simulated
//! peer connections (the real transport of `src/cluster/`, see `sim/net.rs`; the
//! legacy one it replaced only in the scripted tests that show what changed), with
//! partitions and link breaks (`sim/faults.rs`), one-way
//! link outages, pauses and crash-replacements (by the admin, or by autopilot
//! once a fresh node joined); safety checked after every
//! step; after the last fault heals a leader must serve within two election
//! timeouts. `SIM_SEED=N` replays one seed exactly, `SIM_SEEDS=K` sets how
//! many seeds run, `SIM_SEED_BASE=B` the first (see scripts/sim.sh).

mod sim;

use sim::{run_seed, Bug, Checker, SimParams, TransportModel, World};
use ticketing::raft::{AutopilotEvent, Membership, NodeId};

/// Default seed count: sized so this test takes well under a minute in
/// `--release` on 2 cores.
const SEEDS_DEFAULT: u64 = 3000;

#[test]
fn simulate_many_seeds() {
    sim::seeds::run_many(
        SEEDS_DEFAULT,
        "cargo test --release --test raft_sim simulate_many_seeds -- --nocapture (or scripts/sim.sh --only raft \
         --seed <seed>); SIM_DEBUG=1 dumps the nodes and links at a liveness failure, SIM_TRACE=<ms> prints every \
         delivery from then on",
        |seed| run_seed(SimParams::from_seed(seed)),
    );
}

/// The checker is not vacuous: a network that forges vote grants lets two
/// nodes lead one term, and the simulator must say so.
#[test]
fn checker_catches_forged_votes() {
    let caught = (0..40).find_map(|seed| {
        let mut p = SimParams::from_seed(seed);
        p.bug = Some(Bug::ForgeVoteGrants);
        run_seed(p).err()
    });
    let err = caught.expect("forged votes went unnoticed for 40 seeds");
    assert!(err.contains("seed="), "{err}");
    assert!(
        err.contains("election safety") || err.contains("log matching") || err.contains("state machine"),
        "{err}"
    );
}

/// A failing seed replays exactly: the same failure, at the same step, twice.
#[test]
fn failing_seed_replays_exactly() {
    let run = || {
        (0..40).find_map(|seed| {
            let mut p = SimParams::from_seed(seed);
            p.bug = Some(Bug::ForgeVoteGrants);
            run_seed(p).err()
        })
    };
    let first = run().expect("forged votes went unnoticed");
    assert_eq!(run().as_deref(), Some(first.as_str()));
}

#[test]
fn checker_rejects_two_leaders_in_one_term() {
    let mut c = Checker::default();
    c.leader(1, 5).unwrap();
    c.leader(1, 5).unwrap();
    assert!(c.leader(2, 5).unwrap_err().0.contains("election safety"));
}

#[test]
fn checker_rejects_log_mismatch_and_divergent_apply() {
    let mut c = Checker::default();
    c.log_entry(1, 7, 3, 0xaa, 2).unwrap();
    assert!(c.log_entry(2, 7, 3, 0xbb, 2).unwrap_err().0.contains("log matching"));
    assert!(c.log_entry(2, 7, 3, 0xaa, 1).is_err(), "same entry, different prefix");
    c.applied(1, 4, 111).unwrap();
    assert!(c.applied(2, 4, 222).unwrap_err().0.contains("state machine safety"));
}

#[test]
fn checker_rejects_lost_commit_and_incomplete_leader() {
    let mut c = Checker::default();
    c.commit(1, 5, 2, |_| Some(2)).unwrap();
    assert!(c.commit(1, 4, 2, |_| Some(2)).is_err(), "commit went backwards");
    // Entry 5 (term 2) committed in term 2; a leader of term 3 without it.
    assert!(c
        .leader_log(2, 3, 1, |i| if i < 5 { Some(2) } else { None })
        .unwrap_err()
        .0
        .contains("leader completeness"));
}

#[test]
fn checker_rejects_bad_configs_and_removed_leaders() {
    let mut c = Checker::default();
    assert!(c.committed_config(1, 1, 1, &Membership::with_voters(&[1, 2, 3, 4])).is_err());
    c.committed_config(1, 1, 1, &Membership::with_voters(&[1, 2, 3])).unwrap();
    c.committed_config(1, 2, 9, &Membership::with_voters(&[1, 2, 4])).unwrap();
    assert!(c.is_removed(3));
    assert!(c.leader(3, 4).unwrap_err().0.contains("removed"));
    assert!(c.uncommitted_configs(1, 2).is_err());
}

#[test]
fn same_seed_same_history() {
    let run = |seed| {
        let mut w = World::new(SimParams::from_seed(seed));
        w.run().unwrap();
        (w.step, w.now, w.stats.committed, w.stats.elections)
    };
    assert_eq!(run(11), run(11));
}

/// How long the cluster is without a serving leader when the leader hands over to a
/// voter that was only just added, under `transport`. Five voters: the old leader's
/// vote and the newcomer's own are not enough, the newcomer needs the other voters'
/// answers — over links those voters must dial to it.
///
/// The other voters' housekeeping is set to twice the election timeout and the change
/// starts when none of theirs is due within 200 ms, so the whole change (learner,
/// catch-up, joint consensus, final configuration, transfer: a few dozen milliseconds
/// here) completes before any of them looks at its members again — as it does on a
/// LAN, where the real 200 ms period lasts hundreds of round trips.
fn leaderless_ms_after_handing_over_to_a_new_voter(transport: TransportModel) -> (u64, NodeId, NodeId) {
    let transport = TransportModel { housekeeping_ms: 2 * 500, ..transport };
    let mut w = World::scripted(1, 5, transport);
    w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    let l = w.leader().unwrap();
    let voters: Vec<u64> = w.raft(l).membership().voters.iter().copied().collect();
    let old = *voters.iter().find(|v| **v != l).unwrap();
    let others: Vec<u64> = voters.iter().copied().filter(|v| *v != l && *v != old).collect();
    let mut started = 0;
    let quiet = |w: &mut World| {
        w.run_until(1_000, |w| others.iter().all(|o| w.net.next_housekeeping(*o) >= w.now + 200)).unwrap();
        started = w.now;
    };
    let new = w.admin_replace(l, old, 200, quiet).unwrap();
    assert_eq!(w.with_raft(l, |r| r.transfer_leader(Some(new))), Ok(new));
    assert!(w.now < started + 200, "the change outlasted the quiet window");
    w.run_until(200, |w| w.leader() != Some(l)).unwrap();
    let gap = w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    eprintln!("{}: {gap} ms without a leader; {} leads", w.net.model.name, w.followed_leader().unwrap());
    (gap, w.followed_leader().unwrap(), new)
}

/// The transport Raft relies on, compared: a leadership transfer to a new voter.
/// The legacy transport dialed the newcomer only at the next housekeeping, so the
/// votes for it were dropped and the cluster waited an election timeout; the real one
/// dials a new member as soon as the configuration naming it is appended (and
/// messages wait for a link being dialed): the newcomer takes over within a few round
/// trips.
#[test]
fn transfer_to_a_new_voter_is_lost_into_undialed_links_with_the_legacy_transport_not_the_real_one() {
    let (gap, leader, new) = leaderless_ms_after_handing_over_to_a_new_voter(TransportModel::legacy(500));
    assert!(gap >= 500, "legacy: {gap} ms without a leader; expected an election timeout");
    assert_ne!(leader, new, "legacy: the newcomer cannot win without its links");
    let (gap, leader, new) = leaderless_ms_after_handing_over_to_a_new_voter(TransportModel::real(500));
    assert!(gap <= 50, "real: {gap} ms without a leader");
    assert_eq!(leader, new);
}

/// Whether a leader serves within five election timeouts after this: three voters;
/// the leader replaces one follower by a new node while the other follower `g` is cut
/// off (so `g`'s log never names the newcomer), then the leader crashes and `g` comes
/// back. The newcomer needs `g`'s vote, and `g` must answer a node its configuration
/// does not list.
fn newcomer_wins_after_the_leader_crashes(transport: TransportModel) -> Option<NodeId> {
    let mut w = World::scripted(2, 3, transport);
    w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    let l = w.leader().unwrap();
    let voters: Vec<NodeId> = w.raft(l).membership().voters.iter().copied().collect();
    let others: Vec<NodeId> = voters.iter().copied().filter(|v| *v != l).collect();
    let (old, g) = (others[0], others[1]);
    w.isolate(g);
    let new = w.admin_replace(l, old, 1_000, |_| {}).unwrap();
    assert!(!w.raft(g).membership().contains(new));
    w.crash(l);
    w.crash(old);
    w.net.blocked.clear();
    let _ = w.run_until(5 * 575, |w| w.followed_leader().is_some());
    w.followed_leader()
}

/// A voter hears only the members its log names: under the legacy transport a
/// candidate its log does not list is not heard, and a cluster that needs that vote
/// stays leaderless for good. The real transport hears such a stranger's vote
/// requests while no leader is heard (`src/cluster/stranger.rs`) and answers on the
/// link the stranger dialed (its address is unknown): the newcomer leads.
#[test]
fn voter_answers_a_candidate_its_log_does_not_name_only_with_the_real_transport() {
    assert_eq!(newcomer_wins_after_the_leader_crashes(TransportModel::legacy(500)), None);
    let leader = newcomer_wins_after_the_leader_crashes(TransportModel::real(500));
    assert!(leader.is_some_and(|l| l > 3), "{leader:?}");
}

/// Whether a voter that was cut off while it was removed learns it within two election
/// timeouts of the partition healing (and the leader keeps leading, same term). By then
/// the others have long stopped dialing it: it is no member of theirs.
fn removed_voter_learns_it_after_the_heal(transport: TransportModel) -> bool {
    let mut w = World::scripted(3, 3, transport);
    w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    let l = w.leader().unwrap();
    let voters: Vec<NodeId> = w.raft(l).membership().voters.iter().copied().collect();
    let f = *voters.iter().find(|v| **v != l).unwrap();
    w.isolate(f);
    w.admin_replace(l, f, 1_000, |_| {}).unwrap();
    w.run_for(3_000).unwrap(); // f pre-campaigns, unheard, for a while
    let term = w.raft(l).term();
    w.net.blocked.clear();
    let told = w.run_until(2 * 575, |w| w.raft(f).is_removed()).is_ok();
    assert_eq!(
        (w.followed_leader(), w.raft(l).term()),
        (Some(l), term),
        "the removed voter disturbed the leader"
    );
    told
}

/// A removed voter's messages are not heard by the members (it is no member of
/// theirs): each refuses it with a removal notice (the real node refuses its next
/// handshake with code 6), with either transport. The leader keeps its term.
#[test]
fn removed_voter_is_told_after_the_heal_with_either_transport() {
    assert!(removed_voter_learns_it_after_the_heal(TransportModel::legacy(500)));
    assert!(removed_voter_learns_it_after_the_heal(TransportModel::real(500)));
}

#[test]
fn checker_rejects_a_configuration_of_another_size() {
    let mut c = Checker::default();
    c.voters_expected = Some(3);
    c.committed_config(1, 1, 1, &Membership::with_voters(&[1, 2, 3])).unwrap();
    assert!(c.committed_config(1, 1, 2, &Membership::with_voters(&[1, 2, 3, 4, 5])).is_err());
    let shrinking = Membership { voters: [1, 2].into(), outgoing: [1, 2, 3].into(), learners: [].into() };
    assert!(c.committed_config(1, 1, 3, &shrinking).is_err());
}

// ----- autopilot scenarios -------------------------------------------------------

/// Autopilot's threshold in these scenarios: four election timeouts.
const DEAD_MS: u64 = 4 * 500;

/// The `Replacing` decisions so far: (time, dead, standby).
fn replacements(w: &World) -> Vec<(u64, NodeId, NodeId)> {
    w.autopilot_events
        .iter()
        .filter_map(|(t, _, e)| match e {
            AutopilotEvent::Replacing { dead, standby, .. } => Some((*t, *dead, *standby)),
            _ => None,
        })
        .collect()
}

/// Three voters with autopilot on and one fresh node that joined as a standby.
/// Returns (world, leader, standby).
fn autopilot_world(seed: u64) -> (World, NodeId, NodeId) {
    let mut w = World::scripted_autopilot(seed, 3, TransportModel::real(500), DEAD_MS);
    w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    let standby = w.start_joiner();
    w.run_until(3_000, |w| w.leader().is_some_and(|l| w.raft(l).standbys().contains(&standby))).unwrap();
    let l = w.leader().unwrap();
    (w, l, standby)
}

/// A voter cut off for less than `autopilot_dead_ms` is not replaced; cut off past
/// it, it is replaced by the standby (the voter count stays three), and after the
/// heal it learns it was removed.
#[test]
fn autopilot_replaces_a_voter_cut_off_past_the_threshold_only() {
    let (mut w, l, standby) = autopilot_world(4);
    let f = *w.raft(l).membership().voters.iter().find(|v| **v != l).unwrap();
    w.isolate(f);
    w.run_for(DEAD_MS - 300).unwrap();
    w.net.blocked.clear();
    w.run_for(3 * DEAD_MS).unwrap();
    assert!(replacements(&w).is_empty(), "{:?}", w.autopilot_events);
    assert!(w.raft(l).membership().voters.contains(&f));
    w.isolate(f);
    let cut = w.now;
    w.run_until(DEAD_MS + 1_000, |w| {
        let m = w.raft(l).committed_membership().1;
        !m.is_joint() && m.voters.contains(&standby) && !m.contains(f)
    })
    .unwrap();
    let [(at, dead, by)] = replacements(&w)[..] else { panic!("{:?}", w.autopilot_events) };
    assert_eq!((dead, by), (f, standby));
    assert!(at >= cut + DEAD_MS - 50, "replaced {} ms after the cut", at - cut);
    assert_eq!(w.raft(l).membership().voters.len(), 3);
    w.net.blocked.clear();
    w.run_until(2 * 575, |w| w.raft(f).is_removed()).unwrap();
    assert!(w.voters_whole());
}

/// A follower crashes and a fresh node joins; later the leader crashes and another
/// fresh node joins: each time the cluster is back to three live voters, with no
/// admin command.
#[test]
fn autopilot_heals_a_dead_follower_then_a_dead_leader() {
    let mut w = World::scripted_autopilot(5, 3, TransportModel::real(500), DEAD_MS);
    w.run_until(5_000, |w| w.followed_leader().is_some()).unwrap();
    let l = w.leader().unwrap();
    let f = *w.raft(l).membership().voters.iter().find(|v| **v != l).unwrap();
    w.crash(f);
    let first = w.start_joiner();
    w.run_until(DEAD_MS + 3_000, |w| w.voters_whole() && !w.raft(l).committed_membership().1.contains(f))
        .unwrap();
    assert!(w.raft(l).committed_membership().1.voters.contains(&first));
    w.crash(l);
    let second = w.start_joiner();
    w.run_until(2 * 575 + DEAD_MS + 3_000, |w| {
        w.voters_whole() && w.leader().is_some_and(|n| !w.raft(n).committed_membership().1.contains(l))
    })
    .unwrap();
    let n = w.leader().unwrap();
    assert_eq!(w.raft(n).committed_membership().1.voters.len(), 3);
    assert!(w.raft(n).committed_membership().1.voters.contains(&second));
    let dead: Vec<NodeId> = replacements(&w).iter().map(|r| r.1).collect();
    assert_eq!(dead, vec![f, l]);
    assert_eq!(w.stats.replacements, 0, "no admin replacement ran");
}

/// Paused autopilot (on every node: whoever leads) replaces nothing, however long a
/// voter is dead; resumed, it does.
#[test]
fn paused_autopilot_never_replaces() {
    let (mut w, l, standby) = autopilot_world(6);
    let ids: Vec<NodeId> = w.raft(l).membership().all_nodes().into_iter().collect();
    for id in &ids {
        w.with_raft(*id, |r| r.set_autopilot_paused(true));
    }
    let f = *w.raft(l).membership().voters.iter().find(|v| **v != l).unwrap();
    w.crash(f);
    w.run_for(4 * DEAD_MS).unwrap();
    assert!(w.autopilot_events.is_empty(), "{:?}", w.autopilot_events);
    assert!(w.raft(l).membership().voters.contains(&f));
    w.with_raft(l, |r| r.set_autopilot_paused(false));
    w.run_until(1_000, |w| w.voters_whole()).unwrap();
    assert_eq!(replacements(&w).iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(), vec![(f, standby)]);
}
