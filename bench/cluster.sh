#!/usr/bin/env bash
# Cluster figures (BENCHMARKS.md "Cluster"), on loopback with a redis-server of its own:
#   1. latency added by one edge hop: N tern bench viewers of the clip on origin a directly,
#      then N on edge b (one upstream session to a), the same clip in the same run;
#   2. origin CPU: a's process CPU with no viewer, with N viewers of its own, and with N
#      viewers on the edge (a serves one session): per viewer against per edge;
#   3. origin failover: ffmpeg publishes live/cam (RTMP) on a, 10 viewers on edge b; kill -9
#      of a and of ffmpeg; once a's claim has expired ffmpeg publishes again on c. Measured:
#      a leaving b's registry, the claim expiring, and how long b's viewers got no packet
#      (b's tern_stream_packets_out_total sampled every 50 ms);
#   4. Redis commands per second per node (idle, and origin with a claimed stream).
#
#   bench/cluster.sh [N] [SECONDS]        default 200 viewers, 20 s per run
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SECS=${2:-20}
. bench/lib.sh
tern_build
command -v redis-server >/dev/null || { echo "redis-server missing (scripts/install-deps.sh)" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
pids+=($!)
SECRET=bench-cluster-secret-0123456789
declare -A HTTP PID RTMP
for n in a b c; do
    HTTP[$n]=$(free_port)
    RTMP[$n]=$(free_port)
    cat >"$dir/$n.toml" <<TOML
[[app]]
name = "live"
dynamic = true
[cluster]
redis = "redis://127.0.0.1:$RP/0"
node = "$n"
url = "http://127.0.0.1:${HTTP[$n]}"
secret = "$SECRET"
TOML
    cmd=serve
    [ "$n" = a ] && cmd=demo
    RUST_LOG=warn "$TERN" "$cmd" --clip lite --config "$dir/$n.toml" --http "127.0.0.1:${HTTP[$n]}" \
        --media "127.0.0.1:$(free_port)" --candidate 127.0.0.1 --rtmp "127.0.0.1:${RTMP[$n]}" 2>"$dir/$n.log" &
    PID[$n]=$!
    pids+=($!)
done
sleep 3
json() { curl -s "http://127.0.0.1:${HTTP[$1]}/v1/cluster"; }
json b | python3 -c 'import json,sys; v=json.load(sys.stdin); assert [o["node"] for o in v["origins"]]==["a"], v; print("registry:", [n["name"] for n in v["nodes"]], "origins:", v["origins"])'
ticks() { read -r -a st <<<"$(sed 's/.*) //' "/proc/${PID[a]}/stat")"; echo $((st[11] + st[12])); }
cmds() { json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["redis_commands"])'; }
HZ=$(getconf CLK_TCK)

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== 4. Redis commands per second per node (10 s)"
a0=$(cmds a); b0=$(cmds b); sleep 10; a1=$(cmds a); b1=$(cmds b)
echo "origin a (1 claimed stream): $(( (a1 - a0) / 10 ))/s   node b (none): $(( (b1 - b0) / 10 ))/s"

echo "== 2a. origin idle CPU ($SECS s)"
t0=$(ticks); sleep "$SECS"; t1=$(ticks)
idle=$(python3 -c "print(($t1-$t0)/$HZ/$SECS)")
echo "a idle (clip running): $idle CPU-s/s"

bench() { # bench NODE LABEL
    local t0 t1 out
    t0=$(ticks)
    out=$("$TERN" bench --url "http://127.0.0.1:${HTTP[$1]}/live/demo/whep" -n "$N" --cint 10 \
        --life "$SECS" --sint 600000 --json 2>/dev/null | grep '"type":"summary"' | tail -1)
    t1=$(ticks)
    python3 - "$2" "$out" "$t0" "$t1" "$HZ" "$SECS" "$idle" "$N" <<'PY'
import json, sys
label, out, t0, t1, hz, secs, idle, n = sys.argv[1:]
s = json.loads(out)
cpu = (int(t1) - int(t0)) / int(hz) / float(secs)
lat = s["video_latency_ms"]
print(f"{label}: viewers {s['clients']} losses {s['total_losses']} video latency avg {lat['avg']:.1f} ms "
      f"(min {lat['min']:.1f}, max {lat['max']:.1f}); origin a CPU {cpu:.3f} CPU-s/s, above idle {cpu-float(idle):.3f}")
PY
}
echo "== 1+2. $N viewers, $SECS s each, direct on the origin then through the edge (twice, alternating)"
for round in 1 2; do
    bench a "round $round direct on a "
    sleep 2
    bench b "round $round via edge b  "
    sleep 8 # the edge's grace ends, its upstream closes
done

echo "== 3. origin failover: RTMP publisher on a, 10 viewers on edge b; kill -9 a, publisher back on c"
push() { # push NODE: ffmpeg publishes live/cam to NODE for 60 s
    ffmpeg -hide_banner -nostdin -loglevel error -re -f lavfi -i testsrc=size=320x240:rate=30 \
        -re -f lavfi -i sine=frequency=440:sample_rate=44100 -t 60 -c:v libx264 -profile:v baseline \
        -tune zerolatency -preset ultrafast -pix_fmt yuv420p -g 30 -c:a aac -f flv "rtmp://127.0.0.1:${RTMP[$1]}/live/cam" &
    FF=$!
    pids+=($FF)
}
origin() { json "$1" | python3 -c 'import json,sys; print(*[o["node"] for o in json.load(sys.stdin)["origins"] if o["stream"]=="live/cam"])'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
push a
for _ in $(seq 100); do [ "$(origin b)" = a ] && break; sleep 0.1; done
"$TERN" bench --url "http://127.0.0.1:${HTTP[b]}/live/cam/whep" -n 10 --life 30 --sint 600000 --json \
    >"$dir/failover-bench.json" 2>/dev/null &
BP=$!
python3 - "${HTTP[b]}" >"$dir/samples.txt" <<'PY' &
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
end = time.time() + 29
while time.time() < end:
    try:
        text = urllib.request.urlopen(url, timeout=1).read().decode()
        v = next((l.split()[-1] for l in text.splitlines() if l.startswith('tern_stream_packets_out_total{stream="live/cam"}')), "0")
        print(int(time.time() * 1000), v, flush=True)
    except Exception:
        pass
    time.sleep(0.05)
PY
SP2=$!
sleep 10
kill -9 "${PID[a]}" "$FF"
t_kill=$(now_ms)
while [ "$(json b | python3 -c 'import json,sys; print("a" in [n["name"] for n in json.load(sys.stdin)["nodes"]])')" = True ]; do sleep 0.05; done
t_gone=$(now_ms)
while [ -n "$(origin c)" ]; do sleep 0.05; done
t_free=$(now_ms)
push c
t_push=$(now_ms)
wait "$SP2" || true
wait "$BP" || true
python3 - "$dir/samples.txt" "$t_kill" <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
kill = int(sys.argv[2])
last_change, gap, prev = None, 0, None
for t, v in rows:
    if prev is not None and v != prev:
        if last_change is not None:
            gap = max(gap, t - last_change)
        last_change = t
    prev = v
resumed = next((t for (t, v), (_, p) in zip(rows[1:], rows) if t > kill and v != p and t - kill > 500), None)
print(f"b's viewers got no packet for at most {gap} ms; first packet after the kill at +{resumed - kill if resumed else 'never'} ms")
PY
echo "a gone from b's registry +$((t_gone - t_kill)) ms; a's claim expired +$((t_free - t_kill)) ms; ffmpeg started on c +$((t_push - t_kill)) ms"
grep '"type":"summary"' "$dir/failover-bench.json" | tail -1 | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("b viewers:", s["clients"], "sessions kept through the failover, losses", s["total_losses"], "failures", s["failures"])'
