# Sourced by compare.sh and python-bench.sh: Ticketing, etcd and Redis side by side on
# loopback, for the same workload in one run.

# Installs Debian's etcd-server and redis-server (and the packages named as arguments)
# when their commands are missing. Arguments: "command:package" pairs.
install_lock_services() {
    local missing=() pair
    for pair in etcd:etcd-server redis-server:redis-server "$@"; do
        command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# Starts, each stopped on exit with everything else in PIDS:
#   - a 3-node Ticketing cluster on 127.0.0.{1,2,3}:$TPORT (peers on $TPORT+1000),
#     from the binary $TICKETING;
#   - a 3-node etcd cluster on 127.0.0.{1,2,3}:$EPORT (peers $EPORT+1), data in WORK;
#   - one Redis on 127.0.0.1:$RPORT without persistence (--save '' --appendonly no).
# Needs TPORT, EPORT, RPORT, TICKETING and the two Ticketing secrets exported; $1 names
# the run (temp dir, etcd cluster token). Sets WORK (logs and data, under $BENCH_TMP,
# default /dev/shm), PIDS, and TADDRS, EADDRS, RADDRS (comma-separated addresses).
start_lock_services() {
    local name=$1 i
    WORK=$(mktemp -d "${BENCH_TMP:-/dev/shm}/ticketing-$name.XXXXXX")
    PIDS=()
    trap stop_lock_services EXIT
    trap 'exit 130' INT TERM

    local tpeers="1@127.0.0.1:$TPORT,2@127.0.0.2:$TPORT,3@127.0.0.3:$TPORT"
    for i in 1 2 3; do
        TICKETING_LISTEN=127.0.0.$i:$TPORT TICKETING_NODE_ID=$i TICKETING_CLUSTER_SELF=127.0.0.$i:$TPORT \
            TICKETING_CLUSTER_PEERS=$tpeers TICKETING_CLUSTER_STATE=new RUST_LOG=warn \
            "$TICKETING" server 2>"$WORK/ticketing-$i.log" &
        PIDS+=($!)
    done
    TADDRS="127.0.0.1:$TPORT,127.0.0.2:$TPORT,127.0.0.3:$TPORT"

    local ecluster="e1=http://127.0.0.1:$((EPORT + 1)),e2=http://127.0.0.2:$((EPORT + 1)),e3=http://127.0.0.3:$((EPORT + 1))"
    for i in 1 2 3; do
        etcd --name e$i --data-dir "$WORK/etcd-$i" \
            --listen-client-urls http://127.0.0.$i:$EPORT --advertise-client-urls http://127.0.0.$i:$EPORT \
            --listen-peer-urls http://127.0.0.$i:$((EPORT + 1)) \
            --initial-advertise-peer-urls http://127.0.0.$i:$((EPORT + 1)) \
            --initial-cluster "$ecluster" --initial-cluster-state new --initial-cluster-token "$name" \
            --logger zap --log-outputs stderr --log-level error 2>"$WORK/etcd-$i.log" &
        PIDS+=($!)
    done
    EADDRS="127.0.0.1:$EPORT,127.0.0.2:$EPORT,127.0.0.3:$EPORT"

    redis-server --bind 127.0.0.1 --port "$RPORT" --save '' --appendonly no --protected-mode no \
        --daemonize no --logfile "$WORK/redis.log" &
    PIDS+=($!)
    RADDRS="127.0.0.1:$RPORT"
}

stop_lock_services() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}

# Waits until `probe SYSTEM` succeeds for each system named, up to 30 s each; exits
# with the services' last log lines when one does not come up.
wait_lock_services() {
    local system
    log "waiting for the three systems"
    for system in "$@"; do
        for _ in $(seq 1 60); do
            if probe "$system"; then
                continue 2
            fi
            sleep 0.5
        done
        log "$system did not come up; logs in $WORK"
        tail -5 "$WORK"/*.log >&2
        exit 1
    done
}

# Puts the file $3 in place of the lines from `<!-- $2:begin` to `<!-- $2:end -->` of
# the Markdown file $1; appends it under the heading $4 when there are no such lines.
replace_doc_block() {
    local doc=$1 marker=$2 block=$3 heading=$4
    if [ -f "$doc" ] && grep -q "<!-- $marker:begin" "$doc"; then
        awk -v block="$block" -v begin="<!-- $marker:begin" -v end="<!-- $marker:end -->" '
            index($0, begin) == 1 { while ((getline line < block) > 0) print line; skip = 1; next }
            index($0, end) == 1 { skip = 0; next }
            !skip { print }' "$doc" >"$WORK/doc.md"
        cp "$WORK/doc.md" "$doc"
    else
        { echo; echo "$heading"; echo; cat "$block"; } >>"$doc"
    fi
}
