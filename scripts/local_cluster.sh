#!/usr/bin/env bash
# Run a local Laminar cluster on loopback.
#
#   scripts/local_cluster.sh start N [--secure]
#                                        start N nodes (node 0 bootstraps), wait until
#                                        ready, print export LAMINAR_BOOTSTRAP=<all nodes>;
#                                        --secure: TLS, encrypted gossip and ACLs with a
#                                        throwaway CA, keyring and admin token under
#                                        ./.cluster/secure/ (also prints LAMINAR_TLS_CA
#                                        and LAMINAR_TOKEN); kept for restarts
#   scripts/local_cluster.sh stop        stop every node this script started (SIGTERM)
#   scripts/local_cluster.sh status      which nodes run, and the cluster as they see it
#   scripts/local_cluster.sh kill ID     SIGKILL node ID (a crash)
#   scripts/local_cluster.sh restart ID  stop node ID (SIGTERM) if it runs, start it again
#   scripts/local_cluster.sh rolling-restart [OPTIONS]
#                                        restart every node in turn through `laminar
#                                        cluster rolling-restart` (maintenance, restart,
#                                        catch-up; stops if a majority would be lost)
#   scripts/local_cluster.sh logs ID     print node ID's log
#
# Node I gossips on 127.0.0.1:(7000+I), serves gRPC on 127.0.0.1:(7100+I), takes
# replication traffic on 127.0.0.1:(7200+I) and serves HTTP metrics, /healthz and
# /ready on 127.0.0.1:(7300+I) (N <= 50); its data,
# log and pid file live under ./.cluster/ (LAMINAR_CLUSTER_DIR overrides). Python comes
# from ./.venv (LAMINAR_PYTHON overrides). Extra node options: LAMINAR_NODE_ARGS.
set -euo pipefail

ROOT="${LAMINAR_CLUSTER_DIR:-.cluster}"
PYTHON="${LAMINAR_PYTHON:-.venv/bin/python}"
GOSSIP_BASE=7000
GRPC_BASE=7100
PEER_BASE=7200
METRICS_BASE=7300

usage() {
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

SECURE="$ROOT/secure"

secure() { [[ -f "$SECURE/ca.crt" ]]; }

# A secured cluster: the laminar command and the probe need the CA (and the admin's
# token for what the ACLs guard), from the environment as a user would give it.
secure_env() {
    if secure; then
        LAMINAR_TLS_CA="$(cd "$SECURE" && pwd)/ca.crt"
        export LAMINAR_TLS_CA
        LAMINAR_TOKEN="$(cat "$SECURE/admin.token")"
        export LAMINAR_TOKEN
    fi
}

pid_of() { cat "$ROOT/node$1.pid" 2>/dev/null || true; }

running() {
    local pid
    pid="$(pid_of "$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

check_id() {
    [[ "$1" =~ ^[0-9]+$ ]] || { echo "node id must be a number, got '$1'" >&2; exit 2; }
    [[ -d "$ROOT/node$1" ]] || { echo "no node $1 under $ROOT" >&2; exit 2; }
}

start_node() {
    local id="$1" extra=()
    if running "$id"; then
        echo "# node $id already runs (pid $(pid_of "$id"))"
        return
    fi
    mkdir -p "$ROOT/node$id"
    if [[ "$id" == 0 ]]; then
        extra+=(--bootstrap)
    else
        extra+=(--seeds "127.0.0.1:$GOSSIP_BASE")
    fi
    if secure; then
        [[ -f "$SECURE/node$id.toml" ]] \
            || "$PYTHON" -m laminar.security.local "$SECURE" "node$id" >/dev/null
        extra+=(--config "$SECURE/node$id.toml")
    fi
    # shellcheck disable=SC2086
    "$PYTHON" -m laminar.server node start \
        --data-dir "$ROOT/node$id" \
        --node-id "node$id" \
        --gossip "127.0.0.1:$((GOSSIP_BASE + id))" \
        --grpc "127.0.0.1:$((GRPC_BASE + id))" \
        --peer "127.0.0.1:$((PEER_BASE + id))" \
        --metrics "127.0.0.1:$((METRICS_BASE + id))" \
        --preset local "${extra[@]}" ${LAMINAR_NODE_ARGS:-} \
        >>"$ROOT/node$id.log" 2>&1 &
    echo $! >"$ROOT/node$id.pid"
}

wait_ready() {
    local id="$1" members="$2" tls=()
    if secure; then tls=(--tls-ca "$SECURE/ca.crt"); fi
    if ! "$PYTHON" -m laminar.server.probe "${tls[@]}" "127.0.0.1:$((GRPC_BASE + id))" \
        --members "$members" --timeout 60; then
        echo "node $id did not become ready; last log lines:" >&2
        tail -n 20 "$ROOT/node$id.log" >&2 || true
        exit 1
    fi
}

cmd="${1:-}"
case "$cmd" in
start)
    count="${2:-3}"
    [[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "N must be a positive number" >&2; exit 2; }
    (( count <= 50 )) || { echo "at most 50 nodes" >&2; exit 2; }
    case "${3:-}" in
        "") ;;
        --secure)
            if ! secure && compgen -G "$ROOT/node*/" >/dev/null; then
                echo "$ROOT holds a cluster started without --secure; stop it and remove" \
                    "$ROOT first" >&2
                exit 2
            fi
            nodes=()
            for ((i = 0; i < count; i++)); do nodes+=("node$i"); done
            "$PYTHON" -m laminar.security.local "$SECURE" "${nodes[@]}" >/dev/null
            ;;
        *) echo "unknown option '${3}' (start N [--secure])" >&2; exit 2 ;;
    esac
    mkdir -p "$ROOT"
    start_node 0
    wait_ready 0 1
    for ((i = 1; i < count; i++)); do
        start_node "$i"
    done
    for ((i = 0; i < count; i++)); do
        wait_ready "$i" "$count"
    done
    addresses="127.0.0.1:$GRPC_BASE"
    for ((i = 1; i < count; i++)); do
        addresses+=",127.0.0.1:$((GRPC_BASE + i))"
    done
    echo "# $count nodes ready. Point the laminar command at every node (then it works"
    echo "# while any node runs): run this line, or eval \"\$($0 start $count${3:+ $3})\""
    echo "export LAMINAR_BOOTSTRAP=$addresses"
    if secure; then
        echo "# TLS, encrypted gossip and ACLs on: the CA and the admin's token (a super user)"
        echo "export LAMINAR_TLS_CA=$(cd "$SECURE" && pwd)/ca.crt"
        echo "export LAMINAR_TOKEN=$(cat "$SECURE/admin.token")"
    fi
    ;;
