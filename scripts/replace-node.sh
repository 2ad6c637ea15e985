#!/usr/bin/env bash
# Replaces cluster node OLD_ID by a NEW node on this host, with deploy/ticketing@.service.
#
#   scripts/replace-node.sh OLD_ID NEW_ID NEW_ADDR [LISTEN]
#
#   OLD_ID    the voter to replace (dead, or to be retired: a rolling restart)
#   NEW_ID    a NodeId never used in this cluster (the unit refuses one that ran here)
#   NEW_ADDR  the new node's client address as the other nodes dial it (host:port). While
#             OLD is still a member it must not be OLD's address: use another host, IP or
#             port; once the swap has committed OLD's address is free again.
#   LISTEN    its listen address (default 0.0.0.0:PORT of NEW_ADDR)
#
# Steps (docs/operations.md, "Replacing a node"):
#   1. read the membership from any reachable member (`ticketing admin members`): OLD
#      must be a voter and NEW never used, else stop here with exit 1 — nothing started;
#   2. write $CONF_DIR/node-NEW_ID.env (join mode) and start ticketing@NEW_ID;
#   3. `ticketing admin replace OLD_ID NEW_ID@NEW_ADDR` (the leader adds NEW as a learner,
#      streams it the state, swaps it in by joint consensus);
#   4. wait until the membership lists NEW as a voter, stop ticketing@OLD_ID if it runs
#      here, and rewrite TICKETING_CLUSTER_PEERS in $CONF_DIR/cluster.env to the voters.
# Every wait is bounded: the whole run takes at most REPLACE_DEADLINE_S (default 150 s).
# On any failure after step 2 the new node is stopped again and its env file renamed
# to node-NEW_ID.env.failed (NEW_ID has run on this host: pick another one).
#
# Exit status: 0 replaced; 1 refused (the reason is printed; nothing changed);
# 2 usage or local configuration error; 3 not done in time or cluster unreachable.
#
# Environment: CONF_DIR (/etc/ticketing), TICKETING (ticketing binary, from PATH),
# SYSTEMCTL (systemctl), REPLACE_DEADLINE_S. The members to talk to come from
# TICKETING_CLUSTER_PEERS in $CONF_DIR/cluster.env (one live member is enough, the rest
# may be stale) unless TICKETING_ADDRS is set; the client secret from
# $CONF_DIR/auth-token unless TICKETING_AUTH_TOKEN(_FILE) is set, and the operator (peer)
# secret, which `ticketing admin` needs, from $CONF_DIR/peer-token unless
# TICKETING_PEER_AUTH_TOKEN(_FILE) is set.
set -euo pipefail

CONF_DIR=${CONF_DIR:-/etc/ticketing}
TICKETING=${TICKETING:-ticketing}
SYSTEMCTL=${SYSTEMCTL:-systemctl}
DEADLINE=$(( $(date +%s) + ${REPLACE_DEADLINE_S:-150} ))

say() { echo "replace-node: $*" >&2; }
usage() { say "$*"; exit 2; }
refused() { say "refused: $*"; exit 1; }
left() { echo $(( DEADLINE - $(date +%s) )); }

