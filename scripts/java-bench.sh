#!/usr/bin/env bash
# What a Java developer would pick, side by side, in one run on this machine: Ticketing's
# 3-node cluster through the Java library vs Redisson's RLock and RFairLock (the FIFO
# one) on one Redis. THREADS platform threads share one client each, every thread on a
# key of its own; acquire+release pairs/s and p50/p99 of a pair.
#
#   scripts/java-bench.sh                        # THREADS=64 DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=1 scripts/java-bench.sh
#
# Installs Debian's etcd-server and redis-server when missing (apt-get), builds
# Ticketing and the library (`mvn -q install -DskipTests` in java/, which runs cargo) and
# java/bench (a project of its own: Redisson), and starts on loopback the services of
# scripts/lock-services.sh (Ticketing on :15425, Redis on :16579; etcd too, unused).
# Systems alternate run by run; the table reports medians over the rounds. Writes the
# table, the commands, the date and the load average into docs/benchmarks.md between
# the java-bench markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings java-bench 15425 12579 16579
THREADS=${THREADS:-64}

# --- what it needs -------------------------------------------------------------
install_lock_services
log "building"
(cd "$ROOT/java" && mvn -q -B install -DskipTests)
(cd "$ROOT/java/bench" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt \
    -Dmdep.includeScope=runtime)
CP="$ROOT/java/bench/target/classes:$(cat "$ROOT/java/bench/target/classpath.txt")"
BENCH=(java -cp "$CP" Bench)

# --- start and always stop -----------------------------------------------------
start_lock_services java-bench
declare -A ADDRS=([ticketing]="$TADDRS" [rlock]="$RADDRS" [rfairlock]="$RADDRS")
run() { "${BENCH[@]}" run "$1" "${ADDRS[$1]}" "$2" "$3" "$4" 2>>"$WORK/bench.log"; }
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    out=$(timeout 20 "${BENCH[@]}" run "$1" "${ADDRS[$1]}" 1 0.2 0 2>/dev/null) \
        && [[ $out == *'"errors":0'* && $out != *'"pairs":0,'* ]]
}
wait_lock_services ticketing rlock

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing rlock rfairlock)
bench_rounds -r "$THREADS $DURATION $WARMUP"

# --- the report ------------------------------------------------------------------
report_table() { "${BENCH[@]}" report "$RESULTS"; }
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system (+$WARMUP s warm-up),"
    echo "$THREADS threads on one client each, each on a key of its own; systems"
    echo "alternating run by run; medians over the rounds."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), $(java -version 2>&1 | head -1), JNA 5.19.1, Redisson 3.52.0,"
    echo "$(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each system \`ROUNDS\` times; java/bench/src/main/java/Bench.java):"
    echo
    for system in ticketing rlock rfairlock; do
        echo "    java -cp ... Bench run $system ${ADDRS[$system]} $THREADS $DURATION $WARMUP"
    done
}
bench_report "## Java clients"
log "wrote docs/benchmarks.md"
