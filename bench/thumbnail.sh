#!/usr/bin/env bash
# CPU of one thumbnail (issue 55): a 720p and a 1080p H264 keyframe (testsrc2, x264 veryfast,
# CRF 23, Annex B with SPS/PPS in band, made here by Debian's ffmpeg) decoded by
# tern_rtc::thumbnail (libavcodec, one thread) and made into a JPEG at its own size and 320
# wide (swscale, MJPEG): CPU per call of the calling thread, from
# /proc/thread-self/schedstat (crates/tern-rtc/examples/thumbnail_cost.rs). Baseline in the
# same run: the ffmpeg command line doing the same job on the same file (decode, JPEG),
# its whole process's CPU (user + system, from /proc via GNU time's %U %S), start-up included.
#
#   bench/thumbnail.sh [N]      (default 50 calls each)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo build --release -q -p tern-rtc --example thumbnail_cost
TARGET=${CARGO_TARGET_DIR:-target}
for size in 1280x720 1920x1080; do
    ffmpeg -hide_banner -loglevel error -f lavfi -i "testsrc2=size=$size:rate=30" -frames:v 1 \
        -c:v libx264 -preset veryfast -crf 23 -bsf:v h264_mp4toannexb -f h264 "$dir/$size.h264"
    echo "## $size"
    "$TARGET/release/examples/thumbnail_cost" "$dir/$size.h264" "$N"
    # Baseline: the ffmpeg CLI, N times, mean CPU per run.
    total=0
    for _ in $(seq 1 10); do
        t=$( { /usr/bin/time -f '%U %S' ffmpeg -hide_banner -loglevel error -y -threads 1 \
            -i "$dir/$size.h264" -frames:v 1 -q:v 3 "$dir/out.jpg" ; } 2>&1 | tail -1 |
            awk '{printf "%d", ($1 + $2) * 1000}')
        total=$((total + t))
    done
    echo "ffmpeg CLI, same keyframe to a JPEG at its size: $((total / 10)) ms CPU per run (10 runs, start-up included)"
done
