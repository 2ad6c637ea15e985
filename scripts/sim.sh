#!/bin/sh
# Runs the deterministic Raft simulator (tests/raft_sim.rs).
#   scripts/sim.sh                 default seed count (1500)
#   scripts/sim.sh --seeds 10000   more seeds
#   scripts/sim.sh --seed 1234     replay exactly one seed (prints its stats)
#   scripts/sim.sh --base 5000 --seeds 1000   seeds 5000..5999
set -eu
cd "$(dirname "$0")/.."
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) export SIM_SEEDS="$2"; shift 2 ;;
        --seed) export SIM_SEED="$2"; shift 2 ;;
        --base) export SIM_SEED_BASE="$2"; shift 2 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
exec cargo test --release --test raft_sim simulate_many_seeds -- --nocapture
