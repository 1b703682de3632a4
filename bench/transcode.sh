#!/usr/bin/env bash
# Cost of transcoding B-frame RTMP video (issue 20): Debian's ffmpeg pushes SIZE at 30 fps
# (testsrc2, x264 High, -bf 3, preset veryfast, 2.5 Mbit/s, a keyframe every 2 s, AAC) to
# `tern serve --rtmp` on loopback. In one run, the RtmpSession threads' CPU (utime + stime
# from /proc) is read over PHASE seconds without a viewer (passthrough: chunk parsing, FLV
# -> RTP, AAC -> Opus) and over PHASE seconds with one WebRTC viewer (tern bench), when the
# video is also decoded and encoded as Constrained Baseline; the difference is the
# transcoder's cost. When the viewer leaves, the transcoder stops after its 5 s grace and
# logs the latency it added per frame (source frame in to encoded frame out, the decoder's
# reordering delay included): mean and max.
#
#   bench/transcode.sh [SIZE] [PHASE]      (defaults 1280x720 20)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1280x720}
PHASE=${2:-20}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
start_rtmp_server info
TOTAL=$((2 * PHASE + 20))
ffmpeg -hide_banner -nostdin -loglevel error \
    -re -f lavfi -i "testsrc2=size=$SIZE:rate=30" -re -f lavfi -i sine=frequency=440:sample_rate=48000 \
    -t "$TOTAL" -c:v libx264 -profile:v high -bf 3 -preset veryfast -b:v 2500k -pix_fmt yuv420p \
    -g 60 -c:a aac -f flv "rtmp://127.0.0.1:$RTMP/live/cam" &
FP=$!
# Every thread named RtmpSession: the connection's own and the encoder threads libx264
# starts from it (a new thread inherits its creator's name).
ticks() { thread_ticks RtmpSession; }
sleep 4
t0=$(ticks)
sleep "$PHASE"
t1=$(ticks)
# One viewer for PHASE + 2 s (the transcoder starts at its first frame after the viewer
# is seen, within a second).
"$TERN" bench -url "http://127.0.0.1:$HTTP/live/cam/whep" -n 1 -life $((PHASE + 2)) \
    -sint 600000 --details false >"$dir/bench.txt" 2>&1 &
BP=$!
sleep 2
t1=$(ticks)
sleep "$PHASE"
t2=$(ticks)
wait "$BP" || true
# The transcoder stops 5 s after the viewer left, at the next frame.
for _ in $(seq 1 15); do
    grep -q "transcoding stopped" "$dir/tern.log" && break
    sleep 1
done
HZ=$(getconf CLK_TCK)
python3 - "$t0" "$t1" "$t2" "$HZ" "$PHASE" "$SIZE" "$dir/tern.log" "$dir/bench.txt" <<'EOF'
import re, sys
t0, t1, t2, hz, phase = (int(x) for x in sys.argv[1:6])
size, log, bench = sys.argv[6], open(sys.argv[7]).read(), open(sys.argv[8]).read()
passthrough = (t1 - t0) / hz / phase
transcoding = (t2 - t1) / hz / phase
print(f"source: {size} 30 fps, x264 High -bf 3, 2.5 Mbit/s + AAC, over RTMP")
print(f"RtmpSession threads CPU, passthrough (no viewer): {passthrough * 100:.1f} % of a core")
print(f"RtmpSession threads CPU, transcoding (1 viewer):  {transcoding * 100:.1f} % of a core")
print(f"transcoder alone: {(transcoding - passthrough) * 100:.1f} % of a core "
      f"(x{transcoding / passthrough:.1f} the passthrough)" if passthrough > 0 else "")
m = re.search(r"transcoding stopped.*?: (\d+) frames in, (\d+) out, (\d+x\d+), latency mean ([\d.]+)(\w+) max ([\d.]+)(\w+)", log)
if m:
    unit = {"ms": 1, "µs": 1e-3, "us": 1e-3, "s": 1e3}
    mean = float(m.group(4)) * unit.get(m.group(5), 1)
    mx = float(m.group(6)) * unit.get(m.group(7), 1)
    print(f"transcoder: {m.group(1)} frames in, {m.group(2)} out at {m.group(3)}; "
          f"added latency mean {mean:.1f} ms, max {mx:.1f} ms")
else:
    print("transcoder: no 'transcoding stopped' line in the log")
    sys.exit(1)
for line in bench.splitlines():
    if "Loss" in line or "Latency" in line or "fps" in line.lower():
        print("viewer:", line.strip())
EOF
