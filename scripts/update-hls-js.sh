#!/usr/bin/env bash
# Replaces the hls.js built into tern (crates/tern-server/assets/hls.js/) with VERSION from npm
# and pins the browser tests (tests/browser/package.json) to the same version.
#
#   scripts/update-hls-js.sh 1.7.4
set -euo pipefail
VERSION="${1:?usage: scripts/update-hls-js.sh VERSION}"
cd "$(dirname "$0")/.."
DEST=crates/tern-server/assets/hls.js
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "hls.js@$VERSION" >/dev/null && tar xzf hls.js-*.tgz)
cp "$TMP/package/dist/hls.min.js" "$DEST/hls.min.js"
cp "$TMP/package/LICENSE" "$DEST/LICENSE"
sed -i -E "s/hls\.js \*\*[0-9][^*]*\*\*/hls.js **$VERSION**/" "$DEST/README.md"
sed -i -E "s/(const HLS_JS_VERSION: &str = \")[^\"]*/\1$VERSION/" crates/tern-server/src/http/pages.rs
(cd tests/browser && npm install --save-exact --save-dev "hls.js@$VERSION")
echo "hls.js $VERSION built in; rebuild tern and run ./scripts/test.sh --only browser"
