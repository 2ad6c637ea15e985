#!/usr/bin/env bash
# RSS per node of a 3-node cluster holding KEYS locks (default 1,000,000), and of one
# Redis holding the same keys beside it.
#
#   scripts/memory.sh                 # KEYS=1000000 CONNECTIONS=16 THREADS=64
#   REDIS=0 scripts/memory.sh         # without the Redis figure
#   SERVER=/path/to/ticketing REDIS=0 scripts/memory.sh   # the nodes from another build
#                                      # (nothing built; the bench is this checkout's)
#
# Acquires KEYS distinct keys with 250 s leases through `ticketing bench hold`
# (never released), then reads VmRSS of each node from /proc/PID/status. Then starts
# one Redis (no persistence) on 127.0.0.1:$((PORT + 2000)), loads the same number of
# keys of the same shape with `SET key owner PX 250000` (owners of the same shape, 16
# of them, as the bench's 16 connections use), and reads its VmRSS the same way.
# Installs redis-server (apt-get) when missing. Everything it starts it stops.
set -euo pipefail
KEYS=${KEYS:-1000000}
CONNECTIONS=${CONNECTIONS:-16}
THREADS=${THREADS:-64}
PORT=${PORT:-17225}
REDIS=${REDIS:-1}
source "$(dirname "$0")/cluster-lib.sh"
if [ -n "${SERVER:-}" ]; then
    echo "servers: $SERVER ($("$SERVER" --version))"
    start_cluster_with "$SERVER"
else
    start_cluster
fi
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
[ "$REDIS" = 1 ] || exit 0

if ! command -v redis-server >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
RPORT=$((PORT + 2000))
redis-server --bind 127.0.0.1 --port "$RPORT" --save '' --appendonly no --daemonize no \
    >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
REDIS_PID=$!
for _ in $(seq 1 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
# The bench's shapes: key bench-<10 hex>-h<n>, owner bench-<pid>-<connection>.
python3 - "$KEYS" <<'PY' | redis-cli -p "$RPORT" --pipe >/dev/null
import sys
keys = int(sys.argv[1])
out = sys.stdout.buffer
for k in range(keys):
    key = f"bench-19a2b3c4d5-h{k}".encode()
    owner = f"bench-42424-{k % 16}".encode()
    args = [b"SET", key, owner, b"PX", b"250000"]
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
PY
echo "redis: $(redis-cli -p "$RPORT" dbsize) keys; RSS (MiB): $(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$REDIS_PID/status")"
