#!/usr/bin/env bash
# Cost of RTMP renditions (issue 22): Debian's ffmpeg pushes SIZE at 30 fps (testsrc2, x264
# Baseline without B-frames, preset veryfast, 2.5 Mbit/s, a keyframe every 2 s, AAC) to
# `tern serve --rtmp` on loopback, twice with the same input: once to an app without
# renditions, once to an app with `renditions = [m 360 lines at 800 kbit/s, l 180 lines at
# 250 kbit/s]`. Each run reads the tern process's CPU (utime + stime of all its threads, from
# /proc) over PHASE seconds after a 4 s warm-up, without viewers (renditions run whenever the
# stream is published), and splits it by thread: RtmpSession (the connection: chunks, FLV ->
# RTP, AAC -> Opus and, with renditions, the decoder and the two scalers) and RtmpRendition
# (the two encoders). The renditions' own log line gives the time per frame of each scaler
# and encoder.
#
#   bench/renditions.sh [SIZE] [PHASE]      (defaults 1280x720 20)
#   TERN=path/to/tern bench/renditions.sh   (a tern already built: no cargo build)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1280x720}
PHASE=${2:-20}
# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ -z "${TERN:-}" ]; then
    tern_build
fi
HZ=$(getconf CLK_TCK)
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${FP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT

# run NAME RENDITIONS_LINE: prints "NAME process session renditions" in clock ticks.
run() {
    printf '[[app]]\nname = "live"\nstreams = ["cam"]\n%s\n' "$2" >"$dir/$1.toml"
    local http media rtmp
    http=$(free_port)
    media=$(free_port)
    rtmp=$(free_port)
    RUST_LOG=info "$TERN" serve --config "$dir/$1.toml" --http "127.0.0.1:$http" \
        --media "127.0.0.1:$media" --candidate 127.0.0.1 --rtmp "127.0.0.1:$rtmp" \
        2>"$dir/$1.log" &
    SP=$!
    sleep 1
    ffmpeg -hide_banner -nostdin -loglevel error \
        -re -f lavfi -i "testsrc2=size=$SIZE:rate=30" -re -f lavfi -i sine=frequency=440:sample_rate=48000 \
        -t $((PHASE + 8)) -c:v libx264 -profile:v baseline -bf 0 -preset veryfast -b:v 2500k \
        -pix_fmt yuv420p -g 60 -c:a aac -f flv "rtmp://127.0.0.1:$rtmp/live/cam" &
    FP=$!
    sleep 4
    local p0 s0 r0 p1 s1 r1
    p0=$(proc_ticks)
    s0=$(thread_ticks RtmpSession)
    r0=$(thread_ticks RtmpRendition)
    sleep "$PHASE"
    p1=$(proc_ticks)
    s1=$(thread_ticks RtmpSession)
    r1=$(thread_ticks RtmpRendition)
    wait "$FP" || true
    # The renditions' summary comes when the publisher leaves.
    for _ in $(seq 1 20); do
        grep -q "connection closed" "$dir/$1.log" && break
        sleep 0.25
    done
    kill "$SP" 2>/dev/null || true
    wait "$SP" 2>/dev/null || true
    echo "$1 $((p1 - p0)) $((s1 - s0)) $((r1 - r0))" >>"$dir/ticks"
}

run plain ''
run renditions 'renditions = [{ rid = "m", height = 360, bitrate_kbps = 800 }, { rid = "l", height = 180, bitrate_kbps = 250 }]'

python3 - "$dir/ticks" "$HZ" "$PHASE" "$SIZE" "$dir/renditions.log" <<'EOF'
import re, sys
ticks = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(sys.argv[1])}
hz, phase, size = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
log = re.sub(r"\x1b\[[0-9;]*m", "", open(sys.argv[5]).read())
cps = lambda t: t / hz / phase
print(f"source: {size} 30 fps, x264 Baseline (no B-frames), 2.5 Mbit/s + AAC, over RTMP; {phase} s each run")
print("CPU-seconds per second (1.00 = one core): whole tern process / RtmpSession thread / RtmpRendition threads")
for name in ("plain", "renditions"):
    p, s, r = ticks[name]
    print(f"  {name:<10}  {cps(p):.3f} / {cps(s):.3f} / {cps(r):.3f}")
extra = cps(ticks["renditions"][0]) - cps(ticks["plain"][0])
print(f"the two renditions: +{extra:.3f} CPU-s/s ({extra * 100:.1f} % of a core)")
m = re.search(r"renditions of .*", log)
print(m.group(0) if m else "no renditions start line in the log")
m = re.search(r"renditions stopped: .*", log)
print(m.group(0) if m else "no renditions summary in the log")
if not m:
    sys.exit(1)
EOF
