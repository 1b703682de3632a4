#!/usr/bin/env bash
# SRT ingest cost against RTMP's (issue 36): the same 4 Mbit/s source (1280x720 30 fps
# testsrc2, x264 Baseline, a keyframe a second, AAC 44.1 kHz), encoded once beforehand so
# that x264 does not compete for the CPU, is sent in real time (`ffmpeg -re -c copy`) for
# SECONDS to `tern serve` on loopback: once as MPEG-TS over SRT, once as FLV over RTMP, with
# VIEWERS tern bench viewers each time. Prints, for each, the CPU of the ingest threads
# (SrtListener + SrtSession, RtmpListener + RtmpSession: time on CPU from
# /proc/…/schedstat) per second of input, and tern bench's latency (capture time to viewer,
# inside tern) and loss.
#
#   bench/srt.sh [SECONDS] [VIEWERS]      (defaults 30 2)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_=${1:-30}
VIEWERS=${2:-2}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${FP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=1280x720:rate=30" \
    -f lavfi -i sine=frequency=440:sample_rate=44100 -t $((SECONDS_ + 5)) -c:v libx264 \
    -profile:v baseline -preset veryfast -b:v 4000k -maxrate 4000k -bufsize 4000k -g 30 \
    -pix_fmt yuv420p -c:a aac -b:a 128k "$dir/src.mkv"
printf '[[app]]\nname = "live"\n' >"$dir/tern.toml"
HTTP=$(free_port)
MEDIA=$(free_port)
RTMP=$(free_port)
SRT=$(free_port)
RUST_LOG=warn "$TERN" serve --config "$dir/tern.toml" --http "127.0.0.1:$HTTP" \
    --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" \
    --srt "127.0.0.1:$SRT" 2>"$dir/tern.log" &
SP=$!
sleep 1
run() { # run NAME URL FORMAT THREAD...
    local name=$1 url=$2 format=$3
    shift 3
    ffmpeg -hide_banner -nostdin -loglevel error -re -i "$dir/src.mkv" -t "$SECONDS_" -c copy \
        -f "$format" "$url" &
    FP=$!
    sleep 3
    local a=0 b=0 t
    for t in "$@"; do a=$((a + $(thread_ns "$t"))); done
    "$TERN" bench -url "http://127.0.0.1:$HTTP/live/$name/whep" -n "$VIEWERS" -cint 20 \
        -life $((SECONDS_ - 8)) -sint 600000 --details false >"$dir/$name.txt" 2>&1
    for t in "$@"; do b=$((b + $(thread_ns "$t"))); done
    wait "$FP" || true
    python3 - "$name" "$a" "$b" "$((SECONDS_ - 8))" "$dir/$name.txt" <<'PY'
import re, sys
name, a, b, secs, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
text = open(path).read()
print(f"{name}: ingest threads {(b - a) / 1e9 / secs * 100:.1f} % of a core over {secs} s")
for line in text.splitlines():
    if re.search(r"latency|loss|connected", line, re.I):
        print("   ", line.strip())
PY
}
run srt "srt://127.0.0.1:$SRT?streamid=live/srt" mpegts SrtListener SrtSession
run rtmp "rtmp://127.0.0.1:$RTMP/live/rtmp" flv RtmpListener RtmpSession
