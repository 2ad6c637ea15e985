#!/usr/bin/env bash
# Counted and multi-key holds and places in line through the Node.js package, side by side
# in one run on this machine (docs/benchmarks.md, "Node.js: counted and multi-key holds"):
#   stock    64 async loops on one client, each taking 1 of a stock of 1,000 and giving it
#            back at once — the package (client.hold, one key of capacity 1000) vs the
#            Rust client (`ticketing bench stock`, 64 threads) on the same 3 nodes vs
#            redis-semaphore's Semaphore over ioredis on one Redis;
#   multi    64 loops, each holding 4 keys of its own at once — the package (client.hold
#            of 4 keys) vs the Rust client (`ticketing bench multi`) vs redlock 5's
#            multi-resource acquire (the 4 keys sorted) over ioredis;
#   waiters  10,000 holds of one client waiting on one key with onPlace, handed the key
#            one after another: hand-offs/s, places heard, threads, the event loop's
#            worst stall (a 1 ms timer).
#
#   scripts/node-holds-bench.sh                        # DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=3 scripts/node-holds-bench.sh
#
# Needs what scripts/node-bench.sh needs (it installs the same way); the nodes run with
# TICKETING_MAX_WAITERS=20000 (default 4096). Systems alternate run by run (the order
# turning every round); the table has the medians over the rounds and the load average
# at the end of each run. Writes the block between the node-holds-bench markers of
# docs/benchmarks.md. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings node-holds-bench 19325 19479 19579
WAITERS=${WAITERS:-10000}
export TICKETING_MAX_WAITERS=${TICKETING_MAX_WAITERS:-20000}

# --- what it needs -------------------------------------------------------------
install_lock_services
if [ -z "${NO_BUILD:-}" ]; then
    log "building"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
fi
export TICKETING_LIBRARY="$ROOT/target/release/libticketing.so"
(cd "$ROOT/bench/node" && npm install --no-audit --no-fund --silent >/dev/null)
BENCH="$ROOT/bench/node/holds_bench.mjs"
version() { node -p "require('$1/package.json').version"; }

# --- start and always stop -----------------------------------------------------
start_lock_services node-holds-bench
declare -A ANCHOR=([stock]=redis-semaphore [multi]=redlock)
declare -A RUST_ARGS=([stock]="stock --permits 1000 --count 1" [multi]="multi --keys-per-hold 4")
# rust: the same workload on the same cluster through the Rust client (LOOPS threads on
# one client), in lock_bench's JSON shape.
rust() {
    local workload=$1 loops=$2 duration=$3 warmup=$4
    # shellcheck disable=SC2086 # RUST_ARGS are words
    "$TICKETING" bench ${RUST_ARGS[$workload]} --addr "$TADDRS" --threads "$loops" --duration "$duration" \
        --warmup "$warmup" --json --quiet \
        | node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => { const r = JSON.parse(s);
            console.log(JSON.stringify({ workload: process.argv[1], system: "rust", loops: r.threads, pairs: r.pairs,
              seconds: r.elapsed_s, pairs_per_s: Math.round(r.pairs_per_s), p50_ms: r.latency_ms.p50,
              p99_ms: r.latency_ms.p99, errors: r.errors_total, load1: require("os").loadavg()[0] })); })' "$workload"
}
# run SYSTEM WORKLOAD LOOPS DURATION WARMUP; SYSTEM is ticketing, anchor or rust.
run() {
    case $1 in
        rust) rust "${@:2}" ;;
        ticketing) node "$BENCH" "$2" ticketing "$TADDRS" "${@:3}" ;;
        anchor) node "$BENCH" "$2" "${ANCHOR[$2]}" "$RADDRS" "${@:3}" ;;
    esac
}
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    case $1 in
        ticketing) out=$(timeout 10 node "$BENCH" stock ticketing "$TADDRS" 1 0.2 0 2>/dev/null) ;;
        redis) out=$(timeout 10 node "$BENCH" multi redlock "$RADDRS" 1 0.2 0 2>/dev/null) ;;
    esac && [[ $out == *'"errors":0'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing redis

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing anchor rust)
bench_rounds -r "stock 64 $DURATION $WARMUP" "multi 64 $DURATION $WARMUP"
for round in $(seq 1 "$ROUNDS"); do
    line=$(node "$BENCH" waiters ticketing "$TADDRS" "$WAITERS")
    echo "$line" >>"$RESULTS"
    log "round $round: $line"
done
UPTIME_AFTER=$(uptime)

# --- the report ------------------------------------------------------------------
report_table() { node "$ROOT/bench/node/holds_report.mjs" "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and workload (+$WARMUP s"
    echo "warm-up), one Node process per run, 64 loops sharing one client; systems alternating run"
    echo "by run (the order turning every round); medians over the rounds, the 1-minute load"
    echo "average at the end of each run beside them (its range). Then $ROUNDS run(s) of $WAITERS holds"
    echo "waiting on one key, one row each."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), Node.js $(node --version),"
    echo "koffi $(version "$ROOT/node/node_modules/koffi"), ioredis $(version "$ROOT/bench/node/node_modules/ioredis"),"
    echo "redis-semaphore $(version "$ROOT/bench/node/node_modules/redis-semaphore"),"
    echo "redlock $(version "$ROOT/bench/node/node_modules/redlock"), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each \`ROUNDS\` times; bench/node/holds_bench.mjs, with TICKETING_LIBRARY=target/release/libticketing.so;"
    echo "the nodes with TICKETING_MAX_WAITERS=$TICKETING_MAX_WAITERS):"
    echo
    for workload in stock multi; do
        echo "    node bench/node/holds_bench.mjs $workload ticketing $TADDRS 64 $DURATION $WARMUP"
        echo "    node bench/node/holds_bench.mjs $workload ${ANCHOR[$workload]} $RADDRS 64 $DURATION $WARMUP"
        echo "    ticketing bench ${RUST_ARGS[$workload]} --addr $TADDRS --threads 64 --duration $DURATION --warmup $WARMUP --json"
    done
    echo "    node bench/node/holds_bench.mjs waiters ticketing $TADDRS $WAITERS"
}
bench_report "## Node.js: counted and multi-key holds"
log "wrote docs/benchmarks.md"
