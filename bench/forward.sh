#!/usr/bin/env bash
# Forwards (restreaming, issue 52): the CPU a forward costs and the latency it adds. One run:
#
#  1. copy path: ffmpeg encodes testsrc2 1280x720/30 fps (libx264 veryfast zerolatency, 3 Mbit/s,
#     a keyframe every 2 s) + a 44.1 kHz sine (AAC) once and pushes it (tee muxer) both to
#     `tern serve --rtmp` (live/cam) and to nginx-rtmp's application `direct`. Arms of 0, 1, 10,
#     20 forwards of live/cam to nginx's application `live` (a key each), then 20, 10, 1, 0
#     again; for each arm, over WINDOW seconds: the CPU of tern's `Forward f*` threads together
#     (schedstat), of the whole tern process (utime + stime), of its RtmpSession thread (the
#     publisher's thread: the outlet's work for an RTMP publisher runs there), of nginx (one
#     process) and the bytes the forwards wrote.
#  2. the latency a forward adds: with 1 forward and then 20, bench/forward-latency.py pulls
#     nginx's `direct/cam` (the publisher's own copy) and the forwarded copy at once and matches
#     decoded pictures by checksum: forwarded arrival - direct arrival.
#  3. Opus -> AAC path: `tern demo` (live/demo, the built-in clip: ring packets, Opus audio);
#     the same arms, with the MediaTap thread (depacketizing + the per-stream AAC encode).
#
#   bench/forward.sh [WINDOW] [LATENCY_SECONDS]      (defaults 15 30)
set -euo pipefail
cd "$(dirname "$0")/.."
WINDOW=${1:-15}
LAT=${2:-30}
ARMS=(0 1 10 20 20 10 1 0)
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
TICK=$(getconf CLK_TCK)
echo "machine: $(nproc) CPU, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load at start:$(uptime | sed 's/.*load average://')"

