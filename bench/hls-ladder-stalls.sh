#!/usr/bin/env bash
# How long hls.js stalls when its link drops, by a ladder's segment length (issue 54):
#
#   bench/hls-ladder-stalls.sh [RUNS] [SEGMENT_MS ...]     default 8 runs of 2000 and 1000
#   EXTRA_HLS='window = 3' bench/hls-ladder-stalls.sh ...    more [hls] keys for every run
#
# For each SEGMENT_MS, tests/browser/hls-ladder.test.mjs with `[hls]
# ladder_segment_target_ms = SEGMENT_MS` (LADDER_HLS) watches RUNS times (LADDER_RUNS): a
# Chromium WHIP publisher's three simulcast layers, hls.js in another page on the top
# variant, the page's network throttled to 400 kbit/s (DevTools protocol) until hls.js moves
# down, then freed 5 s later. Prints each watch (ms to move down, ms to come back, its longest
# stall) and, per segment length, the stalls sorted and how many were over 2 s. Runs inside
# a private network namespace (scripts/netns-run.sh); needs the browser tests' set-up
# (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-8}
shift || true
SEGMENTS=("$@")
[ ${#SEGMENTS[@]} -gt 0 ] || SEGMENTS=(2000 1000)
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
case $TERN in /*) ;; *) TERN=$PWD/$TERN ;; esac
export TERN_BIN=$TERN
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "# bench/hls-ladder-stalls.sh RUNS=$RUNS: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for ms in "${SEGMENTS[@]}"; do
    LADDER_RUNS=$RUNS LADDER_HLS="ladder_segment_target_ms = $ms${EXTRA_HLS:+$'\n'$EXTRA_HLS}" \
        ./scripts/netns-run.sh node --test tests/browser/hls-ladder.test.mjs >"$log" 2>&1 || true
    echo "## ladder_segment_target_ms = $ms${EXTRA_HLS:+, $EXTRA_HLS}"
    grep -o 'ladder run [0-9]*: .*' "$log" || { tail -20 "$log"; continue; }
    grep -o 'longest stall [0-9]*' "$log" | awk '{ print $3 }' | sort -n | awk '
        { v[NR] = $1; if ($1 > 2000) over++ }
        END { s = ""; for (i = 1; i <= NR; i++) s = s " " v[i];
              printf "stalls (ms):%s; over 2 s: %d of %d\n", s, over + 0, NR }'
done
