#!/usr/bin/env bash
# Counted and multi-key holds against what a user would pick instead, in one run on this
# machine (docs/benchmarks.md, "Counted and multi-key holds"): Ticketing's 3-node cluster
# through `ticketing bench` (the Rust client) vs Curator's InterProcessSemaphoreV2 and
# InterProcessMultiLock on a 3-node ZooKeeper and Redisson's RPermitExpirableSemaphore
# and RedissonMultiLock on one Redis. Two workloads, THREADS (64) threads on one client
# each:
#   stock  every thread takes 1 of a stock of 1000 permits and gives it back
#   multi  every thread takes 4 keys of its own at once and releases them
# pairs/s and p50/p99 of a pair; the table gives Ticketing ÷ each.
#
#   scripts/holds-compare.sh                 # THREADS=64 DURATION=10 ROUNDS=2
#   DURATION=5 ROUNDS=1 scripts/holds-compare.sh
#
# Installs Debian's zookeeper, etcd-server and redis-server when missing (apt-get),
# builds Ticketing and java/bench (Curator 5.9.0, Redisson 3.52.0 from Maven Central),
# and starts on loopback the services of scripts/lock-services.sh (Ticketing on :15625,
# Redis on :16779; etcd too, unused) and three ZooKeeper servers on
# 127.0.0.{1,2,3}:12181 (quorum ports 12888/13888, data in WORK, 256 MiB heaps).
# Systems alternate run by run (the order turns every round); medians over the rounds.
# Writes the table, the commands, the date and the load average into
# docs/benchmarks.md between the holds-compare markers. Everything it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings holds-compare 15625 12779 16779
THREADS=${THREADS:-64}
ZPORT=${ZPORT:-12181}

# --- what it needs -------------------------------------------------------------
install_lock_services java:default-jdk-headless mvn:maven
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    log "installing zookeeper"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq zookeeper >/dev/null
fi
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
if [ ! -f "$HOME/.m2/repository/dev/ticketing/ticketing/0.2.0/ticketing-0.2.0.jar" ]; then
    (cd "$ROOT/java" && mvn -q -B install -DskipTests)
fi
(cd "$ROOT/java/bench" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt \
    -Dmdep.includeScope=runtime)
CP="$ROOT/java/bench/target/classes:$(cat "$ROOT/java/bench/target/classpath.txt")"
JBENCH=(java -cp "$CP" HoldsBench)

# --- start and always stop -----------------------------------------------------
start_lock_services holds-compare
ZADDRS="127.0.0.1:$ZPORT,127.0.0.2:$ZPORT,127.0.0.3:$ZPORT"
for i in 1 2 3; do
    mkdir -p "$WORK/zk-$i"
    echo "$i" >"$WORK/zk-$i/myid"
    {
        echo "tickTime=2000"
        echo "initLimit=10"
        echo "syncLimit=5"
        echo "dataDir=$WORK/zk-$i"
        echo "clientPort=$ZPORT"
        echo "clientPortAddress=127.0.0.$i"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=ruok,srvr"
        for j in 1 2 3; do echo "server.$j=127.0.0.$j:$((ZPORT + 707)):$((ZPORT + 1707))"; done
    } >"$WORK/zk-$i.cfg"
    java -Xmx256m -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
        -Dzookeeper.log.dir="$WORK" -Dzookeeper.root.logger=WARN,CONSOLE \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$WORK/zk-$i.cfg" >"$WORK/zk-$i.log" 2>&1 &
    PIDS+=($!)
done

