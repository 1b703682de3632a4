#!/usr/bin/env bash
# Where the server's CPU goes with many small packets: `tern demo --clip lite` with two
# stream workers and N of this checkout's `tern bench` viewers (its default sockets, `auto`:
# one per media thread on loopback; `--verify sample:16`), `perf record -g` on the server
# for 10 s once they have connected, then the split by user space and kernel and the
# kernel's send and loopback-delivery paths.
#
#   bench/server-profile.sh [N]     default N = 4000; TERN=path to the binary
#
# Runs in a network namespace of its own (loopback only). Needs perf.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TERN_PROFILE_IN_NETNS:-}" ]; then
    export TERN_PROFILE_IN_NETNS=1
    exec unshare -n -- "$0" "$@"
fi
ip link set lo up
N=${1:-4000}
TERN=${TERN:-$PWD/target/release/tern}
# shellcheck source=bench/lib.sh
. bench/lib.sh
lite_pair_init
echo "# bench/server-profile.sh N=$N: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
start_lite_demo "$TERN" --stream-worker-count 2
sleep 1.5
# N viewers at 2 ms apart connect in N/500 s; the profile starts 8 s after the last.
start_lite_bench "$TERN" "$N" $((N / 500 + 24)) --verify sample:16
sleep $((N / 500 + 8))
perf record -F 999 -g -p "$server" -o "$tmp/perf.data" -- sleep 10 2>/dev/null
wait "$bench" || true
bench=""
grep -E "Connected|Total Packet Losses|Bench CPU" "$tmp/bench.out"
samples=$(perf report -i "$tmp/perf.data" --stdio --no-children --sort dso -g none 2>/dev/null |
    awk '/^# Samples:/ { print $3 }')
echo "server samples in 10 s at 999 Hz: $samples"
echo "by place (self):"
perf report -i "$tmp/perf.data" --stdio --no-children --sort dso -g none 2>/dev/null |
    grep '%' | grep -v '^#' | head -5
echo "the kernel's paths (with what they call):"
perf report -i "$tmp/perf.data" --stdio --children --sort sym -g none 2>/dev/null |
    grep -E '\] (__sendmmsg|udp_sendmsg|net_rx_action|__udp_enqueue_schedule_skb|do_epoll_wait|__x64_sys_recvmmsg)$|protect_payload$' |
    head -8
