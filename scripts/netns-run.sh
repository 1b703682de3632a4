#!/usr/bin/env bash
# Runs a command in a fresh, private network namespace: no route to any other machine.
#
#   ./scripts/netns-run.sh CMD [ARGS...]
#
# Inside: `lo` is up (127.0.0.1, ::1), plus a veth pair t0/t1 with 198.18.0.1/24 on t0.
# The veth address exists only inside the namespace; it is there because Chromium ignores
# loopback interfaces when it gathers ICE candidates, so without it a browser has no candidate
# at all. Servers can still bind and announce 127.0.0.1.
#
# As root it uses `unshare --net` (a plain network namespace, nothing named or left behind;
# `ip netns add NAME` + `ip netns exec NAME` would do the same but leaves state to clean up).
# As any other user it uses `unshare --map-root-user --net`: a user namespace in which the
# command runs as uid 0 with CAP_NET_ADMIN over its own network namespace only. That needs
# unprivileged user namespaces (kernel.unprivileged_userns_clone=1 or no such sysctl).
#
# The namespace, its links and anything still bound in it vanish when CMD exits. There is no
# network inside: install and build before (scripts/test.sh does).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi

if [ "${TERN_NETNS_INNER:-}" = 1 ]; then
    unset TERN_NETNS_INNER
    ip link set lo up
    ip link add t0 type veth peer name t1
    ip addr add 198.18.0.1/24 dev t0
    ip link set t0 up
    ip link set t1 up
    ip route add default dev t0
    exec "$@"
fi

if [ "$(id -u)" -eq 0 ]; then
    flags=(--net)
else
    flags=(--map-root-user --net)
fi
TERN_NETNS_INNER=1 exec unshare "${flags[@]}" -- "$0" "$@"