[ $# -ge 3 ] && [ $# -le 4 ] || usage "usage: $0 OLD_ID NEW_ID NEW_ADDR [LISTEN]"
OLD=$1 NEW=$2 NEW_ADDR=$3
[[ $OLD =~ ^[1-9][0-9]*$ && $NEW =~ ^[1-9][0-9]*$ ]] || usage "node ids are non-zero numbers"
[ "$OLD" != "$NEW" ] || usage "NEW_ID must differ from OLD_ID (a NodeId is never reused)"
[[ $NEW_ADDR == *:* ]] || usage "NEW_ADDR must be host:port"
LISTEN=${4:-0.0.0.0:${NEW_ADDR##*:}}

NODE_ENV="$CONF_DIR/node-$NEW.env"
CLUSTER_ENV="$CONF_DIR/cluster.env"
[ -e "$NODE_ENV" ] && refused "$NODE_ENV exists: NodeId $NEW has been used here; pick a new one"
[ -e "$NODE_ENV.failed" ] && refused "NodeId $NEW was started here before (see $NODE_ENV.failed); pick a new one"
[ -r "$CLUSTER_ENV" ] || usage "$CLUSTER_ENV is missing"

if [ -z "${TICKETING_ADDRS:-}" ]; then
    peers=$(sed -n 's/^TICKETING_CLUSTER_PEERS=//p' "$CLUSTER_ENV" | tr -d '"'"'"'')
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

# The membership as the leader sees it: "voter ID@ADDR ...", "learner ...", "retired ...".
# Bounded by the CLI's own 5 s budget (and by `timeout`, in case).
members() {
    timeout 15 "$TICKETING" admin members "$@"
}
voters_of() { awk '$1 == "voter" { print $2 }' <<<"$1"; }

# 1. Check before anything starts.
if ! current=$(members); then
    say "cannot read the membership from any of $TICKETING_ADDRS (the reason is above)"
    exit 3
fi
voters=$(voters_of "$current")
grep -q "^$OLD@" <<<"$voters" || refused "node $OLD is not a voter; voters: $(paste -sd' ' <<<"$voters")"
if awk -v id="$NEW" '($1 == "voter" || $1 == "learner") && index($2, id "@") == 1 { found = 1 } END { exit !found }' <<<"$current"; then
    refused "node $NEW is a member already: a NodeId is never reused"
fi
if awk -v id="$NEW" '$1 == "retired" { n = split($2, ids, ","); for (i = 1; i <= n; i++) if (ids[i] == id) found = 1 } END { exit !found }' <<<"$current"; then
    refused "node $NEW was a member before: a NodeId is never reused"
fi

# From here on, a failure stops the node we started.
STARTED=""
cleanup() {
    if [ -n "$STARTED" ]; then
        say "stopping ticketing@$NEW again; $NODE_ENV is kept as $NODE_ENV.failed"
        "$SYSTEMCTL" stop "ticketing@$NEW.service" || true
        mv -f "$NODE_ENV" "$NODE_ENV.failed" 2>/dev/null || true
    fi
}
trap cleanup EXIT

# 2. Start the new node in join mode.
say "starting node $NEW at $NEW_ADDR (join) to replace node $OLD"
umask 077
cat > "$NODE_ENV" <<ENV
# Written by replace-node.sh: node $NEW replaces node $OLD. Never reuse NodeId $NEW.
TICKETING_LISTEN=$LISTEN
TICKETING_CLUSTER_SELF=$NEW_ADDR
TICKETING_CLUSTER_STATE=join
ENV
STARTED=yes
"$SYSTEMCTL" start "ticketing@$NEW.service" || { say "ticketing@$NEW did not start"; exit 3; }

is_voter() {
    local now
    now=$(members 2>/dev/null) || return 1
    grep -qx "$NEW@$NEW_ADDR" <(voters_of "$now") && ! grep -q "^$OLD@" <(voters_of "$now")
}

# 3. The swap. A leader change midway is answered "stopped leading" or not at all: the
#    membership then tells whether it happened; ask again while time is left.
while :; do
    [ "$(left)" -gt 5 ] || { say "the replacement did not finish within ${REPLACE_DEADLINE_S:-150} s"; exit 3; }
    set +e
    out=$("$TICKETING" admin replace "$OLD" "$NEW@$NEW_ADDR" --timeout "$(( $(left) - 5 ))" 2>&1)
    code=$?
    set -e
    [ -n "$out" ] && echo "$out" >&2
    if [ $code -eq 0 ] || is_voter; then
        break
    fi
    if [ $code -eq 1 ] && ! grep -q "stopped leading" <<<"$out"; then
        refused "the leader refused the replacement (see above)"
    fi
    say "asking again"
    sleep 1
done

# 4. Wait until the members see it, stop OLD here, record the voters on disk.
until is_voter; do
    [ "$(left)" -gt 0 ] || { say "node $NEW is not listed as a voter in time"; exit 3; }
    sleep 1
done
STARTED=""
say "node $NEW is a voter; node $OLD is out"
if "$SYSTEMCTL" is-active --quiet "ticketing@$OLD.service" 2>/dev/null; then
    "$SYSTEMCTL" stop "ticketing@$OLD.service" || true
fi
now=$(members 2>/dev/null) || { say "replaced, but the membership could not be read to update $CLUSTER_ENV"; exit 3; }
peers=$(voters_of "$now" | paste -sd, -)
tmp=$(mktemp "$CLUSTER_ENV.XXXXXX")
if grep -q '^TICKETING_CLUSTER_PEERS=' "$CLUSTER_ENV"; then
    sed "s|^TICKETING_CLUSTER_PEERS=.*|TICKETING_CLUSTER_PEERS=$peers|" "$CLUSTER_ENV" > "$tmp"
else
    { cat "$CLUSTER_ENV"; echo "TICKETING_CLUSTER_PEERS=$peers"; } > "$tmp"
fi
chmod --reference="$CLUSTER_ENV" "$tmp" 2>/dev/null || true
mv -f "$tmp" "$CLUSTER_ENV"
say "$CLUSTER_ENV now lists TICKETING_CLUSTER_PEERS=$peers"
