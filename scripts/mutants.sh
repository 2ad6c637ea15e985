#!/usr/bin/env bash
# Mutation testing of the pure cores (docs/safety.md, "Mutation testing").
#
# Runs `cargo mutants` over one group of source files against the tests that exercise
# them, and writes what it caught and what it missed. A mutant is one small change to
# the code (a condition negated, `<` turned into `<=`, a function body replaced by a
# constant); a mutant the tests still pass is a line no test guards.
#
# Usage: scripts/mutants.sh GROUP [--file PATH] [--shard K/N] [--quick] [--iterate] [--list]
#
#   GROUP       raft      src/raft/**        lib tests, raft_scenarios, raft_guards, raft_sim,
#                                            cluster_sim
#               lock      src/lock/**        lib tests, lock_table, lock_model, lock_storage,
#                                            replica, cluster_sim
#               replica   src/replica/**     lib tests, replica, lock_storage, cluster_sim
#               client    src/client/core/** lib tests, client_sim
#   --file PATH only the mutants of this file of the group (its tests stay the group's)
#   --shard K/N run the K-th of N slices (0-based): one slice of about 60 mutants takes
#               10-20 minutes on two cores
#   --quick     without the simulators: a first pass that shows the candidates quickly
#               (the figures in docs/safety.md come from runs without it)
#   --iterate   skip the mutants an earlier run of the same group caught (or found
#               unviable): a second pass after tests were added tests only the rest.
#               A shard's slice is cut after the skipped mutants are removed, so the
#               slices of an iterated shard move: make the last pass one over the whole
#               group, in a directory holding the shards' caught.txt and unviable.txt
#   --list      list the group's mutants and exit
#
# Environment: MUTANTS_TIMEOUT (default 120 s) ends a test run that a mutant made loop
# (it counts as caught). MUTANTS_OUT (default target/mutants) holds one directory per group and
# shard, each with cargo-mutants' caught.txt, missed.txt, timeout.txt, unviable.txt.
# The simulators run fewer seeds than in `cargo test` (SIM_SEEDS, CLIENT_SIM_SEEDS):
# enough to catch a broken rule, short enough for thousands of builds.
#
# The tests run in the `test` profile (opt-level 1, debug assertions on), so the
# production code's own assertions count as catching a mutant. Needs cargo-mutants
# (`cargo install --locked cargo-mutants`).
set -euo pipefail
cd "$(dirname "$0")/.."

group=${1:-}
shift || true
shard=""
iterate=""
list=""
only=""
quick=""
while [ $# -gt 0 ]; do
    case $1 in
        --shard) shard=$2; shift 2 ;;
        --file) only=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --iterate) iterate=--iterate; shift ;;
        --list) list=1; shift ;;
        *) echo "mutants.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
    esac
done

case $group in
    raft) files=('src/raft/**'); tests=(--lib --test=raft_scenarios --test=raft_guards --test=raft_sim --test=cluster_sim) ;;
    lock) files=('src/lock/**'); tests=(--lib --test=lock_table --test=lock_model --test=lock_storage --test=replica --test=cluster_sim) ;;
    replica) files=('src/replica/**'); tests=(--lib --test=replica --test=lock_storage --test=cluster_sim) ;;
    client) files=('src/client/core/**'); tests=(--lib --test=client_sim) ;;
    *) echo "mutants.sh: GROUP must be raft, lock, replica or client (see the header of this script)" >&2; exit 2 ;;
esac

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "mutants.sh: cargo-mutants is not installed: cargo install --locked cargo-mutants" >&2
    exit 2
fi

if [ -n "$only" ]; then
    files=("$only")
fi
file_args=()
for f in "${files[@]}"; do file_args+=(-f "$f"); done
if [ -n "$list" ]; then
    exec cargo mutants --list "${file_args[@]}"
fi

out_root=${MUTANTS_OUT:-target/mutants}
name=$group
if [ -n "$only" ]; then
    name="$group-$(basename "$only" .rs)"
