#!/usr/bin/env bash
# Before/after of the official client (docs/performance.md §5): one 3-node cluster
# on 127.0.0.{1,2,3}:$PORT run by the current build, driven by `ticketing bench`
# from two binaries that alternate run by run (the order flips every round).
#
#   scripts/client-ab.sh                  # BEFORE_REV=94d9a3b ROUNDS=3 DURATION=10
#   BEFORE=/path/to/old/ticketing ROUNDS=5 scripts/client-ab.sh
#
# Without BEFORE, the before binary is built from git revision $BEFORE_REV (exported
# with `git archive`) into target/ab-before. Per run it prints one line: binary,
# threads, pairs/s, p50 of a pair, the bench process's CPU (client library + workers)
# per pair, the three servers' CPU per pair, and the 1-minute load average at the end.
# Then the medians per binary and thread count. Everything it starts it stops.
set -euo pipefail
PORT=${PORT:-17225}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
THREADS=${THREADS:-"64 1"}
BEFORE_REV=${BEFORE_REV:-94d9a3b}
source "$(dirname "$0")/cluster-lib.sh"

AFTER="$ROOT/target/release/ticketing"
build_before
start_cluster
TCK=$(getconf CLK_TCK)

# One run: prints "name threads pairs_per_s p50_ms client_us server_us load".
run() {
    local name=$1 bin=$2 threads=$3 s0 s1 out
    s0=$(servers_ticks)
    out=$(/usr/bin/time -f "%U %S" -o "$WORK/time" "$bin" bench --addr "$ADDRS" --connections 1 \
        --threads "$threads" --duration "$DURATION" --warmup 0 --json --quiet)
    s1=$(servers_ticks)
    python3 - "$name" "$threads" "$out" "$(cat "$WORK/time")" "$((s1 - s0))" "$TCK" <<'EOF'
import json, sys
name, threads, out, cpu, server_ticks, tck = sys.argv[1:]
r = json.loads(out)
user, system = map(float, cpu.split())
pairs = max(r["pairs"], 1)
load = open("/proc/loadavg").read().split()[0]
print(f'{name} {threads} {r["pairs_per_s"]:.0f} {r["latency_ms"]["p50"]:.3f} '
      f'{(user + system) / pairs * 1e6:.1f} {int(server_ticks) / int(tck) / pairs * 1e6:.1f} {load}')
EOF
}

echo "binary threads pairs/s p50_ms client_cpu_us/pair servers_cpu_us/pair load1" | tee "$WORK/runs"
for round in $(seq 1 "$ROUNDS"); do
    order=("before $BEFORE" "after $AFTER")
    [ $((round % 2)) -eq 0 ] && order=("after $AFTER" "before $BEFORE")
    for threads in $THREADS; do
        for entry in "${order[@]}"; do
            run ${entry% *} ${entry#* } "$threads" | tee -a "$WORK/runs"
        done
    done
done
echo "medians:"
python3 - "$WORK/runs" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
for threads in sorted({r[1] for r in rows}, key=int, reverse=True):
    for name in ("before", "after"):
        sel = [r for r in rows if r[0] == name and r[1] == threads]
        med = lambda i: statistics.median(float(r[i]) for r in sel)
        loads = sorted(float(r[6]) for r in sel)
        print(f"{name:6} {threads:>3} threads: {med(2):.0f} pairs/s, p50 {med(3):.3f} ms, "
              f"client {med(4):.1f} µs/pair, servers {med(5):.1f} µs/pair (load {loads[0]}–{loads[-1]}, {len(sel)} runs)")
EOF
