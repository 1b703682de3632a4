#!/usr/bin/env bash
# UDP GSO over a real veth path (issue 35): tern in one private network namespace, the
# tern bench viewers in a second one, joined by a veth pair (10.99.0.1 <-> 10.99.0.2, MTU
# 1500), so every GSO message crosses a device rather than loopback and the viewers' kernel
# splits it (tern bench does not ask for UDP_GRO). Passes when every viewer connected, none
# lost a packet, every datagram passed SRTP authentication, the server's count agrees with
# the viewers' and GSO carried most packets; exits non-zero otherwise.
#
#   scripts/gso-veth-check.sh [VIEWERS] [SECONDS]      (defaults 50 10; needs root)
#
# Needs target/release/tern (`cargo build --release -p tern`). No traffic leaves the two
# namespaces; they vanish with the script.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VIEWERS=${1:-50}
SECONDS_=${2:-10}
TERN=${TERN_BIN:-$ROOT/target/release/tern}

if [ -z "${TERN_VETH_INNER:-}" ]; then
    export TERN_VETH_INNER=1
    exec unshare -n -- "$0" "$@"
fi

tmp=$(mktemp -d)
peer=""
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    [ -n "$peer" ] && kill "$peer" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

ip link set lo up
# The viewers' namespace: a process that holds it while the bench runs in it.
unshare -n -- sleep 600 &
peer=$!
sleep 0.2
ip link add t0 type veth peer name t1
ip link set t1 netns "$peer"
ip addr add 10.99.0.1/24 dev t0
ip link set t0 up
nsenter -t "$peer" -n sh -c 'ip link set lo up; ip addr add 10.99.0.2/24 dev t1; ip link set t1 up'

"$TERN" demo --rtmp none --http 10.99.0.1:18180 --media 10.99.0.1:18181 \
    --candidate 10.99.0.1 >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    curl -sf --max-time 1 -o /dev/null -I http://10.99.0.1:18180/live/demo/whep && break
    sleep 0.1
done
nsenter -t "$peer" -n "$TERN" bench -url http://10.99.0.1:18180/live/demo/whep \
    -n "$VIEWERS" -cint 10 -life "$SECONDS_" -sint 600000 --bind 10.99.0.2 >"$tmp/bench.out" 2>&1 || true
metrics=$(curl -sf --max-time 2 http://10.99.0.1:18180/metrics)
kill "$server"; wait "$server" 2>/dev/null || true
server=""
m() { echo "$metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
connected=$(grep -o 'Connected([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
losses=$(grep -o 'Total Packet Losses([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
srtp=$(grep -o 'SRTP auth failures([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
check=$(grep '<Server check>' "$tmp/bench.out" || true)
out=$(m tern_packets_out_total)
gso=$(m tern_gso_packets_total)
msgs=$(m tern_gso_messages_total)
fallbacks=$(m tern_gso_fallbacks_total)
echo "veth: viewers $connected/$VIEWERS connected, losses ${losses:-?}, SRTP failures ${srtp:-?}"
echo "veth: packets out $out, in GSO messages $gso ($msgs messages), fallbacks $fallbacks"
echo "veth: $check"
grep -o 'gso=[a-z]*' <(sed 's/\x1b\[[0-9;]*m//g' "$tmp/server.log") | head -1
ok=1
[ "${connected:-0}" = "$VIEWERS" ] || ok=0
[ "${losses:-x}" = 0 ] || ok=0
[ "${srtp:-x}" = 0 ] || ok=0
[ "${fallbacks:-x}" = 0 ] || ok=0
[ "${msgs:-0}" -gt 0 ] || ok=0
[ $((2 * ${gso:-0})) -ge "${out:-1}" ] || ok=0
# The bench's count equals the server's.
python3 - "$check" <<'EOF' || ok=0
import re, sys
m = re.search(r"server sent (\d+) media packets \((\d+) retransmitted\), bench received (\d+)", sys.argv[1])
sent, rtx, got = map(int, m.groups())
sys.exit(0 if got == sent - rtx or got == sent else 1)
EOF
if [ "$ok" = 1 ]; then
    echo "veth: ok"
else
    echo "veth: FAIL"; tail -30 "$tmp/bench.out"; exit 1
fi
