#!/usr/bin/env bash
# Fills ROOT (an empty directory: `buildah mount` of a container from scratch) with what the
# tern image holds, and nothing else:
#
#   /usr/local/bin/tern                 BIN, stripped (the cargo profile keeps debug info)
#   /usr/lib/<multiarch>/...            exactly the shared libraries BIN links, as `ldd` lists
#                                       them (libavcodec and what it pulls in, libopus, libc),
#                                       each under its real name with its soname as a symlink,
#                                       and the dynamic loader at the path BIN names
#   /lib, /lib64                        the host's merged-/usr symlinks (Debian's layout)
#   /etc/ssl/certs/ca-certificates.crt  the CA roots (Debian's ca-certificates)
#   /etc/passwd, /etc/group             root and tern (uid and gid 10001), no login shell
#   /etc/tern/tern.toml                 the image's default configuration (this directory's)
#   /var/lib/tern                       tern's working directory: recordings, owned by tern
#   /tmp                                1777
#
# No shell, no coreutils, no compiler: the health check is `tern health`. The built-in assets
# (demo clips, player and dashboard pages, hls.js) are compiled into the binary.
#
#   packaging/container/rootfs.sh ROOT BIN
#
# Runs as root (or under `buildah unshare`): the files are owned by root, /var/lib/tern by
# 10001. Checks at the end that BIN starts inside ROOT (`chroot ROOT tern --version`).
set -euo pipefail

usage() {
    echo "usage: $0 ROOT BIN" >&2
    exit 2
}
[ $# -eq 2 ] || usage
ROOT=$1
BIN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
# The user tern runs as: fixed, so a volume's owner can be set to match on the host.
TERN_UID=10001
TERN_GID=10001

die() {
    echo "rootfs.sh: $*" >&2
    exit 1
}

[ -d "$ROOT" ] || die "$ROOT is not a directory"
[ -z "$(ls -A "$ROOT")" ] || die "$ROOT is not empty"
[ -x "$BIN" ] || die "$BIN is not an executable"
for tool in ldd strip readelf chroot; do
    command -v "$tool" >/dev/null || die "$tool is needed (binutils, libc-bin, coreutils)"
done
CA=/etc/ssl/certs/ca-certificates.crt
[ -s "$CA" ] || die "$CA is missing: apt-get install ca-certificates"

install -d -m 0755 "$ROOT/usr/local/bin" "$ROOT/etc/ssl/certs" "$ROOT/etc/tern"

# The host's top-level merged-/usr links (bookworm: lib -> usr/lib, lib64 -> usr/lib64), so
# that the paths ldd prints and the loader path in the ELF header resolve in the image as on
# the host. Relative links only: an absolute one would point out of ROOT while we build.
for d in lib lib32 lib64 libx32 bin sbin; do
    if [ -L "/$d" ]; then
        t=$(readlink "/$d")
        case $t in /*) die "/$d links to an absolute path ($t)" ;; esac
        install -d -m 0755 "$ROOT/$(dirname "$t")" "$ROOT/$t"
        ln -s "$t" "$ROOT/$d"
    fi
done

# The binary, without its symbol table and debug sections.
strip --strip-all -o "$ROOT/usr/local/bin/tern" "$BIN"
chmod 0755 "$ROOT/usr/local/bin/tern"

# put NAME: the shared object the host has at NAME (a path ldd printed), copied to its real
# path in ROOT; NAME, when it differs, a relative link to it (the soname link the loader
# opens, e.g. libopus.so.0 -> libopus.so.0.8.0).
put() {
    local name=$1 real
    real=$(readlink -f "$name") || die "cannot resolve $name"
    [ -f "$real" ] || die "$name resolves to $real, not a file"
    if [ ! -e "$ROOT$real" ]; then
        install -d -m 0755 "$ROOT$(dirname "$real")"
        cp -p "$real" "$ROOT$real"
    fi
    if [ "$name" != "$real" ] && [ ! -e "$ROOT$name" ] && [ ! -L "$ROOT$name" ]; then
        install -d -m 0755 "$ROOT$(dirname "$name")"
        ln -sr "$ROOT$real" "$ROOT$name"
    fi
}

# ldd lists every library BIN needs, transitively, with the path the loader found:
# `libopus.so.0 => /lib/x86_64-linux-gnu/libopus.so.0 (0x...)` and the loader itself
# `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has no file.
libs=$(LC_ALL=C ldd "$BIN") || die "ldd $BIN failed"
if grep -q "not found" <<<"$libs"; then
    die "$BIN needs libraries this host lacks: $(grep 'not found' <<<"$libs" | tr -s ' \t' ' ')"
fi
count=0
while read -r path; do
    put "$path"
    count=$((count + 1))
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs")
interp=$(readelf -l "$BIN" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ -n "$interp" ] || die "$BIN names no program interpreter (static?)"
put "$interp"

# CA roots, users, the configuration, the state directory.
install -m 0644 "$CA" "$ROOT$CA"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ntern:x:%d:%d:tern:/var/lib/tern:/usr/sbin/nologin\n' \
    "$TERN_UID" "$TERN_GID" >"$ROOT/etc/passwd"
printf 'root:x:0:\ntern:x:%d:\n' "$TERN_GID" >"$ROOT/etc/group"
chmod 0644 "$ROOT/etc/passwd" "$ROOT/etc/group"
install -m 0644 "$HERE/tern.toml" "$ROOT/etc/tern/tern.toml"
install -d -m 0750 -o "$TERN_UID" -g "$TERN_GID" "$ROOT/var/lib/tern"
install -d -m 1777 "$ROOT/tmp"

# It starts, in the image, with only what is in the image.
version=$(env -i "$(command -v chroot)" "$ROOT" /usr/local/bin/tern --version) ||
    die "tern does not start inside the image (a library missing?)"
echo "rootfs.sh: $version with $count shared objects, $(du -sh --apparent-size "$ROOT" | cut -f1) in $ROOT"
