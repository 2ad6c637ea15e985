# Sourced by memory.sh, soak.sh, client-ab.sh, server-ab.sh, scrape-cost.sh and holds-bench.sh: start a 3-node
# Ticketing cluster on 127.0.0.{1,2,3}:$PORT (peers on $PORT+1000; with METRICS_PORT
# set, metrics on 127.0.0.{1,2,3}:$METRICS_PORT) and stop it on exit.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TICKETING=${TICKETING:-"$ROOT/target/release/ticketing"}
export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-bench-secret-0123456789}
# The peer secret must differ from the client secret (docs/security.md).
export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-bench-peer-secret-0123456789}
# BENCH_TMP: where the run keeps its logs (default /dev/shm).
WORK=$(mktemp -d "${BENCH_TMP:-/dev/shm}/ticketing-bench.XXXXXX")
PIDS=()
NODE_PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -n "${KEEP_WORK:-}" ] && echo "logs kept in $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_cluster() {
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    start_cluster_with "$TICKETING"
}

# Starts the cluster from binary $1 (no build).
start_cluster_with() {
    local bin=$1
    local peers="1@127.0.0.1:$PORT,2@127.0.0.2:$PORT,3@127.0.0.3:$PORT"
    for i in 1 2 3; do
        env ${METRICS_PORT:+TICKETING_METRICS_LISTEN=127.0.0.$i:$METRICS_PORT} \
        TICKETING_LISTEN=127.0.0.$i:$PORT TICKETING_NODE_ID=$i TICKETING_CLUSTER_SELF=127.0.0.$i:$PORT \
            TICKETING_CLUSTER_PEERS=$peers TICKETING_CLUSTER_STATE=new RUST_LOG=warn \
            "$bin" server 2>"$WORK/node-$i.log" &
        PIDS+=($!)
        NODE_PIDS+=($!)
    done
    ADDRS="127.0.0.1:$PORT,127.0.0.2:$PORT,127.0.0.3:$PORT"
    for _ in $(seq 1 60); do
        if "$bin" query probe --addr "$ADDRS" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "the cluster did not elect a leader; logs in $WORK" >&2
    tail -5 "$WORK"/node-*.log >&2
    exit 1
}

# VmRSS of node i (1-based) in MiB, one decimal.
rss_mib() {
    awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/${NODE_PIDS[$(($1 - 1))]}/status"
}

# A STATUS figure of the leader (name=value lines of `ticketing status --node`).
leader_status() {
    local addr text
    for addr in ${ADDRS//,/ }; do
        text=$("$TICKETING" status --node --addr "$addr" 2>/dev/null) || continue
        if grep -q '^role=leader$' <<<"$text"; then
            awk -F= -v k="$1" '$1 == k { print $2; exit }' <<<"$text"
            return
        fi
    done
    echo "?"
}

# The "before" binary of an A/B script: $BEFORE if set, else a release build of
# $BEFORE_REV (from `git archive`, in target/ab-before). Sets BEFORE.
build_before() {
    if [ -z "${BEFORE:-}" ]; then
        local src="$ROOT/target/ab-before-src"
        rm -rf "$src" && mkdir -p "$src"
        git -C "$ROOT" archive "$BEFORE_REV" | tar -x -C "$src"
        TICKETING_GIT_COMMIT="$BEFORE_REV" cargo build --release --quiet --bin ticketing \
            --manifest-path "$src/Cargo.toml" --target-dir "$ROOT/target/ab-before"
        BEFORE="$ROOT/target/ab-before/release/ticketing"
    fi
}

# CPU ticks (utime + stime) the running nodes have used so far, all together.
servers_ticks() {
    local total=0 p
    for p in "${NODE_PIDS[@]}"; do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
    done
    echo "$total"
}
