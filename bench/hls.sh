#!/usr/bin/env bash
# LL-HLS egress figures (issue 23), one run, run inside a private network namespace:
#
#   ./scripts/netns-run.sh bench/hls.sh [SIZE] [PHASE]      (defaults 1280x720 20)
#
# Debian's ffmpeg pushes SIZE at 30 fps (testsrc2, x264 veryfast, 2.5 Mbit/s, -bf 2, a
# keyframe every second, AAC 44.1 kHz) to `tern serve --rtmp` on loopback. Then:
# 1. Packaging CPU per stream: the RtmpSession thread's CPU (/proc schedstat) over
#    PHASE s without an HLS reader (RTMP parsing, FLV -> RTP, AAC -> Opus: the baseline),
#    then over PHASE s with one LL-HLS reader (bench/hls-client.mjs reader: blocking reloads
#    and every part), which adds the packaging (it runs on that thread for RTMP); the
#    HttpWorker threads' CPU over the same phases is the serving cost.
# 2. Latency: hls.js (lowLatencyMode) in headless Chromium plays index.m3u8; Date.now() -
#    hls.playingDate once a second for PHASE s after a 10 s warm-up: how far the picture on
#    screen is behind the time its first sample reached tern (PROGRAM-DATE-TIME). The
#    encoder's own delay (x264 lookahead, before tern) is not in it.
# 3. Requests per second from one node: 64 keep-alive connections GET one part for 10 s;
#    the same client against /dashboard (a static page from memory) in the same run is the
#    baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1280x720}
PHASE=${2:-20}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
start_rtmp_server info
TOTAL=$((4 * PHASE + 60))
ffmpeg -hide_banner -nostdin -loglevel error \
    -re -f lavfi -i "testsrc2=size=$SIZE:rate=30" -re -f lavfi -i sine=frequency=440:sample_rate=44100 \
    -t "$TOTAL" -c:v libx264 -bf 2 -preset veryfast -b:v 2500k -pix_fmt yuv420p \
    -g 30 -c:a aac -f flv "rtmp://127.0.0.1:$RTMP/live/cam" &
FP=$!
HZ=1000000000
URL="http://127.0.0.1:$HTTP/live/cam/index.m3u8"
sleep 4
r0=$(thread_ns RtmpSession); h0=$(thread_ns HttpWorker)
sleep "$PHASE"
r1=$(thread_ns RtmpSession); h1=$(thread_ns HttpWorker)
node bench/hls-client.mjs reader "$URL" $((PHASE + 4)) >"$dir/reader.json" &
RP=$!
sleep 4
r2=$(thread_ns RtmpSession); h2=$(thread_ns HttpWorker)
sleep "$PHASE"
r3=$(thread_ns RtmpSession); h3=$(thread_ns HttpWorker)
wait "$RP"
node bench/hls-client.mjs latency "$URL" "$PHASE" >"$dir/latency.json"
S=$(curl -s "$URL" | tail -1)
PL=$(curl -s "http://127.0.0.1:$HTTP/live/cam/$S")
PART=$(printf '%s\n' "$PL" | grep '^#EXT-X-PART:' | tail -1 | sed 's/.*URI="\([^"]*\)".*/\1/')
PART_BYTES=$(curl -s "http://127.0.0.1:$HTTP/live/cam/$PART" | wc -c)
node bench/hls-client.mjs rate "http://127.0.0.1:$HTTP/live/cam/$PART" 10 64 >"$dir/rate-part.json"
node bench/hls-client.mjs rate "http://127.0.0.1:$HTTP/dashboard" 10 64 >"$dir/rate-base.json"
python3 - "$dir" "$PHASE" "$HZ" "$r0" "$r1" "$r2" "$r3" "$h0" "$h1" "$h2" "$h3" "$PART_BYTES" "$SIZE" <<'PY'
import json, sys
d, phase, hz = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
r0, r1, r2, r3, h0, h1, h2, h3, part_bytes = map(int, sys.argv[4:13])
size = sys.argv[13]
base = (r1 - r0) / hz / phase
withr = (r3 - r2) / hz / phase
http_base = (h1 - h0) / hz / phase
http_with = (h3 - h2) / hz / phase
reader = json.load(open(f"{d}/reader.json"))
lat = json.load(open(f"{d}/latency.json"))
if not lat.get("samples"):
    sys.exit(f"hls.js never played: {lat}")
part = json.load(open(f"{d}/rate-part.json"))
dash = json.load(open(f"{d}/rate-base.json"))
print(f"stream: {size} 30 fps 2.5 Mbit/s H264 (-bf 2, 1 s GOP) + AAC, RTMP")
print(f"RtmpSession CPU, no HLS reader (baseline): {base*100:.2f} % of a core")
print(f"RtmpSession CPU, one LL-HLS reader:        {withr*100:.2f} % of a core")
print(f"  packaging: {(withr-base)*100:.2f} % of a core per stream (x{withr/base if base else float('nan'):.2f} the baseline)")
print(f"HttpWorker CPU: {http_base*100:.2f} % -> {http_with*100:.2f} % with the reader ({reader['parts']} parts, {reader['bytes']/1e6:.1f} MB)")
print(f"hls.js latency (Date.now() - playingDate): mean {lat['mean_ms']} ms, min {lat['min_ms']}, max {lat['max_ms']} over {lat['samples']} samples; hls.latency {lat['hls_latency_s']} s; {lat['frames']} frames decoded")
print(f"parts: {part['per_second']:.0f} requests/s ({part_bytes} B each, {part['per_second']*part_bytes*8/1e9:.2f} Gbit/s), {part['bad']} not 200")
print(f"baseline /dashboard: {dash['per_second']:.0f} requests/s; parts/baseline = {part['per_second']/dash['per_second']:.2f}")
PY
