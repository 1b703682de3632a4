#!/usr/bin/env bash
# Builds tern's container image from scratch with buildah, no registry and no Containerfile,
# and writes it as an OCI archive:
#
#   scripts/image.sh [OUT]     OUT: the OCI archive, default target/tern-image.oci.tar; the
#                              Docker archive goes beside it (target/tern-image.docker.tar)
#
# Environment:
#   TERN_BIN     the binary to package (default $CARGO_TARGET_DIR or target/, release/tern, built with
#                `cargo build --release -p tern` when missing); stripped into the image only
#   TERN_IMAGE   the image's name in local container storage (default localhost/tern:VERSION);
#                it stays there after the build, for `podman run` on this machine
#
# The image (packaging/container/rootfs.sh says what is in it) runs
# `tern serve --config /etc/tern/tern.toml` as uid 10001 in /var/lib/tern, EXPOSEs every
# port tern listens on by default or when configured, and has a HEALTHCHECK that runs
# `tern health --config /etc/tern/tern.toml` (GET /v1/health on the config's `server.http`).
#
# HEALTHCHECK is a Docker image field: the OCI image config has none. So the image is
# committed in Docker format (`podman healthcheck run` works on it in this storage) and
# written twice: the OCI archive carries the same layers and every other field, and podman
# or docker loading it has no health check unless given one at run time (`--health-cmd`);
# the Docker archive keeps the HEALTHCHECK (docs/src/operations.md, "Container image").
# Prints the image's size at the end.
#
# Needs root (or `buildah unshare scripts/image.sh`), and Debian's buildah, binutils
# (strip, readelf) and ca-certificates.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-$ROOT/target/tern-image.oci.tar}
# The release build's directory: $CARGO_TARGET_DIR (absolute, or relative to the root) or
# target/, as cargo decides.
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
BIN=${TERN_BIN:-$TARGET/release/tern}
# The same image in Docker's archive format, which keeps the HEALTHCHECK.
DOCKER_OUT=${OUT%.oci.tar}
DOCKER_OUT=${DOCKER_OUT%.tar}.docker.tar
CONFIG=/etc/tern/tern.toml

die() {
    echo "image.sh: $*" >&2
    exit 1
}

command -v buildah >/dev/null || die "buildah is needed (apt-get install buildah)"
if [ ! -x "$BIN" ]; then
    [ -z "${TERN_BIN:-}" ] || die "TERN_BIN=$TERN_BIN is not an executable"
    echo "image.sh: $BIN missing: cargo build --release -p tern"
    cargo build --release -p tern
fi
VERSION=$("$BIN" --version | awk '{print $2}')
[ -n "$VERSION" ] || die "$BIN --version printed no version"
IMAGE=${TERN_IMAGE:-localhost/tern:$VERSION}

# Docker format from the start: buildah keeps the HEALTHCHECK (in OCI format it warns and drops it).
ctr=$(buildah from --format docker scratch)
mnt=
cleanup() {
    [ -z "$mnt" ] || buildah umount "$ctr" >/dev/null 2>&1 || true
    [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
mnt=$(buildah mount "$ctr")
"$ROOT/packaging/container/rootfs.sh" "$mnt" "$BIN"
rootfs_bytes=$(du -sb "$mnt" | cut -f1)
buildah umount "$ctr" >/dev/null
mnt=

# buildah splits a HEALTHCHECK's `CMD a b c` on spaces into the exec form (no shell: there is
# none in the image); it does not read the JSON form.
# Every port tern listens on: HTTP, the one media port and RTMP by default; SRT, TURN (UDP
# and TCP) and HTTPS at the addresses their docs suggest, once configured.
buildah config \
    --entrypoint "[\"/usr/local/bin/tern\", \"serve\", \"--config\", \"$CONFIG\"]" \
    --cmd '[]' \
    --user 10001:10001 \
    --workingdir /var/lib/tern \
    --volume /var/lib/tern \
    --port 8080/tcp --port 10000/udp --port 1935/tcp --port 8890/udp \
    --port 3478/udp --port 3478/tcp --port 8443/tcp \
    --stop-signal SIGTERM \
    --env NO_COLOR=1 \
    --healthcheck "CMD /usr/local/bin/tern health --config $CONFIG --timeout 5" \
    --healthcheck-interval 30s \
    --healthcheck-timeout 10s \
    --healthcheck-start-period 10s \
    --healthcheck-retries 3 \
    --label org.opencontainers.image.title=tern \
    --label org.opencontainers.image.description="tern: a lean WebRTC streaming server" \
    --label org.opencontainers.image.version="$VERSION" \
    "$ctr"
buildah commit --quiet --format docker --rm "$ctr" "$IMAGE" >/dev/null
ctr=

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT" "$DOCKER_OUT"
buildah push --quiet --format oci "$IMAGE" "oci-archive:$OUT:$IMAGE"
buildah push --quiet --format v2s2 "$IMAGE" "docker-archive:$DOCKER_OUT:$IMAGE"

mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
echo "image.sh: $IMAGE: $(mb "$rootfs_bytes") unpacked"
echo "image.sh: OCI archive $OUT: $(mb "$(stat -c %s "$OUT")") (no HEALTHCHECK: the OCI config has no such field)"
echo "image.sh: Docker archive $DOCKER_OUT: $(mb "$(stat -c %s "$DOCKER_OUT")") (with the HEALTHCHECK)"
