#!/usr/bin/env bash
# The Laminar demo (`make demo`): a 3-node local cluster, a topic, produce and consume,
# a node killed while produce and consume go on, a Spark read of the topic from the
# cluster and from node 1's segment files (the offline reader); then a secured cluster
# (TLS, encrypted gossip, a token and an ACL refusing one write), then everything
# stopped.
#
# Uses ./.venv (made by `make install`) and ./.cluster/ (see scripts/local_cluster.sh).
# Refuses to run if a local cluster already runs there.
set -euo pipefail

cd "$(dirname "$0")/.."
export LAMINAR_CLUSTER_DIR="${LAMINAR_CLUSTER_DIR:-.cluster}"
CLUSTER=scripts/local_cluster.sh
PY=.venv/bin/python

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
laminar() { "$PY" -m laminar.cli "$@"; }  # every node, from LAMINAR_BOOTSTRAP (below)

if compgen -G "$LAMINAR_CLUSTER_DIR/node*.pid" >/dev/null; then
    echo "a local cluster seems to run under $LAMINAR_CLUSTER_DIR; stop it first:" >&2
    echo "  $CLUSTER stop" >&2
    exit 1
fi
rm -rf "$LAMINAR_CLUSTER_DIR"
trap '$CLUSTER stop >/dev/null 2>&1 || true' EXIT

step "start a 3-node cluster on 127.0.0.1 (data and logs in $LAMINAR_CLUSTER_DIR/)"
started="$($CLUSTER start 3)"
echo "$started"
eval "$started"  # export LAMINAR_BOOTSTRAP=<every node>

step "create topic 'demo': 3 partitions, the cluster's default replication factor (3)"
laminar topic create demo --partitions 3
laminar topic describe demo

step "produce 1,000 records to demo/0 (acks=all: on a majority of replicas, fsynced)"
seq 1 1000 | sed 's/^/event-/' | laminar produce demo --partition 0

step "consume the first 5 records of demo/0"
laminar consume demo --partition 0 --from earliest --max 5

step "cluster status"
laminar cluster status

step "kill node 0 (SIGKILL) and keep going"
$CLUSTER kill 0
seq 1001 2000 | sed 's/^/event-/' | laminar produce demo --partition 0
count="$(laminar consume demo --partition 0 --from earliest --max 2000 | wc -l)"
unique="$(laminar consume demo --partition 0 --from earliest --max 2000 | sort -u | wc -l)"
echo "consumed $count records from demo/0 ($unique distinct) with node 0 down"
[[ "$count" == 2000 && "$unique" == 2000 ]] || { echo "expected 2000 distinct records" >&2; exit 1; }
laminar cluster status

step "restart node 0: it rejoins and catches up"
$CLUSTER restart 0
"$PY" -m laminar.server.probe 127.0.0.1:7100 --members 3 --timeout 30
laminar cluster status

step "read the topic with Spark (spark.read.format(\"laminar\"), PySpark's local mode)"
"$PY" scripts/demo_spark.py

step "stop the cluster"
$CLUSTER stop

step "a secured cluster: TLS on every port, encrypted gossip, a token, ACLs"
rm -rf "$LAMINAR_CLUSTER_DIR"
started="$($CLUSTER start 3 --secure)"
echo "$started"
eval "$started"  # LAMINAR_BOOTSTRAP, LAMINAR_TLS_CA and the admin's LAMINAR_TOKEN
laminar topic create payments --partitions 1
seq 1 3 | sed 's/^/payment-/' | laminar produce payments
echo "# a token for the user 'reporting', allowed to read payments and nothing else"
reporting="$(laminar token create reporting --file "$LAMINAR_CLUSTER_DIR/secure/tokens.toml")"
laminar acl create --principal User:reporting --operation read --topic payments
laminar acl list
# The nodes read the token file again within a second of a change.
for _ in $(seq 50); do
    laminar --token "$reporting" consume payments --max 3 >/dev/null 2>&1 && break
    sleep 0.2
done
echo "# reporting reads payments:"
laminar --token "$reporting" consume payments --max 3
echo "# reporting writes to payments: refused, nothing written"
if echo refund | laminar --token "$reporting" produce payments; then
    echo "a write the ACLs do not allow was accepted" >&2
    exit 1
fi
echo "# a client without the CA (plaintext) is refused at the TLS handshake:"
if LAMINAR_TLS_CA="" laminar --timeout 5 cluster status; then
    echo "a plaintext client was answered" >&2
    exit 1
fi

step "stop the secured cluster"
$CLUSTER stop
trap - EXIT
echo
echo "demo done: try it yourself with eval \"\$(scripts/local_cluster.sh start 3)\" (add --secure"
echo "for TLS, encrypted gossip and ACLs) and .venv/bin/laminar --help"
