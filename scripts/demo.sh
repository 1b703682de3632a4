#!/usr/bin/env bash
# Builds and runs `tern demo`: the built-in clip served live as live/demo.
#
#   ./scripts/demo.sh [tern demo flags...]     e.g. --http 127.0.0.1:8080 --candidate 192.0.2.10
#
# First installs what building needs and is missing (scripts/install-deps.sh --rust: a C
# toolchain, Rust, the libavcodec headers the B-frame transcoder builds against); on a ready
# machine that is a second of checks.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
./scripts/install-deps.sh --rust
cargo build --release -p tern
http=0.0.0.0:8080
prev=""
for a in "$@"; do
    case "$a" in --http=*) http="${a#--http=}" ;; esac
    [ "$prev" = --http ] && http="$a"
    prev="$a"
done
port="${http##*:}"
host="${http%:*}"
case "$host" in 0.0.0.0 | "[::]" | "") host=127.0.0.1 ;; esac
echo "player: http://$host:$port/live/demo"
exec cargo run --release -p tern -- demo "$@"
