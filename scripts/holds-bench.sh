#!/usr/bin/env bash
# Counted and multi-key holds, places in line (docs/benchmarks.md, "Counted and multi-key
# holds"): each scenario of `ticketing bench` against its baseline on one 3-node cluster,
# the two alternating run by run (the order flips every round), ratios taken within a
# round.
#
#   scripts/holds-bench.sh                    # ROUNDS=2 DURATION=10
#   CASES="stock pool" ROUNDS=3 scripts/holds-bench.sh
#
# Cases (Ticketing's figure ÷ its baseline's, the target beside it):
#   stock     64 threads, each taking 1 of a stock of 1000 and releasing, ÷ 64 threads on
#             64 keys of their own (uncontended)            target ≥ 0.8×
#   pool      200 waiters on one key of capacity 10, grants/s, ÷ 200 waiters on one
#             key of capacity 1 (hot: the hand-off rate)    target ≥ 3×
#   multi     64 threads, each holding 4 keys of its own at once, ÷ uncontended
#                                                            target ≥ 0.6×
#   position  10,000 waiters on one key, each asking for its place in line, hand-offs/s
#             ÷ the same without places                     target ≥ 0.8×; places after
#             a waiter's first ≤ 1 per waiter per second
# The 10,000 waiters are 10,000 worker threads (small stacks) over 16 clients: the client
# is blocking, one request outstanding per thread, and pipelines the requests of the
# threads sharing it. The nodes run with TICKETING_MAX_WAITERS=20000 (default 4096).
#
# Per run one JSON line (the bench's) with the 1-minute load average at its end; the
# block written into docs/benchmarks.md (between the holds-bench markers) has the
# table, every run, the commands and the machine. Everything it starts it stops.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lock-services.sh"
bench_settings holds-bench 18225 0 0
PORT=$TPORT
source "$ROOT/scripts/cluster-lib.sh"
CASES=${CASES:-"stock pool multi position"}
export TICKETING_MAX_WAITERS=${TICKETING_MAX_WAITERS:-20000}

if [ -z "${NO_BUILD:-}" ]; then
    log "building"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
fi
start_cluster_with "$TICKETING"

# The bench arguments of each side of a case: "ticketing" is the new scenario,
# "baseline" what it is measured against.
args_of() {
    case "$1 $2" in
        "stock ticketing") echo "stock --threads 64 --permits 1000 --count 1" ;;
        "stock baseline" | "multi baseline") echo "uncontended --threads 64" ;;
        "pool ticketing") echo "pool --threads 200 --permits 10" ;;
        "pool baseline") echo "hot --threads 200" ;;
        "multi ticketing") echo "multi --threads 64 --keys-per-hold 4" ;;
        "position ticketing") echo "hot --threads 10000 --connections 16 --wait 120000 --position" ;;
        "position baseline") echo "hot --threads 10000 --connections 16 --wait 120000" ;;
    esac
}
# Waiters need time to queue: 10,000 threads take a few seconds to start and line up.
warmup_of() { [ "$1" = position ] && echo 5 || echo "$WARMUP"; }

# Settle: the leader elected and the first connections made.
"$TICKETING" bench --addr "$ADDRS" --threads 4 --duration 1 --warmup 0 --quiet >/dev/null

RESULTS="$WORK/results.jsonl"
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
UPTIME_BEFORE=$(uptime)
for round in $(seq 1 "$ROUNDS"); do
    for c in $CASES; do
        order=(ticketing baseline)
        [ $((round % 2)) -eq 0 ] && order=(baseline ticketing)
        for side in "${order[@]}"; do
            read -ra args <<<"$(args_of "$c" "$side")"
            out=$("$TICKETING" bench "${args[@]}" --addr "$ADDRS" --duration "$DURATION" \
                --warmup "$(warmup_of "$c")" --json --quiet)
            line="{\"case\":\"$c\",\"side\":\"$side\",\"round\":$round,\"load1\":$(cut -d' ' -f1 /proc/loadavg),\"bench\":$out}"
            echo "$line" >>"$RESULTS"
            log "round $round: $c $side: $(python3 -c 'import json,sys; r=json.loads(sys.argv[1])["bench"]; print(r["scenario"], round(r["grants_per_s"]), "grants/s", r["errors_total"], "errors")' "$line")"
        done
    done
