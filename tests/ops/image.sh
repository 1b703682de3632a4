#!/usr/bin/env bash
# The container image (issue 57): scripts/image.sh builds it and writes its archives; this
# loads each into podman and runs it on loopback, as root:
#
#   1. the OCI archive: the image's config (user 10001, `tern serve --config
#      /etc/tern/tern.toml` as entry point, every port EXPOSEd, no HEALTHCHECK: the OCI format
#      has no such field) and its files (a stripped tern, no compiler, no shell, the CA roots,
#      the tern user, /var/lib/tern owned by it), under 200 MB; then `tern serve` from the
#      entry point with a config on free loopback ports mounted over /etc/tern/tern.toml,
#      `podman healthcheck run` with the `--health-cmd` the docs give for this archive, and a
#      clean stop on SIGTERM (tern is PID 1);
#   2. the Docker archive: its own HEALTHCHECK, `tern demo` (the built-in clip) from the same
#      image, `podman healthcheck run`, and the pion WHEP viewer playing live/demo through it
#      (video frames and audio packets received).
#
#   tests/ops/image.sh
#
# Environment: TERN_BIN (default $CARGO_TARGET_DIR or target/, release/tern, built by scripts/image.sh when
# missing), TERN_PION_VIEWER (default tests/interop/pion-viewer/pion-viewer, which
# scripts/install-deps.sh builds). Needs podman, buildah and runc (Debian packages) and
# iproute2's ss. podman runs with runc and cgroupfs and lower rlimits: crun refuses this
# kernel's hybrid cgroups and raising an rlimit is not permitted here (FIELD-NOTES.md).
# Without systemd, podman logs that it cannot set the health check's timer; checks run
# only when asked (`podman healthcheck run`), which is what this test does.
#
# Containers use the host's network and listen on 127.0.0.1 only; the viewer talks to
# 127.0.0.1 only. Every wait is bounded; containers, images and files are removed on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
PION=${TERN_PION_VIEWER:-$ROOT/tests/interop/pion-viewer/pion-viewer}
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
RUN=(run -d --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
TAG=localhost/tern-image-test-$$:ci
CONFIG=/etc/tern/tern.toml
# The health check the image's HEALTHCHECK names, in exec form (there is no shell for
# the string form), for the OCI archive, which cannot carry one.
HEALTH_CMD="[\"/usr/local/bin/tern\", \"health\", \"--config\", \"$CONFIG\"]"
MAX_MB=200
WORK=$(mktemp -d /tmp/tern-image-test.XXXXXX)
CONTAINERS=()
MOUNTED=
STARTED_AT=$(date +%s)

fail() {
    echo "FAIL tests/ops/image.sh: $*" >&2
    exit 1
}
step() { echo "== $*"; }

cleanup() {
    local c
    [ -z "$MOUNTED" ] || "${PODMAN[@]}" image unmount "$TAG" >/dev/null 2>&1 || true
    for c in "${CONTAINERS[@]}"; do
        timeout 30 "${PODMAN[@]}" rm -f -t 2 "$c" >/dev/null 2>&1 || true
    done
    timeout 60 "${PODMAN[@]}" rmi -f "$TAG" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "run as root (podman's storage, image mounts)"
for tool in podman buildah runc ss readelf; do
    command -v "$tool" >/dev/null || fail "$tool is missing: apt-get install podman buildah runc iproute2 binutils"
done
[ -x "$PION" ] || fail "$PION missing: run scripts/install-deps.sh (it builds the pion viewer)"

# --- build ---------------------------------------------------------------------------------
step "scripts/image.sh"
TERN_IMAGE=$TAG timeout 1200 "$ROOT/scripts/image.sh" "$WORK/tern.oci.tar" ||
    fail "scripts/image.sh failed"
[ -s "$WORK/tern.oci.tar" ] || fail "no OCI archive at $WORK/tern.oci.tar"
[ -s "$WORK/tern.docker.tar" ] || fail "no Docker archive at $WORK/tern.docker.tar"
# What runs below is what the archives hold, not the image the build left in storage.
timeout 60 "${PODMAN[@]}" rmi "$TAG" >/dev/null

# inspect FORMAT: the loaded image's field.
inspect() { timeout 30 "${PODMAN[@]}" image inspect "$TAG" --format "$1"; }

# --- the OCI archive: config and files -----------------------------------------------------
step "podman load the OCI archive"
timeout 120 "${PODMAN[@]}" load -q -i "$WORK/tern.oci.tar" >/dev/null || fail "podman load (OCI) failed"
manifest=$(inspect '{{.ManifestType}}')
[ "$manifest" = application/vnd.oci.image.manifest.v1+json ] || fail "OCI archive loaded as $manifest"
health=$(inspect '{{json .HealthCheck}}')
[ "$health" = null ] || fail "the OCI archive carries a health check now ($health): update the docs"
echo "   OCI archive: no HEALTHCHECK after podman load (the OCI image config has no such field)"
[ "$(inspect '{{.User}}')" = 10001:10001 ] || fail "user is $(inspect '{{.User}}'), not 10001:10001"
entry=$(inspect '{{json .Config.Entrypoint}}')
[ "$entry" = "[\"/usr/local/bin/tern\",\"serve\",\"--config\",\"$CONFIG\"]" ] || fail "entry point $entry"
[ "$(inspect '{{.Config.WorkingDir}}')" = /var/lib/tern ] || fail "working directory $(inspect '{{.Config.WorkingDir}}')"
ports=$(inspect '{{range $p, $v := .Config.ExposedPorts}}{{$p}} {{end}}')
for p in 8080/tcp 10000/udp 1935/tcp 8890/udp 3478/udp 3478/tcp 8443/tcp; do
    [[ " $ports " == *" $p "* ]] || fail "$p is not EXPOSEd (EXPOSE: $ports)"
done
size=$(inspect '{{.Size}}')
size_mb=$((size / 1000000))
[ "$size_mb" -lt "$MAX_MB" ] || fail "image is $size_mb MB, over $MAX_MB MB"
echo "   image size: $size_mb MB ($size bytes)"

step "the image's files"
MOUNTED=$(timeout 60 "${PODMAN[@]}" image mount "$TAG") || fail "podman image mount failed"
fs=$MOUNTED
[ -x "$fs/usr/local/bin/tern" ] || fail "no /usr/local/bin/tern"
# No symbol table and no DWARF; `.debug_gdb_scripts` is not debug info but a loaded section
# (rustc's pointer to its gdb pretty-printers) that strip keeps.
sections=$(readelf -SW "$fs/usr/local/bin/tern" | grep -Eo '\.symtab|\.debug_[a-z_]+' | grep -v '^\.debug_gdb_scripts$' | sort -u || true)
[ -z "$sections" ] || fail "tern is not stripped: $(tr '\n' ' ' <<<"$sections")"
if command -v file >/dev/null; then
    file -L "$fs/usr/local/bin/tern" | grep -q ', stripped' || fail "file(1) says: $(file -L "$fs/usr/local/bin/tern")"
fi
# Nothing that compiles, and no shell or shell tools: tern is the only program.
found=$(cd "$fs" && find . \( -type f -o -type l \) \( -name cc -o -name 'gcc*' -o -name 'g++*' \
    -o -name 'clang*' -o -name rustc -o -name cargo -o -name ld -o -name 'ld.bfd' -o -name as \
    -o -name sh -o -name bash -o -name dash -o -name busybox -o -name curl -o -name wget \) -print)
[ -z "$found" ] || fail "the image holds $(tr '\n' ' ' <<<"$found")"
programs=$(cd "$fs" && find . -type f -perm -u+x ! -name '*.so*' -print)
[ "$programs" = ./usr/local/bin/tern ] || fail "programs other than tern: $(tr '\n' ' ' <<<"$programs")"
[ -s "$fs/etc/ssl/certs/ca-certificates.crt" ] || fail "no CA roots"
grep -qx 'tern:x:10001:10001:tern:/var/lib/tern:/usr/sbin/nologin' "$fs/etc/passwd" || fail "no tern user in /etc/passwd"
grep -qx 'tern:x:10001:' "$fs/etc/group" || fail "no tern group in /etc/group"
[ "$(stat -c %u:%g "$fs/var/lib/tern")" = 10001:10001 ] || fail "/var/lib/tern is not tern's"
[ -s "$fs$CONFIG" ] || fail "no $CONFIG"
"$fs/usr/local/bin/tern" config check "$fs$CONFIG" >/dev/null || fail "$CONFIG does not check"
timeout 60 "${PODMAN[@]}" image unmount "$TAG" >/dev/null
MOUNTED=

# --- running it ------------------------------------------------------------------------------
# free PROTO: a port in 20000-32767 (below the ephemeral range) nothing listens on.
free() {
    local p i
    for i in $(seq 200); do
        p=$((20000 + RANDOM % 12768))
        if [ "$1" = tcp ]; then
            [ -z "$(ss -Htln "sport = :$p")" ] && echo "$p" && return
        else
            [ -z "$(ss -Huln "sport = :$p")" ] && echo "$p" && return
        fi
    done
    fail "no free $1 port found"
}

# start NAME ARGS...: runs a container from the image with a config on free loopback ports
# mounted over /etc/tern/tern.toml (ARGS: extra `podman run` options), waits (≤ 30 s) for
# `podman healthcheck run` to pass; sets HTTP. Tries new ports when they were taken meanwhile.
start() {
    local name=$1 try cfg
    shift
    for try in 1 2 3; do
        HTTP=$(free tcp) || exit 1
        local media
        media=$(free udp) || exit 1
        cfg=$WORK/$name.toml
        printf '[server]\nhttp = "127.0.0.1:%s"\nmedia = "127.0.0.1:%s"\nrtmp = "none"\n' "$HTTP" "$media" >"$cfg"
        chmod 0644 "$cfg"
        CONTAINERS+=("$name")
        timeout 60 "${PODMAN[@]}" "${RUN[@]}" --name "$name" -v "$cfg:$CONFIG:ro" "$@" "$TAG" \
            >/dev/null 2>"$WORK/$name.run.err" || fail "podman run $name: $(cat "$WORK/$name.run.err")"
        local deadline=$((SECONDS + 30))
        while [ $SECONDS -lt $deadline ]; do
            if [ "$(timeout 10 "${PODMAN[@]}" inspect "$name" --format '{{.State.Running}}')" != true ]; then
                break
            fi
            if timeout 15 "${PODMAN[@]}" healthcheck run "$name" >/dev/null 2>&1; then
                echo "   $name: healthy on 127.0.0.1:$HTTP (media 127.0.0.1:$media)"
                return
            fi
            sleep 0.5
        done
        local log
        log=$(timeout 10 "${PODMAN[@]}" logs "$name" 2>&1 | tail -20)
        timeout 30 "${PODMAN[@]}" rm -f -t 2 "$name" >/dev/null 2>&1 || true
        if grep -q 'Address already in use' <<<"$log" && [ "$try" -lt 3 ]; then
            echo "   $name: a port was taken meanwhile; again on others"
            continue
        fi
        fail "$name did not become healthy within 30 s; its log:
$log"
    done
}

# stop NAME: SIGTERM (podman stop, ≤ 20 s) and a clean exit.
stop() {
    # Without systemd podman logs that it has no health check timer to remove: noise, kept
    # for a failure.
    timeout 40 "${PODMAN[@]}" stop -t 20 "$1" >/dev/null 2>"$WORK/$1.stop.err" ||
        fail "podman stop $1: $(cat "$WORK/$1.stop.err")"
    local code
    code=$(timeout 10 "${PODMAN[@]}" inspect "$1" --format '{{.State.ExitCode}}')
    [ "$code" = 0 ] || fail "$1 exited with $code on SIGTERM: $(timeout 10 "${PODMAN[@]}" logs "$1" 2>&1 | tail -5)"
}

step "tern serve from the OCI archive's image (entry point), health check given at run"
start tern-image-serve-$$ --health-cmd "$HEALTH_CMD"
user=$(timeout 10 "${PODMAN[@]}" top "tern-image-serve-$$" user | tail -n +2 | tr -d ' ')
[ "$user" = tern ] || fail "tern runs as '$user', not tern"
args=$(timeout 10 "${PODMAN[@]}" top "tern-image-serve-$$" args | tail -n +2)
[[ "$args" == "/usr/local/bin/tern serve --config $CONFIG"* ]] || fail "the container runs '$args'"
out=$(timeout 10 "${PODMAN[@]}" inspect "tern-image-serve-$$" --format '{{json .State.Health}}')
grep -q 'status.*ok' <<<"$out" || fail "the health check's output: $out"
stop "tern-image-serve-$$"
echo "   stopped cleanly on SIGTERM"

# --- the Docker archive: its HEALTHCHECK, and the demo to a viewer ---------------------------
step "podman load the Docker archive"
timeout 60 "${PODMAN[@]}" rm -f "tern-image-serve-$$" >/dev/null 2>&1
timeout 60 "${PODMAN[@]}" rmi "$TAG" >/dev/null
timeout 120 "${PODMAN[@]}" load -q -i "$WORK/tern.docker.tar" >/dev/null || fail "podman load (Docker) failed"
health=$(inspect '{{json .HealthCheck.Test}}')
[ "$health" = "[\"CMD\",\"/usr/local/bin/tern\",\"health\",\"--config\",\"$CONFIG\",\"--timeout\",\"5\"]" ] ||
    fail "the Docker archive's HEALTHCHECK is $health"

step "tern demo from the same image, its own HEALTHCHECK"
start tern-image-demo-$$ --entrypoint "[\"/usr/local/bin/tern\", \"demo\", \"--config\", \"$CONFIG\"]"

step "pion viewer plays live/demo through the container (5 s)"
timeout 40 "$PION" -whep "http://127.0.0.1:$HTTP/live/demo/whep" -seconds 5 -every 1000 \
    >"$WORK/pion.out" 2>"$WORK/pion.err" || fail "pion-viewer failed: $(tail -5 "$WORK/pion.err")"
last=$(grep '^{' "$WORK/pion.out" | tail -1)
[ -n "$last" ] || fail "pion-viewer printed no figures: $(tail -5 "$WORK/pion.err")"
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$last"; }
frames=$(field frames)
audio=$(field audio_packets)
echo "   pion: $last"
# The clip is 30 frames/s and Opus is 50 packets/s: 5 s is 150 and 250; half is plenty.
[ "${frames:-0}" -ge 60 ] || fail "the viewer got ${frames:-0} video frames in 5 s"
[ "${audio:-0}" -ge 100 ] || fail "the viewer got ${audio:-0} audio packets in 5 s"
stop "tern-image-demo-$$"

echo "ok tests/ops/image.sh: image $size_mb MB, serve healthy, demo played ($frames frames), $(($(date +%s) - STARTED_AT)) s"
