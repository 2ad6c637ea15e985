#!/bin/sh
# Runs one measurement on real processes (bench/measure/): figures that docs/ cite,
# printed, never a pass/fail condition. Timing depends on the machine and its load.
#
#   scripts/measure.sh failover        leader SIGKILL -> a new leader serves; 10 trials
#                                      (docs/guarantees.md, "Failover time")
#   scripts/measure.sh replacement     replacing a follower and the leader under a client
#                                      (docs/operations.md, "Replacing a node")
#   scripts/measure.sh handover        the longest gap between grants for each way the
#                                      leader changes, 20 trials each; HANDOVER_TRIALS=N,
#                                      HANDOVER_ONLY=Transfer|Sigterm|Sigkill|Replace|Sigstop
#                                      (docs/operations.md, "Handing leadership over")
#   scripts/measure.sh rolling         a rolling restart of 3 voters, each restarted as
#                                      ticketing-node.service does, under 4 clients;
#                                      ROLLING_TRIALS=N (default 5), ROLLING_LEAVE=off
#                                      (docs/operations.md, "Upgrading")
#   scripts/measure.sh raw-throughput  pairs/s over raw protocol connections, standalone
#                                      and 3-node cluster (docs/performance.md §4)
#   scripts/measure.sh stop            SIGTERM to a leader whose followers are dead or
#                                      frozen -> it exits; STOP_TRIALS=N (default 5)
#                                      (docs/operations.md, "Handing leadership over")
#   scripts/measure.sh readyz          the majority frozen -> the lone node's /readyz
#                                      answers 503; thawed -> 200; STOP_TRIALS=N
#   scripts/measure.sh flood           the slowest legitimate acquire and fresh connection
#                                      during the connection flood of
#                                      tests/security_resources.rs (docs/security.md)
#
# Through the official client, `ticketing bench` measures throughput (docs/cli.md).
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
    failover|replacement|handover|rolling|raw-throughput|stop|readyz) ;;
    flood) exec cargo test --release --quiet --test security_resources -- --nocapture \
        a_legitimate_client_is_served_through_a_connection_flood ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "usage: scripts/measure.sh failover|replacement|handover|rolling|raw-throughput|stop|readyz|flood (--help)" >&2; exit 2 ;;
esac
exec cargo bench --quiet --bench measure -- "$1"
