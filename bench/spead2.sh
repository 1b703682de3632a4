#!/usr/bin/env bash
# spead2's experiment (issue 3): assemble 64 MiB frames from UDP datagrams over loopback,
# frame buffers from a prefaulted pool against a fresh heap allocation per frame; MB/s.
#
# Usage: bench/spead2.sh [FRAMES]   (default 24 per case; payloads of 8192 and 65000 bytes)
set -euo pipefail
cd "$(dirname "$0")/.."
for P in 8192 65000; do cargo bench -p tern-pool --bench frames -- "${1:-24}" $P; echo; done 2>&1 | grep -vE 'Finished|Running|Compiling'
