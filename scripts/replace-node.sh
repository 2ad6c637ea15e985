#!/usr/bin/env bash
# Replaces cluster node OLD_ID by a NEW node on this host, with deploy/ticketing@.service.
#
#   scripts/replace-node.sh OLD_ID NEW_ID NEW_ADDR [LISTEN]
#   scripts/replace-node.sh --help        (prints this text)
#
#   OLD_ID    the voter to replace (dead, or to be retired: a rolling restart)
#   NEW_ID    a NodeId never used in this cluster (the unit refuses one that ran here)
#   NEW_ADDR  the new node's client address as the other nodes dial it (host:port). While
#             OLD is still a member it must not be OLD's address: use another host, IP or
#             port; once the swap has committed OLD's address is free again.
#   LISTEN    its listen address; default: TICKETING_LISTEN of the node template, else
#             0.0.0.0:PORT of NEW_ADDR (which collides with any node listening on PORT on
#             this host: on a host shared by several nodes, give LISTEN or the template's)
#
# Files in $CONF_DIR (docs/operations.md, "replace-node.sh: the files it reads"):
#   cluster.env        shared by every node: TICKETING_CLUSTER_PEERS (the members to ask;
#                      one live one is enough) and, on a TLS cluster, TICKETING_TLS_CA
#                      (this script's own `ticketing` calls use it as well)
#   node-template.env  what every new node gets besides its id and address, one
#                      TICKETING_NAME=VALUE a line, with {ID}, {HOST} and {PORT} replaced
#                      by NEW_ID and NEW_ADDR's host and port. Required on a TLS cluster
#                      (each node its own certificate and key), optional otherwise:
#                          TICKETING_TLS_CERT=/etc/ticketing/node-{ID}.pem
#                          TICKETING_TLS_KEY=/etc/ticketing/node-{ID}.key
#                          TICKETING_METRICS_LISTEN={HOST}:9225
#                          TICKETING_LISTEN={HOST}:{PORT}
#                      It may not set TICKETING_NODE_ID, _CLUSTER_SELF, _CLUSTER_STATE or
#                      _CLUSTER_PEERS (the unit, the arguments and cluster.env do).
#   auth-token, peer-token   the client and the operator (peer) secrets
#
# Steps (docs/operations.md, "Replacing a node"):
#   1. read the membership from the leader, found through any reachable member: OLD must
#      be a voter and NEW never used, else stop here with exit 1 — nothing started,
#      nothing written. Then TICKETING_CLUSTER_PEERS in cluster.env is set to the voters
#      the leader named (so it names live members from here on, whatever happens next);
#   2. write $CONF_DIR/node-NEW_ID.env (join mode, the template's lines), start
#      ticketing@NEW_ID and wait until it answers at NEW_ADDR. If it exits instead, its
#      last log lines (journalctl) are printed and the run ends with exit 2;
#   3. `ticketing admin replace OLD_ID NEW_ID@NEW_ADDR` (the leader adds NEW as a learner,
#      streams it the state, swaps it in by joint consensus);
#   4. ask the leader, found through the members other than OLD, until it lists NEW as a
#      voter and OLD as none; then rewrite TICKETING_CLUSTER_PEERS in cluster.env to those
#      voters, and only then stop ticketing@OLD_ID if it runs here.
# Every wait is bounded: the whole run takes at most REPLACE_DEADLINE_S (default 150 s),
# and when that runs out, one last look at the membership (at most 30 s more).
# On any failure after step 2 the new node's last log lines are printed, and unless the
# leader lists it as a voter by then, it is stopped again and its env file renamed to
# node-NEW_ID.env.failed (NEW_ID has run on this host: pick another one).
#
# Exit status: 0 replaced; 1 refused (the reason is printed; the cluster is unchanged);
# 2 usage or local configuration error, or the new node exited at start (its own error
# is printed); 3 not done in time or cluster unreachable.
#
# Environment: CONF_DIR (/etc/ticketing), NODE_TEMPLATE ($CONF_DIR/node-template.env),
# TICKETING (ticketing binary, from PATH), SYSTEMCTL (systemctl), JOURNALCTL
# (journalctl), REPLACE_DEADLINE_S. TICKETING_ADDRS, if set, replaces cluster.env's
# members as the first ones asked; TICKETING_TLS_CA, if set, replaces cluster.env's for
# this script's calls; the client secret comes from $CONF_DIR/auth-token unless
# TICKETING_AUTH_TOKEN(_FILE) is set, the operator secret, which `ticketing admin`
# needs, from $CONF_DIR/peer-token unless TICKETING_PEER_AUTH_TOKEN(_FILE) is set.
set -euo pipefail

