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
source "$ROOT/scripts/lock-services.sh"
bench_settings go-bench 15325 12479 16479
GOROUTINES=${GOROUTINES:-64}

# --- what it needs -------------------------------------------------------------
install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
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
SYSTEMS=(ticketing redis etcd)
bench_rounds -r "$GOROUTINES ${DURATION}s ${WARMUP}s"

# --- the report ------------------------------------------------------------------
report_table() { "$BENCH" report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system (+$WARMUP s warm-up),"
    echo "$GOROUTINES goroutines on one client each, each on a key of its own; systems"
    echo "alternating run by run; medians over the rounds."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), $(go version | cut -d' ' -f3),"
    echo "$(cd "$ROOT/go/bench" && go list -m all | awk '$1 ~ /(redsync\/v4|redis\/go-redis\/v9|etcd\/client\/v3)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'),"
    echo "$(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each system \`ROUNDS\` times; go/bench/main.go):"
    echo
    for system in ticketing redis etcd; do
        echo "    target/go-bench run -system $system -addrs ${ADDRS[$system]} -goroutines $GOROUTINES -duration ${DURATION}s -warmup ${WARMUP}s"
    done
}
bench_report "## Go clients"
log "wrote docs/benchmarks.md"
