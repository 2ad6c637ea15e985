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
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
TASKS=${TASKS:-1000}
WAITS=${WAITS:-10000}
LOOPS=${LOOPS:-asyncio}
TPORT=15225
EPORT=12379
RPORT=16379
export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-python-bench-secret-0123456789}
export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-python-bench-peer-secret-0123456789}

log() { echo "python-aio-bench: $*" >&2; }

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
"$PY" -m pip install --quiet "redis[hiredis]" uvloop
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

RESULTS="$WORK/results.jsonl"
SYSTEMS=(ticketing redis)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
UPTIME_BEFORE=$(uptime)
run_no=0
for round in $(seq 1 "$ROUNDS"); do
    for loop in $LOOPS; do
        for k in 0 1; do
            system=${SYSTEMS[$(((k + run_no) % 2))]}
            line=$(run "$system" "$TASKS" "$DURATION" "$WARMUP" "$loop")
            echo "$line" >>"$RESULTS"
            log "round $round, $loop, $TASKS tasks: $line"
        done
        run_no=$((run_no + 1))
    done
done
line=$("$PY" "$DRIVER" waits --addrs "$TADDRS" --waits "$WAITS")
echo "$line" >>"$RESULTS"
log "waits: $line"
UPTIME_AFTER=$(uptime)

TABLE=$("$PY" "$DRIVER" report "$RESULTS")
echo "$TABLE"
BLOCK="$WORK/block.md"
{
    echo "<!-- python-aio-bench:begin (written by scripts/python-aio-bench.sh; do not edit by hand) -->"
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and loop"
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
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis|uvloop)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'), $(redis-server --version | cut -d' ' -f1-3)."
    echo
    echo "Commands:"
    echo
    for system in ticketing redis; do
        echo "    python bench/python/aio_bench.py pairs --system $system --addrs ${ADDRS[$system]} --tasks $TASKS --duration $DURATION --warmup $WARMUP"
    done
    echo "    python bench/python/aio_bench.py waits --addrs $TADDRS --waits $WAITS"
    echo
    echo "Raw results:"
    echo
    sed 's/^/    /' "$RESULTS"
    echo "<!-- python-aio-bench:end -->"
} >"$BLOCK"
replace_doc_block "$ROOT/docs/benchmarks.md" python-aio-bench "$BLOCK" "## Python asyncio clients"
log "wrote docs/benchmarks.md"
