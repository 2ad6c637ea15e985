#!/usr/bin/env bash
# What a Prometheus scrape costs the lock path (docs/benchmarks.md, "Scrape cost"):
# one 3-node cluster on 127.0.0.{1,2,3}:$PORT with metrics on :$METRICS_PORT, driven
# by `ticketing bench` with 64 workers; runs alternate between "scraped" (every node's
# /metrics fetched every 100 ms by one scraper process, like three Prometheus jobs at a
# 100 ms interval — 150 times the usual rate) and "quiet" (no scraper), the order
# flipping every round. Prints pairs/s and p50 per run, the 1-minute load average, then
# the medians and their ratio.
#
#   scripts/scrape-cost.sh                # ROUNDS=4 DURATION=10 THREADS=64
set -euo pipefail
PORT=${PORT:-23225}
METRICS_PORT=${METRICS_PORT:-23325}
ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-10}
THREADS=${THREADS:-64}
source "$(dirname "$0")/cluster-lib.sh"
start_cluster

# One process fetching the three nodes' /metrics every 100 ms until killed; it
# checks every answer is a whole exposition, so a broken scrape cannot pass unseen.
scraper() {
    exec python3 - "$METRICS_PORT" <<'PY'
import sys, time, urllib.request
port = sys.argv[1]
urls = [f"http://127.0.0.{i}:{port}/metrics" for i in (1, 2, 3)]
n = 0
while True:
    start = time.monotonic()
    for url in urls:
        body = urllib.request.urlopen(url, timeout=2).read()
        if b"ticketing_grants_total" not in body:
            sys.exit(f"bad scrape of {url}")
        n += 1
    time.sleep(max(0.0, 0.1 - (time.monotonic() - start)))
PY
}

run() { # mode -> "pairs/s p50_ms"
    local mode=$1 scraper_pid="" out
    if [ "$mode" = scraped ]; then
        scraper >&2 &
        scraper_pid=$!
        sleep 0.3
    fi
    out=$("$TICKETING" bench uncontended --addr "$ADDRS" --connections 4 --threads "$THREADS" \
        --duration "$DURATION" --warmup 1 --json --quiet) || exit 1
    if [ -n "$scraper_pid" ]; then
        kill "$scraper_pid" 2>/dev/null || true
        wait "$scraper_pid" 2>/dev/null || true
    fi
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); print("%.0f %.3f" % (r["pairs_per_s"], r["latency_ms"]["p50"]))' "$out"
}

declare -A RESULTS
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order="quiet scraped"; else order="scraped quiet"; fi
    for mode in $order; do
        read -r pairs p50 <<<"$(run "$mode")"
        load=$(cut -d' ' -f1 /proc/loadavg)
        printf 'round %d  %-8s  pairs/s %8s  p50 %6s ms  load %s\n' "$round" "$mode" "$pairs" "$p50" "$load"
        RESULTS[$mode]+="$pairs "
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
quiet=$(median <<<"${RESULTS[quiet]}")
scraped=$(median <<<"${RESULTS[scraped]}")
echo "median pairs/s: quiet $quiet, scraped $scraped, scraped/quiet $(awk -v a="$scraped" -v b="$quiet" 'BEGIN { printf "%.3f", a / b }')"
