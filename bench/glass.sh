#!/usr/bin/env bash
# Glass-to-glass latency (encoder to WHEP viewer in Chromium) of SRT ingest against RTMP's:
# see bench/glass.mjs. Runs it in a private network namespace (the browser's candidates stay
# there).
#
#   bench/glass.sh [SECONDS]        (default 20 per arm; GLASS_AUDIO=1 adds silent AAC)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
export TERN_BIN="$TERN"
exec ./scripts/netns-run.sh node bench/glass.mjs "${1:-20}"
