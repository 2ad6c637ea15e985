#!/bin/sh
# Runs the deterministic simulators (over simulated peer connections, see docs/raft.md):
#   tests/raft_sim.rs     Raft cores on a hostile network (Raft invariants)
#   tests/cluster_sim.rs  Raft + lock Replicas + clients (lock invariants, docs/guarantees.md)
#
#   scripts/sim.sh                 both, default seed counts (3000 raft, 4000 lock)
#   scripts/sim.sh --only lock     just the lock-level simulator (or: --only raft)
#   scripts/sim.sh --seeds 10000   more seeds
#   scripts/sim.sh --seed 1234     replay exactly one seed (prints its stats);
#                                  add SIM_TRACE=1 to the environment for a trace,
#                                  SIM_DEBUG=1 for nodes and links at a liveness failure
#   scripts/sim.sh --base 5000 --seeds 1000   seeds 5000..5999
#   scripts/sim.sh --transport legacy         every seed over the transport model the
#                                  real one replaced (default: real), to explore
#   scripts/sim.sh --only lock --no-term-check   an exploration: the lock-level seeds
#                                  with the glue's term check on appends left out
set -eu
cd "$(dirname "$0")/.."
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) export SIM_SEEDS="$2"; shift 2 ;;
        --seed) export SIM_SEED="$2"; shift 2 ;;
        --base) export SIM_SEED_BASE="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --transport) export SIM_TRANSPORT="$2"; shift 2 ;;
        --no-term-check) export SIM_NO_TERM_CHECK=1; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$only" in
    ""|raft|lock) ;;
    *) echo "--only takes raft or lock" >&2; exit 2 ;;
esac
if [ "$only" != lock ]; then
    cargo test --release --test raft_sim simulate_many_seeds -- --nocapture
fi
if [ "$only" != raft ]; then
    cargo test --release --test cluster_sim simulate_many_seeds -- --nocapture
fi
