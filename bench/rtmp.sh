#!/usr/bin/env bash
# RTMP ingest cost: Debian's ffmpeg pushes 320x240/30 fps testsrc (H264 baseline, a keyframe a
# second) and a 44.1 kHz sine (AAC) to `tern serve --rtmp` on loopback for SECONDS; VIEWERS
# tern bench viewers watch for SECONDS - 5. Prints:
#   - the RtmpSession thread's CPU (utime + stime from /proc, in clock ticks): chunk parsing,
#     FLV -> RTP, AAC decode, 44.1 -> 48 kHz resampling, Opus encode;
#   - the rtmp_ingest pool (heap one connection holds) halfway through;
#   - tern bench's summary (loss, latency from the capture time, server check).
#
#   bench/rtmp.sh [SECONDS] [VIEWERS]      (defaults 25 10)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_=${1:-25}
VIEWERS=${2:-10}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
start_rtmp_server warn
ffmpeg -hide_banner -nostdin -loglevel error \
    -re -f lavfi -i testsrc=size=320x240:rate=30 -re -f lavfi -i sine=frequency=440:sample_rate=44100 \
    -t "$SECONDS_" -c:v libx264 -profile:v baseline -tune zerolatency -pix_fmt yuv420p -g 30 \
    -c:a aac -f flv "rtmp://127.0.0.1:$RTMP/live/cam" &
FP=$!
sleep 3
(
    sleep $(((SECONDS_ - 5) / 2))
    curl -s "http://127.0.0.1:$HTTP/v1/memory" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pools"]:
    if p["name"] == "rtmp_ingest":
        print("rtmp_ingest: %d connection(s), %d bytes" % (p["items_in_use"], p["used_bytes"]))'
) &
"$TERN" bench -url "http://127.0.0.1:$HTTP/live/cam/whep" -n "$VIEWERS" -cint 20 \
    -life $((SECONDS_ - 5)) -sint 600000 --details false
# Before ffmpeg ends (the connection's thread goes with it).
echo "RtmpSession CPU: $(thread_ticks RtmpSession) ticks of 1/$(getconf CLK_TCK) s over ~$((SECONDS_ - 2)) s of input"
wait
