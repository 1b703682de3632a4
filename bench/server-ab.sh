#!/usr/bin/env bash
# Two tern server builds, alternated, under the same tester: the server's packets per
# CPU-second with the lite demo clip (a change to the server's send path against its
# baseline, in one run on a noisy machine).
#
#   bench/server-ab.sh A_BINARY B_BINARY [N]     default N = 3000; ROUNDS=2
#
# Each run: `A|B demo --clip lite`, then this checkout's `tern bench -n N -cint 2` with
# TESTER_ARGS (default `--sockets thread --verify sample:16`, the cheapest tester); from 12 s
# to 27 s the server's CPU (/proc/PID/stat) and `tern_packets_out_total`. Prints one line per
# run. Runs in a network namespace of its own (loopback only).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TERN_AB_IN_NETNS:-}" ]; then
    export TERN_AB_IN_NETNS=1
    exec unshare -n -- "$0" "$@"
fi
ip link set lo up
A=${1:?A binary}
B=${2:?B binary}
N=${3:-3000}
ROUNDS=${ROUNDS:-2}
TESTER=${TESTER:-$PWD/target/release/tern}
read -r -a TARGS <<<"${TESTER_ARGS:---sockets thread --verify sample:16}"
# shellcheck source=bench/lib.sh
. bench/lib.sh
lite_pair_init
ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }
metric() { curl -sf --max-time 2 http://127.0.0.1:18180/metrics | awk -v m="$1" '$1 == m { print $2 }'; }
echo "# bench/server-ab.sh N=$N: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for r in $(seq "$ROUNDS"); do
    for arm in A B; do
        bin=$A
        [ "$arm" = B ] && bin=$B
        start_lite_demo "$bin"
        sleep 1.5
        start_lite_bench "$TESTER" "$N" 32 "${TARGS[@]}"
        sleep 12
        c0=$(cpu "$server"); p0=$(metric tern_packets_out_total)
        sleep 15
        c1=$(cpu "$server"); p1=$(metric tern_packets_out_total)
        wait "$bench" || true
        bench=""
        kill "$server"; wait "$server" 2>/dev/null || true
        server=""
        awk -v arm="$arm" -v r="$r" -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" \
            -v conn="$(grep -o 'Connected([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)" \
            -v loss="$(grep -o 'Total Packet Losses([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)" \
            'BEGIN { printf "round %d %s: server_cpu_s %.2f packets %d packets_per_cpu_s %.0f connected %s lost %s\n", r, arm, c1 - c0, p1 - p0, (c1 > c0 ? (p1 - p0) / (c1 - c0) : 0), conn, loss }'
    done
done
