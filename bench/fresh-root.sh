#!/usr/bin/env bash
# Runs the benchmark suite the way a freshly installed machine would: in a new Debian bookworm
# root made by debootstrap (minbase plus git and ca-certificates: no Rust, Go, Python, C
# compiler, valgrind or coturn), from a clean clone of this repository's HEAD.
#
#   bench/fresh-root.sh [DIR] [-- ARGS for bench/run.sh]      as root; DIR default /var/tmp/tern-fresh
#
# What the new root takes from the host is only what belongs to the network, not software:
# the apt sources, resolv.conf, and any local CA certificates in /usr/local/share/ca-certificates
# (a network that intercepts TLS needs its CA on every machine). /proc, /sys and /dev are bind
# mounts (unshare -n and valgrind need them) and are unmounted on exit; DIR is left for a look
# afterwards (delete it with `rm -rf DIR` once unmounted).
# Prints the wall time of bench/run.sh start to finish, installs and build included, and the
# environment-marker scan's verdict (no process left behind) comes from bench/run.sh itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=/var/tmp/tern-fresh
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    DIR=$1
    shift
fi
[ "${1:-}" = -- ] && shift
[ "$(id -u)" = 0 ] || { echo "fresh-root: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
[ -e "$DIR" ] && { echo "fresh-root: $DIR exists; remove it first" >&2; exit 1; }
command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

mirror=$(awk '/^URIs:/ {print $2; exit} /^deb / {print $2; exit}' \
    /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
echo "fresh-root: debootstrap bookworm into $DIR from $mirror" >&2
t0=$(date +%s)
debootstrap --variant=minbase --include=git,ca-certificates bookworm "$DIR" "$mirror" >"$DIR.debootstrap.log" 2>&1 ||
    { tail -20 "$DIR.debootstrap.log" >&2; exit 1; }
echo "fresh-root: root made in $(( $(date +%s) - t0 )) s" >&2

# The network's settings, not software.
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    cp /etc/apt/sources.list.d/*.sources "$DIR/etc/apt/sources.list.d/"
    rm -f "$DIR/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/"
    chroot "$DIR" update-ca-certificates >/dev/null 2>&1
fi

mounts=(proc sys dev dev/pts dev/shm)
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        umount -l "$DIR/${mounts[i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
for m in "${mounts[@]}"; do mount --bind "/$m" "$DIR/$m"; done

git clone -q "$ROOT" "$DIR/root/tern"
git -C "$DIR/root/tern" log --oneline -1 >&2

echo "fresh-root: bench/run.sh $* in the new root" >&2
start=$(date +%s)
status=0
chroot "$DIR" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    TERN_SUITE_COMMAND="bench/fresh-root.sh (bench/run.sh in a new debootstrapped Debian root)" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /root/tern && bench/run.sh "$@"' run.sh "$@" || status=$?
secs=$(( $(date +%s) - start ))
printf 'fresh-root: bench/run.sh exited %d after %d min %02d s (installs, build and measurement)\n' \
    "$status" $((secs / 60)) $((secs % 60)) >&2
# The results live in the new root's clone: copy the new ones into this checkout and put the
# run's generated block into this checkout's BENCHMARKS.md, as bench/run.sh does in place.
mkdir -p bench/results
new_md=
for f in "$DIR"/root/tern/bench/results/*; do
    b=$(basename "$f")
    if [ -f "$f" ] && [ ! -e "bench/results/$b" ]; then
        cp "$f" bench/results/
        case "$b" in *.md) new_md=bench/results/$b ;; esac
    fi
done
case " $* " in *" --no-update "*) new_md= ;; esac
if [ -n "$new_md" ]; then
    python3 -c 'import sys; sys.path.insert(0, "bench"); import suite; suite.update_benchmarks(open(sys.argv[1]).read())' \
        "$new_md"
    echo "fresh-root: BENCHMARKS.md's suite block now shows $new_md" >&2
fi
exit "$status"