fi
shard_args=()
if [ -n "$shard" ]; then
    name="$group-${shard/\//of}"
    shard_args=(--shard "$shard")
fi
if [ -n "$quick" ]; then
    name="$name-quick"
fi
out="$out_root/$name"
mkdir -p "$out"

cargo_args=()
for t in "${tests[@]}"; do
    case $t in *_sim) [ -n "$quick" ] && continue ;; esac
    cargo_args+=("--cargo-arg=$t")
done

# Fewer seeds than `cargo test` runs; the first seeds of each simulator are the ones
# every change is tested against.
export SIM_SEEDS=${SIM_SEEDS:-200}
# A property test failing under a mutant must not leave a regression file in the tree.
export PROPTEST_DISABLE_FAILURE_PERSISTENCE=1
export CLIENT_SIM_SEEDS=${CLIENT_SIM_SEEDS:-0..2000}

# The mutants' builds live in their own target directory, without debug information
# (linking is most of a mutant's cost).
export CARGO_TARGET_DIR=${MUTANTS_TARGET:-target/mutants-build}
export CARGO_PROFILE_TEST_DEBUG=0 CARGO_PROFILE_DEV_DEBUG=0
# Tests that cannot see these cores are skipped: the checker's own self-tests (each
# searches up to 400 seeds with a planted bug, ~20 s) and the unit tests of the C
# interface, the transport and the metrics (real sockets and threads, ~7 s).
skips=(--cargo-test-arg=-- --cargo-test-arg=--skip=checker_catches_
    --cargo-test-arg=--skip=capi:: --cargo-test-arg=--skip=transport::
    --cargo-test-arg=--skip=metrics::)

started=$(date +%s)
status=0
# --in-place: the mutants are applied to this tree (and undone): no copy of the
# target directory, so each build is incremental. Do not edit the tree meanwhile.
cargo mutants --in-place --no-shuffle --baseline=skip $iterate "${shard_args[@]}" \
    "${file_args[@]}" "${cargo_args[@]}" "${skips[@]}" \
    --timeout "${MUTANTS_TIMEOUT:-120}" --build-timeout 900 --output "$out" || status=$?
# cargo-mutants exits 2 when a mutant was missed, 3 on a timeout: those are results.
if [ "$status" != 0 ] && [ "$status" != 2 ] && [ "$status" != 3 ]; then
    echo "mutants.sh: cargo mutants failed (exit $status)" >&2
    exit "$status"
fi
# A stale tree after an interrupted run would be dangerous: make sure it is clean.
if ! git diff --quiet -- "${files[@]%\*\*}" || [ -n "$(git status --porcelain --untracked-files=all -- proptest-regressions tests)" ]; then
    echo "mutants.sh: the source tree still differs from git after the run: check git diff" >&2
    exit 1
fi

count() {
    if [ -s "$out/mutants.out/$1" ]; then grep -c . "$out/mutants.out/$1"; else echo 0; fi
}
caught=$(count caught.txt)
missed=$(count missed.txt)
timeout=$(count timeout.txt)
unviable=$(count unviable.txt)
viable=$((caught + missed + timeout))
echo
echo "group $name: $viable viable mutants, $caught caught, $timeout timed out (counted as caught), $missed missed, $unviable unviable; $(( $(date +%s) - started )) s"
if [ "$viable" -gt 0 ]; then
    echo "caught: $(( (caught + timeout) * 1000 / viable / 10 )).$(( (caught + timeout) * 1000 / viable % 10 )) %"
fi
previously=$(count previously_caught.txt)
if [ "$previously" -gt 0 ]; then
    echo "(this pass only: $previously mutants that earlier passes caught or found unviable were skipped; they are in $out/mutants.out/previously_caught.txt)"
fi
if [ "$missed" -gt 0 ]; then
    echo "missed (each needs a test, or a line in docs/safety.md saying why it cannot change behaviour):"
    sed 's/^/  /' "$out/mutants.out/missed.txt"
fi
