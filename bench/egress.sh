#!/usr/bin/env bash
# tern's egress against the raw-UDP limit, steady state only (issue 24, point 2; GSO arms:
# issue 35).
#
#   bench/egress.sh [N ...]        default N = 100 500 2500; ROUNDS=2 alternations per N
#
# SOURCES (default "rtmp lite") says which streams:
#   rtmp   a 720p30 4 Mbit/s H264 stream (one slice a frame, a keyframe a second, no audio),
#          encoded once by ffmpeg into bench/results/tmp/720p-4m.flv and pushed to tern over
#          RTMP with `-stream_loop -1 -re -c copy`; the raw arms send the same H264
#          (Annex-B) through the clip packetizer.
#   lite   `tern demo --clip lite` (~300 kbit/s, 320x180, Opus audio).
# ARMS (default "raw rawgso off auto"), run in this order for each N and round, so that
# the machine's background load falls on every arm alike:
#   raw     `udp-blaster --mode clip`: the same stream to N receiver sockets through tern's
#           own sendmmsg batch, receiver by receiver, no crypto, no sessions: packets per
#           CPU-second of the sending thread (which on loopback also pays the delivery).
#   rawgso  the same with `--gso`: each receiver's run of equal-size packets one UDP GSO
#           message.
#   off     tern with `[tunables] gso = "off"`, `tern bench -n N` connected; once every
#           viewer has connected and 5 s have passed, a WINDOW-second window (default 15 s):
#           the server's packets sent (`tern_packets_out_total`) per CPU-second of the whole
#           server process (/proc/PID/stat utime + stime) in that window.
#   auto    the same with `gso = "auto"` (the default); also the share of the packets that
#           left inside GSO messages (`tern_gso_packets_total`).
#   base    with TERN_BASE=<path to another tern binary>: that build, its default config (no
#           `gso` key), the same way: a change against its baseline in the same run.
#   nogro   `auto`'s server, the tester receiving without UDP_GRO (`tern bench --gro false`).
#   sample  `auto`'s server, the tester authenticating 1 packet in $SAMPLE (default 16:
#           `tern bench --verify sample:16`; every packet still counted for loss).
#   tbase   with BENCH_BASE=<path to another tern binary>: `auto`'s server, that build's
#           `tern bench` as the tester (the tester against its previous build, same run).
#   tsock   `auto`'s server, the tester with one socket per media thread (`tern bench
#           --sockets thread`, what its default `auto` picks on loopback) instead of one per
#           viewer (`--sockets viewer`, which every arm above gives this build's tester).
#   tsample `tsock` and `sample` together.
#   tceil   the tester's own ceiling, no server: `udp-blaster --mode clip --gso
#           --into-bench`, the same stream sealed as real SRTP (one seal per packet, sent to
#           every viewer) into `tern bench`'s media threads and viewers, keyed from the start.
#           Its `tester_us_per_packet` is those threads' CPU per packet received, and
#           `packets_per_cpu_s` their packets per CPU-second; `sender_cpu_s` is the blaster's
#           (which on loopback pays the delivery, as the server does).
# SERVER_ARGS: more flags for every tern server, word-split (e.g. "--stream-worker-count 2").
# Every tern arm also reports tern bench's connected viewers, losses and SRTP failures, and
# the tester's own CPU in the window (/proc/PID/stat of `tern bench`): its CPU per packet
# the server sent (`tester_us_per_packet`), and both sides' shares of the window's CPU, so a
# run says which side saturated (2 cores: 2.0 is the whole machine).
# Prints one line per measurement and, per round, the ratios against raw and off; JSON lines
# go to $OUT (default bench/results/tmp/egress-<stamp>.jsonl). Needs target/release/{tern,
# udp-blaster} (`cargo build --release -p tern -p tern-baselines`) and ffmpeg.
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
SOURCES=${SOURCES:-rtmp lite}
ARMS=${ARMS:-raw rawgso off auto}
SERVER_ARGS=${SERVER_ARGS:-}
[ -n "${TERN_BASE:-}" ] && [[ " $ARMS " != *" base "* ]] && ARMS="$ARMS base"
[ -n "${BENCH_BASE:-}" ] && [[ " $ARMS " != *" tbase "* ]] && ARMS="$ARMS tbase"
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(100 500 2500)
stamp=$(date -u +%Y-%m-%d-%H%M)
OUT=${OUT:-$ROOT/bench/results/tmp/egress-$stamp.jsonl}
mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d)
server=""
bench=""
pusher=""
cleanup() {
    [ -n "$bench" ] && kill "$bench" 2>/dev/null || true
    [ -n "$pusher" ] && kill "$pusher" 2>/dev/null || true
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# The 4 Mbit/s stream, made once (30 s, looped). Noise keeps x264 at the rate cap; one slice
# a frame (no sliced threads), as a camera or OBS sends.
CACHE=$ROOT/bench/results/tmp
FLV=$CACHE/720p-4m.flv
H264=$CACHE/720p-4m.h264
mkdir -p "$CACHE"
if [[ " $SOURCES " == *" rtmp "* ]] && [ ! -s "$H264" ]; then
    ffmpeg -hide_banner -nostdin -loglevel error -y \
        -f lavfi -i "testsrc2=size=1280x720:rate=30,noise=alls=12:allf=t" -t 30 \
        -c:v libx264 -preset veryfast -profile:v baseline -tune zerolatency \
        -x264-params sliced-threads=0 -pix_fmt yuv420p -g 30 -bf 0 \
        -b:v 4M -maxrate 4M -bufsize 2M -an -f flv "$FLV"
    ffmpeg -hide_banner -nostdin -loglevel error -y -i "$FLV" -c:v copy \
        -bsf:v h264_mp4toannexb -f h264 "$H264"
fi

ticks=$(getconf CLK_TCK)
proc_cpu_s() { # utime + stime of a whole process, seconds
    awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"
}
metric() {
    curl -sf --max-time 2 "http://127.0.0.1:18180/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

measure_tern() { # SOURCE N GSO(auto|off|-) [binary] [kind] [tester binary] [tester args...]
    local src=$1 n=$2 gso=$3 bin=${4:-$TERN} kind=${5:-$3} tester=${6:-${4:-$TERN}}
    shift $(($# < 6 ? $# : 6))
    local cfg=$tmp/tern-$kind.toml path
    : >"$cfg"
    [ "$gso" != "-" ] && printf '[tunables]\ngso = "%s"\n' "$gso" >>"$cfg"
    if [ "$src" = rtmp ]; then
        printf '[[app]]\nname = "live"\nstreams = ["cam"]\n' >>"$cfg"
        "$bin" serve --config "$cfg" --http 127.0.0.1:18180 --media 127.0.0.1:18181 \
            --rtmp 127.0.0.1:18182 --candidate 127.0.0.1 $SERVER_ARGS >"$tmp/server.log" 2>&1 &
        server=$!
        path=/live/cam/whep
        sleep 1
        ffmpeg -hide_banner -nostdin -loglevel error -re -stream_loop -1 -i "$FLV" -c copy \
            -f flv rtmp://127.0.0.1:18182/live/cam >"$tmp/ffmpeg.log" 2>&1 &
        pusher=$!
        sleep 2
    else
        "$bin" demo --clip lite --config "$cfg" --rtmp none --http 127.0.0.1:18180 \
            --media 127.0.0.1:18181 --candidate 127.0.0.1 $SERVER_ARGS >"$tmp/server.log" 2>&1 &
        server=$!
        path=/live/demo/whep
    fi
    for _ in $(seq 100); do
        curl -sf --max-time 1 -o /dev/null -I "http://127.0.0.1:18180$path" && break
        sleep 0.1
    done
    local ramp_s=$(((n * CINT + 999) / 1000))
    local life=$((ramp_s + 5 + WINDOW + 5))
    "$tester" bench -url "http://127.0.0.1:18180$path" -n "$n" -cint "$CINT" \
        -life "$life" -sint 600000 "$@" >"$tmp/bench.out" 2>&1 &
    bench=$!
    sleep $((ramp_s + 5))
    local c0 p0 g0 c1 p1 g1 t0 t1 b0 b1
    b0=$(proc_cpu_s "$bench")
    c0=$(proc_cpu_s "$server"); p0=$(metric tern_packets_out_total); t0=$(date +%s.%N)
    g0=$(metric tern_gso_packets_total); g0=${g0:-0}
    sleep "$WINDOW"
    c1=$(proc_cpu_s "$server"); p1=$(metric tern_packets_out_total); t1=$(date +%s.%N)
    b1=$(proc_cpu_s "$bench")
    g1=$(metric tern_gso_packets_total); g1=${g1:-0}
    wait "$bench" || true
    bench=""
    [ -n "$pusher" ] && { kill "$pusher" 2>/dev/null || true; wait "$pusher" 2>/dev/null || true; }
    pusher=""
    kill "$server"; wait "$server" 2>/dev/null || true
    server=""
    local connected losses srtp
    connected=$(grep -o 'Connected([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
    losses=$(grep -o 'Total Packet Losses([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
    srtp=$(grep -o 'SRTP auth failures([0-9]*)' "$tmp/bench.out" | tr -dc 0-9)
    awk -v src="$src" -v n="$n" -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" -v g0="$g0" \
        -v g1="$g1" -v t0="$t0" -v t1="$t1" -v conn="${connected:-0}" -v loss="${losses:-?}" \
        -v srtp="${srtp:-?}" -v kind="$kind" -v b0="$b0" -v b1="$b1" 'BEGIN {
        cpu = c1 - c0; pk = p1 - p0; tcpu = b1 - b0; w = t1 - t0;
        printf "{\"source\":\"%s\",\"kind\":\"%s\",\"n\":%d,\"connected\":%d,\"losses\":\"%s\",\"srtp_failures\":\"%s\",\"window_s\":%.2f,\"server_cpu_s\":%.2f,\"packets\":%d,\"gso_share\":%.3f,\"packets_per_cpu_s\":%.0f,\"tester_cpu_s\":%.2f,\"tester_us_per_packet\":%.3f,\"server_cores\":%.2f,\"tester_cores\":%.2f}\n",
            src, kind, n, conn, loss, srtp, w, cpu, pk, (pk > 0 ? (g1 - g0) / pk : 0),
            (cpu > 0 ? pk / cpu : 0), tcpu, (pk > 0 ? tcpu * 1e6 / pk : 0),
            (w > 0 ? cpu / w : 0), (w > 0 ? tcpu / w : 0) }'
}

measure_raw() { # SOURCE N KIND(raw|rawgso)
    local src=$1 n=$2 kind=$3 args=()
    [ "$src" = rtmp ] && args+=(--h264 "$H264" --opus "$ROOT/assets/clip/demo.opus" --video-only)
    [ "$kind" = rawgso ] && args+=(--gso)
    "$BLASTER" --mode clip --receivers "$n" --seconds "$WINDOW" "${args[@]}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(json.dumps({"source": sys.argv[1], "kind": sys.argv[2], "n": d["receivers"],
                  "packets": d["sent_packets"], "received": d["received_packets"],
                  "refused": d["send_refused"], "sender_cpu_s": round(d["sender_cpu_s"], 2),
                  "gso_share": round(d["gso_packets"] / max(d["sent_packets"], 1), 3),
                  "packets_per_cpu_s": round(d["packets_per_cpu_s"])}))' "$src" "$kind"
}

measure_ceiling() { # SOURCE N
    local src=$1 n=$2 args=()
    [ "$src" = rtmp ] && args+=(--h264 "$H264" --opus "$ROOT/assets/clip/demo.opus" --video-only)
    "$BLASTER" --mode clip --gso --into-bench --receivers "$n" --seconds "$WINDOW" "${args[@]}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
b = d["bench"]
print(json.dumps({"source": sys.argv[1], "kind": "tceil", "n": d["receivers"],
                  "connected": b["viewers_receiving"], "losses": str(b["lost"]),
                  "srtp_failures": str(b["srtp_failures"]), "packets": d["sent_packets"],
                  "received": b["received_packets"], "sender_cpu_s": round(d["sender_cpu_s"], 2),
                  "tester_cpu_s": round(b["cpu_s"], 2),
                  "tester_us_per_packet": round(b["us_per_packet"], 3),
                  "packets_per_cpu_s": round(b["packets_per_cpu_s"]),
                  "tester_cores": round(b["cpu_s"] / d["seconds"], 2)}))' "$src"
}

echo "# bench/egress.sh ${NS[*]} sources=[$SOURCES] arms=[$ARMS]: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)" | tee -a "$OUT"
for src in $SOURCES; do
    for n in "${NS[@]}"; do
        for r in $(seq "$ROUNDS"); do
            lines=()
            for arm in $ARMS; do
                case $arm in
                raw | rawgso) l=$(measure_raw "$src" "$n" "$arm") ;;
                off | auto) l=$(measure_tern "$src" "$n" "$arm" "$TERN" "$arm" "$TERN" --sockets viewer) ;;
                base) l=$(measure_tern "$src" "$n" - "$TERN_BASE" base) ;;
                nogro) l=$(measure_tern "$src" "$n" auto "$TERN" nogro "$TERN" --sockets viewer --gro false) ;;
                sample) l=$(measure_tern "$src" "$n" auto "$TERN" sample "$TERN" --sockets viewer --verify "sample:${SAMPLE:-16}") ;;
                tbase) l=$(measure_tern "$src" "$n" auto "$TERN" tbase "$BENCH_BASE") ;;
                tsock) l=$(measure_tern "$src" "$n" auto "$TERN" tsock "$TERN" --sockets thread) ;;
                tsample) l=$(measure_tern "$src" "$n" auto "$TERN" tsample "$TERN" --sockets thread --verify "sample:${SAMPLE:-16}") ;;
                tceil) l=$(measure_ceiling "$src" "$n") ;;
                *) echo "unknown arm $arm" >&2; exit 2 ;;
                esac
                echo "$l" | tee -a "$OUT"
                lines+=("$l")
            done
            python3 -c '
