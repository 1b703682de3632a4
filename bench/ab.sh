#!/usr/bin/env bash
# Two tern binaries side by side (bench/ab.py): instructions per forwarded packet per viewer
# (callgrind) and heap per viewer above idle at N WHEP viewers, alternating A B A B, inside a
# private network namespace with only loopback. For a refactor that must not move them:
#
#   git worktree add /tmp/before BASE && (cd /tmp/before && cargo build --release -p tern)
#   cargo build --release -p tern
#   bench/ab.sh /tmp/before/target/release/tern target/release/tern [--rounds R] [--viewers N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -ge 2 ] || { sed -n '2,8p' "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "ab.sh: valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
exec unshare -n sh -c 'ip link set lo up && exec python3 bench/ab.py "$@"' ab "$@"
