#!/usr/bin/env bash
# Long fault-injection runs of the real binary (docs/safety.md).
#   scripts/torture.sh --minutes N --seed S [--nodes 3|5] [--no-netns] [--links LAT,JITTER[,SLOW]]
# --links puts a delay proxy in front of every node's peer port: LAT ± JITTER ms one way
# toward every node, SLOW ± JITTER toward the first (e.g. --links 20,10,200).
# Needs root for the network namespace (partitions, loss, delay); without it only the
# process-level nemeses run. Output: target/faults/seed<S>-n<N>-<pid>/{report.txt,
# history.jsonl,node-*.log}; the report is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=30 seed=$(date +%s) nodes=3
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        --nodes) nodes="$2"; shift 2 ;;
        --no-netns) export TICKETING_FAULT_NO_NETNS=1; shift ;;
        --links) export TICKETING_FAULT_LINKS="$2"; shift 2 ;;
        -h|--help) sed -n 2,8p "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" = 0 ] && ! command -v iptables >/dev/null 2>&1; then
    echo "torture: iptables missing; installing it (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null || true
fi
export TICKETING_FAULT_SECS=$((minutes * 60)) TICKETING_FAULT_SEED="$seed" TICKETING_FAULT_NODES="$nodes"
echo "torture: $minutes min, seed $seed, $nodes nodes${TICKETING_FAULT_LINKS:+, links $TICKETING_FAULT_LINKS}" >&2
exec cargo test --release --test fault_suite -- mixed_nemesis_short_run --exact --nocapture
