#!/usr/bin/env bash
# What a Node.js developer would pick, side by side, in one run on this machine: Ticketing's
# 3-node cluster through the Node package vs redlock 5 over ioredis on one Redis (and, as the
# ceiling of any binding, the same cluster through the Rust client). One Node
# process per run, LOOPS concurrent async loops sharing one client, every loop on a key of
# its own; acquire+release pairs/s and p50/p99 of a pair; at 64 loops and at 1.
#
#   scripts/node-bench.sh                       # DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=1 scripts/node-bench.sh
#
# Installs Debian's etcd-server and redis-server when missing (apt-get; etcd only because
# scripts/lock-services.sh starts it beside the others), builds Ticketing (`cargo build
# --release`: the server and libticketing.so), installs bench/node's packages (ioredis,
# redlock, and the package from node/ through a link), and starts on loopback the
# services of scripts/lock-services.sh (Ticketing on :15325, Redis on :16479). Systems
# alternate run by run; the table reports medians over the rounds. Writes the table, the
# commands, the date and the load average into docs/benchmarks.md between the node-bench
# markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings node-bench 15325 12479 16479

# --- what it needs -------------------------------------------------------------
install_lock_services
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
export TICKETING_LIBRARY="$ROOT/target/release/libticketing.so"
(cd "$ROOT/bench/node" && npm install --no-audit --no-fund --silent >/dev/null)
BENCH="$ROOT/bench/node/lock_bench.mjs"
version() { node -p "require('$1/package.json').version"; }

# --- start and always stop -----------------------------------------------------
start_lock_services node-bench
declare -A ADDRS=([ticketing]="$TADDRS" [redis]="$RADDRS")
# rust: the same cluster through the Rust client (`ticketing bench`, LOOPS threads on one
# client): what the cluster itself gives on this machine, the ceiling of any binding.
rust() {
    "$TICKETING" bench uncontended --addr "$TADDRS" --threads "$1" --duration "$2" --warmup "$3" --json --quiet \
        | node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => { const r = JSON.parse(s);
            console.log(JSON.stringify({ system: "rust", loops: r.threads, pairs: r.pairs, seconds: r.elapsed_s,
              pairs_per_s: Math.round(r.pairs_per_s), p50_ms: r.latency_ms.p50, p99_ms: r.latency_ms.p99,
              errors: r.errors_total })); })'
}
run() {
    if [[ $1 == rust ]]; then rust "$2" "$3" "$4"; else node "$BENCH" "$1" "${ADDRS[$1]}" "$2" "$3" "$4"; fi
}
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    [[ $1 == etcd ]] && return 0
    out=$(timeout 10 node "$BENCH" "$1" "${ADDRS[$1]}" 1 0.2 0 2>/dev/null) \
        && [[ $out == *'"errors":0'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing redis

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing redis rust)
bench_rounds -r "64 $DURATION $WARMUP" "1 $DURATION $WARMUP"

# --- the report ------------------------------------------------------------------
report_table() { node "$ROOT/bench/node/report.mjs" "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and loop count (+$WARMUP s"
    echo "warm-up), one Node process per run, the loops sharing one client, each on a key of its"
    echo "own; systems alternating run by run; medians over the rounds. The Rust client's row"
    echo "(\`ticketing bench\`, as many threads on one client) is the same cluster without Node.js:"
    echo "what the three nodes give on this machine, and so the most any binding could reach."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), Node.js $(node --version),"
    echo "koffi $(version "$ROOT/node/node_modules/koffi"), ioredis $(version "$ROOT/bench/node/node_modules/ioredis"),"
    echo "redlock $(version "$ROOT/bench/node/node_modules/redlock"), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each \`ROUNDS\` times; bench/node/lock_bench.mjs, with TICKETING_LIBRARY=target/release/libticketing.so):"
    echo
    for loops in 64 1; do
        for system in ticketing redis; do
            echo "    node bench/node/lock_bench.mjs $system ${ADDRS[$system]} $loops $DURATION $WARMUP"
        done
        echo "    ticketing bench uncontended --addr $TADDRS --threads $loops --duration $DURATION --warmup $WARMUP --json"
    done
}
bench_report "## Node.js clients"
log "wrote docs/benchmarks.md"
