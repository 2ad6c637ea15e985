#!/usr/bin/env bash
# Counted and multi-key holds through the Java library, side by side in one run on this
# machine (docs/benchmarks.md, "Java clients: counted and multi-key holds"), on one
# 3-node Ticketing cluster and one Redis:
#   java            THREADS (64) platform threads on ONE client, blocking
#                   (client.hold(...).permits(k, 1, 1000).acquire(); client.acquire(4 keys))
#   java-async      THREADS concurrent acquireAsync chains on ONE client
#   rust            `ticketing bench stock|multi --threads THREADS` (the Rust client)
#   redisson        Redisson's RPermitExpirableSemaphore / RedissonMultiLock over 4 RLocks,
#                   THREADS threads on one client
#   redisson-async  the same through their async forms, THREADS chains
# Two workloads: stock (every caller takes 1 of a stock of 1000 and gives it back) and
# multi (every caller takes 4 keys of its own at once and releases them); pairs/s and
# p50/p99 of a pair. Then WAITERS (10,000) async holds with a place listener wait on one
# key through one client, released one after another (each waiter releases when
# granted): hand-offs/s, places received, the process's threads (/proc/self/task) before
# and while they wait, and the worst lateness of a 1 ms timer ticking on the client's
# executor.
#
#   DURATION=5 ROUNDS=3 scripts/java-holds-bench.sh      # the defaults
#
# Installs Debian's etcd-server and redis-server when missing (apt-get), builds
# Ticketing, the library (`mvn -q install -DskipTests` in java/) and java/bench
# (Redisson 3.52.0), and starts on loopback the services of scripts/lock-services.sh
# (Ticketing on :15825 with TICKETING_MAX_WAITERS=20000, Redis on :16979; etcd too,
# unused). Systems alternate run by run (the order turns every round); medians over the
# rounds, ratios taken within a round. Writes the tables, the commands, the date and the
# load average into docs/benchmarks.md between the java-holds-bench markers. Everything
# it starts it stops.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
bench_settings java-holds-bench 15825 12979 16979
THREADS=${THREADS:-64}
WAITERS=${WAITERS:-10000}
export TICKETING_MAX_WAITERS=${TICKETING_MAX_WAITERS:-20000}

# --- what it needs -------------------------------------------------------------
install_lock_services java:default-jdk-headless mvn:maven
log "building"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
(cd "$ROOT/java" && mvn -q -B install -DskipTests)
(cd "$ROOT/java/bench" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt \
    -Dmdep.includeScope=runtime)
CP="$ROOT/java/bench/target/classes:$(cat "$ROOT/java/bench/target/classpath.txt")"
JBENCH=(java -cp "$CP" JavaHoldsBench)

# --- start and always stop -----------------------------------------------------
start_lock_services java-holds-bench
declare -A ADDRS=([java]="$TADDRS" [java-async]="$TADDRS" [rust]="$TADDRS" [redisson]="$RADDRS"
    [redisson-async]="$RADDRS")
# One run: $1 the system, $2 the workload; prints one JSON line with ROUND and the load
# average at its end.
run_one() {
    local out load
    if [ "$1" = rust ]; then
        local args=(stock --permits 1000 --count 1)
        [ "$2" = multi ] && args=(multi --keys-per-hold 4)
        out=$("$TICKETING" bench "${args[@]}" --addr "$TADDRS" --threads "$THREADS" --duration "$DURATION" \
            --warmup "$WARMUP" --json --quiet)
    else
        # A JVM that ends without its line (Redisson's start once timed out under load) is
        # run again, up to 3 times; its last lines go to the log.
        local try
        for try in 1 2 3; do
            out=$("${JBENCH[@]}" run "$1" "$2" "${ADDRS[$1]}" "$THREADS" "$DURATION" "$WARMUP" 2>"$WORK/run.err") \
                && [[ $out == '{'* ]] && break
            log "$1 $2: no result (try $try); its last lines:"
            tail -5 "$WORK/run.err" >&2
            out=""
        done
        cat "$WORK/run.err" >>"$WORK/bench.log"
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 - "$1" "$2" "$load" "$out" "$ROUND" <<'PY'
import json, sys
system, workload, load, out, rnd = sys.argv[1:]
r = json.loads(out)
if system == "rust":
    line = dict(pairs_per_s=r["pairs_per_s"], p50_ms=r["latency_ms"]["p50"], p99_ms=r["latency_ms"]["p99"],
                errors=r["errors_total"])
else:
    line = dict(pairs_per_s=r["pairs_per_s"], p50_ms=r["p50_us"] / 1000, p99_ms=r["p99_us"] / 1000,
                errors=r["errors"], last_error=r["last_error"])
print(json.dumps(dict(system=system, workload=workload, round=int(rnd), load1=float(load), **line)))
PY
}
# Up means serving: a short run that did pairs and met no error.
probe() {
    local out
    out=$(DURATION=0.5 WARMUP=0 THREADS=2 ROUND=0 run_one "$1" stock 2>/dev/null) \
        && [[ $out == *'"errors": 0'* && $out != *'"pairs_per_s": 0.0'* ]]
}
wait_lock_services java redisson

