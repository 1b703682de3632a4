#!/usr/bin/env bash
# The SRTP profile in the server path (issue 40): AES-128-GCM against AES-256-GCM, one build.
#
#   bench/srtp-profiles.sh [ROUNDS]     default 3
#
# For each profile, with `tern lab --srtp PROFILE` (the server's preference narrowed to it):
#   time          fan-out time per forwarded packet per viewer (header rewrite + SRTP seal
#                 into the send batch; 200 viewers, 20,000 source packets), arms alternated
#                 ROUNDS times so the other core's load hits both alike;
#   instructions  callgrind, `tern::lab::fan_out_packet` only, 50 viewers, the difference of
#                 a 3,000- and a 1,000-packet run over 2,000 x 50 forwarded packets (set-up
#                 and handshakes cancel out); the seal's share from the same runs
#                 (`RtpSender::protect_payload` inclusive);
#   heap          the lab's per-viewer heap after the handshakes (1,000 viewers).
# Needs a release build: TERN_BIN (default $CARGO_TARGET_DIR or target, release/tern).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
T=${CARGO_TARGET_DIR:-target}
BIN=${TERN_BIN:-$T/release/tern}
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== time: $BIN lab --viewers 200 --packets 20000 --srtp P, alternated"
for r in $(seq "$ROUNDS"); do
    for p in aes128gcm aes256gcm; do
        ns=$("$BIN" lab --viewers 200 --packets 20000 --srtp "$p" 2>&1 | sed -n 's/^fan-out: \([0-9]*\) ns.*/\1/p')
        echo "round $r $p: $ns ns per forwarded packet per viewer"
    done
done
echo "== instructions: callgrind, 50 viewers, fan_out_packet"
for p in aes128gcm aes256gcm; do
    for n in 1000 3000; do
        valgrind --tool=callgrind --toggle-collect='tern::lab::fan_out_packet' \
            --callgrind-out-file="$tmp/cg.$p.$n" "$BIN" lab --viewers 50 --packets $n --srtp "$p" \
            >/dev/null 2>"$tmp/log.$p.$n"
    done
    a=$(grep -m1 '^summary:' "$tmp/cg.$p.1000" | awk '{print $2}')
    b=$(grep -m1 '^summary:' "$tmp/cg.$p.3000" | awk '{print $2}')
    seal() { # inclusive instructions of RtpSender::protect_payload in a callgrind file
        callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
            awk '/RtpSender::protect_payload/ && !f { gsub(",", "", $1); print $1; f = 1 }'
    }
    sa=$(seal "$tmp/cg.$p.1000")
    sb=$(seal "$tmp/cg.$p.3000")
    awk -v p="$p" -v a="$a" -v b="$b" -v sa="${sa:-0}" -v sb="${sb:-0}" 'BEGIN {
        printf "%s: %.0f instructions per forwarded packet per viewer, of which the seal (protect_payload) %.0f\n",
            p, (b - a) / 100000, (sb - sa) / 100000 }'
done
echo "== heap: $BIN lab --viewers 1000 --packets 100 --srtp P"
for p in aes128gcm aes256gcm; do
    "$BIN" lab --viewers 1000 --packets 100 --srtp "$p" 2>&1 |
        grep -E '^handshakes complete|^inline Viewer' | sed "s/^/$p: /"
done
