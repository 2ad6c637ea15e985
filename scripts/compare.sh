#!/usr/bin/env bash
# Ticketing vs etcd vs Redis, same machine, same workload, same concurrency.
#
#   scripts/compare.sh                 # DURATION=10 ROUNDS=2 by default
#   DURATION=5 ROUNDS=1 scripts/compare.sh
#
# Installs Debian's etcd-server and redis-server when missing (apt-get), builds
# Ticketing and bench/compare, then starts on loopback:
#   - a 3-node Ticketing cluster on 127.0.0.{1,2,3}:15225 (peers on :16225),
#   - a 3-node etcd cluster on 127.0.0.{1,2,3}:12379 (peers :12380), data in /dev/shm,
#   - one Redis on 127.0.0.1:16379 without persistence (--save '' --appendonly no),
# and drives each with acquire+release pairs: 1, 16 and 64 workers on their own keys,
# and 16 workers on one hot key. Systems alternate run by run (the order rotates),
# each case runs ROUNDS times and the table reports medians. Writes the table, the
# machine, the commands and an SVG chart into docs/benchmarks.md (between the
# compare markers) and docs/benchmarks.svg. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
HOT_WAITERS=${HOT_WAITERS:-16}
TPORT=15225
EPORT=12379
RPORT=16379
export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-compare-secret-0123456789}
export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-compare-peer-secret-0123456789}

log() { echo "compare: $*" >&2; }

# --- what it needs -------------------------------------------------------------
source "$ROOT/scripts/lock-services.sh"
install_lock_services curl:curl
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
cargo build --release --quiet --manifest-path "$ROOT/bench/compare/Cargo.toml"
TICKETING="$ROOT/target/release/ticketing"
DRIVER="$ROOT/bench/compare/target/release/ticketing-compare"

# --- start and always stop -----------------------------------------------------
start_lock_services compare

addrs_of() { case $1 in ticketing) echo "$TADDRS" ;; etcd) echo "$EADDRS" ;; redis) echo "$RADDRS" ;; esac; }

# Up means serving: a probe that did pairs and met no error (a cluster that has not
# elected its leader yet answers, but only with M).
probe() {
    local out
    out=$("$DRIVER" run --system "$1" --addrs "$(addrs_of "$1")" --workers 1 --duration 0.2 --warmup 0 2>/dev/null) \
        && [[ $out == *'"errors":0,'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing etcd redis

# --- the runs --------------------------------------------------------------------
RESULTS="$WORK/results.jsonl"
SYSTEMS=(ticketing etcd redis)
CASES=()
for c in $CONCURRENCY; do CASES+=("uncontended $c"); done
CASES+=("hot $HOT_WAITERS")
run_no=0
for round in $(seq 1 "$ROUNDS"); do
    for case in "${CASES[@]}"; do
        read -r scenario workers <<<"$case"
        for k in 0 1 2; do
            system=${SYSTEMS[$(((k + run_no) % 3))]}
            line=$("$DRIVER" run --system $system --addrs "$(addrs_of $system)" --workers "$workers" \
                --scenario "$scenario" --duration "$DURATION" --warmup "$WARMUP")
            echo "$line" >>"$RESULTS"
            log "round $round $scenario $workers $line"
        done
        run_no=$((run_no + 1))
    done
done

# --- the report ------------------------------------------------------------------
TABLE=$("$DRIVER" report "$RESULTS" "$ROOT/docs/benchmarks.svg")
echo "$TABLE"
MEM=$(free -h | sed 's/^/    /')
BLOCK="$WORK/block.md"
{
    echo "<!-- compare:begin (written by scripts/compare.sh; do not edit by hand) -->"
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'): $ROUNDS round(s) of $DURATION s per system and case"
    echo "(+$WARMUP s warm-up), systems alternating run by run; medians over the rounds."
    echo
    echo "$TABLE"
    echo
    echo "![pairs per second](benchmarks.svg)"
    echo
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
    echo "kernel $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Versions: $("$TICKETING" --version), $(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
    echo
    echo "    \$ free -h"
    echo "$MEM"
    echo
    echo "Commands (each case, each system, \`ROUNDS\` times):"
    echo
    echo "    ticketing-compare run --system ticketing --addrs $TADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
    echo "    ticketing-compare run --system etcd --addrs $EADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
    echo "    ticketing-compare run --system redis --addrs $RADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
    echo
    echo "Raw results:"
    echo
    sed 's/^/    /' "$RESULTS"
    echo "<!-- compare:end -->"
} >"$BLOCK"
replace_doc_block "$ROOT/docs/benchmarks.md" compare "$BLOCK" "## Ticketing vs etcd vs Redis"
log "wrote docs/benchmarks.md and docs/benchmarks.svg"
