#!/usr/bin/env bash
# RTSP camera cost against RTMP's (issue 37): one 1080p 30 fps source (testsrc2, x264 Baseline,
# 6 Mbit/s, a keyframe a second, AAC 44.1 kHz), encoded once beforehand so that no encoder
# competes for the CPU, is served in real time by GStreamer's RTSP server
# (tests/rtsp/camera.py --file, no re-encoding) and pulled by `tern serve` as an
# `[[app.source]]`; the same file is then pushed over RTMP (`ffmpeg -re -c copy`), the
# baseline. VIEWERS tern bench viewers watch each for SECONDS - 8 s. Prints the CPU of the
# ingest threads (RtspPull; RtmpListener + RtmpSession: /proc/…/schedstat) per second of
# input and their ratio; then the time from an on-demand WHEP request to the viewer's first
# decoded frame (tern bench: signalling, which waits for the camera's first keyframe, + ICE,
# DTLS, first frame), ROUNDS times after the pull went idle, beside ffprobe's time to the
# first video frame of the same camera (the baseline: an RTSP client on its own).
#
#   bench/rtsp.sh [SECONDS] [VIEWERS] [ROUNDS]      (defaults 30 2 5)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_=${1:-30}
VIEWERS=${2:-2}
ROUNDS=${3:-5}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${FP:-}" "${CP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=1920x1080:rate=30" \
    -f lavfi -i sine=frequency=440:sample_rate=44100 -t $((SECONDS_ * 3 + ROUNDS * 10)) \
    -c:v libx264 -profile:v baseline -preset veryfast -b:v 6000k -maxrate 6000k \
    -bufsize 6000k -g 30 -pix_fmt yuv420p -c:a aac -b:a 128k "$dir/src.mkv"
CAM=$(free_port)
/usr/bin/python3 tests/rtsp/camera.py "$CAM" --file "$dir/src.mkv" >"$dir/camera.log" 2>&1 &
CP=$!
sleep 2
printf '[[app]]\nname = "live"\nidle_grace_s = 1\n[[app.source]]\nstream = "cam"\nurl = "rtsp://127.0.0.1:%s/cam"\n' \
    "$CAM" >"$dir/tern.toml"
HTTP=$(free_port)
MEDIA=$(free_port)
RTMP=$(free_port)
RUST_LOG=info "$TERN" serve --config "$dir/tern.toml" --http "127.0.0.1:$HTTP" \
    --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" 2>"$dir/tern.log" &
SP=$!
sleep 1
secs=$((SECONDS_ - 8))
measure() { # measure NAME THREAD...: viewers on live/NAME, the threads' CPU meanwhile
    local name=$1 a=0 b=0 t
    shift
    for t in "$@"; do a=$((a + $(thread_ns "$t"))); done
    "$TERN" bench -url "http://127.0.0.1:$HTTP/live/$name/whep" -n "$VIEWERS" -cint 20 \
        -life "$secs" -sint 600000 --details false >"$dir/$name.txt" 2>&1
    for t in "$@"; do b=$((b + $(thread_ns "$t"))); done
    echo "$name $(( (b - a) / secs ))" >>"$dir/cpu"
    grep -iE "latency|loss|connected" "$dir/$name.txt" | sed 's/^/    /' || true
}
echo "rtsp: 1080p camera pulled, $VIEWERS viewers, $secs s"
measure cam RtspPull
ffmpeg -hide_banner -nostdin -loglevel error -re -i "$dir/src.mkv" -t "$SECONDS_" -c copy \
    -f flv "rtmp://127.0.0.1:$RTMP/live/rtmp" &
FP=$!
sleep 3
echo "rtmp: the same file pushed, $VIEWERS viewers, $secs s"
measure rtmp RtmpListener RtmpSession
wait "$FP" || true
python3 - "$dir/cpu" <<'PY'
import sys
cpu = dict(l.split() for l in open(sys.argv[1]))
r, m = int(cpu["cam"]), int(cpu["rtmp"])
print(f"ingest CPU: RTSP pull {r / 1e7:.2f} % of a core, RTMP {m / 1e7:.2f} %, ratio {r / m:.2f}")
PY
echo "time to first frame on demand ($ROUNDS rounds, the pull idle before each):"
for i in $(seq "$ROUNDS"); do
    # Idle: the grace (1 s) after the last viewer, then the thread's exit.
    until curl -s "http://127.0.0.1:$HTTP/v1/streams/live/cam" | grep -q '"state":"idle"'; do sleep 0.2; done
    sleep 1
    "$TERN" bench -url "http://127.0.0.1:$HTTP/live/cam/whep" -n 1 -life 2 -sint 600000 \
        --json >"$dir/first.json" 2>&1 || true
    t=$(python3 - "$dir/first.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
c = [j for j in lines if j.get("type") == "client"][-1]
print(f"{(c['signalling_ms'] + c['first_frame_ms']) / 1000:.3f}")
PY
)
    b=$( { /usr/bin/time -f '%e' ffprobe -v error -select_streams v:0 -show_entries frame=pict_type \
        -read_intervals '%+#1' "rtsp://127.0.0.1:$CAM/cam" >/dev/null; } 2>&1 | tail -1)
    echo "  round $i: WHEP request -> first frame decoded ${t} s; ffprobe first frame ${b} s"
done
curl -s "http://127.0.0.1:$HTTP/metrics" | grep '^tern_source_first_frame_seconds'
