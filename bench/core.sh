#!/usr/bin/env bash
# The core viewer-path benchmark (issue 2): heap per viewer at lifecycle checkpoints,
# handshakes per second per core, fan-out time per packet per viewer, CPU per million
# packets with sendmmsg over loopback, and instructions per forwarded packet per viewer
# from callgrind (difference of two runs that differ only in the packet count, so set-up
# and handshakes cancel out).
#
# Usage: bench/core.sh [VIEWERS]   (default 1000; callgrind runs use 50 viewers)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
command -v valgrind >/dev/null || { apt-get install -y valgrind >/dev/null 2>&1 || sudo apt-get install -y valgrind; }
cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
T=${CARGO_TARGET_DIR:-target}
BIN=$T/release/tern
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
echo "== $BIN lab --viewers $N --seconds 60"
$BIN lab --viewers "$N" --seconds 60
echo
echo "== $BIN lab --viewers $N --packets 20000 --udp   (sendmmsg to a loopback sink)"
$BIN lab --viewers "$N" --packets 20000 --udp | grep -E 'fan-out|handshakes'
echo
V=50
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Only the server's per-packet work is collected (tern lab's fan_out_packet: header rewrite,
# SRTP into the send batch, batch bookkeeping): set-up, handshakes and aws-lc's entropy
# gathering (which varies run to run) stay out of the count.
for P in 1000 3000; do
  valgrind --tool=callgrind --toggle-collect='tern::lab::fan_out_packet' \
    --callgrind-out-file="$tmp/cg.$P" "$BIN" lab --viewers $V --packets $P >/dev/null 2>"$tmp/log.$P"
done
i1=$(grep -m1 '^summary:' "$tmp/cg.1000" | awk '{print $2}')
i3=$(grep -m1 '^summary:' "$tmp/cg.3000" | awk '{print $2}')
echo "== callgrind: $V viewers, 1000 vs 3000 source packets, fan_out_packet only"
echo "instructions: $i1 vs $i3"
awk -v a="$i1" -v b="$i3" -v v=$V 'BEGIN { printf "instructions per forwarded packet per viewer: %.0f\n", (b-a)/(2000*v) }'
echo
echo "== SRTP profiles: instructions per 1188-byte packet (RtpSender::protect_payload)"
cargo bench -p tern-proto --bench srtp --no-run >/dev/null 2>&1
SB=$(ls -t $T/release/deps/srtp-* 2>/dev/null | grep -v '\.d$' | head -1)
for i in 0 1 2; do
  valgrind --tool=callgrind --toggle-collect='*protect_one*' --callgrind-out-file="$tmp/s.$i" "$SB" 20000 --only $i >"$tmp/so.$i" 2>/dev/null
  n=$(grep -m1 '^summary:' "$tmp/s.$i" | awk '{print $2}')
  name=$(grep ns/packet "$tmp/so.$i" | awk '{print $1}')
  awk -v n="$n" -v p="$name" 'BEGIN { printf "%-22s %6.0f instructions/packet\n", p, n/20000 }'
done
