#!/usr/bin/env bash
# The checkpoint table of issue 3: `tern demo` with N viewers (default 1000, tern's lean
# clients over loopback, one test thread), the memory report read at startup, idle, viewers
# created, handshakes complete, steady state after S seconds of streaming (default 60), and
# all viewers gone; the counting allocator's total beside the sum of the named pools.
#
# Usage: bench/heap-report.sh [VIEWERS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
TERN_VIEWERS=${1:-1000} TERN_SECONDS=${2:-60} \
  cargo test --release -p tern --test e2e -- --ignored memory::checkpoint_table_1000 --nocapture 2>&1 |
  grep -vE '^(running|test |$)|Finished|Running|Compiling'
