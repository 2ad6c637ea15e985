#!/usr/bin/env bash
# Two versions of the Python package side by side, in one run, over the same library
# and the same 3-node cluster: THREADS threads sharing one client, acquire+release
# pairs/s and the Python process's CPU time per pair. For a change of the package
# itself (the sliced waits that answer Ctrl-C, say): BEFORE is a git revision whose
# python/ is the baseline; the working tree's python/ is the other side.
#
#   BEFORE=1dc9134 scripts/python-ab.sh          # THREADS=16 DURATION=10 ROUNDS=3
#
# Installs nothing but what python-bench.sh does (Debian's redis-server and
# etcd-server, which lock-services.sh also starts). Prints a table; writes nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=${BEFORE:?set BEFORE to the git revision of the baseline package}
THREADS=${THREADS:-16}
ROUNDS=${ROUNDS:-3}
source "$ROOT/scripts/lock-services.sh"
bench_settings python-ab 15225 12379 16379

install_lock_services
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
export TICKETING_LIBRARY="$ROOT/target/release/libticketing.so"
BASE="$ROOT/target/python-ab/$BEFORE"
rm -rf "$BASE" && mkdir -p "$BASE"
git -C "$ROOT" archive "$BEFORE" python | tar -x -C "$BASE"
DRIVER="$ROOT/bench/python/lock_bench.py"

start_lock_services python-ab
run() { # $1: package dir
    local out cpu
    out=$(mktemp)
    cpu=$( { /usr/bin/time -f '%U %S' env PYTHONPATH="$1" python3 "$DRIVER" run --system ticketing \
        --addrs "$TADDRS" --threads "$THREADS" --duration "$DURATION" --warmup 1 >"$out"; } 2>&1 | tail -1)
    python3 - "$out" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); user, system = map(float, sys.argv[2].split())
print(f"{r['pairs_per_s']} {(user + system) / max(r['pairs'], 1) * 1e6:.1f} {r['errors']} {r['load']:.1f}")
PY
    rm -f "$out"
}
probe() { PYTHONPATH="$ROOT/python" python3 "$DRIVER" run --system ticketing --addrs "$TADDRS" --threads 1 --duration 0.2 --warmup 0 2>/dev/null | grep -q '"errors": 0'; }
wait_lock_services ticketing
echo "| round | package | pairs/s | CPU µs per pair | errors | load avg |"
echo "|---:|---|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
    for side in before after; do
        dir="$ROOT/python"; [ "$side" = before ] && dir="$BASE/python"
        read -r rate cpu errors load < <(run "$dir")
        echo "| $round | $side ($([ "$side" = before ] && echo "$BEFORE" || echo working tree)) | $rate | $cpu | $errors | $load |"
    done
done
