#!/usr/bin/env bash
# Churn soak (issue 18): one `tern demo` on loopback under steady and churning load for
# MINUTES, then the heap, RSS and open file descriptors compared with their idle values.
#
#   bench/soak.sh [MINUTES] [STEADY] [CHURN_PER_S]       (defaults 30 1000 50)
#
# Load, all at once for MINUTES:
#   - STEADY viewers of live/demo (tern bench, WHEP), connected for the whole run;
#   - churn: viewers joining at CHURN_PER_S and leaving 1-9 s later, from four staggered
#     loops of `tern bench -n N -cint C -life 9` (each run's viewers join over 8 s and are
#     DELETEd at its end); two of the loops go through tern's TURN server (`--relay`), so
#     TURN allocations are made and released at half the churn rate;
#   - publishers coming and going: ffmpeg pushing RTMP to live/cam for 20 s at a time, and a
#     WHIP publisher (tern bench --publish 1) on live/desk for 15 s at a time.
# Idle is measured after a warm-up (one round of each kind of load at the run's full size,
# then every session gone), so one-time initialisation counts as idle: the runtime's first
# threads and the C allocator's arenas, which keep pages of their first peak (about 1.3 MiB
# for 1,500 viewers, measured; later rounds of the same size add 0.1 MiB or less). After
# the load the script waits (≤ 60 s) for the memory report to return to idle, then reads the
# figures again. Every loop is bounded by
# the run's deadline; everything runs on 127.0.0.1.
#
# Output: a Markdown table on stdout and bench/results/soak-<date>.json; exit 1 if the heap,
# the packet pool, RSS or the descriptors did not return to idle or a steady viewer failed.
# RSS has a tolerance of 1 MiB (RSS_SLACK_KIB): the heap is back to the byte, and what RSS
# keeps on top of it is pages holding the few objects made during the load and still live
# (a rebuilt snapshot, a table reallocated): measured +200 to +636 KiB (5- and 30-minute
# runs at 1,000 + 50/s; +340 KiB in a 2-minute run at 500 + 40/s). Before the fixes of
# issue 18's last stop it was +2.3 to +4.6 MiB: the stream rings' per-packet Arcs (now none:
# freezing a pooled buffer allocates nothing), glibc's thread caches and fast bins (off in
# `tern serve`/`demo`, crates/tern/src/malloc.rs) and the last few hundred KiB of a wave
# never returned (the reclaim pass now also trims once the heap is quiet). The script waits
# up to 30 s after the heap is back for the reclaim pass to return the pages.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-30}
STEADY=${2:-1000}
RATE=${3:-50}
DUR=$((MINUTES * 60))
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
command -v ffmpeg >/dev/null || ./scripts/install-deps.sh
BIN=$TARGET/release/tern
tmp=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_tcp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
free_udp() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=127.0.0.1:$(free_tcp)
MEDIA=127.0.0.1:$(free_udp)
RTMP=127.0.0.1:$(free_tcp)
TURN=127.0.0.1:$(free_udp)
cat >"$tmp/soak.toml" <<EOF
[[app]]
name = "live"
streams = ["cam", "desk"]

[limits]
# The relayed churn viewers all come from 127.0.0.1; the TURN quota is not exempt.
turn_allocations_per_ip = 10000

[tunables]
# The reclaim pass (packet pool back to its idle size, malloc_trim) every 2 s instead of 10,
# so the run's end does not wait for it.
pool_trim_s = 2

EOF
# SOAK_SERVER_ENV: extra environment for the server only (e.g. allocator settings to compare).
env ${SOAK_SERVER_ENV:-} "$BIN" demo --config "$tmp/soak.toml" --http "$HTTP" --media "$MEDIA" --candidate 127.0.0.1 \
    --rtmp "$RTMP" --turn "$TURN" --turn-user u:p --turn-relay-ip 127.0.0.1 \
    >"$tmp/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
for _ in $(seq 100); do
    curl -sf "http://$HTTP/v1/stats/current" >/dev/null && break
    sleep 0.1
done

