//! The seed runner both simulators use: `SIM_SEED=N` replays one seed, `SIM_SEEDS=K`
//! and `SIM_SEED_BASE=B` choose the range, two threads share it, and a failure names
//! every failed seed and how to replay one.

use std::fmt::Debug;
use std::time::Instant;

use super::env_u64;

/// Threads the seeds are shared over (the machines that run the suite have two cores).
const THREADS: u64 = 2;

/// Figures a simulator sums over its seeds.
pub trait Totals: Default + Debug + Send + 'static {
    fn add(&mut self, other: &Self);
}

/// Runs `run` for each seed of the range (`seeds_default` seeds from 0 unless the
/// variables say otherwise) and fails naming the failed seeds. `replay` is the
/// command line that replays one (`SIM_SEED=<seed>` is put before it).
pub fn run_many<S, F>(seeds_default: u64, replay: &str, run: F)
where
    S: Totals,
    F: Fn(u64) -> Result<S, String> + Send + Copy + 'static,
{
    if let Some(seed) = env_u64("SIM_SEED") {
        let stats = run(seed).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("seed={seed} ok: {stats:?}");
        return;
    }
    let seeds = env_u64("SIM_SEEDS").unwrap_or(seeds_default);
    let base = env_u64("SIM_SEED_BASE").unwrap_or(0);
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let mut totals = S::default();
                // Why seed / 2: odd seeds (5 nodes) cost more; this gives every
                // thread the same mix.
                for seed in (base..base + seeds).filter(|s| (s / 2) % THREADS == t) {
                    match run(seed) {
                        Ok(s) => totals.add(&s),
                        Err(e) => failures.push(e),
                    }
                }
                (failures, totals)
            })
        })
        .collect();
    let mut failures = Vec::new();
    let mut totals = S::default();
    for h in handles {
        let (f, t) = h.join().unwrap();
        totals.add(&t);
        failures.extend(f);
    }
    eprintln!("{totals:?}");
    eprintln!("{seeds} seeds in {:.1}s", started.elapsed().as_secs_f64());
    for f in &failures {
        eprintln!("FAILED {f}");
    }
    assert!(
        failures.is_empty(),
        "{} seeds failed; first: {}\nreplay one: SIM_SEED=<seed> {replay}",
        failures.len(),
        failures[0]
    );
}
