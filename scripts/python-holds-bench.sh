#!/usr/bin/env bash
# Counted and multi-key holds through the Python package, in one run on this machine:
# the package (a blocking client shared by CALLERS threads, an asyncio client shared by
# CALLERS tasks) beside the Rust client (`ticketing bench`, CALLERS threads on one
# client) on the same 3-node cluster, and beside what a Python user builds on Redis with
# redis-py; then 10,000 holds waiting with places in line on one asyncio client.
#
#   scripts/python-holds-bench.sh                # CALLERS=64 DURATION=10 ROUNDS=2 WAITERS=10000
#   DURATION=5 ROUNDS=2 scripts/python-holds-bench.sh
#
# Cases (bench/python/holds_bench.py says each system's calls):
#   stock    every caller takes 1 of a stock of 1000 permits and gives it back; the
#            anchor a sorted-set counting semaphore in one Lua script through redis-py
#   multi    every caller takes 4 keys of its own at once and gives them back; the
#            anchor redis-py Locks over the 4 keys taken in sorted order
#   waiters  WAITERS holds with places (`client.hold([key], places=True)`) waiting on
#            one key through one ticketing.aio client, handed off one after another:
#            threads, places, hand-offs/s and the event loop's worst stall
# Installs Debian's redis-server (and etcd-server, which lock-services.sh starts too)
# when missing, builds Ticketing, makes a virtualenv in target/python-bench with the
# package (`pip install ./python`) and redis with hiredis, and starts on loopback a
# 3-node Ticketing cluster on 127.0.0.{1,2,3}:15925 (TICKETING_MAX_WAITERS=20000, as
# holds-bench.sh) and one Redis on 127.0.0.1:16979 without persistence. Systems
# alternate run by run (the order turns by one every case); medians over the rounds,
# ratios within a round. Writes the table, the commands, the date and the load average
# into docs/benchmarks.md between the python-holds-bench markers. Everything it starts
# it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings python-holds-bench 15925 12979 16979
CALLERS=${CALLERS:-64}
WAITERS=${WAITERS:-10000}
CASES=${CASES:-"stock multi"}
export TICKETING_MAX_WAITERS=${TICKETING_MAX_WAITERS:-20000}

install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
python_bench_venv "redis[hiredis]"
DRIVER="$ROOT/bench/python/holds_bench.py"

start_lock_services python-holds-bench
declare -A ADDRS=([ticketing-threads]="$TADDRS" [ticketing-asyncio]="$TADDRS" [rust]="$TADDRS"
    [redis-threads]="$RADDRS" [redis-asyncio]="$RADDRS")
run() {
    "$PY" "$DRIVER" run --case "$2" --system "$1" --addrs "${ADDRS[$1]}" --callers "$3" --duration "$4" \
        --warmup "$5" --ticketing "$TICKETING"
}
probe() {
    local out
    out=$(run "$1" stock 1 0.2 0 2>/dev/null) && [[ $out == *'"errors": 0,'* && $out != *'"pairs": 0,'* ]]
}
wait_lock_services ticketing-threads redis-threads

SYSTEMS=(ticketing-threads rust redis-threads ticketing-asyncio redis-asyncio)
RUNS=()
for c in $CASES; do RUNS+=("$c $CALLERS $DURATION $WARMUP"); done
bench_rounds "${RUNS[@]}"
if [ "$WAITERS" -gt 0 ]; then
    line=$("$PY" "$DRIVER" waiters --addrs "$TADDRS" --waiters "$WAITERS")
    echo "$line" >>"$RESULTS"
    log "waiters: $line"
    UPTIME_AFTER=$(uptime) # after the waiters too
fi

report_table() { "$PY" "$DRIVER" report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and case (+$WARMUP s"
    echo "warm-up), $CALLERS callers on one client each, systems alternating run by run; medians"
    echo "over the rounds, ratios within a round (the n-th run of each system is round n)."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), Python $("$PY" -c 'import platform; print(platform.python_version())'),"
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each case, each system, \`ROUNDS\` times; the nodes with TICKETING_MAX_WAITERS=$TICKETING_MAX_WAITERS):"
    echo
    local system
    for system in "${SYSTEMS[@]}"; do
        echo "    python bench/python/holds_bench.py run --case stock|multi --system $system --addrs ${ADDRS[$system]} --callers $CALLERS --duration $DURATION --warmup $WARMUP"
    done
    echo "    python bench/python/holds_bench.py waiters --addrs $TADDRS --waiters $WAITERS"
    echo
    echo "(\`--system rust\` runs \`ticketing bench stock --permits 1000 --count 1\` or \`ticketing bench multi"
    echo "--keys-per-hold 4\` with \`--threads $CALLERS --lease 30 --wait 5000 --json --quiet\`.)"
}
bench_report "## Python: counted and multi-key holds"
log "wrote docs/benchmarks.md"
