#!/usr/bin/env bash
# Before/after of the servers (docs/performance.md §6): a 3-node cluster on
# 127.0.0.{1,2,3}:$PORT started from one binary, driven by `ticketing bench` (by default
# the current build's, so the client is the same; see CLIENT), stopped; then the same with the other
# binary. The binaries alternate run by run and the order flips every round.
#
#   scripts/server-ab.sh                          # BEFORE_REV=e1427e8 ROUNDS=3 DURATION=10
#   BEFORE=/path/to/old/ticketing CASES="rate1000" scripts/server-ab.sh
#   AFTER=/path/to/new/ticketing BEFORE=...   # two given binaries, nothing built
#
# CLIENT=own: each binary drives its own cluster with its own `ticketing bench`, so the
# whole product (client library and servers) is compared, as an upgrade of both would
# see it; the default drives both clusters with the current build's client, so only
# the servers differ.
#
# Cases: "rate1000" is a steady 1,000 pairs/s (8 threads sharing one Client, each on
# its own keys); "t64" is 64 threads sharing one Client, as fast as they go; "idle"
# (not run by default) is no load for IDLE_S seconds (20), its CPU figure the three
# servers' CPU in ms per second instead of per pair. Per run
# one line: binary, case, pairs/s, p50 of a pair, the three servers' CPU (utime +
# stime from /proc/PID/stat) per pair, and the 1-minute load average at the end; then
# the medians. Everything it starts it stops.
set -euo pipefail
PORT=${PORT:-17225}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CASES=${CASES:-"rate1000 t64"}
BEFORE_REV=${BEFORE_REV:-e1427e8}
source "$(dirname "$0")/cluster-lib.sh"

if [ -z "${AFTER:-}" ]; then
    AFTER="$ROOT/target/release/ticketing"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
fi
build_before
TCK=$(getconf CLK_TCK)

stop_cluster() {
    for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    NODE_PIDS=()
    PIDS=()
}

# One run: prints "name case pairs_per_s p50_ms server_us load".
run() {
    local name=$1 bin=$2 case=$3 s0 s1 out args client=$AFTER
    [ "${CLIENT:-after}" = own ] && client=$bin
    start_cluster_with "$bin"
    case $case in
        rate1000) args=(--threads 8 --rate 1000) ;;
        t64) args=(--threads 64) ;;
    esac
    # Let the cluster settle (elections, first connections) before counting.
    "$client" bench --addr "$ADDRS" --connections 1 --threads 4 --duration 1 --warmup 0 --quiet >/dev/null
    if [ "$case" = idle ]; then
        sleep 2
        s0=$(servers_ticks)
        sleep "${IDLE_S:-20}"
        s1=$(servers_ticks)
        stop_cluster
        awk -v n="$name" -v t=$((s1 - s0)) -v tck="$TCK" -v s="${IDLE_S:-20}" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
            'BEGIN { printf "%s idle 0 0 %.1f %s\n", n, t / tck / s * 1000, l }'
        return
    fi
    s0=$(servers_ticks)
    out=$("$client" bench --addr "$ADDRS" --connections 1 "${args[@]}" --duration "$DURATION" --warmup 0 --json --quiet)
    s1=$(servers_ticks)
    stop_cluster
    python3 - "$name" "$case" "$out" "$((s1 - s0))" "$TCK" <<'PY'
import json, sys
name, case, out, server_ticks, tck = sys.argv[1:]
r = json.loads(out)
pairs = max(r["pairs"], 1)
load = open("/proc/loadavg").read().split()[0]
print(f'{name} {case} {r["pairs_per_s"]:.0f} {r["latency_ms"]["p50"]:.3f} '
      f'{int(server_ticks) / int(tck) / pairs * 1e6:.1f} {load}')
PY
}

echo "binary case pairs/s p50_ms servers_cpu_us/pair load1" | tee "$WORK/runs"
for round in $(seq 1 "$ROUNDS"); do
    order=("before $BEFORE" "after $AFTER")
    [ $((round % 2)) -eq 0 ] && order=("after $AFTER" "before $BEFORE")
    for case in $CASES; do
        for entry in "${order[@]}"; do
            run ${entry% *} ${entry#* } "$case" | tee -a "$WORK/runs"
        done
    done
done
echo "medians:"
python3 - "$WORK/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
for case in dict.fromkeys(r[1] for r in rows):
    for name in ("before", "after"):
        sel = [r for r in rows if r[0] == name and r[1] == case]
        med = lambda i: statistics.median(float(r[i]) for r in sel)
        loads = sorted(float(r[5]) for r in sel)
        if case == "idle":
            print(f"{name:6} {case:>8}: servers {med(4):.1f} ms CPU/s "
                  f"(load {loads[0]}–{loads[-1]}, {len(sel)} runs)")
            continue
        print(f"{name:6} {case:>8}: {med(2):.0f} pairs/s, p50 {med(3):.3f} ms, "
              f"servers {med(4):.1f} µs/pair (load {loads[0]}–{loads[-1]}, {len(sel)} runs)")
PY
