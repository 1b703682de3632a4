#!/usr/bin/env bash
# Server CPU with and without an event subscriber and a Prometheus scrape every second, at N
# streaming viewers (issue 7's overhead target: ≤ 1%).
#
#   bench/api-overhead.sh [N]     default N = 5000; ROUNDS (default 3), WIN seconds (default 20)
#
# One `tern demo --clip lite` and one `tern bench -n N`; once all viewers are connected, the
# server is sampled over alternating windows, ROUNDS times: quiet, then busy (a WebSocket
# subscriber on /v1/events and `curl /metrics` every second). Per window, each server thread's
# CPU time from /proc/PID/task/*/schedstat (ns), grouped: media (SPICE-*, AW-*, StreamWorker*)
# and HTTP (HttpWorker, which serves the API, events and metrics), plus the packets sent
# (/v1/stats/current, read at every window edge, busy or quiet alike).
#
# Two figures, because the whole-process one is noisy on a shared 2-core machine:
#  - attributable overhead: the HTTP threads' extra CPU in busy windows over the server's
#    CPU. The media threads do no extra work for a subscriber or a scrape (steady state: no
#    joins or leaves, so no events; reads build no snapshot), so this is the cost;
#  - media CPU per packet sent, busy against quiet: a check that the media path is unchanged
#    (its spread between windows of the same kind is the noise).
# Every loop is bounded; the server and tester are killed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-${CARGO_TARGET_DIR:-target}/release/tern}
N=${1:-5000}
WIN=${WIN:-20}
ROUNDS=${ROUNDS:-3}
[ -x "$TERN" ] || cargo build --release -p tern
HTTP=127.0.0.1:18494
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
tmp=$(mktemp -d)
"$TERN" demo --clip lite --http "$HTTP" --media 127.0.0.1:18495 --candidate 127.0.0.1 >"$tmp/server.log" 2>&1 &
sp=$!
pids=()
cleanup() {
    kill "$sp" "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://$HTTP/" >/dev/null && break; sleep 0.1; done
ramp=$(( N * 2 / 1000 + 10 ))
life=$(( ramp + 2 * ROUNDS * (WIN + 2) + 15 ))
"$TERN" bench -url "http://$HTTP/live/demo/whep" -n "$N" -cint 2 -life "$life" -sint 600000 --json \
    >"$tmp/bench.out" 2>&1 &
pids+=($!)
sleep "$ramp"
stats() { curl -sf "http://$HTTP/v1/stats/current"; }
connected=$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["response"]["totalConnections"])')
printf '# %s, %s cores, %s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(uname -r)"
echo "# $N viewers requested, $connected connected; $ROUNDS rounds of ${WIN}s windows; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# "name ns" per thread, then the packets-out counter.
sample() {
    local t
    for t in /proc/"$sp"/task/*; do
        printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" "$(awk '{print $1}' "$t/schedstat")"
    done
    printf 'packets_out %s\n' "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["response"]["packetsOut"])')"
}
for r in $(seq "$ROUNDS"); do
    sample >"$tmp/q$r.a"; sleep "$WIN"; sample >"$tmp/q$r.b"
    python3 "$(dirname "$0")/ws_subscribe.py" "$HTTP" /v1/events "$((WIN + 1))" >"$tmp/sub$r.out" &
    sub=$!
    sleep 0.5
    ( for _ in $(seq "$WIN"); do
        curl -sf -o /dev/null -w '%{time_total}\n' "http://$HTTP/metrics" >>"$tmp/scrape.times" || true
        sleep 1
      done ) &
    scr=$!
    sample >"$tmp/b$r.a"; sleep "$WIN"; sample >"$tmp/b$r.b"
    wait "$scr" 2>/dev/null || true
    # A busy window without its subscriber would measure nothing: stop rather than report it.
    wait "$sub" || { echo "api-overhead: the /v1/events subscriber failed in round $r" >&2; exit 1; }
done
echo "# /v1/events subscriber per busy window: $(cat "$tmp"/sub*.out | tr '\n' ' ')"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$ROUNDS" "$WIN" <<'PY'
import sys, collections, statistics
tmp, rounds, win = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def load(f):
    d = collections.Counter()
    for line in open(f):
        name, v = line.rsplit(" ", 1)
        d[name] += int(v)
    return d
def window(kind, r):
    a, b = load(f"{tmp}/{kind}{r}.a"), load(f"{tmp}/{kind}{r}.b")
    d = {k: b[k] - a.get(k, 0) for k in b}
    media = sum(v for k, v in d.items() if k.startswith(("SPICE", "AW-", "StreamWorker")))
    http = sum(v for k, v in d.items() if k.startswith("HttpWorker"))
    total = sum(v for k, v in d.items() if k != "packets_out")
    return dict(total=total / 1e9, media=media / 1e9, http=http / 1e9, packets=d["packets_out"])
q = [window("q", r) for r in range(1, rounds + 1)]
b = [window("b", r) for r in range(1, rounds + 1)]
print("%-6s %5s %12s %12s %12s %12s %14s" % ("window", "round", "server_cpu_s", "media_cpu_s", "http_cpu_s", "packets", "media_ns/pkt"))
for kind, ws in (("quiet", q), ("busy", b)):
    for i, w in enumerate(ws, 1):
        print("%-6s %5d %12.3f %12.3f %12.4f %12d %14.1f" % (kind, i, w["total"], w["media"], w["http"], w["packets"], w["media"] * 1e9 / w["packets"]))
mean = lambda ws, k: statistics.mean(w[k] for w in ws)
extra_http = mean(b, "http") - mean(q, "http")
print("attributable overhead (busy - quiet HTTP-thread CPU) / server CPU: %+.3f%%  (%.4f s per %.0f s window)" % (
    extra_http * 100 / mean(q, "total"), extra_http, win))
ppk = lambda ws: [w["media"] / w["packets"] for w in ws]
print("media CPU per packet, busy vs quiet: %+.2f%%  (quiet windows spread %.2f%%, busy %.2f%%)" % (
    (statistics.mean(ppk(b)) / statistics.mean(ppk(q)) - 1) * 100,
    (max(ppk(q)) / min(ppk(q)) - 1) * 100, (max(ppk(b)) / min(ppk(b)) - 1) * 100))
print("whole-process CPU, busy vs quiet (noisy): %+.2f%%" % ((mean(b, "total") / mean(q, "total") - 1) * 100))
try:
    t = sorted(float(x) for x in open(f"{tmp}/scrape.times"))
    print("GET /metrics wall time: median %.1f ms, max %.1f ms over %d scrapes" % (t[len(t) // 2] * 1e3, t[-1] * 1e3, len(t)))
except FileNotFoundError:
    pass
PY
