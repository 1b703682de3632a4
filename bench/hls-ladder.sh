#!/usr/bin/env bash
# LL-HLS ladder against a single variant (issue 54), one run, inside a private network
# namespace:
#
#   ./scripts/netns-run.sh bench/hls-ladder.sh [PHASE]      (default 20 s)
#
# One `tern serve --rtmp` with two apps: `ladder` has two renditions (m 360 lines at
# 800 kbit/s, l 180 lines at 250 kbit/s), `single` none; `[hls] session_timeout_s = 5`.
# Debian's ffmpeg pushes the same 1280x720 30 fps testsrc2 (x264 veryfast 2.5 Mbit/s,
# Baseline, a keyframe a second, AAC 44.1 kHz) to ladder/cam and to single/cam at once; the
# renditions' encoders run all along, readers or not. Three phases of PHASE s each:
#   A. no LL-HLS reader (the baseline);
#   B. one reader of single/cam (bench/hls-client.mjs reader: blocking reloads and every
#      part of the top variant): one variant packaged;
#   C. (after B's packaging has stopped) one reader of ladder/cam: three variants packaged
#      (the top one on the RtmpSession thread, the lower two on the MediaTap thread).
# Packaging CPU = (RtmpSession + MediaTap CPU in the phase) - (the same in A), from
# /proc/.../schedstat; memory = the `hls_segments` line of /v1/memory (allocated bytes: the
# buffers of the parts held and those kept free) at the end of the phase.
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-20}
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
dir=$(mktemp -d)
trap 'kill "${SP:-}" "${F1:-}" "${F2:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/tern.toml" <<'EOF'
[hls]
session_timeout_s = 5

[[app]]
name = "ladder"
streams = ["cam"]
renditions = [{ rid = "m", height = 360, bitrate_kbps = 800 }, { rid = "l", height = 180, bitrate_kbps = 250 }]

[[app]]
name = "single"
streams = ["cam"]
EOF
HTTP=$(free_port)
MEDIA=$(free_port)
RTMP=$(free_port)
RUST_LOG=warn "$TERN" serve --config "$dir/tern.toml" --http "127.0.0.1:$HTTP" \
    --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" 2>"$dir/tern.log" &
SP=$!
sleep 1
TOTAL=$((3 * PHASE + 50))
push() {
    ffmpeg -hide_banner -nostdin -loglevel error \
        -re -f lavfi -i "testsrc2=size=1280x720:rate=30" -re -f lavfi -i sine=frequency=440:sample_rate=44100 \
        -t "$TOTAL" -c:v libx264 -profile:v baseline -preset veryfast -b:v 2500k -maxrate 2500k \
        -bufsize 2500k -pix_fmt yuv420p -g 30 -c:a aac -f flv "rtmp://127.0.0.1:$RTMP/$1/cam" &
}
push ladder
F1=$!
push single
F2=$!
HZ=1000000000
sleep 5
cpu() { echo "$(thread_ns RtmpSession) $(thread_ns MediaTap)"; }
mem() {
    curl -s "http://127.0.0.1:$HTTP/v1/memory" |
        python3 -c 'import json,sys; p=[x for x in json.load(sys.stdin)["pools"] if x["name"]=="hls_segments"]; print(p[0]["allocated_bytes"] if p else 0)'
}
# The same line's used bytes (the parts held) and items (parts held), for the record.
held() {
    curl -s "http://127.0.0.1:$HTTP/v1/memory" |
        python3 -c 'import json,sys; p=[x for x in json.load(sys.stdin)["pools"] if x["name"]=="hls_segments"]; print("%.2f MB in %d parts" % (p[0]["used_bytes"] / 1e6, p[0]["items_in_use"]) if p else "none")'
}
variants() { curl -s "http://127.0.0.1:$HTTP/$1/cam/index.m3u8" | grep -c '^#EXT-X-STREAM-INF'; }
a0=$(cpu)
sleep "$PHASE"
a1=$(cpu)
node bench/hls-client.mjs reader "http://127.0.0.1:$HTTP/single/cam/index.m3u8" $((PHASE + 5)) >"$dir/single.json" &
RP=$!
sleep 5
b0=$(cpu)
sleep "$PHASE"
b1=$(cpu)
bm=$(mem)
bh=$(held)
wait "$RP"
# The reader's index.m3u8 counts as a session too: wait for both to time out (5 s idle,
# housekeeping once a second) and the packaging to stop.
sleep 12
node bench/hls-client.mjs reader "http://127.0.0.1:$HTTP/ladder/cam/index.m3u8" $((PHASE + 5)) >"$dir/ladder.json" &
RP=$!
sleep 5
c0=$(cpu)
sleep "$PHASE"
c1=$(cpu)
cm=$(mem)
ch=$(held)
wait "$RP"
nv=$(variants ladder)
ns=$(variants single)
echo "parts held at the end of B: $bh; of C: $ch"
python3 - "$PHASE" "$HZ" "$a0" "$a1" "$b0" "$b1" "$c0" "$c1" "$bm" "$cm" "$nv" "$ns" "$dir" <<'PY'
import json, sys
phase, hz = float(sys.argv[1]), float(sys.argv[2])
pair = lambda s: tuple(int(x) for x in s.split())
a0, a1, b0, b1, c0, c1 = (pair(x) for x in sys.argv[3:9])
bm, cm, nv, ns = map(int, sys.argv[9:13])
d = sys.argv[13]
share = lambda x0, x1, i: (x1[i] - x0[i]) / hz / phase * 100
rs = json.load(open(f"{d}/single.json"))
rl = json.load(open(f"{d}/ladder.json"))
print("source: 1280x720 30 fps 2.5 Mbit/s H264 Baseline (1 s GOP) + AAC, RTMP, twice (ladder/cam with 2 renditions, single/cam)")
print("% of a core over each phase:  RtmpSession (both connections: RTMP, decode+scale for the renditions, top-variant packaging)  MediaTap (lower variants)")
for name, x0, x1 in (("A no reader", a0, a1), ("B single/cam read", b0, b1), ("C ladder/cam read", c0, c1)):
    print(f"  {name:<20} {share(x0, x1, 0):6.2f}   {share(x0, x1, 1):6.2f}")
top_b = share(b0, b1, 0) - share(a0, a1, 0)
top_c = share(c0, c1, 0) - share(a0, a1, 0)
low_c = share(c0, c1, 1) - share(a0, a1, 1)
print(f"single variant ({ns} in index.m3u8): packaging {top_b:.2f} % of a core (RtmpSession - A); hls_segments {bm/1e6:.2f} MB; reader {rs['parts']} parts, {rs['bytes']/1e6:.1f} MB")
print(f"ladder ({nv} variants): top {top_c:.2f} % (RtmpSession - A) + lower {low_c:.2f} % (MediaTap - A); hls_segments {cm/1e6:.2f} MB; reader {rl['parts']} parts, {rl['bytes']/1e6:.1f} MB")
if bm > 0:
    print(f"ladder / single memory: x{cm/bm:.2f}")
PY
