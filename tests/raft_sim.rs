//! Deterministic simulation of Raft clusters (3 and 5 nodes) under a hostile
//! network, pauses and crash-replacements; safety checked after every step,
//! liveness after healing. `SIM_SEED=N` replays one seed, `SIM_SEEDS=K`
//! sets how many seeds run (see scripts/sim.sh).

mod sim;

use std::time::Instant;

use sim::{env_u64, run_seed, Bug, Checker, SimParams, World};
use ticketing::raft::Membership;

/// Default seed count: sized so this test takes well under a minute in
/// `--release` on 2 cores.
const SEEDS_DEFAULT: u64 = 1500;
const THREADS: u64 = 2;

#[test]
fn simulate_many_seeds() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let stats = run_seed(SimParams::from_seed(seed)).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("seed={seed} ok: {stats:?}");
        return;
    }
    let seeds = env_u64("SIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
    let base = env_u64("SIM_SEED_BASE").unwrap_or(0);
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let mut total = sim::Stats::default();
                // Why seed / 2: odd seeds (5 nodes) cost more; this gives
                // every thread the same mix.
                for seed in (base..base + seeds).filter(|s| (s / 2) % THREADS == t) {
                    match run_seed(SimParams::from_seed(seed)) {
                        Ok(s) => {
                            total.elections += s.elections;
                            total.committed += s.committed;
                            total.snapshots_installed += s.snapshots_installed;
                            total.replacements += s.replacements;
                            total.reads_answered += s.reads_answered;
                        }
                        Err(e) => failures.push(e),
                    }
                }
                (failures, total)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for h in handles {
        let (f, s) = h.join().unwrap();
        eprintln!("thread totals: {s:?}");
        failures.extend(f);
    }
    eprintln!("{seeds} seeds in {:.1}s", started.elapsed().as_secs_f64());
    for f in &failures {
        eprintln!("FAILED {f}");
    }
    assert!(failures.is_empty(), "{} seeds failed; first: {}", failures.len(), failures[0]);
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
