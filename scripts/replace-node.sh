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
# Steps (docs/operations.md): write $CONF_DIR/node-NEW_ID.env (join mode), start ticketing@NEW_ID,
# run `ticketing admin replace OLD_ID NEW_ID@NEW_ADDR` against the current members (the
# leader adds NEW as a learner, streams it the state, swaps it in by joint consensus),
# wait until STATUS lists NEW as a voter, then stop ticketing@OLD_ID if it runs here
# (a removed node also stops by itself, with status 0).
#
# Environment: CONF_DIR (/etc/ticketing), TICKETING (ticketing binary, from PATH),
# SYSTEMCTL (systemctl). The members to talk to come from TICKETING_CLUSTER_PEERS in
# $CONF_DIR/cluster.env unless TICKETING_ADDRS is set; the client secret from
# $CONF_DIR/auth-token unless TICKETING_AUTH_TOKEN(_FILE) is set, and the operator (peer)
# secret, which `ticketing admin` needs, from $CONF_DIR/peer-token unless
# TICKETING_PEER_AUTH_TOKEN(_FILE) is set.
set -euo pipefail

CONF_DIR=${CONF_DIR:-/etc/ticketing}
TICKETING=${TICKETING:-ticketing}
SYSTEMCTL=${SYSTEMCTL:-systemctl}

die() { echo "replace-node: $*" >&2; exit 2; }

[ $# -ge 3 ] && [ $# -le 4 ] || die "usage: $0 OLD_ID NEW_ID NEW_ADDR [LISTEN]"
OLD=$1 NEW=$2 NEW_ADDR=$3
[[ $OLD =~ ^[1-9][0-9]*$ && $NEW =~ ^[1-9][0-9]*$ ]] || die "node ids are non-zero numbers"
[ "$OLD" != "$NEW" ] || die "NEW_ID must differ from OLD_ID (a NodeId is never reused)"
[[ $NEW_ADDR == *:* ]] || die "NEW_ADDR must be host:port"
LISTEN=${4:-0.0.0.0:${NEW_ADDR##*:}}

NODE_ENV="$CONF_DIR/node-$NEW.env"
[ -e "$NODE_ENV" ] && die "$NODE_ENV exists: NodeId $NEW has been used; pick a new one"
[ -r "$CONF_DIR/cluster.env" ] || die "$CONF_DIR/cluster.env is missing"

if [ -z "${TICKETING_ADDRS:-}" ]; then
    peers=$(sed -n 's/^TICKETING_CLUSTER_PEERS=//p' "$CONF_DIR/cluster.env" | tr -d '"'"'"'')
    [ -n "$peers" ] || die "no TICKETING_CLUSTER_PEERS in $CONF_DIR/cluster.env and no TICKETING_ADDRS"
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

echo "replace-node: starting node $NEW at $NEW_ADDR (join) to replace node $OLD"
umask 077
cat > "$NODE_ENV" <<ENV
# Written by replace-node.sh: node $NEW replaces node $OLD. Never reuse NodeId $NEW.
TICKETING_LISTEN=$LISTEN
TICKETING_CLUSTER_SELF=$NEW_ADDR
TICKETING_CLUSTER_STATE=join
ENV
"$SYSTEMCTL" start "ticketing@$NEW.service"

# The leader answers once NEW has caught up and the swap committed. A leader change
# midway is refused ("stopped leading") or unanswered: look at STATUS, then ask again.
# True when the current leader's committed configuration lists NEW as a voter.
is_voter() {
    local addr text
    for addr in $(echo "$TICKETING_ADDRS,$NEW_ADDR" | tr ',' ' '); do
        text=$("$TICKETING" status --node --addr "$addr" 2>/dev/null) || continue
        if echo "$text" | grep -qx "role=leader"; then
            echo "$text" | sed -n 's/^voters=//p' | tr ',' '\n' | grep -qx "$NEW@$NEW_ADDR"
            return
        fi
    done
    return 1
}
for attempt in 1 2 3 4 5; do
    if "$TICKETING" admin replace "$OLD" "$NEW@$NEW_ADDR"; then
        break
    fi
    sleep 3
    if is_voter; then
        break
    fi
    [ "$attempt" -lt 5 ] || die "admin replace $OLD $NEW@$NEW_ADDR did not succeed; ticketing@$NEW keeps running, check \`ticketing status\`"
    echo "replace-node: asking again ($attempt)" >&2
done

for _ in $(seq 1 60); do
    if is_voter; then
        echo "replace-node: node $NEW is a voter; node $OLD is out"
        if "$SYSTEMCTL" is-active --quiet "ticketing@$OLD.service"; then
            "$SYSTEMCTL" stop "ticketing@$OLD.service"
        fi
        exit 0
    fi
    sleep 1
done
die "node $NEW is not listed as a voter after 60 s; check \`ticketing status\`"
