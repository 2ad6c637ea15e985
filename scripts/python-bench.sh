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
missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
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
WORK=$(mktemp -d "${BENCH_TMP:-/dev/shm}/ticketing-python-bench.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TPEERS="1@127.0.0.1:$TPORT,2@127.0.0.2:$TPORT,3@127.0.0.3:$TPORT"
for i in 1 2 3; do
    TICKETING_LISTEN=127.0.0.$i:$TPORT TICKETING_NODE_ID=$i TICKETING_CLUSTER_SELF=127.0.0.$i:$TPORT \
        TICKETING_CLUSTER_PEERS=$TPEERS TICKETING_CLUSTER_STATE=new RUST_LOG=warn \
        "$TICKETING" server 2>"$WORK/ticketing-$i.log" &
    PIDS+=($!)
done
ECLUSTER="e1=http://127.0.0.1:$((EPORT + 1)),e2=http://127.0.0.2:$((EPORT + 1)),e3=http://127.0.0.3:$((EPORT + 1))"
for i in 1 2 3; do
    etcd --name e$i --data-dir "$WORK/etcd-$i" \
        --listen-client-urls http://127.0.0.$i:$EPORT --advertise-client-urls http://127.0.0.$i:$EPORT \
        --listen-peer-urls http://127.0.0.$i:$((EPORT + 1)) \
        --initial-advertise-peer-urls http://127.0.0.$i:$((EPORT + 1)) \
        --initial-cluster "$ECLUSTER" --initial-cluster-state new --initial-cluster-token python-bench \
        --logger zap --log-outputs stderr --log-level error 2>"$WORK/etcd-$i.log" &
    PIDS+=($!)
done
redis-server --bind 127.0.0.1 --port $RPORT --save '' --appendonly no --protected-mode no \
    --daemonize no --logfile "$WORK/redis.log" &
PIDS+=($!)

declare -A ADDRS=(
    [ticketing]="127.0.0.1:$TPORT,127.0.0.2:$TPORT,127.0.0.3:$TPORT"
    [redis]="127.0.0.1:$RPORT"
    [etcd]="127.0.0.1:$EPORT"
)
run() { "$PY" "$DRIVER" run --system "$1" --addrs "${ADDRS[$1]}" --threads "$2" --duration "$3" --warmup "$4"; }

log "waiting for the three systems"
for system in ticketing redis etcd; do
    for _ in $(seq 1 60); do
        # Up means serving: a short run that did pairs and met no error.
        if out=$(run $system 1 0.2 0 2>/dev/null) && [[ $out == *'"errors": 0,'* && $out != *'"pairs": 0,'* ]]; then
            continue 2
        fi
        sleep 0.5
    done
    log "$system did not come up; logs in $WORK"; tail -5 "$WORK"/*.log >&2; exit 1
done

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
    echo "$("$PY" -m pip list 2>/dev/null | awk '$1 ~ /^(redis|hiredis|etcd3|grpcio|protobuf)$/ { printf "%s %s, ", $1, $2 }')"
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
DOC="$ROOT/docs/benchmarks.md"
if grep -q '<!-- python-bench:begin' "$DOC"; then
    awk -v block="$BLOCK" '
        /<!-- python-bench:begin/ { while ((getline line < block) > 0) print line; skip = 1; next }
        /<!-- python-bench:end -->/ { skip = 0; next }
        !skip { print }' "$DOC" >"$WORK/doc.md"
    cp "$WORK/doc.md" "$DOC"
else
    { echo; echo "## Python clients"; echo; cat "$BLOCK"; } >>"$DOC"
fi
log "wrote docs/benchmarks.md"
