#!/usr/bin/env bash
# Builds and runs `tern demo`: the built-in clip served live as live/demo.
#
#   ./scripts/demo.sh [tern demo flags...]     e.g. --http 127.0.0.1:8080 --candidate 192.0.2.10
#
# Installs a Rust toolchain (scripts/install-deps.sh --rust) only if cargo is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
    ./scripts/install-deps.sh --rust
fi
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