# --- the runs --------------------------------------------------------------------
SYSTEMS=(java java-async rust redisson redisson-async)
# bench_rounds does not say which round a line is of: it is counted from the lines
# written so far (each round runs every system on both workloads).
run() {
    local lines=0
    [ -f "$RESULTS" ] && lines=$(wc -l <"$RESULTS")
    ROUND=$((lines / (${#SYSTEMS[@]} * 2) + 1)) run_one "$@"
}
bench_rounds -r stock multi
# The 10,000 waiters, once a round, after the pairs.
for round in $(seq 1 "$ROUNDS"); do
    out=$("${JBENCH[@]}" waiters "$TADDRS" "$WAITERS" 2>>"$WORK/bench.log")
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["round"]=int(sys.argv[3]); r["load1"]=float(sys.argv[2]); print(json.dumps(r))' \
        "$out" "$load" "$round")
    echo "$line" >>"$RESULTS"
    log "waiters, round $round: $line"
done
UPTIME_AFTER=$(uptime)

# --- the report ------------------------------------------------------------------
report_table() {
    python3 - "$RESULTS" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
threads = int(sys.argv[2])
names = {"java": "Ticketing, Java library, blocking", "java-async": "Ticketing, Java library, async",
         "rust": "Ticketing, Rust client", "redisson": "Redisson, blocking",
         "redisson-async": "Redisson, async"}
recipe = {("java", "stock"): f"{threads} threads: `hold(...).permits(k, 1, 1000).acquire()`, `release()`",
          ("java", "multi"): f"{threads} threads: `acquire(List.of(4 keys), ...)`, `release()`",
          ("java-async", "stock"): f"{threads} chains: `hold(...).permits(k, 1, 1000).acquireAsync()`, `releaseAsync()`",
          ("java-async", "multi"): f"{threads} chains: `acquireAsync(List.of(4 keys), ...)`, `releaseAsync()`",
          ("rust", "stock"): f"`ticketing bench stock`, {threads} threads", ("rust", "multi"): f"`ticketing bench multi`, {threads} threads",
          ("redisson", "stock"): f"{threads} threads: `RPermitExpirableSemaphore.tryAcquire`, `release`",
          ("redisson", "multi"): f"{threads} threads: `RedissonMultiLock` of 4 `RLock`s, `tryLock`, `unlock`",
          ("redisson-async", "stock"): f"{threads} chains: `tryAcquireAsync`, `releaseAsync`",
          ("redisson-async", "multi"): f"{threads} chains: `RedissonMultiLock.tryLockAsync`, `unlockAsync`"}
anchor = {"java": "redisson", "java-async": "redisson-async"}
def per_round(a, b, w):
    out = []
    for r in sorted({x["round"] for x in rows if x.get("workload") == w}):
        ra = [x for x in rows if x["system"] == a and x["workload"] == w and x["round"] == r]
        rb = [x for x in rows if x["system"] == b and x["workload"] == w and x["round"] == r]
        if ra and rb and rb[0]["pairs_per_s"] > 0:
            out.append(ra[0]["pairs_per_s"] / rb[0]["pairs_per_s"])
    return out
def ratio(a, b, w):
    xs = per_round(a, b, w)
    if not xs:
        return "—"
    return f"**{statistics.median(xs):.2f}×** ({', '.join(f'{x:.2f}' for x in xs)})"
print("| workload | system | recipe | pairs/s | p50 | p99 | errors | ÷ Rust client (per round) | ÷ Redisson, same form (per round) | load average (1 min) |")
print("|---|---|---|---:|---:|---:|---:|---|---|---|")
for w in ("stock", "multi"):
    for s in names:
        sel = [r for r in rows if r["system"] == s and r.get("workload") == w]
        if not sel:
            continue
        m = lambda k: statistics.median(r[k] for r in sel)
        loads = sorted(r["load1"] for r in sel)
        vs_rust = ratio(s, "rust", w) if s in anchor else "—"
        vs_anchor = ratio(s, anchor[s], w) if s in anchor else "—"
        print(f"| {w} | {names[s]} | {recipe[(s, w)]} | {m('pairs_per_s'):,.0f} | {m('p50_ms'):.2f} ms | "
              f"{m('p99_ms'):.2f} ms | {sum(r['errors'] for r in sel)} | {vs_rust} | {vs_anchor} | "
              f"{loads[0]}–{loads[-1]} |")
ws = [r for r in rows if r.get("workload") == "waiters"]
if ws:
    print()
    print("| round | waiters | queued in | hand-offs/s | places received (while waiting) | waiters told a place | "
          "threads before / waiting / most | worst stall of the executor's 1 ms timer: idle / waiting / hand-offs | "
          "the control thread's worst: idle / waiting / hand-offs | errors | load average (1 min) |")
    print("|---:|---:|---:|---:|---|---:|---|---|---|---:|---:|")
    for r in ws:
        c = r["control_worst_ms"]
        print(f"| {r['round']} | {r['waiters']:,} | {r['queued_s']:.2f} s | {r['handoffs_per_s']:,.0f} | "
              f"{r['places']:,} ({r['places_while_waiting']:,}) | {r['waiters_told_a_place']:,} | "
              f"{r['threads_before']} / {r['threads_waiting']} / {r['threads_max']} | "
              f"{r['worst_stall_idle_ms']:.1f} / {r['worst_stall_waiting_ms']:.1f} / {r['worst_stall_handoffs_ms']:.1f} ms | "
              f"{c[0]:.1f} / {c[1]:.1f} / {c[2]:.1f} ms | {r['errors']} | {r['load1']} |")
    m = lambda k: statistics.median(r[k] for r in ws)
    print(f"| median | | {m('queued_s'):.2f} s | {m('handoffs_per_s'):,.0f} | {m('places'):,.0f} | "
          f"{m('waiters_told_a_place'):,.0f} | {m('threads_before'):.0f} / {m('threads_waiting'):.0f} / "
          f"{m('threads_max'):.0f} | {m('worst_stall_idle_ms'):.1f} / {m('worst_stall_waiting_ms'):.1f} / "
          f"{m('worst_stall_handoffs_ms'):.1f} ms | | | |")
PY
}
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per system and workload (+$WARMUP s"
    echo "warm-up), $THREADS callers on one client each; systems alternating run by run (the order"
    echo "turns every round); medians over the rounds, ratios taken within a round (their median"
    echo "first, then each round's), the load average's range beside each figure. stock: every"
    echo "caller takes 1 of a stock of 1000 and gives it back; multi: every caller takes 4 keys"
    echo "of its own at once and releases them. Then, once a round, $WAITERS async holds with a place"
    echo "listener on one key through one client (the nodes run with"
    echo "TICKETING_MAX_WAITERS=$TICKETING_MAX_WAITERS), released one after another."
}
report_versions() {
    echo "Versions: $("$TICKETING" --version), $(java -version 2>&1 | head -1) (the client's executor the"
    echo "default ForkJoinPool.commonPool(), parallelism $(($(nproc) > 1 ? $(nproc) - 1 : 1))), JNA 5.19.1,"
    echo "Redisson 3.52.0, $(redis-server --version | cut -d' ' -f1-3)."
}
report_commands() {
    echo "Commands (each system and workload \`ROUNDS\` times; java/bench/src/main/java/JavaHoldsBench.java):"
    echo
    echo "    DURATION=$DURATION ROUNDS=$ROUNDS scripts/java-holds-bench.sh"
    for system in java java-async redisson redisson-async; do
        echo "    java -cp ... JavaHoldsBench run $system stock|multi ${ADDRS[$system]} $THREADS $DURATION $WARMUP"
    done
    echo "    ticketing bench stock --permits 1000 --count 1 --addr $TADDRS --threads $THREADS --duration $DURATION --warmup $WARMUP --json"
    echo "    ticketing bench multi --keys-per-hold 4 --addr $TADDRS --threads $THREADS --duration $DURATION --warmup $WARMUP --json"
    echo "    java -cp ... JavaHoldsBench waiters $TADDRS $WAITERS"
}
bench_report "### Java clients: counted and multi-key holds"
log "wrote docs/benchmarks.md"
