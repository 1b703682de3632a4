#!/usr/bin/env bash
# Cost of a WHIP publisher's renditions (issue 54): `tern bench --publish 1` sends the
# built-in clip (640x360 H264 at 30 fps + Opus, str0m) over WHIP to `tern serve` on
# loopback, with one viewer, twice: once to an app without renditions, once to an app with
# `renditions = [m 180 lines at 250 kbit/s, l 90 lines at 100 kbit/s]`. Each run reads the
# tern process's CPU (utime + stime of all its threads, from /proc) over PHASE seconds
# after a 4 s warm-up and splits it by thread: WhipRendition (decodes the publisher's
# frames and scales each picture for both renditions), RtmpRendition (the two encoders)
# and MediaTap (where the frames are rebuilt from the ring's packets). The renditions'
# summary line (when the publisher leaves) gives the time per frame of each scaler and
# encoder.
#
#   bench/whip-renditions.sh [PHASE]           (default 20)
#   TERN=path/to/tern bench/whip-renditions.sh (a tern already built: no cargo build)
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-20}
# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ -z "${TERN:-}" ]; then
    tern_build
fi
HZ=$(getconf CLK_TCK)
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${BP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT

# run NAME RENDITIONS_LINE: prints "NAME process whip-rendition encoders tap" in clock ticks.
run() {
    printf '[[app]]\nname = "live"\nstreams = ["cam"]\n%s\n' "$2" >"$dir/$1.toml"
    local http media
    http=$(free_port)
    media=$(free_port)
    RUST_LOG=info "$TERN" serve --config "$dir/$1.toml" --http "127.0.0.1:$http" \
        --media "127.0.0.1:$media" --candidate 127.0.0.1 2>"$dir/$1.log" &
    SP=$!
    sleep 1
    "$TERN" bench -url "http://127.0.0.1:$http/live/cam/whep" --publish 1 -n 1 \
        -life $((PHASE + 6)) -sint 600000 --details false >"$dir/bench-$1.txt" 2>&1 &
    BP=$!
    sleep 4
    local p0 w0 r0 t0 p1 w1 r1 t1
    p0=$(proc_ticks)
    w0=$(thread_ticks WhipRendition)
    r0=$(thread_ticks RtmpRendition)
    t0=$(thread_ticks MediaTap)
    sleep "$PHASE"
    p1=$(proc_ticks)
    w1=$(thread_ticks WhipRendition)
    r1=$(thread_ticks RtmpRendition)
    t1=$(thread_ticks MediaTap)
    wait "$BP" || true
    # The renditions' summary comes when the publisher leaves (its media timeout at most).
    for _ in $(seq 1 60); do
        grep -q "renditions stopped" "$dir/$1.log" && break
        [ "$1" = plain ] && break
        sleep 0.25
    done
    kill "$SP" 2>/dev/null || true
    wait "$SP" 2>/dev/null || true
    echo "$1 $((p1 - p0)) $((w1 - w0)) $((r1 - r0)) $((t1 - t0))" >>"$dir/ticks"
}

run plain ''
run renditions 'renditions = [{ rid = "m", height = 180, bitrate_kbps = 250 }, { rid = "l", height = 90, bitrate_kbps = 100 }]'

python3 - "$dir/ticks" "$HZ" "$PHASE" "$dir/renditions.log" <<'EOF'
import re, sys
ticks = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(sys.argv[1])}
hz, phase = int(sys.argv[2]), int(sys.argv[3])
log = re.sub(r"\x1b\[[0-9;]*m", "", open(sys.argv[4]).read())
cps = lambda t: t / hz / phase
print(f"source: the built-in clip (640x360 H264 30 fps + Opus) over WHIP, one viewer; {phase} s each run")
print("CPU-seconds per second (1.00 = one core): whole tern process / WhipRendition / RtmpRendition threads / MediaTap")
for name in ("plain", "renditions"):
    p, w, r, t = ticks[name]
    print(f"  {name:<10}  {cps(p):.3f} / {cps(w):.3f} / {cps(r):.3f} / {cps(t):.3f}")
extra = cps(ticks["renditions"][0]) - cps(ticks["plain"][0])
print(f"the two renditions: +{extra:.3f} CPU-s/s ({extra * 100:.1f} % of a core)")
m = re.search(r"renditions of the \d+x\d+ source.*", log)
print(m.group(0) if m else "no renditions start line in the log")
m = re.search(r"renditions stopped: .*", log)
print(m.group(0) if m else "no renditions summary in the log")
if not m:
    sys.exit(1)
EOF