start_rtmp_server warn # dir, HTTP, RTMP, SP (tern serve, app live, stream cam)
NP='' DP=''
cleanup() {
    local p
    for p in "${FP:-}" "${SP:-}" "${DP:-}" "${NP:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    sleep 0.5
    for p in "${FP:-}" "${SP:-}" "${DP:-}" "${NP:-}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# nginx-rtmp: `live` receives the forwards, `direct` the publisher's own copy.
NPORT=$(free_port)
mkdir -p "$dir/nginx"
cat >"$dir/nginx/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
daemon off;
master_process off;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log;
events { worker_connections 256; }
rtmp {
  server {
    listen 127.0.0.1:$NPORT;
    chunk_size 4096;
    application live { live on; record off; }
    application direct { live on; record off; }
  }
}
EOF
nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" >/dev/null 2>&1 &
NP=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NPORT") 2>/dev/null && break
    sleep 0.1
done

# Sum over the threads of process $1 whose name starts with $2: time on CPU (ns, schedstat).
prefix_ns() {
    local sum=0 t c ns
    for t in /proc/$1/task/*; do
        c=$(cat "$t/comm" 2>/dev/null) || continue
        [[ $c == "$2"* ]] || continue
        read -r ns _ <"$t/schedstat" 2>/dev/null || continue
        sum=$((sum + ns))
    done
    echo "$sum"
}
api() { curl -s -m 5 "$@"; }
# Bytes all forwards of stream $1 wrote, and how many are live.
fw_status() {
    api "http://127.0.0.1:$HTTP/v1/forwards" | python3 -c '
import json, sys
key = sys.argv[1]
fs = [f for f in json.load(sys.stdin) if "%s/%s" % (f["app"], f["stream"]) == key]
print(sum(f["bytes"] for f in fs), sum(f["state"] == "live" for f in fs), sum(f["reconnects"] for f in fs))' "$1"
}

IDS=() KEYS=()
NKEY=0
# Brings stream $1's forwards (all made here) to $2; waits (<= 30 s) until all are live.
set_forwards() {
    local stream=$1 n=$2 r id deadline
    while [ ${#IDS[@]} -gt "$n" ]; do
        id=${IDS[-1]}
        api -o /dev/null -X DELETE "http://127.0.0.1:$HTTP/v1/streams/$stream/forwards/$id"
        unset 'IDS[-1]' 'KEYS[-1]'
    done
    while [ ${#IDS[@]} -lt "$n" ]; do
        NKEY=$((NKEY + 1))
        deadline=$((SECONDS + 20))
        while :; do
            r=$(api -w '\n%{http_code}' -H 'content-type: application/json' \
                -d "{\"url\": \"rtmp://127.0.0.1:$NPORT/live/k$NKEY\"}" \
                "http://127.0.0.1:$HTTP/v1/streams/$stream/forwards") || r=''
            [ "${r##*$'\n'}" = 201 ] && break
            [ $SECONDS -lt $deadline ] || { echo "POST forward: $r" >&2; exit 1; }
            sleep 0.2
        done
        id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "${r%$'\n'*}")
        IDS+=("$id") KEYS+=("k$NKEY")
    done
    deadline=$((SECONDS + 30))
    while :; do
        read -r _ live _ <<<"$(fw_status "$stream")"
        [ "$live" -ge "$n" ] && break
        [ $SECONDS -lt $deadline ] || { echo "only $live of $n forwards live" >&2; break; }
        sleep 0.2
    done
}

# One arm: $1 stream, $2 forwards, $3 the outlet thread's name; appends a row to $dir/rows.
arm() {
    local stream=$1 n=$2 th=$3 f0 f1 o0 o1 p0 p1 g0 g1 b0 b1 t0 t1 rc
    set_forwards "$stream" "$n"
    sleep 3
    t0=$(date +%s%N)
    f0=$(prefix_ns "$SP" 'Forward f') o0=$(prefix_ns "$SP" "$th")
    p0=$(proc_ticks "$SP") g0=$(proc_ticks "$NP")
    read -r b0 _ _ <<<"$(fw_status "$stream")"
    sleep "$WINDOW"
    t1=$(date +%s%N)
    f1=$(prefix_ns "$SP" 'Forward f') o1=$(prefix_ns "$SP" "$th")
    p1=$(proc_ticks "$SP") g1=$(proc_ticks "$NP")
    read -r b1 _ rc <<<"$(fw_status "$stream")"
    # stream n wall_ns forward_ns outlet_ns tern_ticks nginx_ticks bytes reconnects
    echo "$stream $n $((t1 - t0)) $((f1 - f0)) $((o1 - o0)) $((p1 - p0)) $((g1 - g0)) $((b1 - b0)) $rc" >>"$dir/rows"
    echo "  $stream, $n forward(s): done" >&2
}

# --- 1. copy path -------------------------------------------------------------------------
TOTAL=$(((${#ARMS[@]} * (WINDOW + 8)) + 2 * (LAT + 30) + 30))
ffmpeg -hide_banner -nostdin -loglevel error \
    -re -f lavfi -i testsrc2=size=1280x720:rate=30 -re -f lavfi -i sine=frequency=440:sample_rate=44100 \
    -t "$TOTAL" -map 0:v -map 1:a -c:v libx264 -preset veryfast -tune zerolatency -pix_fmt yuv420p \
    -g 60 -b:v 3M -maxrate 3M -bufsize 3M -flags:v +global_header \
    -c:a aac -b:a 128k -flags:a +global_header \
    -f tee "[f=flv:onfail=ignore]rtmp://127.0.0.1:$RTMP/live/cam|[f=flv:onfail=ignore]rtmp://127.0.0.1:$NPORT/direct/cam" &
FP=$!
sleep 3
for n in "${ARMS[@]}"; do
    arm live/cam "$n" RtmpSession
done

# --- 2. latency -----------------------------------------------------------------------------
: >"$dir/latency"
for n in 1 20; do
    set_forwards live/cam "$n"
    sleep 3
    echo "$n $(python3 bench/forward-latency.py "rtmp://127.0.0.1:$NPORT/direct/cam" \
        "rtmp://127.0.0.1:$NPORT/live/${KEYS[0]}" "$LAT")" >>"$dir/latency"
    echo "  latency with $n forward(s): done" >&2
done
set_forwards live/cam 0
kill "$FP" "$SP" 2>/dev/null || true
wait "$FP" "$SP" 2>/dev/null || true
FP='' SP=''

# --- 3. Opus -> AAC path: tern demo ---------------------------------------------------------
HTTP=$(free_port)
MEDIA=$(free_port)
RUST_LOG=warn "$TERN" demo --http "127.0.0.1:$HTTP" --media "127.0.0.1:$MEDIA" \
    --candidate 127.0.0.1 --rtmp none 2>"$dir/demo.log" &
SP=$!
DP=$SP
sleep 3
for n in "${ARMS[@]}"; do
    arm live/demo "$n" MediaTap
done
echo "load at end:$(uptime | sed 's/.*load average://')"

# --- table ----------------------------------------------------------------------------------
python3 - "$dir/rows" "$dir/latency" "$TICK" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
tick = int(sys.argv[3])
print()
print("| stream | forwards | rounds | Forward f* threads, % core | per forward | tern process, % core | x arm 0 | tern above arm 0, per forward | outlet thread, % core | nginx, % core | kbit/s per forward | reconnects |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for stream, outlet in (("live/cam", "RtmpSession"), ("live/demo", "MediaTap")):
    arms = {}
    for r in rows:
        if r[0] == stream:
            arms.setdefault(int(r[1]), []).append([int(x) for x in r[2:]])
    def pct(n, i, ticks=False):
        v = [(a[i] * 1e9 / tick if ticks else a[i]) / a[0] * 100 for a in arms[n]]
        return sum(v) / len(v), v
    base = pct(0, 3, True)[0]
    for n in sorted(arms):
        fw, fwr = pct(n, 1)
        out = pct(n, 2)[0]
        tern, ternr = pct(n, 3, True)
        ng = pct(n, 4, True)[0]
        kb = sum(a[5] * 8 / (a[0] / 1e9) / 1000 for a in arms[n]) / len(arms[n]) / n if n else 0
        rc = max(a[6] for a in arms[n])
        print("| %s (%s) | %d | %s | %.2f | %s | %.1f | %.2f | %s | %.2f | %.2f | %s | %d |" % (
            stream, outlet, n, " / ".join("%.1f" % v for v in ternr), fw,
            "%.3f" % (fw / n) if n else "-", tern, tern / base,
            "%.3f" % ((tern - base) / n) if n else "-", out, ng,
            "%.0f" % kb if n else "-", rc))
print()
for l in open(sys.argv[2]):
    n, rest = l.split(" ", 1)
    print("latency, live/cam, %s forward(s) (forwarded - direct arrival): %s" % (n, rest.strip()))
EOF
