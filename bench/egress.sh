#!/usr/bin/env bash
# tern's egress against the raw-UDP limit, steady state only (issue 24, point 2).
#
#   bench/egress.sh [N ...]        default N = 1000 5000; ROUNDS=2 alternations per N
#
# For each N, in a private network namespace (loopback only), alternating ROUNDS times:
#   tern   `tern demo --clip lite` with `tern bench -n N` connected; once every viewer has
#          connected and 5 s have passed, a WINDOW-second window (default 15 s): the
#          server's packets sent (`tern_packets_out_total` from /metrics) per CPU-second of
#          the whole server process (/proc/PID/stat utime + stime) in that window, so the
#          handshakes of the ramp and the idle tail are not in it.
#   raw    `udp-blaster --mode clip --receivers N` (tern's own sendmmsg batch, the same clip,
#          no crypto, no sessions): packets per CPU-second of the sending thread.
#   base   with TERN_BASE=<path to another tern binary>: that build too, the same way, so a
#          change is measured against its baseline in the same run. TERN_ARGS and
#          TERN_BASE_ARGS add server arguments to each arm (e.g. TERN_BASE=<the same binary>
#          TERN_BASE_ARGS="--config aes256.toml" compares two configurations of one build).
# Prints one line per measurement and the ratio tern ÷ raw per round; JSON lines go to
# $OUT (default bench/results/tmp/egress-<stamp>.jsonl). Needs target/release/{tern,udp-blaster}
# (`cargo build --release -p tern && cargo build --release --manifest-path bench/baselines/Cargo.toml`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ -z "${TERN_EGRESS_IN_NETNS:-}" ]; then
    export TERN_EGRESS_IN_NETNS=1
    exec unshare -n -- "$0" "$@"
fi
ip link set lo up

TERN=${TERN_BIN:-$ROOT/target/release/tern}
BLASTER=${BLASTER_BIN:-$ROOT/bench/baselines/target/release/udp-blaster}
[ -x "$BLASTER" ] || BLASTER=$ROOT/target/release/udp-blaster
ROUNDS=${ROUNDS:-2}
WINDOW=${WINDOW:-15}
CINT=${CINT:-2}
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(1000 5000)
stamp=$(date -u +%Y-%m-%d-%H%M)
OUT=${OUT:-$ROOT/bench/results/tmp/egress-$stamp.jsonl}
mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d)
server=""
bench=""
cleanup() {
    [ -n "$bench" ] && kill "$bench" 2>/dev/null || true
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

ticks=$(getconf CLK_TCK)
proc_cpu_s() { # utime + stime of a whole process, seconds
    awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"
}
packets_out() {
    curl -sf --max-time 2 "http://127.0.0.1:18180/metrics" | awk '$1 == "tern_packets_out_total" { print $2 }'
}

measure_tern() { # N [binary] [kind] [extra server args] -> packets per server CPU-second
    local n=$1 bin=${2:-$TERN} kind=${3:-tern} extra=${4:-${TERN_ARGS:-}}
    # shellcheck disable=SC2086 # extra is a list of arguments
    "$bin" demo --clip lite --http 127.0.0.1:18180 --media 127.0.0.1:18181 \
        --candidate 127.0.0.1 $extra >"$tmp/server.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        curl -sf --max-time 1 -o /dev/null -I http://127.0.0.1:18180/live/demo/whep && break
        sleep 0.1
    done
    local ramp_s=$(((n * CINT + 999) / 1000))
    local life=$((ramp_s + 5 + WINDOW + 5))
    "$bin" bench -url http://127.0.0.1:18180/live/demo/whep -n "$n" -cint "$CINT" \
        -life "$life" -sint 600000 >"$tmp/bench.out" 2>&1 &
    bench=$!
    sleep $((ramp_s + 5))
    local c0 p0 c1 p1 t0 t1
    c0=$(proc_cpu_s "$server"); p0=$(packets_out); t0=$(date +%s.%N)
    sleep "$WINDOW"
    c1=$(proc_cpu_s "$server"); p1=$(packets_out); t1=$(date +%s.%N)
    wait "$bench" || true
    bench=""
    kill "$server"; wait "$server" 2>/dev/null || true
    server=""
    local connected losses
    connected=$(grep -o 'Connected([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
    losses=$(grep -o 'Total Packet Losses([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
    awk -v n="$n" -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" -v t0="$t0" -v t1="$t1" \
        -v conn="${connected:-0}" -v loss="${losses:-?}" -v kind="$kind" 'BEGIN {
        cpu = c1 - c0; pk = p1 - p0;
        printf "{\"kind\":\"%s\",\"n\":%d,\"connected\":%d,\"losses\":\"%s\",\"window_s\":%.2f,\"server_cpu_s\":%.2f,\"packets\":%d,\"packets_per_cpu_s\":%.0f}\n",
            kind, n, conn, loss, t1 - t0, cpu, pk, (cpu > 0 ? pk / cpu : 0) }'
}

measure_raw() {
    "$BLASTER" --mode clip --receivers "$1" --seconds "$WINDOW" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(json.dumps({"kind": "raw", "n": d["receivers"], "packets": d["sent_packets"],
                  "sender_cpu_s": round(d["sender_cpu_s"], 2),
                  "packets_per_cpu_s": round(d["packets_per_cpu_s"])}))'
}

echo "# bench/egress.sh ${NS[*]}: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)" | tee -a "$OUT"
for n in "${NS[@]}"; do
    for r in $(seq "$ROUNDS"); do
        t=$(measure_tern "$n"); echo "$t" | tee -a "$OUT"
        w=$(measure_raw "$n"); echo "$w" | tee -a "$OUT"
        if [ -n "${TERN_BASE:-}" ]; then
            b=$(measure_tern "$n" "$TERN_BASE" base "${TERN_BASE_ARGS:-}"); echo "$b" | tee -a "$OUT"
            python3 -c '
import json, sys
t, b, w = (json.loads(a) for a in sys.argv[1:4])
print("N = %d: base %d packets per CPU-second = %.2f of raw; tern / base = %.3f" % (
    t["n"], b["packets_per_cpu_s"], b["packets_per_cpu_s"] / w["packets_per_cpu_s"],
    t["packets_per_cpu_s"] / b["packets_per_cpu_s"]))' "$t" "$b" "$w"
        fi
        python3 -c '
import json, sys
t, w = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("N = %d round %s: tern %d / raw %d packets per CPU-second = %.2f (tern connected %d, losses %s)" % (
    t["n"], sys.argv[3], t["packets_per_cpu_s"], w["packets_per_cpu_s"],
    t["packets_per_cpu_s"] / w["packets_per_cpu_s"], t["connected"], t["losses"]))' "$t" "$w" "$r"
    done
done
