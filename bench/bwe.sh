#!/usr/bin/env bash
# Issue 22: what a bandwidth estimate costs a viewer (of a simulcast stream; other viewers
# have none). Both figures come from `tern lab`, with and without --bwe, in the same run:
#
# - heap per viewer: the lab's ledger of server-side calls at its lifecycle checkpoints
#   (the estimator is one boxed block per viewer, made when the viewer joins a simulcast
#   stream);
# - instructions per forwarded packet per viewer (callgrind, difference of two runs that
#   differ only in the packet count): the per-packet work (fan_out_packet: header with the
#   transport-wide sequence number, SRTP, the estimator's record of the send) plus the
#   feedback the estimator reads every 100 ms (feed_back: one transport-wide feedback per
#   viewer, built by the lab), so the estimator's whole cost is counted per packet.
#
# Usage: bench/bwe.sh [VIEWERS]   (default 1000 for the heap; callgrind runs use 50)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
command -v valgrind >/dev/null || { apt-get install -y valgrind >/dev/null 2>&1 || sudo apt-get install -y valgrind; }
cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
T=${CARGO_TARGET_DIR:-target}
BIN=$T/release/tern
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
for mode in "" --bwe; do
  echo "== $BIN lab --viewers $N --seconds 20 $mode"
  $BIN lab --viewers "$N" --seconds 20 $mode | grep -E 'checkpoint|handshakes complete|estimators|steady state|inline|fan-out'
done
V=50
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A per
for mode in off on; do
  flag=""
  [ "$mode" = on ] && flag=--bwe
  for P in 1000 3000; do
    valgrind --tool=callgrind --toggle-collect='tern::lab::fan_out_packet' --toggle-collect='tern::lab::feed_back' \
      --callgrind-out-file="$tmp/cg.$mode.$P" "$BIN" lab --viewers $V --packets $P $flag >/dev/null 2>"$tmp/log.$mode.$P"
  done
  i1=$(grep -m1 '^summary:' "$tmp/cg.$mode.1000" | awk '{print $2}')
  i3=$(grep -m1 '^summary:' "$tmp/cg.$mode.3000" | awk '{print $2}')
  per[$mode]=$(awk -v a="$i1" -v b="$i3" -v v=$V 'BEGIN { printf "%.0f", (b-a)/(2000*v) }')
  echo "== callgrind, estimator $mode: $V viewers, 1000 vs 3000 source packets: $i1 vs $i3 instructions"
done
echo "instructions per forwarded packet per viewer: estimator off ${per[off]}, on ${per[on]} (x$(awk -v a="${per[off]}" -v b="${per[on]}" 'BEGIN { printf "%.3f", b/a }'))"