declare -A ADDRS=([ticketing]="$TADDRS" [zk]="$ZADDRS" [redisson]="$RADDRS")
# One run: $1 the system, $2 the workload; prints one JSON line.
run() {
    local out load
    if [ "$1" = ticketing ]; then
        local args=(stock --permits 1000 --count 1)
        [ "$2" = multi ] && args=(multi --keys-per-hold 4)
        out=$("$TICKETING" bench "${args[@]}" --addr "$TADDRS" --threads "$THREADS" --duration "$DURATION" \
            --warmup "$WARMUP" --json --quiet)
    else
        out=$("${JBENCH[@]}" run "$1-$2" "${ADDRS[$1]}" "$THREADS" "$DURATION" "$WARMUP" 2>>"$WORK/bench.log")
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 - "$1" "$2" "$load" "$out" <<'PY'
import json, sys
system, workload, load, out = sys.argv[1:]
r = json.loads(out)
if system == "ticketing":
    line = dict(pairs_per_s=r["pairs_per_s"], p50_ms=r["latency_ms"]["p50"], p99_ms=r["latency_ms"]["p99"],
                errors=r["errors_total"])
else:
    line = dict(pairs_per_s=r["pairs_per_s"], p50_ms=r["p50_us"] / 1000, p99_ms=r["p99_us"] / 1000,
                errors=r["errors"], last_error=r["last_error"])
print(json.dumps(dict(system=system, workload=workload, load1=float(load), **line)))
PY
}
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    out=$(DURATION=0.5 WARMUP=0 THREADS=2 run "$1" stock 2>/dev/null) \
        && [[ $out == *'"errors": 0'* && $out != *'"pairs_per_s": 0.0'* ]]
}
wait_lock_services ticketing zk redisson

# --- the runs --------------------------------------------------------------------
SYSTEMS=(ticketing zk redisson)
bench_rounds -r stock multi

# --- the report ------------------------------------------------------------------
report_table() {
    python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"ticketing": "Ticketing (Rust client, 3 nodes)", "zk": "Curator on ZooKeeper (3 nodes)",
         "redisson": "Redisson (1 Redis)"}
recipe = {("ticketing", "stock"): "`ticketing bench stock` (HOLD of 1 of 1000)",
          ("ticketing", "multi"): "`ticketing bench multi` (HOLD of 4 keys)",
          ("zk", "stock"): "`InterProcessSemaphoreV2`", ("zk", "multi"): "`InterProcessMultiLock`",
          ("redisson", "stock"): "`RPermitExpirableSemaphore`", ("redisson", "multi"): "`RedissonMultiLock`"}
print("| workload | system | recipe | pairs/s | p50 | p99 | errors | Ticketing ÷ it | load average (1 min) |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
for w in ("stock", "multi"):
    med = {}
    for s in names:
        sel = [r for r in rows if r["system"] == s and r["workload"] == w]
        if sel:
            m = lambda k: statistics.median(r[k] for r in sel)
            loads = sorted(r["load1"] for r in sel)
            med[s] = (m("pairs_per_s"), m("p50_ms"), m("p99_ms"), sum(r["errors"] for r in sel), loads)
    for s, (rate, p50, p99, errors, loads) in med.items():
        ratio = "—" if s == "ticketing" or "ticketing" not in med else f"**{med['ticketing'][0] / max(rate, 1e-9):.1f}×**"
        print(f"| {w} | {names[s]} | {recipe[(s, w)]} | {rate:,.0f} | {p50:.2f} ms | {p99:.2f} ms | {errors} | {ratio} | "
              f"{loads[0]}–{loads[-1]} |")
PY
}
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and workload (+$WARMUP s"
    echo "warm-up), $THREADS threads on one client each; systems alternating run by run (the"
    echo "order turns every round); medians over the rounds, the load average's range beside"
    echo "each. stock: every thread takes 1 of a stock of 1000 and gives it back; multi: every"
    echo "thread takes 4 keys of its own at once and releases them."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), ZooKeeper $(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo '?')"
    echo "(Debian) with Curator 5.9.0, $(redis-server --version | cut -d' ' -f1-3) with Redisson 3.52.0,"
    echo "$(java -version 2>&1 | head -1)."
}
report_commands() {
    echo "Commands (each system and workload \`ROUNDS\` times; java/bench/src/main/java/HoldsBench.java):"
    echo
    echo "    ticketing bench stock --permits 1000 --count 1 --addr $TADDRS --threads $THREADS --duration $DURATION --warmup $WARMUP --json --quiet"
    echo "    ticketing bench multi --keys-per-hold 4 --addr $TADDRS --threads $THREADS --duration $DURATION --warmup $WARMUP --json --quiet"
    for s in zk redisson; do
        for w in stock multi; do
            echo "    java -cp ... HoldsBench run $s-$w ${ADDRS[$s]} $THREADS $DURATION $WARMUP"
        done
    done
}
bench_report "## Counted and multi-key holds against Curator and Redisson"
log "wrote docs/benchmarks.md"
