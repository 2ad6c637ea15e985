#!/usr/bin/env bash
# What a Go developer would pick, side by side, in one run on this machine: Ticketing's
# 3-node cluster through the Go module vs etcd's concurrency.Mutex on a 3-node etcd vs
# redsync over go-redis on one Redis. GOROUTINES goroutines share one client each, every
# goroutine on a key of its own; acquire+release pairs/s and p50/p99 of a pair.
#
#   scripts/go-bench.sh                         # GOROUTINES=64 DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=1 scripts/go-bench.sh
#
# Installs Debian's etcd-server and redis-server when missing (apt-get), builds
# Ticketing (`cargo build --release`: the server and libticketing.a) and go/bench (a
# module of its own: etcd's client v3, redsync v4, go-redis v9), and starts on loopback
# the services of scripts/lock-services.sh (Ticketing on :15325, etcd on :12479, Redis on
# :16479). Systems alternate run by run; the table reports medians over the rounds.
# Writes the table, the commands, the date and the load average into docs/benchmarks.md
# between the go-bench markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
GOROUTINES=${GOROUTINES:-64}
TPORT=15325
EPORT=12479
RPORT=16479
export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-go-bench-secret-0123456789}
export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-go-bench-peer-secret-0123456789}

log() { echo "go-bench: $*" >&2; }

# --- what it needs -------------------------------------------------------------
source "$ROOT/scripts/lock-services.sh"
install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
TICKETING="$ROOT/target/release/ticketing"
BENCH="$ROOT/target/go-bench"
(cd "$ROOT/go/bench" && go build -o "$BENCH" .)

# --- start and always stop -----------------------------------------------------
start_lock_services go-bench
declare -A ADDRS=([ticketing]="$TADDRS" [redis]="$RADDRS" [etcd]="$EADDRS")
run() { "$BENCH" run -system "$1" -addrs "${ADDRS[$1]}" -goroutines "$2" -duration "$3" -warmup "$4"; }
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    out=$(timeout 10 "$BENCH" run -system "$1" -addrs "${ADDRS[$1]}" -goroutines 1 -duration 0.2s -warmup 0s \
        2>/dev/null) && [[ $out == *'"errors":0'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing redis etcd

# --- the runs --------------------------------------------------------------------
RESULTS="$WORK/results.jsonl"
SYSTEMS=(ticketing redis etcd)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
UPTIME_BEFORE=$(uptime)
for round in $(seq 1 "$ROUNDS"); do
    for k in 0 1 2; do
        system=${SYSTEMS[$(((k + round) % 3))]}
        line=$(run "$system" "$GOROUTINES" "${DURATION}s" "${WARMUP}s")
        echo "$line" >>"$RESULTS"
        log "round $round: $line"
    done
done
UPTIME_AFTER=$(uptime)

# --- the report ------------------------------------------------------------------
TABLE=$("$BENCH" report "$RESULTS")
echo "$TABLE"
BLOCK="$WORK/block.md"
{
    echo "<!-- go-bench:begin (written by scripts/go-bench.sh; do not edit by hand) -->"
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system (+$WARMUP s warm-up),"
    echo "$GOROUTINES goroutines on one client each, each on a key of its own; systems"
    echo "alternating run by run; medians over the rounds."
    echo
    echo "$TABLE"
    echo
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
    echo "kernel $(uname -r). \`uptime\` before and after the runs:"
    echo
    echo "    $UPTIME_BEFORE"
    echo "    $UPTIME_AFTER"
    echo
    echo "Versions: $("$TICKETING" --version), $(go version | cut -d' ' -f3),"
    echo "$(cd "$ROOT/go/bench" && go list -m all | awk '$1 ~ /(redsync\/v4|redis\/go-redis\/v9|etcd\/client\/v3)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'),"
    echo "$(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
    echo
    echo "Commands (each system \`ROUNDS\` times; go/bench/main.go):"
    echo
    for system in ticketing redis etcd; do
        echo "    target/go-bench run -system $system -addrs ${ADDRS[$system]} -goroutines $GOROUTINES -duration ${DURATION}s -warmup ${WARMUP}s"
    done
    echo
    echo "Raw results:"
    echo
    sed 's/^/    /' "$RESULTS"
    echo "<!-- go-bench:end -->"
} >"$BLOCK"
replace_doc_block "$ROOT/docs/benchmarks.md" go-bench "$BLOCK" "## Go clients"
log "wrote docs/benchmarks.md"
