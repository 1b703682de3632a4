#!/usr/bin/env bash
# Where a packet's CPU goes with and without UDP GSO (issue 35): `tern serve` fed the 720p
# 4 Mbit/s RTMP stream of bench/egress.sh (made there, bench/results/tmp/720p-4m.flv), N
# `tern bench` viewers, and `perf record -F 499 -g` on the server for 15 s once they are on.
#
#   bench/gso-perf.sh auto|off [N] [OUT]     (defaults 100, bench/results/tmp/perf-GSO)
#
# Writes OUT.data (perf), OUT.metrics (the GSO and packet counters) and OUT.bench (viewers
# connected, losses); read with `perf report -i OUT.data --no-children --sort dso,sym -g none`.
# Runs itself in a private network namespace (root).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
G=${1:?auto or off}
N=${2:-100}
OUT=${3:-$ROOT/bench/results/tmp/perf-$G}
if [ -z "${TERN_PERF_IN_NETNS:-}" ]; then
    export TERN_PERF_IN_NETNS=1
    exec unshare -n -- "$0" "$G" "$N" "$OUT"
fi
ip link set lo up
T=${TERN_BIN:-$ROOT/target/release/tern}
FLV=$ROOT/bench/results/tmp/720p-4m.flv
[ -s "$FLV" ] || { echo "no $FLV: run SOURCES=rtmp bench/egress.sh 100 first" >&2; exit 1; }
d=$(mktemp -d)
printf '[tunables]\ngso = "%s"\n[[app]]\nname = "live"\nstreams = ["cam"]\n' "$G" >"$d/t.toml"
"$T" serve --config "$d/t.toml" --http 127.0.0.1:18180 --media 127.0.0.1:18181 \
    --rtmp 127.0.0.1:18182 --candidate 127.0.0.1 >"$d/s.log" 2>&1 &
S=$!
sleep 1
ffmpeg -hide_banner -nostdin -loglevel error -re -stream_loop -1 -i "$FLV" -c copy \
    -f flv rtmp://127.0.0.1:18182/live/cam >"$d/f.log" 2>&1 &
F=$!
sleep 2
"$T" bench -url http://127.0.0.1:18180/live/cam/whep -n "$N" -cint 5 -life 30 -sint 600000 >"$d/b.out" 2>&1 &
B=$!
sleep 8
perf record -F 499 -g -p "$S" -o "$OUT.data" -- sleep 15 2>/dev/null
wait "$B"
curl -s http://127.0.0.1:18180/metrics | grep -E "^tern_(gso|packets_out)" >"$OUT.metrics"
kill "$F" "$S"
wait
grep -E "Total Packet Losses|Connected\(" "$d/b.out" | head -3 >"$OUT.bench"
rm -rf "$d"
cat "$OUT.metrics" "$OUT.bench"
