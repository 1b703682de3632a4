#!/usr/bin/env bash
# WHEP set-up time with and without an admission webhook (issue 19): `tern demo` on
# loopback, VIEWERS viewers joining at RATE per second (tern bench), first with no
# admission, then with a local webhook (bench/webhook.py, Python's threaded HTTP server,
# allowing everything), in alternation ROUNDS times. Reports the `signalling` row of tern
# bench's connect times (WHEP POST to 201, ms) for each run.
#
#   bench/admission.sh [VIEWERS] [RATE] [ROUNDS]     (defaults 1000 200 2)
set -euo pipefail
cd "$(dirname "$0")/.."
VIEWERS=${1:-1000}
RATE=${2:-200}
ROUNDS=${3:-2}
CINT=$((1000 / RATE))
LIFE=$((VIEWERS / RATE + 5))
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
BIN=$TARGET/release/tern
tmp=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
free_tcp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HOOK=$(free_tcp)
python3 bench/webhook.py "$HOOK" &
PIDS+=($!)

run() {
    local name=$1 cfg=$2 http
    http=127.0.0.1:$(free_tcp)
    "$BIN" demo --config "$cfg" --http "$http" --media 127.0.0.1:0 --rtmp none >"$tmp/server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do curl -sf "http://$http/v1/stats/current" >/dev/null && break; sleep 0.1; done
    local line
    line=$("$BIN" bench -url "http://$http/live/demo/whep" -n "$VIEWERS" -cint "$CINT" -life "$LIFE" \
        -sint 600000 --details false 2>"$tmp/bench.err" | grep '^signalling' || echo "bench failed: $(tail -3 "$tmp/bench.err")")
    local admitted
    admitted=$(curl -sf "http://$http/metrics" | awk '/^tern_admission_total\{action="play",result="allow"\}/ {print $2}')
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "| $name | $line | ${admitted:-0} |"
}

printf '[[app]]\nname = "live"\n' >"$tmp/plain.toml"
printf '[[app]]\nname = "live"\n\n[app.admission]\nurl = "http://127.0.0.1:%s/admit"\n' "$HOOK" >"$tmp/hook.toml"
sleep 0.5
echo "| run | WHEP POST → 201 (ms) | plays admitted by the webhook |"
echo "|---|---|---:|"
for r in $(seq "$ROUNDS"); do
    run "no webhook ($r)" "$tmp/plain.toml"
    run "local webhook ($r)" "$tmp/hook.toml"
done
