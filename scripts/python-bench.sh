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
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-"1 16"}
TPORT=15225
EPORT=12379
RPORT=16379
export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-python-bench-secret-0123456789}
export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-python-bench-peer-secret-0123456789}
export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python

log() { echo "python-bench: $*" >&2; }

# --- what it needs -------------------------------------------------------------
source "$ROOT/scripts/lock-services.sh"
install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TICKETING="$ROOT/target/release/ticketing"
VENV="$ROOT/target/python-bench"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip >/dev/null
"$PY" -m pip install --quiet --force-reinstall --no-deps "$ROOT/python"
"$PY" -m pip install --quiet "redis[hiredis]" etcd3
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
RESULTS="$WORK/results.jsonl"
SYSTEMS=(ticketing redis etcd)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
UPTIME_BEFORE=$(uptime)
run_no=0
for round in $(seq 1 "$ROUNDS"); do
    for threads in $THREADS; do
        for k in 0 1 2; do
            system=${SYSTEMS[$(((k + run_no) % 3))]}
            line=$(run "$system" "$threads" "$DURATION" "$WARMUP")
            echo "$line" >>"$RESULTS"
            log "round $round, $threads threads: $line"
        done
        run_no=$((run_no + 1))
    done
done
UPTIME_AFTER=$(uptime)

# --- the report ------------------------------------------------------------------
TABLE=$("$PY" "$DRIVER" report "$RESULTS")
echo "$TABLE"
BLOCK="$WORK/block.md"
{
    echo "<!-- python-bench:begin (written by scripts/python-bench.sh; do not edit by hand) -->"
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and thread count"
    echo "(+$WARMUP s warm-up), systems alternating run by run; medians over the rounds."
    echo
    echo "$TABLE"
    echo
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
    echo "kernel $(uname -r). \`uptime\` before and after the runs:"
    echo
    echo "    $UPTIME_BEFORE"
    echo "    $UPTIME_AFTER"
    echo
    echo "Versions: $("$TICKETING" --version), Python $("$PY" -c 'import platform; print(platform.python_version())'),"
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis|etcd3|grpcio|protobuf)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'),"
    echo "$(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
    echo
    echo "Commands (each thread count, each system, \`ROUNDS\` times; \`PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python\` for etcd3):"
    echo
    for system in ticketing redis etcd; do
        echo "    python bench/python/lock_bench.py run --system $system --addrs ${ADDRS[$system]} --threads N --duration $DURATION --warmup $WARMUP"
    done
    echo
    echo "Raw results:"
    echo
    sed 's/^/    /' "$RESULTS"
    echo "<!-- python-bench:end -->"
} >"$BLOCK"
replace_doc_block "$ROOT/docs/benchmarks.md" python-bench "$BLOCK" "## Python clients"
log "wrote docs/benchmarks.md"
