#!/usr/bin/env bash
# RSS per node of a 3-node cluster holding KEYS locks (default 1,000,000).
#
#   scripts/memory.sh                 # KEYS=1000000 CONNECTIONS=16 THREADS=64
#
# Acquires KEYS distinct keys with 250 s leases through `ticketing bench hold`
# (never released), then reads VmRSS of each node from /proc/PID/status.
set -euo pipefail
KEYS=${KEYS:-1000000}
CONNECTIONS=${CONNECTIONS:-16}
THREADS=${THREADS:-64}
PORT=${PORT:-17225}
source "$(dirname "$0")/cluster-lib.sh"
start_cluster
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "RSS before (MiB): node1 $(rss_mib 1)  node2 $(rss_mib 2)  node3 $(rss_mib 3)"
start=$(date +%s)
"$TICKETING" bench hold --addr "$ADDRS" --keys "$KEYS" --lease 250 --warmup 0 --connections "$CONNECTIONS" \
    --threads "$THREADS" --quiet
echo "acquired in $(($(date +%s) - start)) s; leader: keys_held=$(leader_status keys_held) applied_index=$(leader_status applied_index)"
echo "RSS holding (MiB): node1 $(rss_mib 1)  node2 $(rss_mib 2)  node3 $(rss_mib 3)"
sleep 10
echo "RSS 10 s later (MiB): node1 $(rss_mib 1)  node2 $(rss_mib 2)  node3 $(rss_mib 3)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