stop)
    shopt -s nullglob
    pids=()
    for file in "$ROOT"/node*.pid; do
        pid="$(cat "$file")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            pids+=("$pid")
        fi
        rm -f "$file"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
    echo "stopped ${#pids[@]} nodes"
    ;;
status)
    shopt -s nullglob
    live=""
    for dir in "$ROOT"/node*/; do
        id="${dir%/}"
        id="${id##*/node}"
        if running "$id"; then
            echo "node $id: running (pid $(pid_of "$id")), grpc 127.0.0.1:$((GRPC_BASE + id))," \
                "metrics http://127.0.0.1:$((METRICS_BASE + id))/metrics"
            live+="${live:+,}127.0.0.1:$((GRPC_BASE + id))"
        else
            echo "node $id: stopped"
        fi
    done
    if [[ -n "$live" ]]; then
        secure_env
        "$PYTHON" -m laminar.cli --bootstrap "$live" cluster status || true
    fi
    ;;
kill)
    check_id "${2:-}"
    if running "$2"; then
        kill -KILL "$(pid_of "$2")"
        echo "killed node $2"
    else
        echo "node $2 is not running"
    fi
    ;;
restart)
    id="${2:-}"
    id="${id#node}"  # the node id (node3) works too
    check_id "$id"
    if running "$id"; then
        kill -TERM "$(pid_of "$id")"
        for _ in $(seq 1 200); do running "$id" || break; sleep 0.1; done
    fi
    start_node "$id"
    wait_ready "$id" 1
    echo "restarted node $id"
    ;;
rolling-restart)
    shopt -s nullglob
    live=""
    for dir in "$ROOT"/node*/; do
        id="${dir%/}"
        id="${id##*/node}"
        if running "$id"; then
            live+="${live:+,}127.0.0.1:$((GRPC_BASE + id))"
        fi
    done
    [[ -n "$live" ]] || { echo "no node runs under $ROOT" >&2; exit 1; }
    secure_env
    "$PYTHON" -m laminar.cli --bootstrap "$live" cluster rolling-restart \
        --command "$0 restart %n" "${@:2}"
    ;;
logs)
    check_id "${2:-}"
    cat "$ROOT/node$2.log"
    ;;
*)
    usage
    ;;
esac
