#!/usr/bin/env bash
# Counted and multi-key holds through the Go module, side by side in one run on this
# machine (docs/benchmarks.md, "Go clients"): the Rust client on the same cluster and
# the anchor a Go developer would build, then 10,000 goroutines waiting with places in
# line while the process's OS threads are counted.
#
#   scripts/go-holds-bench.sh                   # DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=2 scripts/go-holds-bench.sh
#   SCENARIOS=waiters ROUNDS=4 scripts/go-holds-bench.sh
#
# Scenarios (go/bench/holds.go; 64 goroutines or threads on ONE client each):
#   stock    each takes 1 permit of a key of capacity 1,000 and releases it at once:
#            the Go module's AcquirePermits, the Rust client (`ticketing bench stock`),
#            and etcd's concurrency.Mutex.TryLock over 1,000 slot keys (3 etcd nodes)
#   multi    each holds 4 keys of its own at once: the Go module's AcquireAll, the Rust
#            client (`ticketing bench multi`), and redsync taking 4 mutexes in sorted
#            key order (one Redis)
#   waiters  10,000 goroutines in AcquirePermits with OnPlace on one key, then handed
#            the key one after another; OS threads (/proc/self/task) before and while
#            they wait
# Systems alternate run by run (the order turns every round); medians over the rounds,
# ratios within a round; the 1-minute load average at the end of every run. Services as
# scripts/lock-services.sh starts them, on ports of their own (Ticketing :17325, etcd
# :17479, Redis :17579), the Ticketing nodes with TICKETING_MAX_WAITERS=20000. Writes
# the tables, the commands, the date and the load into docs/benchmarks.md between the
# go-holds-bench markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings go-holds-bench 17325 17479 17579
GOROUTINES=64
WAITERS=${WAITERS:-10000}
SCENARIOS=${SCENARIOS:-"stock multi waiters"}
export TICKETING_MAX_WAITERS=${TICKETING_MAX_WAITERS:-20000}

# --- what it needs -------------------------------------------------------------
install_lock_services
if [ -z "${NO_BUILD:-}" ]; then
    log "building"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
fi
BENCH="$ROOT/target/go-bench"
(cd "$ROOT/go/bench" && go build -o "$BENCH" .)

# --- start and always stop -----------------------------------------------------
start_lock_services go-holds-bench
declare -A ADDRS=([ticketing]="$TADDRS" [redis]="$RADDRS" [etcd]="$EADDRS")
# Up means serving: a short run of go-bench's plain pairs that met no error.
probe() {
    local out
    out=$(timeout 10 "$BENCH" run -system "$1" -addrs "${ADDRS[$1]}" -goroutines 1 -duration 0.2s -warmup 0s \
        2>/dev/null) && [[ $out == *'"errors":0'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing redis etcd

# The systems of a scenario, and one run of one of them (a JSON line).
systems_of() {
    case $1 in
        stock) echo "ticketing rust etcd" ;;
        multi) echo "ticketing rust redis" ;;
        waiters) echo "ticketing" ;;
    esac
}
rust_args() {
    case $1 in
        stock) echo "stock --threads $GOROUTINES --permits 1000 --count 1" ;;
        multi) echo "multi --threads $GOROUTINES --keys-per-hold 4" ;;
    esac
}
run() {
    local scenario=$1 system=$2 out
    if [ "$system" = rust ]; then
        # shellcheck disable=SC2046
        out=$("$TICKETING" bench $(rust_args "$scenario") --addr "$TADDRS" --duration "$DURATION" \
            --warmup "$WARMUP" --json --quiet)
        echo "{\"scenario\":\"$scenario\",\"load1\":$(cut -d' ' -f1 /proc/loadavg),\"rust\":$out}"
    elif [ "$scenario" = waiters ]; then
        "$BENCH" holds -scenario waiters -addrs "$TADDRS" -goroutines "$WAITERS"
    else
        "$BENCH" holds -scenario "$scenario" -system "$system" -addrs "${ADDRS[$system]}" \
            -goroutines "$GOROUTINES" -duration "${DURATION}s" -warmup "${WARMUP}s"
    fi
}

# --- the runs --------------------------------------------------------------------
RESULTS="$WORK/results.jsonl"
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
UPTIME_BEFORE=$(uptime)
for round in $(seq 1 "$ROUNDS"); do
    for scenario in $SCENARIOS; do
        read -ra systems <<<"$(systems_of $scenario)"
        n=${#systems[@]}
        for ((k = 0; k < n; k++)); do
            system=${systems[$(((k + round - 1) % n))]}
            line=$(run "$scenario" "$system")
            echo "$line" >>"$RESULTS"
            log "round $round: $scenario $system: ${line:0:220}"
        done
    done
done
UPTIME_AFTER=$(uptime)

# --- the report ------------------------------------------------------------------
report_table() { "$BENCH" holds-report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and scenario (+$WARMUP s"
    echo "warm-up), $GOROUTINES goroutines (the Rust client: threads) on one client each; systems"
    echo "alternating run by run, the order turning every round; medians over the rounds, ratios"
    echo "within a round; the 1-minute load average at the end of each run (whatever else the"
    echo "machine ran meanwhile counts in it): the ratios within one run are what count."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), $(go version | cut -d' ' -f3),"
    echo "$(cd "$ROOT/go/bench" && go list -m all | awk '$1 ~ /(redsync\/v4|redis\/go-redis\/v9|etcd\/client\/v3)$/ { print $1 " " $2 }' \
        | paste -sd, | sed 's/,/, /g'),"
    echo "$(etcd --version | head -1), $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each \`ROUNDS\` times; go/bench/holds.go; the Ticketing nodes with"
    echo "TICKETING_MAX_WAITERS=$TICKETING_MAX_WAITERS):"
    echo
    for system in ticketing etcd; do
        echo "    target/go-bench holds -scenario stock -system $system -addrs ${ADDRS[$system]} -goroutines $GOROUTINES -duration ${DURATION}s -warmup ${WARMUP}s"
    done
    echo "    ticketing bench $(rust_args stock) --addr $TADDRS --duration $DURATION --warmup $WARMUP --json --quiet"
    for system in ticketing redis; do
        echo "    target/go-bench holds -scenario multi -system $system -addrs ${ADDRS[$system]} -goroutines $GOROUTINES -duration ${DURATION}s -warmup ${WARMUP}s"
    done
    echo "    ticketing bench $(rust_args multi) --addr $TADDRS --duration $DURATION --warmup $WARMUP --json --quiet"
    echo "    target/go-bench holds -scenario waiters -addrs $TADDRS -goroutines $WAITERS"
}
bench_report "## Go clients: counted and multi-key holds"
log "wrote docs/benchmarks.md"
