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
BIN=target/release/tern
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
for P in 1000 3000; do
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$P" "$BIN" lab --viewers $V --packets $P >/dev/null 2>"$tmp/log.$P"
done
i1=$(grep -m1 '^summary:' "$tmp/cg.1000" | awk '{print $2}')
i3=$(grep -m1 '^summary:' "$tmp/cg.3000" | awk '{print $2}')
echo "== callgrind: $V viewers, 1000 vs 3000 source packets"
echo "instructions: $i1 vs $i3"
awk -v a="$i1" -v b="$i3" -v v=$V 'BEGIN { printf "instructions per forwarded packet per viewer (whole process, incl. synthetic source and batch bookkeeping): %.0f\n", (b-a)/(2000*v) }'
