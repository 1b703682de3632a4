#!/usr/bin/env bash
# OvenMediaEngine's own load tester, OvenRtcTester, against `tern demo` over tern's
# OME-compatible WebSocket signalling, inside a private network namespace.
#
#   bench/ovenrtctester.sh PATH/TO/OvenRtcTester [N] [LIFE]      default N=100, LIFE=60 s
#
# OvenRtcTester is not on any registry and is not part of tern: build it outside this
# repository from OvenMediaEngine's misc/oven_rtc_tester (Go; its go.mod needs `go mod tidy`
# with current Go toolchains), see BENCHMARKS.md. Clients start 100 ms apart (-cint 100); the
# tester prints its <Summary> every 5 s and a final one after LIFE seconds. After the run this
# prints tern's CPU time and peak RSS and its /v1/stats/current counters.
# Env: TERN (binary, default $CARGO_TARGET_DIR/release/tern or target/release/tern).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${OVENRTC_INNER:-}" != 1 ]; then
    [ $# -ge 1 ] && [ -x "$1" ] || {
        sed -n '2,13p' "$0"
        exit 2
    }
    TERN=${TERN:-${CARGO_TARGET_DIR:-target}/release/tern}
    [ -x "$TERN" ] || cargo build --release -p tern
    export TERN OVENRTC_INNER=1
    exec scripts/netns-run.sh "$0" "$@"
fi
TESTER=$1
N=${2:-100}
LIFE=${3:-60}
HTTP=127.0.0.1:18090
"$TERN" demo --http "$HTTP" --media 127.0.0.1:18091 --candidate 127.0.0.1 >/tmp/tern-ovenrtc-server.log 2>&1 &
sp=$!
trap 'kill $sp 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null "http://$HTTP/" && break; sleep 0.1; done
hz=$(getconf CLK_TCK)
c0=$(awk '{print $14+$15}' "/proc/$sp/stat")
"$TESTER" -url "ws://$HTTP/live/demo" -n "$N" -cint 100 -life "$LIFE" >/tmp/tern-ovenrtc.txt 2>&1 || true
c1=$(awk '{print $14+$15}' "/proc/$sp/stat")
sed -n '/^Reports/,/^<Details>/p' /tmp/tern-ovenrtc.txt
echo "tern CPU during the run: $(((c1 - c0) * 1000 / hz)) ms; $(grep VmHWM "/proc/$sp/status" | tr -s ' \t' ' ')"
echo "tern /v1/stats/current: $(curl -s "http://$HTTP/v1/stats/current")"
echo "(full tester output: /tmp/tern-ovenrtc.txt)"
