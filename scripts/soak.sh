#!/usr/bin/env bash
# A soak at a steady rate on a 3-node cluster, sampling each node's RSS.
#
#   scripts/soak.sh [--minutes N]     # default 10; RATE=2000 pairs/s, INTERVAL=30 s
#
# Flat RSS over the run means log compaction works: the log is cut at every
# snapshot, so memory does not grow with the number of entries.
set -euo pipefail
MINUTES=10
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) MINUTES=$2; shift 2 ;;
        -h|--help) sed -n 2,8p "$0"; exit 0 ;;
        *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
RATE=${RATE:-2000}
INTERVAL=${INTERVAL:-30}
PORT=${PORT:-18225}
source "$(dirname "$0")/cluster-lib.sh"
start_cluster
seconds=$((MINUTES * 60))
"$TICKETING" bench uncontended --addr "$ADDRS" --connections 8 --keys 1000 --rate "$RATE" \
    --duration "$seconds" --warmup 0 --quiet --json >"$WORK/soak.json" &
BENCH=$!
PIDS+=($BENCH)
start=$(date +%s)
echo "| t (s) | node1 MiB | node2 MiB | node3 MiB | leader applied_index | load avg |"
echo "|---:|---:|---:|---:|---:|---:|"
while kill -0 "$BENCH" 2>/dev/null; do
    t=$(($(date +%s) - start))
    echo "| $t | $(rss_mib 1) | $(rss_mib 2) | $(rss_mib 3) | $(leader_status applied_index) | $(cut -d' ' -f1 /proc/loadavg) |"
    for _ in $(seq 1 "$INTERVAL"); do
        kill -0 "$BENCH" 2>/dev/null || break
        sleep 1
    done
done
wait "$BENCH" || true
echo "| $(($(date +%s) - start)) (end) | $(rss_mib 1) | $(rss_mib 2) | $(rss_mib 3) | $(leader_status applied_index) | $(cut -d' ' -f1 /proc/loadavg) |"
echo
echo "bench: $(cat "$WORK/soak.json")"
