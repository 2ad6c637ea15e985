# Sourced by the benchmark scripts (compare.sh, go-bench.sh, go-holds-bench.sh, holds-bench.sh, holds-compare.sh,
# java-bench.sh, java-holds-bench.sh, node-bench.sh, node-holds-bench.sh, python-bench.sh, python-aio-bench.sh,
# python-holds-bench.sh, python-ab.sh): Ticketing, etcd and Redis side by
# side on loopback, for the same workload in one run, and what those scripts share: their
# settings, their rounds and the block they write into docs/benchmarks.md.
#
# A script sets ROOT (the repository), sources this file, calls bench_settings, builds what
# it drives, calls start_lock_services, defines `run` and `probe`, calls wait_lock_services,
# sets SYSTEMS and calls bench_rounds, then defines the report_* functions and calls
# bench_report.

# The settings of the benchmark scripts/$1.sh ($1 also names its log lines and its block
# of docs/benchmarks.md): DURATION (s a run, default 10), WARMUP (s, default 1) and ROUNDS
# (default 2) unless set; the services' ports, Ticketing's $2, etcd's $3 and Redis's $4;
# the two Ticketing secrets, unless set; TICKETING, the server `cargo build --release`
# makes.
bench_settings() {
    BENCH_NAME=$1
    DURATION=${DURATION:-10}
    WARMUP=${WARMUP:-1}
    ROUNDS=${ROUNDS:-2}
    TPORT=$2
    EPORT=$3
    RPORT=$4
    export TICKETING_AUTH_TOKEN=${TICKETING_AUTH_TOKEN:-$1-secret-0123456789}
    export TICKETING_PEER_AUTH_TOKEN=${TICKETING_PEER_AUTH_TOKEN:-$1-peer-secret-0123456789}
    TICKETING="$ROOT/target/release/ticketing"
}

log() { echo "$BENCH_NAME: $*" >&2; }

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

# The virtualenv target/python-bench with the package from python/ and the PyPI
# requirements given as arguments; sets PY, its python.
python_bench_venv() {
    local venv="$ROOT/target/python-bench"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    PY="$venv/bin/python"
    "$PY" -m pip install --quiet --upgrade pip >/dev/null
    "$PY" -m pip install --quiet --force-reinstall --no-deps "$ROOT/python"
    "$PY" -m pip install --quiet "$@"
}

# Runs each system of SYSTEMS once per argument, ROUNDS times over, and appends what
# `run SYSTEM ARGS...` prints (a JSON line) to RESULTS, in WORK. An argument is the ARGS
# of one run, split on spaces: `bench_rounds "64 10 1" "1 10 1"` runs every system with
# 64, then with 1. The systems' order turns by one after each argument, the first
# starting with the first system; with -r first, after each round, the first round
# starting with the second. Sets STARTED (the date), UPTIME_BEFORE and UPTIME_AFTER.
bench_rounds() {
    local by_round="" turn=0 n=${#SYSTEMS[@]} round set k system line args
    if [ "${1:-}" = -r ]; then
        by_round=1
        shift
    fi
    RESULTS="$WORK/results.jsonl"
    STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
    UPTIME_BEFORE=$(uptime)
    for round in $(seq 1 "$ROUNDS"); do
        if [ -n "$by_round" ]; then turn=$round; fi
        for set in "$@"; do
            read -ra args <<<"$set"
            for ((k = 0; k < n; k++)); do
                system=${SYSTEMS[$(((k + turn) % n))]}
                line=$(run "$system" "${args[@]}")
                echo "$line" >>"$RESULTS"
                log "round $round: $line"
            done
            if [ -z "$by_round" ]; then turn=$((turn + 1)); fi
        done
    done
    UPTIME_AFTER=$(uptime)
}

# Writes the block of the script into docs/benchmarks.md, between its markers (under the
# heading $1 when there are none yet): report_body's lines, then the raw results. Sets
# TABLE to what report_table prints (and prints it).
bench_report() {
    local block="$WORK/block.md"
    TABLE=$(report_table)
    echo "$TABLE"
    {
        echo "<!-- $BENCH_NAME:begin (written by scripts/$BENCH_NAME.sh; do not edit by hand) -->"
        report_body
        echo
        echo "Raw results:"
        echo
        sed 's/^/    /' "$RESULTS"
        echo "<!-- $BENCH_NAME:end -->"
    } >"$block"
    replace_doc_block "$ROOT/docs/benchmarks.md" "$BENCH_NAME" "$block" "$1"
}

# The body of the block unless a script defines its own: report_intro's lines, the
# table, the machine and its load before and after the runs, report_versions' lines and
# report_commands' lines.
report_body() {
    report_intro
    echo
    echo "$TABLE"
    echo
    report_machine
    echo "kernel $(uname -r). \`uptime\` before and after the runs:"
    echo
    echo "    $UPTIME_BEFORE"
    echo "    $UPTIME_AFTER"
    echo
    report_versions
    echo
    report_commands
}

# The first line on the machine: its CPUs.
report_machine() {
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
}
