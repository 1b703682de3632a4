#!/usr/bin/env bash
# A three-node tern cluster on this machine: a local redis-server, node a running the demo
# clip (its origin), nodes b and c with nothing of their own. Open any node's player page:
# WHEP requests are redirected to the least-loaded node, and b and c pull live/demo from a.
#
#   ./scripts/cluster-demo.sh            ports 8081-8083 (HTTP), 10001-10003 (media), Redis 6390
#   REDIS_PORT=6391 ./scripts/cluster-demo.sh
#
# Ctrl-C stops the three nodes and Redis. Needs redis-server (apt-get install redis-server;
# scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
REDIS_PORT=${REDIS_PORT:-6390}
SECRET=${TERN_CLUSTER_SECRET:-$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')}
command -v redis-server >/dev/null || { echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
cargo build --release -p tern
TERN=${CARGO_TARGET_DIR:-target}/release/tern
dir=$(mktemp -d)
pids=()
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
pids+=($!)
for i in 1 2 3; do
    node=$(echo abc | cut -c"$i")
    cat >"$dir/$node.toml" <<TOML
[[app]]
name = "live"
dynamic = true

[cluster]
redis = "redis://127.0.0.1:$REDIS_PORT/0"
node = "$node"
url = "http://127.0.0.1:808$i"
secret = "$SECRET"
redirect = true
TOML
    cmd=serve
    [ "$node" = a ] && cmd=demo
    "$TERN" "$cmd" --config "$dir/$node.toml" --http "127.0.0.1:808$i" \
        --media "127.0.0.1:1000$i" --candidate 127.0.0.1 --rtmp none 2>"$dir/$node.log" &
    pids+=($!)
done
sleep 2
echo "cluster: curl -s http://127.0.0.1:8082/v1/cluster"
echo "players: http://127.0.0.1:8081/live/demo  http://127.0.0.1:8082/live/demo  http://127.0.0.1:8083/live/demo"
echo "logs:    $dir/{a,b,c}.log   (Ctrl-C stops everything)"
wait "${pids[1]}"