done
UPTIME_AFTER=$(uptime)

report_table() {
    python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
what = {
    "stock": ("stock of 1000, 64 threads taking 1 each", "64 threads on keys of their own", 0.8),
    "pool": ("pool of 10, 200 waiters: grants/s", "one key, 200 waiters: hand-offs/s", 3.0),
    "multi": ("64 threads, 4 keys of their own per hold", "64 threads, 1 key of their own", 0.6),
    "position": ("10,000 waiters asking their place: hand-offs/s", "10,000 waiters, no places", 0.8),
}
print("| case | Ticketing (grants/s) | baseline (grants/s) | ratio per round | median ratio | target | load average (1 min) |")
print("|---|---:|---:|---|---:|---:|---|")
for case in dict.fromkeys(r["case"] for r in rows):
    sel = [r for r in rows if r["case"] == case]
    rounds = sorted({r["round"] for r in sel})
    ratios, t, b = [], [], []
    for n in rounds:
        g = {r["side"]: r for r in sel if r["round"] == n}
        if "ticketing" in g and "baseline" in g:
            t.append(g["ticketing"]["bench"]["grants_per_s"])
            b.append(g["baseline"]["bench"]["grants_per_s"])
            ratios.append(t[-1] / max(b[-1], 1e-9))
    if not ratios:
        continue
    med = statistics.median(ratios)
    loads = sorted(r["load1"] for r in sel)
    name, base, target = what[case]
    print(f"| {name} vs {base} | {statistics.median(t):,.0f} | {statistics.median(b):,.0f} | "
          + ", ".join(f"{x:.2f}×" for x in ratios)
          + f" | **{med:.2f}×** | ≥ {target}× ({'met' if med >= target else 'missed'}) | {loads[0]}–{loads[-1]} |")
placed = [r for r in rows if r["case"] == "position" and r["side"] == "ticketing"]
if placed:
    print()
    print("| places in line (10,000 waiters) | run | places/s | of which after a waiter's first, per waiter per s | repeated a place | shortest gap of one waiter | load average |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in placed:
        x = r["bench"]
        per = x["places_later"] / x["elapsed_s"] / x["threads"]
        gap = "—" if x["place_gap_min_ms"] is None else f"{x['place_gap_min_ms'] / 1000:.3f} s"
        print(f"| `hot --position` | round {r['round']} | {x['places_per_s']:,.0f} | {per:.3f} | {x['places_unchanged']} | {gap} | {r['load1']} |")
PY
}
report_intro() {
    echo "Run of $STARTED: $ROUNDS round(s) of $DURATION s per side and case (+$WARMUP s warm-up,"
    echo "5 s for the 10,000 waiters), one 3-node cluster, the two sides of a case"
    echo "alternating run by run (the order flips every round); the ratio is taken within a"
    echo "round, and the load average beside each figure is the range over the case's runs."
}
report_versions() {
    echo "Version: $("$TICKETING" --version)."
}
report_commands() {
    echo "Commands (\`ticketing bench ARGS --addr $ADDRS --duration $DURATION --warmup W --json --quiet\`;"
    echo "the nodes with TICKETING_MAX_WAITERS=$TICKETING_MAX_WAITERS):"
    echo
    for c in $CASES; do
        echo "    $c: $(args_of "$c" ticketing)"
        echo "    $c baseline: $(args_of "$c" baseline)"
    done
}
bench_report "## Counted and multi-key holds"
log "wrote docs/benchmarks.md"
