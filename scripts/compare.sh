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
source "$ROOT/scripts/lock-services.sh"
bench_settings compare 15225 12379 16379
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
HOT_WAITERS=${HOT_WAITERS:-16}

# --- what it needs -------------------------------------------------------------
install_lock_services curl:curl
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
cargo build --release --quiet --manifest-path "$ROOT/bench/compare/Cargo.toml"
DRIVER="$ROOT/bench/compare/target/release/ticketing-compare"

# --- start and always stop -----------------------------------------------------
start_lock_services compare

addrs_of() { case $1 in ticketing) echo "$TADDRS" ;; etcd) echo "$EADDRS" ;; redis) echo "$RADDRS" ;; esac; }
# One case: $2 the scenario, $3 the workers.
run() {
    "$DRIVER" run --system "$1" --addrs "$(addrs_of "$1")" --workers "$3" \
        --scenario "$2" --duration "$DURATION" --warmup "$WARMUP"
}

# Up means serving: a probe that did pairs and met no error (a cluster that has not
# elected its leader yet answers, but only with M).
probe() {
    local out
    out=$("$DRIVER" run --system "$1" --addrs "$(addrs_of "$1")" --workers 1 --duration 0.2 --warmup 0 2>/dev/null) \
        && [[ $out == *'"errors":0,'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing etcd redis

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing etcd redis)
CASES=()
for c in $CONCURRENCY; do CASES+=("uncontended $c"); done
CASES+=("hot $HOT_WAITERS")
bench_rounds "${CASES[@]}"

# --- the report ------------------------------------------------------------------
report_table() { "$DRIVER" report "$RESULTS" "$ROOT/docs/benchmarks.svg"; }
# Its own body: the chart, and the load average at the end and `free -h` in place of
# `uptime` before and after.
report_body() {
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'): $ROUNDS round(s) of $DURATION s per system and case"
    echo "(+$WARMUP s warm-up), systems alternating run by run; medians over the rounds."
    echo
    echo "$TABLE"
    echo
    echo "![pairs per second](benchmarks.svg)"
    echo
    report_machine
    echo "kernel $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Versions: $("$TICKETING" --version), $(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
    echo
    echo "    \$ free -h"
    free -h | sed 's/^/    /'
    echo
    echo "Commands (each case, each system, \`ROUNDS\` times):"
    echo
    echo "    ticketing-compare run --system ticketing --addrs $TADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
    echo "    ticketing-compare run --system etcd --addrs $EADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
    echo "    ticketing-compare run --system redis --addrs $RADDRS --workers N [--scenario hot] --duration $DURATION --warmup $WARMUP"
}
bench_report "## Ticketing vs etcd vs Redis"
log "wrote docs/benchmarks.md and docs/benchmarks.svg"
