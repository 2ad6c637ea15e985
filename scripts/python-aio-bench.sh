#!/usr/bin/env bash
# asyncio side by side, in one run on this machine: Ticketing's 3-node cluster through
# `ticketing.aio` vs redis-py's asyncio Lock on one Redis. TASKS tasks on one event
# loop share one client each, every task on keys of its own; acquire+release pairs/s
# and p50/p99 of a pair. Then WAITS acquires waiting at once through one Ticketing
# client (keys held by another): the process's threads and RSS while they wait.
#
#   scripts/python-aio-bench.sh                  # TASKS=1000 DURATION=10 ROUNDS=2 WAITS=10000
#   DURATION=5 ROUNDS=1 LOOPS="asyncio uvloop" scripts/python-aio-bench.sh
#
# Installs Debian's redis-server (and etcd-server, which lock-services.sh starts too)
# when missing, builds Ticketing, makes a virtualenv in target/python-bench with the
# package (`pip install ./python`), redis with hiredis, and uvloop, and starts on
# loopback a 3-node Ticketing cluster on 127.0.0.{1,2,3}:15225 and one Redis on
# 127.0.0.1:16379 without persistence. Systems alternate run by run; medians over the
# rounds. Writes the table, the commands, the date and the load average into
# docs/benchmarks.md between the python-aio-bench markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings python-aio-bench 15225 12379 16379
TASKS=${TASKS:-1000}
WAITS=${WAITS:-10000}
LOOPS=${LOOPS:-asyncio}

install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
python_bench_venv "redis[hiredis]" uvloop
DRIVER="$ROOT/bench/python/aio_bench.py"

start_lock_services python-aio-bench
declare -A ADDRS=([ticketing]="$TADDRS" [redis]="$RADDRS")
loop_flag() { [ "$1" = uvloop ] && echo --uvloop || true; }
run() { "$PY" "$DRIVER" pairs --system "$1" --addrs "${ADDRS[$1]}" --tasks "$2" --duration "$3" --warmup "$4" $(loop_flag "$5"); }
probe() {
    local out
    out=$(run "$1" 1 0.2 0 asyncio 2>/dev/null) && [[ $out == *'"errors": 0,'* && $out != *'"pairs": 0,'* ]]
}
wait_lock_services ticketing redis

SYSTEMS=(ticketing redis)
RUNS=()
for loop in $LOOPS; do RUNS+=("$TASKS $DURATION $WARMUP $loop"); done
bench_rounds "${RUNS[@]}"
line=$("$PY" "$DRIVER" waits --addrs "$TADDRS" --waits "$WAITS")
echo "$line" >>"$RESULTS"
log "waits: $line"
UPTIME_AFTER=$(uptime) # after the waits too

report_table() { "$PY" "$DRIVER" report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and loop"
    echo "(+$WARMUP s warm-up), systems alternating run by run; medians over the rounds."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), Python $("$PY" -c 'import platform; print(platform.python_version())'),"
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis|uvloop)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands:"
    echo
    for system in ticketing redis; do
        echo "    python bench/python/aio_bench.py pairs --system $system --addrs ${ADDRS[$system]} --tasks $TASKS --duration $DURATION --warmup $WARMUP"
    done
    echo "    python bench/python/aio_bench.py waits --addrs $TADDRS --waits $WAITS"
}
bench_report "## Python asyncio clients"
log "wrote docs/benchmarks.md"
