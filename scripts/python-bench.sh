#!/usr/bin/env bash
# What a Python user would pick, side by side, in one run on this machine: Ticketing's
# 3-node cluster through the Python package vs redis-py's Lock on one Redis vs
# python-etcd3's Lock on a 3-node etcd. THREADS threads share one client each, every
# thread on keys of its own; acquire+release pairs/s and p50/p99 of a pair.
#
#   scripts/python-bench.sh                   # THREADS="1 16" DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=1 scripts/python-bench.sh
#
# Installs Debian's etcd-server and redis-server when missing (apt-get), builds
# Ticketing, makes a virtualenv in target/python-bench with the package (`pip install
# ./python`), redis (with hiredis, its fast parser) and etcd3 from PyPI, and starts on
# loopback:
#   - a 3-node Ticketing cluster on 127.0.0.{1,2,3}:15225 (peers on :16225),
#   - a 3-node etcd cluster on 127.0.0.{1,2,3}:12379 (peers :12380), data in /dev/shm,
#   - one Redis on 127.0.0.1:16379 without persistence (--save '' --appendonly no).
# python-etcd3 takes one address (127.0.0.1:12379; etcd forwards to its leader).
# python-etcd3 0.12 is generated code older than protobuf 4: it runs only with
# protobuf's pure-Python implementation (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python),
# as its users must run it. Systems alternate run by run; the table reports medians
# over the rounds. Writes the table, the commands, the date and the load average into
# docs/benchmarks.md between the python-bench markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings python-bench 15225 12379 16379
THREADS=${THREADS:-"1 16"}
export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python

# --- what it needs -------------------------------------------------------------
install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
python_bench_venv "redis[hiredis]" etcd3
DRIVER="$ROOT/bench/python/lock_bench.py"

# --- start and always stop -----------------------------------------------------
start_lock_services python-bench
declare -A ADDRS=([ticketing]="$TADDRS" [redis]="$RADDRS" [etcd]="${EADDRS%%,*}")
run() { "$PY" "$DRIVER" run --system "$1" --addrs "${ADDRS[$1]}" --threads "$2" --duration "$3" --warmup "$4"; }
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    out=$(run "$1" 1 0.2 0 2>/dev/null) && [[ $out == *'"errors": 0,'* && $out != *'"pairs": 0,'* ]]
}
wait_lock_services ticketing redis etcd

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing redis etcd)
RUNS=()
for threads in $THREADS; do RUNS+=("$threads $DURATION $WARMUP"); done
bench_rounds "${RUNS[@]}"

# --- the report ------------------------------------------------------------------
report_table() { "$PY" "$DRIVER" report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and thread count"
    echo "(+$WARMUP s warm-up), systems alternating run by run; medians over the rounds."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), Python $("$PY" -c 'import platform; print(platform.python_version())'),"
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis|etcd3|grpcio|protobuf)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'),"
    echo "$(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each thread count, each system, \`ROUNDS\` times; \`PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python\` for etcd3):"
    echo
    for system in ticketing redis etcd; do
        echo "    python bench/python/lock_bench.py run --system $system --addrs ${ADDRS[$system]} --threads N --duration $DURATION --warmup $WARMUP"
    done
}
bench_report "## Python clients"
log "wrote docs/benchmarks.md"
