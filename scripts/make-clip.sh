#!/usr/bin/env bash
# Regenerates the built-in demo clip under assets/clip/ (see assets/clip/README.md).
#
# Output is deterministic for a given ffmpeg/x264/libopus build; running the script
# twice overwrites the same two files. Installs ffmpeg with apt-get if it is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=assets/clip
mkdir -p "$OUT"

if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "ffmpeg not found; installing with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends ffmpeg
fi

DURATION=6
FPS=30

# Video: constrained baseline 3.1 (profile-level-id 42e01f), 640x360, 30 fps, 1 s GOP,
# no B-frames, SPS+PPS before every IDR, an AUD before every frame, ~1 Mbit/s CBR-ish.
ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "testsrc2=size=640x360:rate=${FPS}" \
    -t "$DURATION" -frames:v $((DURATION * FPS)) \
    -an -c:v libx264 -profile:v baseline -level:v 3.1 -pix_fmt yuv420p \
    -preset veryfast -tune zerolatency -threads 1 \
    -g "$FPS" -keyint_min "$FPS" -sc_threshold 0 -bf 0 \
    -b:v 1M -maxrate 1M -bufsize 1M \
    -x264-params repeat-headers=1:aud=1 \
    -bsf:v h264_metadata=aud=insert \
    -fflags +bitexact -flags:v +bitexact \
    -f h264 "$OUT/demo.h264"

# The lite variant (`tern demo --clip lite`, for load tests at ~300 kbit/s per viewer):
# the same pattern and settings at 320x180 and ~240 kbit/s video, with the same audio.
ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "testsrc2=size=320x180:rate=${FPS}" \
    -t "$DURATION" -frames:v $((DURATION * FPS)) \
    -an -c:v libx264 -profile:v baseline -level:v 3.1 -pix_fmt yuv420p \
    -preset veryfast -tune zerolatency -threads 1 \
    -g "$FPS" -keyint_min "$FPS" -sc_threshold 0 -bf 0 \
    -b:v 240k -maxrate 240k -bufsize 240k \
    -x264-params repeat-headers=1:aud=1 \
    -bsf:v h264_metadata=aud=insert \
    -fflags +bitexact -flags:v +bitexact \
    -f h264 "$OUT/lite.h264"

# Audio: Ogg Opus, 48 kHz stereo, 20 ms frames, 64 kbit/s: a 440 Hz tone with a
# 880 Hz beep for the first 100 ms of every second.
ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "aevalsrc=exprs='0.2*sin(2*PI*440*t)+0.3*lt(mod(t\,1)\,0.1)*sin(2*PI*880*t)':sample_rate=48000:channel_layout=stereo:duration=${DURATION}" \
    -vn -c:a libopus -b:a 64k -frame_duration 20 -application audio \
    -fflags +bitexact -flags:a +bitexact \
    -f ogg "$OUT/demo.opus"

ls -l "$OUT/demo.h264" "$OUT/lite.h264" "$OUT/demo.opus"