CONF_DIR=${CONF_DIR:-/etc/ticketing}
NODE_TEMPLATE=${NODE_TEMPLATE:-$CONF_DIR/node-template.env}
TICKETING=${TICKETING:-ticketing}
SYSTEMCTL=${SYSTEMCTL:-systemctl}
JOURNALCTL=${JOURNALCTL:-journalctl}
DEADLINE=$(( $(date +%s) + ${REPLACE_DEADLINE_S:-150} ))

say() { echo "replace-node: $*" >&2; }
usage() { say "$*"; exit 2; }
left() { echo $(( DEADLINE - $(date +%s) )); }

if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
fi
[ $# -ge 3 ] && [ $# -le 4 ] || usage "usage: $0 OLD_ID NEW_ID NEW_ADDR [LISTEN] (--help: the files it reads)"
OLD=$1 NEW=$2 NEW_ADDR=$3
[[ $OLD =~ ^[1-9][0-9]*$ && $NEW =~ ^[1-9][0-9]*$ ]] || usage "node ids are non-zero numbers"
[ "$OLD" != "$NEW" ] || usage "NEW_ID must differ from OLD_ID (a NodeId is never reused)"
[[ $NEW_ADDR =~ ^[][A-Za-z0-9.:_-]+:[0-9]+$ ]] || usage "NEW_ADDR must be host:port, not $NEW_ADDR"
NEW_HOST=${NEW_ADDR%:*} NEW_PORT=${NEW_ADDR##*:}

NODE_ENV="$CONF_DIR/node-$NEW.env"
CLUSTER_ENV="$CONF_DIR/cluster.env"
[ -e "$NODE_ENV" ] && { say "refused: $NODE_ENV exists: NodeId $NEW has been used here; pick a new one"; exit 1; }
[ -e "$NODE_ENV.failed" ] &&
    { say "refused: NodeId $NEW was started here before (see $NODE_ENV.failed); pick a new one"; exit 1; }
[ -r "$CLUSTER_ENV" ] || usage "$CLUSTER_ENV is missing"

# The value of NAME in env-file text $2 (the last assignment wins, as in systemd).
value_in() {
    sed -n "s/^$1=//p" <<<"$2" | tail -n 1 | sed -e 's/^"\(.*\)"$/\1/' -e "s/^'\(.*\)'$/\1/"
}
CLUSTER_TEXT=$(cat "$CLUSTER_ENV")

# The template's lines for this node (comments and blank lines dropped).
TEMPLATE=""
if [ -e "$NODE_TEMPLATE" ]; then
    [ -r "$NODE_TEMPLATE" ] || usage "$NODE_TEMPLATE is not readable"
    TEMPLATE=$(sed -e "s/{ID}/$NEW/g" -e "s/{HOST}/$NEW_HOST/g" -e "s/{PORT}/$NEW_PORT/g" "$NODE_TEMPLATE" |
        grep -v '^[[:space:]]*\(#.*\)\{0,1\}$' || true)
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        name=${line%%=*}
        [[ $line == *=* && $name =~ ^TICKETING_[A-Z_]+$ ]] ||
            usage "$NODE_TEMPLATE: \"$line\" is not a TICKETING_NAME=VALUE line"
        case $name in
        TICKETING_NODE_ID | TICKETING_CLUSTER_SELF | TICKETING_CLUSTER_STATE | TICKETING_CLUSTER_PEERS)
            usage "$NODE_TEMPLATE sets $name: the unit (NodeId), the arguments (NEW_ADDR, join) and $CLUSTER_ENV (peers) set it" ;;
        esac
        if [[ $line =~ \{[A-Za-z_]*\} ]]; then
            usage "$NODE_TEMPLATE: \"$line\": only {ID}, {HOST} and {PORT} are replaced"
        fi
    done <<<"$TEMPLATE"
fi
LISTEN=${4:-$(value_in TICKETING_LISTEN "$TEMPLATE")}
LISTEN=${LISTEN:-0.0.0.0:$NEW_PORT}

# TLS: the node gets its CA from cluster.env or the template, and its own certificate and
# key from the template. Checked here, before anything starts, so that a TLS cluster is
# never handed a node that speaks plain TCP (it would exit 2 or never be reached).
NODE_CA=$(value_in TICKETING_TLS_CA "$CLUSTER_TEXT")
NODE_CA=${NODE_CA:-$(value_in TICKETING_TLS_CA "$TEMPLATE")}
export TICKETING_TLS_CA=${TICKETING_TLS_CA:-$NODE_CA}
[ -n "$TICKETING_TLS_CA" ] || unset TICKETING_TLS_CA
if [ -n "${TICKETING_TLS_CA:-}" ] && [ -z "$NODE_CA" ]; then
    usage "TICKETING_TLS_CA is set for this script but neither $CLUSTER_ENV nor $NODE_TEMPLATE gives it to the new node: put TICKETING_TLS_CA=$TICKETING_TLS_CA in $CLUSTER_ENV"
fi
if [ -n "$NODE_CA" ]; then
    [ -r "$NODE_CA" ] || usage "TICKETING_TLS_CA: $NODE_CA is not a readable file"
    for var in TICKETING_TLS_CERT TICKETING_TLS_KEY; do
        file=$(value_in "$var" "$TEMPLATE")
        [ -n "$file" ] || usage "the cluster uses TLS (TICKETING_TLS_CA in $CLUSTER_ENV) but $NODE_TEMPLATE gives the new node no $var: add e.g. $var=$CONF_DIR/node-{ID}.$([ $var = TICKETING_TLS_CERT ] && echo pem || echo key) (docs/tls.md makes one)"
        [ -r "$file" ] || usage "$var of node $NEW ($NODE_TEMPLATE): $file is not a readable file (docs/tls.md makes one)"
    done
fi

if [ -z "${TICKETING_ADDRS:-}" ]; then
    peers=$(value_in TICKETING_CLUSTER_PEERS "$CLUSTER_TEXT")
    [ -n "$peers" ] || usage "no TICKETING_CLUSTER_PEERS in $CLUSTER_ENV and no TICKETING_ADDRS"
    # id@host:port,... -> host:port,...
    TICKETING_ADDRS=$(echo "$peers" | tr ',' '\n' | sed 's/^[0-9]*@//' | paste -sd, -)
fi
export TICKETING_ADDRS
if [ -z "${TICKETING_AUTH_TOKEN:-}" ] && [ -z "${TICKETING_AUTH_TOKEN_FILE:-}" ]; then
    export TICKETING_AUTH_TOKEN_FILE="$CONF_DIR/auth-token"
fi
if [ -z "${TICKETING_PEER_AUTH_TOKEN:-}" ] && [ -z "${TICKETING_PEER_AUTH_TOKEN_FILE:-}" ]; then
    export TICKETING_PEER_AUTH_TOKEN_FILE="$CONF_DIR/peer-token"
fi

# `ticketing admin members` lines: "leader ADDR (node ID, term T)", "voter ID@ADDR ...",
# "learner ...", "standby ...", "retired ID,ID". Bounded by the CLI's own 5 s budget
# (and by `timeout`, in case).
members() { timeout 15 "$TICKETING" admin members "$@"; }
voters_of() { awk '$1 == "voter" { print $2 }' <<<"$1"; }
leader_of() { awk '$1 == "leader" && $2 ~ /:/ { print $2 }' <<<"$1"; }

# The membership as the leader itself reports it, found through any of the addresses
# $1. Any node answers MEMBERS with its own view, and a removed or cut-off node's view
# can be stale: only the node that says it leads is believed.
leader_view() {
    local seen leader view
    seen=$(members --addr "$1") || return 1
    leader=$(leader_of "$seen")
    [ -n "$leader" ] || { say "no leader known at $1"; return 1; }
    view=$(members --addr "$leader") || return 1
    [ "$(leader_of "$view")" = "$leader" ] || { say "$leader no longer leads"; return 1; }
    echo "$view"
}

# Sets TICKETING_CLUSTER_PEERS in cluster.env to the voters $1 (id@addr lines), keeping
# every other line; written to a temporary file and renamed, so never half written.
record_voters() {
    local peers tmp
    peers=$(paste -sd, - <<<"$1")
    [ "$peers" = "$(value_in TICKETING_CLUSTER_PEERS "$(cat "$CLUSTER_ENV")")" ] && return 0
    tmp=$(mktemp "$CLUSTER_ENV.XXXXXX")
    if grep -q '^TICKETING_CLUSTER_PEERS=' "$CLUSTER_ENV"; then
        sed "s|^TICKETING_CLUSTER_PEERS=.*|TICKETING_CLUSTER_PEERS=$peers|" "$CLUSTER_ENV" > "$tmp"
    else
        { cat "$CLUSTER_ENV"; echo "TICKETING_CLUSTER_PEERS=$peers"; } > "$tmp"
    fi
    chmod --reference="$CLUSTER_ENV" "$tmp" 2>/dev/null || true
    mv -f "$tmp" "$CLUSTER_ENV"
    say "$CLUSTER_ENV now lists TICKETING_CLUSTER_PEERS=$peers"
}

# 1. Check before anything starts.
if ! current=$(leader_view "$TICKETING_ADDRS"); then
    say "cannot read the membership from the leader through $TICKETING_ADDRS (the reason is above)"
    exit 3
fi
voters=$(voters_of "$current")
grep -q "^$OLD@" <<<"$voters" ||
    { say "refused: node $OLD is not a voter; voters: $(paste -sd' ' <<<"$voters")"; exit 1; }
if awk -v id="$NEW" '$1 != "leader" && $1 != "retired" && index($2, id "@") == 1 { found = 1 } END { exit !found }' <<<"$current"; then
    say "refused: node $NEW is a member already: a NodeId is never reused"; exit 1
fi
if awk -v id="$NEW" '$1 == "retired" { n = split($2, ids, ","); for (i = 1; i <= n; i++) if (ids[i] == id) found = 1 } END { exit !found }' <<<"$current"; then
    say "refused: node $NEW was a member before: a NodeId is never reused"; exit 1
fi
OLD_ADDR=$(grep "^$OLD@" <<<"$voters" | sed 's/^[0-9]*@//')
member_addrs=$(awk '$1 != "leader" && $1 != "retired" && $2 ~ /@/ { sub(/^[0-9]+@/, "", $2); print $2 }' <<<"$current")
grep -qx "$NEW_ADDR" <<<"$member_addrs" &&
    { say "refused: $NEW_ADDR is the address of a member (node $OLD's, while it is one, too): give node $NEW another host, IP or port"; exit 1; }
# Who is asked from here on: the members as the leader named them. The swap is asked of
# all of them; its outcome only of the others and the new node, never of OLD.
MEMBERS=$(paste -sd, - <<<"$member_addrs")
ASK=$( { grep -vx "$OLD_ADDR" <<<"$member_addrs" || true; echo "$NEW_ADDR"; } | paste -sd, -)
record_voters "$voters"

# From here on, a failure shows the new node's log and stops it, unless it is a voter.
STARTED=""
node_log() {
    say "node $NEW's last log lines (journalctl -u ticketing@$NEW):"
    "$JOURNALCTL" --unit "ticketing@$NEW.service" --lines 20 --no-pager --output cat 2>&1 |
        sed 's/^/    /' >&2 || true
}
running() { "$SYSTEMCTL" is-active --quiet "ticketing@$NEW.service" 2>/dev/null; }
# True when the node answering at NEW_ADDR is ours (not whatever else holds the port).
answers() {
    local text
    text=$(timeout 8 "$TICKETING" status --node --addr "$NEW_ADDR" 2>/dev/null) || return 1
    grep -qx "node_id=$NEW" <<<"$text"
}
# True when the leader, found through the members other than OLD, lists NEW as a voter
# and OLD as none; sets VIEW to its membership.
swapped() {
    local view
    view=$(leader_view "$ASK" 2>/dev/null) || return 1
    [ "$(leader_of "$view")" != "$OLD_ADDR" ] || return 1
    grep -qx "$NEW@$NEW_ADDR" <<<"$(voters_of "$view")" || return 1
    ! grep -q "^$OLD@" <<<"$(voters_of "$view")" || return 1
    VIEW=$view
}
finish() {
    STARTED=""
    say "node $NEW is a voter; node $OLD is out (as the leader $(leader_of "$VIEW") reports)"
    record_voters "$(voters_of "$VIEW")"
    if "$SYSTEMCTL" is-active --quiet "ticketing@$OLD.service" 2>/dev/null; then
        say "stopping ticketing@$OLD"
        "$SYSTEMCTL" stop "ticketing@$OLD.service" || say "ticketing@$OLD did not stop; it stops by itself once it learns it was removed"
    fi
    exit 0
}
# fail CODE MESSAGE: ends the run. A swap that happened after all is finished instead.
fail() {
    local code=$1
    shift
    say "$*"
    if [ -n "$STARTED" ]; then
        if [ "$code" = 3 ] && swapped; then
            say "the leader lists node $NEW as a voter all the same"
            finish
        fi
        node_log
    fi
    exit "$code"
}
cleanup() {
    if [ -n "$STARTED" ]; then
        say "stopping ticketing@$NEW again; $NODE_ENV is kept as $NODE_ENV.failed"
        "$SYSTEMCTL" stop "ticketing@$NEW.service" 2>/dev/null || true
        mv -f "$NODE_ENV" "$NODE_ENV.failed" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. Start the new node in join mode, and wait until it answers or exits.
say "starting node $NEW at $NEW_ADDR (join, listening on $LISTEN) to replace node $OLD"
umask 077
{
    echo "# Written by replace-node.sh: node $NEW replaces node $OLD. Never reuse NodeId $NEW."
    echo "TICKETING_LISTEN=$LISTEN"
    echo "TICKETING_CLUSTER_SELF=$NEW_ADDR"
    echo "TICKETING_CLUSTER_STATE=join"
    if [ -n "$TEMPLATE" ]; then
        echo "# From $NODE_TEMPLATE:"
        grep -v '^TICKETING_LISTEN=' <<<"$TEMPLATE" || true
    fi
} > "$NODE_ENV"
STARTED=yes
"$SYSTEMCTL" start "ticketing@$NEW.service" || fail 2 "ticketing@$NEW did not start"
# A node that cannot start (its port taken, its certificate refused) exits within
# moments: look before asking it, since asking an address nobody listens at takes 5 s.
sleep 0.5
until running && answers; do
    # Its own last words are the reason.
    running || fail 2 "node $NEW exited at start: fix what its log says ($NODE_ENV, $NODE_TEMPLATE), then run again with another NEW_ID"
    [ "$(left)" -gt 0 ] || fail 3 "node $NEW does not answer at $NEW_ADDR"
    sleep 0.5
done

# 3. The swap. A leader change midway is answered "stopped leading" or not at all: the
#    membership then tells whether it happened; ask again while time is left.
while :; do
    [ "$(left)" -gt 5 ] || fail 3 "the replacement did not finish within ${REPLACE_DEADLINE_S:-150} s"
    set +e
    out=$("$TICKETING" admin replace "$OLD" "$NEW@$NEW_ADDR" --addr "$MEMBERS" --timeout "$(( $(left) - 5 ))" 2>&1)
    code=$?
    set -e
    [ -n "$out" ] && echo "$out" >&2
    [ $code -eq 0 ] && break
    swapped && finish
    running || fail 3 "node $NEW exited during the replacement"
    if [ $code -eq 1 ] && ! grep -q "stopped leading" <<<"$out"; then
        fail 1 "refused: the leader refused the replacement (see above)"
    fi
    say "asking again"
    sleep 1
done

# 4. Judge by the membership after the swap, as the leader reports it, asked through
#    the others: OLD may be stale or gone. Only then record it and stop OLD.
until swapped; do
    [ "$(left)" -gt 0 ] || fail 3 "the leader does not list node $NEW as a voter and node $OLD as none in time"
    sleep 0.5
done
finish
