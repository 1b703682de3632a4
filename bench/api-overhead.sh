#!/usr/bin/env bash
# Server CPU with and without an event subscriber and a Prometheus scrape every second, at N
# streaming viewers (issue 7's overhead target: ≤ 1%).
#
#   bench/api-overhead.sh [N]     default N = 5000
#
# One `tern demo --clip lite` and one `tern bench -n N`; once all viewers are connected the
# server's CPU time is sampled over alternating 20 s windows: quiet, then with a WebSocket
# subscriber on /v1/events (node --experimental-websocket) and `curl /metrics` every second,
# twice each. Prints CPU seconds per window and the overhead.
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-target/release/tern}
N=${1:-5000}
WIN=${WIN:-20}
[ -x "$TERN" ] || cargo build --release -p tern
HTTP=127.0.0.1:18490
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
hz=$(getconf CLK_TCK)
"$TERN" demo --clip lite --http "$HTTP" --media 127.0.0.1:18491 --candidate 127.0.0.1 >/tmp/tern-api-server.log 2>&1 &
sp=$!
pids=()
cleanup() { kill "$sp" "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://$HTTP/" >/dev/null && break; sleep 0.1; done
ramp=$(( N * 2 / 1000 + 5 ))
life=$(( ramp + 4 * WIN + 10 ))
"$TERN" bench -url "http://$HTTP/live/demo/whep" -n "$N" -cint 2 -life "$life" -sint 600000 --json \
    >/tmp/tern-api-bench.out 2>&1 &
pids+=($!)
sleep "$ramp"
connected=$(curl -sf "http://$HTTP/v1/stats/current" | python3 -c 'import json,sys; print(json.load(sys.stdin)["response"]["totalConnections"])')
echo "# $N viewers requested, $connected connected; windows of ${WIN}s; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ticks() { awk '{print $14+$15}' "/proc/$sp/stat"; }
window() {
    local a b
    a=$(ticks); sleep "$WIN"; b=$(ticks)
    echo "scale=3; ($b - $a) / $hz" | bc
}
declare -a quiet busy
for round in 1 2; do
    quiet+=("$(window)")
    node --experimental-websocket -e "
        const ws = new WebSocket('ws://$HTTP/v1/events');
        let n = 0; ws.onmessage = () => n++;
        setTimeout(() => { console.error('events received: ' + n); process.exit(0); }, ${WIN}000 + 500);" &
    sub=$!
    ( for _ in $(seq "$WIN"); do curl -sf "http://$HTTP/metrics" >/dev/null; sleep 1; done ) &
    scr=$!
    busy+=("$(window)")
    wait "$sub" "$scr" 2>/dev/null || true
done
python3 - "${quiet[@]}" "${busy[@]}" <<PY
import sys
v = [float(x) for x in sys.argv[1:]]
q, b = v[:2], v[2:]
print("quiet windows (server CPU s): %s" % q)
print("with subscriber + scrape    : %s" % b)
mq, mb = sum(q) / len(q), sum(b) / len(b)
print("overhead: %+.2f%% of the server's CPU (%.3f s per %s s window)" % ((mb - mq) * 100 / mq, mb - mq, "$WIN"))
PY
