#!/usr/bin/env bash
# Time to the right simulcast layer after a viewer's link drops from unlimited to 300 kbit/s
# and back, for Chromium, pion and aiortc viewers in one run (issue 41): see
# bench/time-to-layer.mjs. Runs it in a private network namespace (the viewers' namespace
# and its token bucket live inside it). Needs scripts/install-deps.sh's clients.
#
#   bench/time-to-layer.sh [ROUNDS] [HOLD_SECONDS]        (defaults 2, 20)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
export TERN_BIN="$TERN"
exec ./scripts/netns-run.sh node bench/time-to-layer.mjs "${1:-2}" "${2:-20}"
