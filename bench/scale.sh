#!/usr/bin/env bash
# How many viewers one `tern bench` process holds against `tern demo --clip lite` (~300
# kbit/s per viewer) on this machine, and what each side spends per packet.
#
#   bench/scale.sh [N ...]        default: 1000 2500 5000 7500 10000
#
# For each N: a fresh `tern demo --clip lite` on loopback, then `tern bench -n N` connecting
# over ~N/500 s (cint 2 ms) and staying 40 s after the last connect. Prints one row per N:
# connected, failed, losses, recovered, min fps, mean latency, bench CPU µs per received
# packet, server CPU µs per sent packet, both processes' CPU share, and the server's RSS.
# Env: TERN (binary, default target/release/tern), HOLD (seconds after ramp, default 40).
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-target/release/tern}
HOLD=${HOLD:-40}
[ -x "$TERN" ] || cargo build --release -p tern
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(1000 2500 5000 7500 10000)
HTTP=127.0.0.1:18480
MEDIA=127.0.0.1:18481
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
printf '# %s, %s cores, %s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(uname -r)"
printf '# load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%7s %9s %6s %6s %9s %7s %9s %11s %11s %9s %9s %9s\n' N connected failed lost recovered minfps lat_ms bench_us/pk server_us/pk bench_cpu server_cpu rss_MiB
for n in "${NS[@]}"; do
    "$TERN" demo --clip lite --http "$HTTP" --media "$MEDIA" --candidate 127.0.0.1 >/tmp/tern-scale-server.log 2>&1 &
    sp=$!
    trap 'kill $sp 2>/dev/null || true' EXIT
    for _ in $(seq 50); do curl -sf "http://$HTTP/" >/dev/null && break; sleep 0.1; done
    life=$(( n * 2 / 1000 + HOLD ))
    s0=$(cpu_ticks $sp)
    t0=$(date +%s.%N)
    out=$(timeout $((life + 120)) "$TERN" bench -url "http://$HTTP/live/demo/whep" -n "$n" -cint 2 \
        -life "$life" -sint 600000 --json 2>/tmp/tern-scale-bench.err || true)
    t1=$(date +%s.%N)
    s1=$(cpu_ticks $sp)
    rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$sp/status")
    kill $sp; wait $sp 2>/dev/null || true
    summary=$(printf '%s\n' "$out" | grep '"type":"summary"' | tail -1)
    server=$(printf '%s\n' "$out" | grep '"type":"server"' | tail -1)
    python3 - "$n" "$summary" "$server" "$s0" "$s1" "$hz" "$t0" "$t1" "$rss" <<'PY'
import json, sys
n, summ, serv, s0, s1, hz, t0, t1, rss = sys.argv[1:]
s = json.loads(summ) if summ else {}
v = json.loads(serv) if serv else {}
wall = float(t1) - float(t0)
server_cpu = (int(s1) - int(s0)) / int(hz)
pk = v.get("packets_out", 0)
st = s.get("states", {})
bench_us = s.get("cpu_us_per_packet") or 0
bench_cpu = bench_us * s.get("datagrams", 0) / 1e6
print("%7s %9s %6s %6s %9s %7.1f %9.1f %11.2f %11.2f %8.0f%% %8.0f%% %9s" % (
    n, st.get("connected", 0), st.get("failed", 0), s.get("total_losses", 0), s.get("recovered", 0),
    s.get("fps", {}).get("min", 0), s.get("video_latency_ms", {}).get("avg", 0),
    bench_us, server_cpu * 1e6 / pk if pk else 0, bench_cpu * 100 / wall, server_cpu * 100 / wall, rss))
PY
    trap - EXIT
done
