#!/usr/bin/env bash
# CPU of a slate viewer against a live one (issue 55): one `tern serve` on loopback, app
# "live" with `fallback = "clip"` and two declared streams:
#   - live/slate has no publisher: it plays the slate, the built-in clip (640x360, 30 fps);
#   - live/cam is live: ffmpeg pushes the same clip over RTMP (its H264 copied as it is, its
#     Opus encoded to AAC, which tern turns back into Opus), so its viewers get the same
#     pictures at the same rate.
# Both streams run for the whole benchmark. Each arm is N `tern bench` viewers of one of the
# two streams; tern's CPU (utime + stime of the whole process, /proc/PID/stat) is read over
# WINDOW seconds once they are all connected, and the same window with no viewer at all is
# the baseline (the slate's pacing, the RTMP ingest and its AAC decode, idle timers). Arms
# alternate (idle, slate, live, idle, live, slate, ...) ROUNDS times; the summary prints each
# arm's CPU per viewer (ms of CPU per viewer-second) and the slate/live ratio.
#
#   bench/slate.sh [N] [WINDOW] [ROUNDS]      (defaults 200 15 2)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
WINDOW=${2:-15}
ROUNDS=${3:-2}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${FP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
printf '[[app]]\nname = "live"\nstreams = ["cam", "slate"]\nfallback = "clip"\n' >"$dir/tern.toml"
HTTP=$(free_port)
MEDIA=$(free_port)
RTMP=$(free_port)
RUST_LOG=warn "$TERN" serve --config "$dir/tern.toml" --http "127.0.0.1:$HTTP" \
    --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" 2>"$dir/tern.log" &
SP=$!
sleep 1
# The clip in an MP4 (a raw H264 stream cannot be looped by seeking), its audio as AAC;
# pushed in a loop for as long as the arms run, killed on exit.
ffmpeg -hide_banner -nostdin -loglevel error -r 30 -i assets/clip/demo.h264 \
    -i assets/clip/demo.opus -c:v copy -c:a aac -ar 48000 "$dir/clip.mp4"
ffmpeg -hide_banner -nostdin -loglevel error -re -stream_loop -1 -i "$dir/clip.mp4" -c copy \
    -f flv "rtmp://127.0.0.1:$RTMP/live/cam" &
FP=$!
sleep 4
source_of() {
    curl -s "http://127.0.0.1:$HTTP/v1/streams/live/$1" | python3 -c '
import json, sys
v = json.load(sys.stdin)
print((v.get("snapshot") or v).get("source"))'
}
echo "live/slate plays: $(source_of slate); live/cam plays: $(source_of cam)"
ticks() {
    local st
    read -r -a st <<<"$(sed 's/.*) //' "/proc/$SP/stat")"
    echo $((st[11] + st[12]))
}
HZ=$(getconf CLK_TCK)
# One arm: N viewers of live/$1 (none for "idle"); prints the CPU ticks over WINDOW s.
arm() {
    local bp=
    if [ "$1" != idle ]; then
        "$TERN" bench -url "http://127.0.0.1:$HTTP/live/$1/whep" -n "$N" -cint 20 \
            -life $((WINDOW + 12)) -sint 600000 --details false >"$dir/bench-$1.txt" 2>&1 &
        bp=$!
    fi
    sleep 8
    local a b
    a=$(ticks)
    sleep "$WINDOW"
    b=$(ticks)
    if [ -n "$bp" ]; then wait "$bp" || true; fi
    echo $((b - a))
}
declare -A sum=([idle]=0 [slate]=0 [cam]=0)
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="idle slate cam"; else order="idle cam slate"; fi
    for a in $order; do
        t=$(arm "$a")
        sum[$a]=$((sum[$a] + t))
        echo "round $r $a: $t ticks of 1/$HZ s over ${WINDOW} s (live/cam then: $(source_of cam))"
        if [ "$a" != idle ]; then grep -E "connected|lost" "$dir/bench-$a.txt" | head -3 | sed 's/^/    /'; fi
    done
done
python3 - "$N" "$WINDOW" "$ROUNDS" "$HZ" "${sum[idle]}" "${sum[slate]}" "${sum[cam]}" <<'EOF'
import sys
n, window, rounds, hz, idle, slate, cam = map(int, sys.argv[1:])
secs = window * rounds
def per_viewer(t):
    # ms of CPU per viewer-second, above the idle arm's.
    return (t - idle) / hz * 1000 / (n * secs)
s, c = per_viewer(slate), per_viewer(cam)
print(f"idle (no viewer): {idle / hz / secs * 100:.1f} % of a core")
print(f"slate viewers: {s:.3f} ms of CPU per viewer-second ({slate / hz / secs * 100:.1f} % of a core with {n})")
print(f"live viewers:  {c:.3f} ms of CPU per viewer-second ({cam / hz / secs * 100:.1f} % of a core with {n})")
print(f"slate / live: {s / c:.2f}" if c > 0 else "slate / live: n/a")
EOF