# memory: the counting allocator's "live mapped" bytes and the packet pool's allocated bytes;
# rss in KiB; fds open.
memory() { curl -sf "http://$HTTP/v1/memory" | python3 -c 'import json,sys
d=json.load(sys.stdin); a=d["allocator"]
p=[p["allocated_bytes"] for p in d["pools"] if p["name"]=="packet_buffers"]
print(a["live_bytes"], a["mapped_bytes"], p[0] if p else 0)'; }
# Heap outside the packet pool: live + mapped - the pool's allocation. The pool keeps up to
# tunables.pool_max_free free buffers during a burst (spead2's max_free) and the reclaim pass
# gives them back once it has passed, so it is judged on its own: back to its idle size.
outside() { echo $(($1 + $2 - $3)); }
# Each pool's "name used_bytes items" (one per line), to show where a difference is.
pools() { curl -sf "http://$HTTP/v1/memory" | python3 -c 'import json,sys
for p in json.load(sys.stdin)["pools"]: print(p["name"], p["used_bytes"], p["items_in_use"], p["allocated_bytes"])'; }
# Waits (≤ 60 s) until the demo stream's ring is full: its pool line holds for 3 s.
ring_full() {
    local last now stable=0
    last=$(pools | grep '^stream_rings ')
    for _ in $(seq 120); do
        sleep 0.5
        now=$(pools | grep '^stream_rings ')
        if [ "$now" = "$last" ]; then stable=$((stable + 1)); else stable=0; fi
        last=$now
        [ $stable -ge 6 ] && return 0
    done
    echo "the stream ring never filled" >&2
}
rss() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER/status"; }
# RSS by kind of mapping, KiB, and the thread count: "anon file heap threads" (heap: the brk
# heap; anon: every other private anonymous mapping, the packet pool, thread arenas and
# thread stacks among them; file: the binary and its libraries, as far as they were paged in).
rss_parts() { cat "/proc/$SERVER/smaps" >"$tmp/smaps-$1"; python3 - "$tmp/smaps-$1" "/proc/$SERVER/status" <<'PY'
import re, sys
anon = file = heap = 0
kind = None
for line in open(sys.argv[1]):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        f = line.split()
        name = f[5] if len(f) > 5 else ""
        kind = "heap" if name == "[heap]" else ("file" if name.startswith("/") else "anon")
    elif line.startswith("Rss:"):
        kb = int(line.split()[1])
        if kind == "heap": heap += kb
        elif kind == "file": file += kb
        else: anon += kb
threads = [l.split()[1] for l in open(sys.argv[2]) if l.startswith("Threads:")][0]
print(anon, file, heap, threads)
PY
}
fds() { ls "/proc/$SERVER/fd" | wc -l; }
sessions() {
    python3 - "$HTTP" <<'PY'
import json, sys, urllib.request
h = sys.argv[1]
s = json.load(urllib.request.urlopen(f"http://{h}/v1/stats/current"))["response"]
t = json.load(urllib.request.urlopen(f"http://{h}/v1/turn/allocations"))
print(s["totalConnections"], s["publishers"], len(t))
PY
}
# Waits (≤ $1 s) until no viewer, publisher or allocation is left.
wait_empty() {
    local end=$((SECONDS + $1))
    while [ $SECONDS -lt $end ]; do
        [ "$(sessions)" = "0 0 0" ] && return 0
        sleep 0.5
    done
    echo "still open after $1 s (viewers publishers allocations): $(sessions)" >&2
    return 1
}
# A memory reading that holds for 1 s (≤ 20 s of trying); prints it.
stable_memory() {
    local a b
    a=$(memory)
    for _ in $(seq 20); do
        sleep 1
        b=$(memory)
        [ "$a" = "$b" ] && break
        a=$b
    done
    echo "$a"
}
# Waits (≤ $1 s) for the heap outside the packet pool to read $2 and the pool $3 or less;
# prints the last reading.
wait_memory() {
    local end=$((SECONDS + $1)) m
    while :; do
        m=$(memory)
        read -r _ _ pool <<<"$m"
        if { [ "$(outside $m)" = "$2" ] && [ "$pool" -le "$3" ]; } || [ $SECONDS -ge $end ]; then
            echo "$m"
            return
        fi
        sleep 0.5
    done
}

bench() { "$BIN" bench -url "http://$HTTP/live/$1/whep" "${@:2}"; }
push_rtmp() {
    timeout $(($1 + 10)) ffmpeg -nostdin -loglevel error -re \
        -f lavfi -i "testsrc=size=320x240:rate=15" -f lavfi -i "sine=frequency=440" \
        -t "$1" -c:v libx264 -preset ultrafast -tune zerolatency -g 15 -pix_fmt yuv420p \
        -c:a aac -b:a 64k -f flv "rtmp://$RTMP/live/cam" >>"$tmp/ffmpeg.log" 2>&1 || true
}

# Warm-up: one round of everything, then idle.
echo "warm-up..." >&2
push_rtmp 4 &
WARM=$!
bench desk -n 1 -life 4 --publish 1 --json >/dev/null 2>&1 || true
bench demo -n "$STEADY" -cint 5 -life 10 --json >/dev/null 2>&1 &
WARM_STEADY=$!
sleep 2
bench demo -n 100 -cint 20 -life 3 --json >/dev/null 2>&1 || true
bench demo -n 100 -cint 20 -life 3 --relay --json >/dev/null 2>&1 || true
wait "$WARM" "$WARM_STEADY" || true
wait_empty 60
ring_full
# Two reclaim passes: the warm-up's burst is given back before idle is read.
sleep 5
IDLE_MEM=$(stable_memory)
pools >"$tmp/pools-idle"
read -r IDLE_LIVE IDLE_MAPPED IDLE_POOL <<<"$IDLE_MEM"
IDLE_RSS=$(rss)
IDLE_PARTS=$(rss_parts idle)
# SOAK_HOOK: a command run as `$SOAK_HOOK idle|after PID` at both readings (diagnosis).
[ -n "${SOAK_HOOK:-}" ] && $SOAK_HOOK idle "$SERVER"
IDLE_FDS=$(fds)
echo "idle: live $IDLE_LIVE B, mapped $IDLE_MAPPED B, RSS $IDLE_RSS KiB, fds $IDLE_FDS" >&2

START=$SECONDS
END=$((START + DUR))
# Steady viewers, for the whole run. They join in a burst while the churn starts, on two
# cores that also run the server, four churn loops and the publishers: a join is given 30 s
# (not tern bench's default 10 s) so that a slow connect on a starved machine is not taken
# for a failure; one that never connects still fails the run.
bench demo -n "$STEADY" -cint 5 -life "$DUR" -sint 60000 --connect-timeout 30 --json >"$tmp/steady.jsonl" 2>"$tmp/steady.err" &
STEADY_PID=$!
PIDS+=("$STEADY_PID")
# Churn: four staggered loops (two direct, two relayed). Each run of a loop joins viewers
# for JOIN s, keeps them to LIFE s and DELETEs them all; the run's end (deletes, drain,
# count, the next run's start) takes about 3 s more, so each loop joins at
# RATE * (LIFE + 3) / (4 * JOIN) per second while it joins, for RATE on average over the four.
# The script reports the rate achieved.
JOIN=8
LIFE=9
PER_LOOP_MILLI=$((RATE * (LIFE + 3) * 1000 / (4 * JOIN)))
CINT=$((1000 * 1000 / PER_LOOP_MILLI))
N=$((PER_LOOP_MILLI * JOIN / 1000))
churn() {
    local flag=$1 out=$2
    while [ $((SECONDS + LIFE + 3)) -lt "$END" ]; do
        bench demo -n "$N" -cint "$CINT" -life "$LIFE" -sint 60000 --json $flag 2>/dev/null |
            grep '"type":"summary"' | tail -1 >>"$out" || true
    done
}
LOOPS=()
churn "" "$tmp/churn-direct.jsonl" &
LOOPS+=($!)
sleep 3
churn --relay "$tmp/churn-relay.jsonl" &
LOOPS+=($!)
sleep 3
churn "" "$tmp/churn-direct.jsonl" &
LOOPS+=($!)
sleep 3
churn --relay "$tmp/churn-relay.jsonl" &
LOOPS+=($!)
# Publishers coming and going.
(
    while [ $((SECONDS + 25)) -lt "$END" ]; do
        push_rtmp 20
        echo x >>"$tmp/rtmp-cycles"
        sleep 2
    done
) &
LOOPS+=($!)
(
    while [ $((SECONDS + 20)) -lt "$END" ]; do
        bench desk -n 1 -life 15 --publish 1 --json >/dev/null 2>&1 || true
        echo x >>"$tmp/whip-cycles"
        sleep 2
    done
) &
LOOPS+=($!)
PIDS+=("${LOOPS[@]}")
# Sample the server while the load runs.
PEAK_RSS=0
PEAK_FDS=0
while [ $SECONDS -lt "$END" ]; do
    r=$(rss)
    f=$(fds)
    [ "$r" -gt "$PEAK_RSS" ] && PEAK_RSS=$r
    [ "$f" -gt "$PEAK_FDS" ] && PEAK_FDS=$f
    sleep 5
done
wait "$STEADY_PID" || true
# Let the loops finish their last rounds (each is bounded by END plus its own run time).
for _ in $(seq 60); do
    running=0
    for p in "${LOOPS[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    [ $running -eq 0 ] && break
    sleep 1
done
LOAD_SECS=$((SECONDS - START))
wait_empty 90 || true
AFTER_MEM=$(wait_memory 60 "$(outside $IDLE_MEM)" "$(echo $IDLE_MEM | cut -d' ' -f3)")
pools >"$tmp/pools-after"
if [ "$(outside $AFTER_MEM)" != "$(outside $IDLE_MEM)" ]; then
    echo "memory pools that differ from idle (name used_bytes items allocated_bytes):" >&2
    diff "$tmp/pools-idle" "$tmp/pools-after" >&2 || true
fi
read -r AFTER_LIVE AFTER_MAPPED AFTER_POOL <<<"$AFTER_MEM"
RSS_SLACK_KIB=1024
# RSS settles once the reclaim pass has run (every 2 s here): wait (≤ 30 s) until it is within
# the slack and has not moved for 3 s.
last_rss=0
still=0
for _ in $(seq 30); do
    now_rss=$(rss)
    if [ "$now_rss" = "$last_rss" ]; then still=$((still + 1)); else still=0; fi
    last_rss=$now_rss
    [ "$now_rss" -le $((IDLE_RSS + RSS_SLACK_KIB)) ] && [ $still -ge 3 ] && break
    sleep 1
done
AFTER_RSS=$(rss)
AFTER_PARTS=$(rss_parts after)
[ -n "${SOAK_HOOK:-}" ] && $SOAK_HOOK after "$SERVER"
AFTER_FDS=$(fds)
if [ -n "${SOAK_SMAPS_DIR:-}" ]; then
    cp "$tmp/smaps-idle" "$tmp/smaps-after" "$SOAK_SMAPS_DIR/"
    # glibc's per-arena report, written to the server's stderr (a string argument would need
    # the inferior's malloc, which gdb mistakes for the aws-lc hook tern exports).
    gdb -p "$SERVER" -batch -ex 'call (int) malloc_info(0, *(void**) &stderr)' >/dev/null 2>&1 || true
    sleep 0.5
    sed -n '/^<malloc /,/^<\/malloc>/p' "$tmp/server.log" >"$SOAK_SMAPS_DIR/malloc-after.xml"
    echo "$SERVER" >"$SOAK_SMAPS_DIR/pid"
    sleep "${SOAK_HOLD_S:-0}"
fi
LEFT=$(sessions)

python3 - "$tmp" "$LOAD_SECS" "$MINUTES" "$STEADY" "$RATE" "$IDLE_LIVE" "$IDLE_MAPPED" "$IDLE_POOL" "$IDLE_RSS" "$IDLE_FDS" \
    "$AFTER_LIVE" "$AFTER_MAPPED" "$AFTER_POOL" "$AFTER_RSS" "$AFTER_FDS" "$PEAK_RSS" "$PEAK_FDS" "$LEFT" \
    "$IDLE_PARTS" "$AFTER_PARTS" "$RSS_SLACK_KIB" <<'PY'
import json, os, sys, time
(tmp, load_secs, minutes, steady, rate, il, im, ip, ir, ifd, al, am, ap, ar, afd, pr, pfd, left,
 iparts, aparts, rss_slack) = sys.argv[1:]
rss_slack = int(rss_slack)
iparts, aparts = list(map(int, iparts.split())), list(map(int, aparts.split()))
load_secs, minutes, steady, rate = int(load_secs), int(minutes), int(steady), int(rate)
il, im, ip, ir, ifd, al, am, ap, ar, afd, pr, pfd = map(
    int, (il, im, ip, ir, ifd, al, am, ap, ar, afd, pr, pfd))
io, ao = il + im - ip, al + am - ap

def finals(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out

def lines(path):
    return sum(1 for _ in open(path)) if os.path.exists(path) else 0

steady_runs = [s for s in finals(f"{tmp}/steady.jsonl") if s.get("type") == "summary"]
st = steady_runs[-1] if steady_runs else {}
churn = {}
for kind in ("direct", "relay"):
    runs = finals(f"{tmp}/churn-{kind}.jsonl")
    churn[kind] = {
        "runs": len(runs),
        "clients": sum(r["clients"] for r in runs),
        "connected": sum(r["states"]["connected"] for r in runs),
        # Silent for 5 s when the run's final count was taken (their session was deleted).
        "disconnected": sum(r["states"]["disconnected"] for r in runs),
        "still_connecting": sum(r["states"]["checking"] + r["states"]["new"] for r in runs),
        "failed": sum(r["states"]["failed"] for r in runs),
        "failures": {},
    }
    for r in runs:
        for k, v in r.get("failures", {}).items():
            churn[kind]["failures"][k] = churn[kind]["failures"].get(k, 0) + v
result = {
    "minutes": minutes, "steady": steady, "churn_per_s": rate, "load_secs": load_secs,
    "idle": {"live_bytes": il, "mapped_bytes": im, "packet_pool_bytes": ip,
             "heap_outside_pool": io, "rss_kib": ir, "fds": ifd,
             "rss_anon_kib": iparts[0], "rss_file_kib": iparts[1], "rss_brk_heap_kib": iparts[2],
             "threads": iparts[3]},
    "after": {"live_bytes": al, "mapped_bytes": am, "packet_pool_bytes": ap,
              "heap_outside_pool": ao, "rss_kib": ar, "fds": afd,
              "rss_anon_kib": aparts[0], "rss_file_kib": aparts[1], "rss_brk_heap_kib": aparts[2],
              "threads": aparts[3]},
    "peak": {"rss_kib": pr, "fds": pfd},
    "left_open": left,
    "steady_final": {k: st.get(k) for k in ("clients", "states", "total_losses", "failures")},
    "churn": churn,
    "rtmp_cycles": lines(f"{tmp}/rtmp-cycles"),
    "whip_cycles": lines(f"{tmp}/whip-cycles"),
}
os.makedirs("bench/results", exist_ok=True)
path = time.strftime("bench/results/soak-%Y-%m-%d-%H%M.json")
json.dump(result, open(path, "w"), indent=1)
print(f"| figure | idle | peak under load | after | after − idle |")
print(f"|---|---:|---:|---:|---:|")
print(f"| heap outside the packet pool (B) | {io} | | {ao} | {ao - io:+} |")
print(f"| packet pool allocated (B) | {ip} | | {ap} | {ap - ip:+} |")
print(f"| allocator live + mapped (B) | {il + im} | | {al + am} | {al + am - il - im:+} |")
print(f"| RSS (KiB) | {ir} | {pr} | {ar} | {ar - ir:+} |")
for i, name in enumerate(("RSS: anonymous mappings (KiB)", "RSS: files (binary, libraries) (KiB)",
                          "RSS: brk heap (KiB)", "threads")):
    print(f"| {name} | {iparts[i]} | | {aparts[i]} | {aparts[i] - iparts[i]:+} |")
print(f"| open fds | {ifd} | {pfd} | {afd} | {afd - ifd:+} |")
print()
sv = st.get("states", {})
print(f"steady: {st.get('clients')} viewers, {sv.get('connected')} connected at the end, "
      f"{sv.get('failed')} failed, losses {st.get('total_losses')}, failures {st.get('failures')}")
for kind, c in churn.items():
    print(f"churn ({kind}): {c['runs']} runs, {c['clients']} viewers joined and left "
          f"({c['clients'] / max(load_secs, 1):.1f}/s), "
          f"at each run's end {c['connected']} connected, {c['disconnected']} disconnected "
          f"(deleted, silent 5 s), {c['still_connecting']} still connecting, "
          f"{c['failed']} failed {c['failures'] or ''}")
print(f"publishers: {result['rtmp_cycles']} RTMP and {result['whip_cycles']} WHIP cycles; "
      f"open at the end (viewers publishers allocations): {left}")
print(f"result: {path}")
# Tolerance: packets in flight in the demo stream's ring and queues at the moment of
# reading, and tables that keep their peak size (viewer slots, TURN relays, the runtime's I/O
# slab): 256 KiB. A leak of 20 B per churned session trips it in the 5-minute CI run. The
# packet pool must be back at (or below) its idle size, RSS within RSS_SLACK_KIB of idle.
ok = abs(ao - io) <= 256 * 1024 and ap <= ip and ar - ir <= rss_slack and afd == ifd \
    and left == "0 0 0" \
    and sv.get("failed", 1) == 0 and sv.get("connected") == steady
sys.exit(0 if ok else 1)
PY
