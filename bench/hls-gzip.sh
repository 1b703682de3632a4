#!/usr/bin/env bash
# What gzip on LL-HLS playlists costs and saves, one run, inside a private network namespace:
#
#   ./scripts/netns-run.sh bench/hls-gzip.sh [ROUNDS]      (default 2)
#
# Debian's ffmpeg pushes 1280x720 30 fps over RTMP (as bench/hls.sh) to `tern serve`; after
# 12 s (six segments listed), 16 keep-alive connections GET the stream's media playlist back
# to back for 10 s (bench/hls-client.mjs rate), alternately without and with
# `Accept-Encoding: gzip`, ROUNDS times each. Printed per arm: requests/s, bytes per
# playlist as sent, and the server's CPU (/proc/PID/stat) per 1,000 playlists. The Node
# client shares the 2 cores, so the arms are compared by their ratio in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
start_rtmp_server warn
TOTAL=$((ROUNDS * 2 * 12 + 30))
ffmpeg -hide_banner -nostdin -loglevel error \
    -re -f lavfi -i "testsrc2=size=1280x720:rate=30" -re -f lavfi -i sine=frequency=440:sample_rate=44100 \
    -t "$TOTAL" -c:v libx264 -preset veryfast -b:v 2500k -pix_fmt yuv420p \
    -g 30 -c:a aac -f flv "rtmp://127.0.0.1:$RTMP/live/cam" &
FP=$!
sleep 3
INDEX="http://127.0.0.1:$HTTP/live/cam/index.m3u8"
MEDIA="http://127.0.0.1:$HTTP/live/cam/$(curl -s "$INDEX" | grep '^media')"
sleep 12
HZ=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
    for arm in plain gzip; do
        enc=""
        [ "$arm" = gzip ] && enc=gzip
        t0=$(proc_ticks)
        out=$(HLS_ACCEPT_ENCODING=$enc node bench/hls-client.mjs rate "$MEDIA" 10 16)
        t1=$(proc_ticks)
        python3 - "$round" "$arm" "$out" "$((t1 - t0))" "$HZ" <<'PY'
import json, sys
round_, arm, out, ticks, hz = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
n = max(out["requests"], 1)
print(f"round {round_} {arm}: {out['per_second']:.0f} playlists/s, {out['bytes'] / n:.0f} bytes each, "
      f"server {ticks / hz * 1000 / n * 1000:.1f} ms CPU per 1,000 playlists, {out['bad']} not 200")
PY
    done
done