import json, sys
rows = {d["kind"]: d for d in map(json.loads, sys.argv[2:])}
def r(a, b):
    return "%s/%s %.2f" % (a, b, rows[a]["packets_per_cpu_s"] / rows[b]["packets_per_cpu_s"]) \
        if a in rows and b in rows and rows[b]["packets_per_cpu_s"] else None
def t(a, b):
    return "tester us/packet %s/%s %.2f" % (a, b, rows[a]["tester_us_per_packet"] / rows[b]["tester_us_per_packet"]) \
        if a in rows and b in rows and rows[b].get("tester_us_per_packet") else None
pairs = [("auto", "raw"), ("auto", "off"), ("off", "raw"), ("rawgso", "raw"), ("auto", "rawgso"), ("auto", "base")]
tpairs = [("auto", "nogro"), ("auto", "tbase"), ("nogro", "tbase"), ("sample", "auto"), ("sample", "tbase"),
          ("tsock", "auto"), ("tsock", "tbase"), ("auto", "tceil"), ("tsock", "tceil")]
print("# %s N = %d round %s: %s" % (next(iter(rows.values()))["source"], next(iter(rows.values()))["n"],
      sys.argv[1], ", ".join(x for x in [r(a, b) for a, b in pairs] + [t(a, b) for a, b in tpairs] if x)))' "$r" "${lines[@]}" | tee -a "$OUT"
        done
    done
done
