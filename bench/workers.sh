#!/usr/bin/env bash
# Viewer capacity against the worker knobs: the same `tern bench` load on `tern demo --clip
# lite` (~300 kbit/s per viewer) with different stream worker counts, in one run.
#
#   bench/workers.sh [N ...]          default: 2500 5000
#   CONFIGS="1 2 0" HOLD=30 bench/workers.sh 5000
#
# For each N and each stream worker count S in CONFIGS (default "1 2"): a fresh server with
# --stream-worker-count S, then `tern bench -n N` ramping over ~N/500 s (cint 2 ms) and holding
# HOLD seconds. Per run: connected, losses, minimum fps, mean latency, server CPU µs per sent
# packet, and each server thread's share of one core over the run (from
# /proc/PID/task/*/schedstat, summed by thread name). The busiest per-viewer thread's share is
# what bounds capacity: a thread at 100% of a core cannot take more viewers, so
# N / busiest share is the single-thread bound for that configuration (the machine's cores, which
# the tester shares, bound it too). Bounded: each bench run has a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-${CARGO_TARGET_DIR:-target}/release/tern}
HOLD=${HOLD:-30}
CONFIGS=${CONFIGS:-"1 2"}
[ -x "$TERN" ] || cargo build --release -p tern
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(2500 5000)
HTTP=127.0.0.1:18490
MEDIA=127.0.0.1:18491
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
tmp=$(mktemp -d)
sp=
cleanup() {
    [ -n "$sp" ] && kill "$sp" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# name ns lines for every thread of $1
threads() {
    local t
    for t in /proc/"$1"/task/*; do
        printf '%s %s\n' "$(cat "$t/comm")" "$(awk '{print $1}' "$t/schedstat")"
    done
}

printf '# %s, %s cores, %s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(uname -r)"
printf '# load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for n in "${NS[@]}"; do
    for s in $CONFIGS; do
        "$TERN" demo --clip lite --http "$HTTP" --media "$MEDIA" --candidate 127.0.0.1 \
            --stream-worker-count "$s" >"$tmp/server.log" 2>&1 &
        sp=$!
        for _ in $(seq 50); do curl -sf "http://$HTTP/" >/dev/null && break; sleep 0.1; done
        life=$(( n * 2 / 1000 + HOLD ))
        threads "$sp" >"$tmp/t0"
        t0=$(date +%s.%N)
        timeout $((life + 120)) "$TERN" bench -url "http://$HTTP/live/demo/whep" -n "$n" -cint 2 \
            -life "$life" -sint 600000 --json >"$tmp/out" 2>"$tmp/bench.err" || true
        t1=$(date +%s.%N)
        threads "$sp" >"$tmp/t1"
        kill "$sp"; wait "$sp" 2>/dev/null || true
        sp=
        python3 - "$n" "$s" "$t0" "$t1" "$tmp/t0" "$tmp/t1" "$tmp/out" <<'PY'
import json, sys, collections
n, s, t0, t1, f0, f1, fout = sys.argv[1:]
wall = float(t1) - float(t0)
def load(f):
    d = collections.Counter()
    for line in open(f):
        name, ns = line.rsplit(" ", 1)
        d[name] += int(ns)
    return d
a, b = load(f0), load(f1)
share = {k: (b[k] - a.get(k, 0)) / 1e9 / wall for k in b}
summ = serv = {}
for line in open(fout):
    if '"type":"summary"' in line:
        summ = json.loads(line)
    if '"type":"server"' in line:
        serv = json.loads(line)
pk = serv.get("packets_out", 0)
cpu = sum(share.values()) * wall
workers = {k: v for k, v in share.items() if k.startswith(("StreamWorker", "AW-"))}
busiest = max(workers.items(), key=lambda kv: kv[1]) if workers else ("-", 0)
st = summ.get("states", {})
threads = " ".join("%s=%.0f%%" % (k, v * 100) for k, v in sorted(share.items()) if v >= 0.005)
print("N=%s stream_workers=%s connected=%s losses=%s min_fps=%.1f lat_ms=%.1f server_us/pkt=%.2f "
      "server_cores=%.2f busiest=%s@%.0f%% bound=%s" % (
    n, s, st.get("connected", 0), summ.get("total_losses", 0), summ.get("fps", {}).get("min", 0),
    summ.get("video_latency_ms", {}).get("avg", 0), cpu * 1e6 / pk if pk else 0,
    cpu / wall, busiest[0], busiest[1] * 100, int(int(n) / busiest[1]) if busiest[1] else "-"))
print("    threads: " + threads)
PY
    done
done
printf '# load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
