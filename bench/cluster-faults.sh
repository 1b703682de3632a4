#!/usr/bin/env bash
# The cluster under faults (issue 58; BENCHMARKS.md "Cluster faults"). Three tern nodes, a
# Redis master, its replica and three sentinels, each node and the Redis host in a network
# namespace of its own, joined to this script's namespace by a veth pair (10.99.K.2 there,
# 10.99.K.1 here, routed here); tern bench's viewers and the ffmpeg encoder (RTMP, 640x360,
# 25 fps, x264 + AAC) run here. The nodes find Redis through the sentinels
# (redis+sentinel://).
#
# Each fault is a phase of its own with fresh viewers (VIEWERS in all, spread over the
# nodes), who watch for PHASE seconds; the fault starts 8 s in:
#   sentinel    the Redis master killed (SIGKILL): the sentinels promote the replica
#   unreachable every node cut off from Redis and the sentinels for 6 s
#   split       node a (the origin) cut off from Redis for 12 s; once its claim lapsed a
#               second encoder publishes the stream on b (no viewers there this phase);
#               when a returns both claim it
#   partition   edge c cut off from origin a for 10 s (viewers still reach c)
#   frozen      edge c stopped (SIGSTOP) for 10 s
# A link is cut with iptables in the node's namespace (this kernel's tc has no drop action,
# and a link set down would cut the viewers too). For each phase: viewers connected and
# kept, each viewer's longest video gap (p50, p99, max), packets lost, the time to recover
# (from the fault's end until every node sees Redis and the origin map as before), and the
# origin map after.
#
#   bench/cluster-faults.sh [VIEWERS] [PHASE_SECONDS] [PHASES]
#       default 300 viewers, 30 s, "sentinel unreachable split partition frozen"
# KEEP_LOGS=DIR keeps the nodes', Redis' and the last phase's viewers' logs there.
# Needs root (it runs itself under scripts/netns-run.sh), redis-server, redis-sentinel
# (Debian's redis-server package has both), ffmpeg, iptables.
set -euo pipefail
cd "$(dirname "$0")/.."
VIEWERS=${1:-300}
PHASE=${2:-30}
PHASES=${3:-sentinel unreachable split partition frozen}

if [ "${TERN_FAULTS_INNER:-}" != 1 ]; then
    . bench/lib.sh
    tern_build
    for c in redis-server redis-cli ffmpeg iptables; do
        command -v "$c" >/dev/null || { echo "$c missing (scripts/install-deps.sh)" >&2; exit 1; }
    done
    TERN=$(realpath "$TERN") TERN_FAULTS_INNER=1 exec ./scripts/netns-run.sh "$0" "$@"
fi

dir=$(mktemp -d)
pids=()
cleanup() {
    kill -CONT "${pids[@]}" 2>/dev/null || true
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    if [ -n "${KEEP_LOGS:-}" ]; then
        mkdir -p "$KEEP_LOGS" && cp "$dir"/*.log "$dir"/*.json "$KEEP_LOGS"/ 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
declare -A K=([a]=1 [b]=2 [c]=3 [r]=4) NS=() PID=()
sysctl -qw net.ipv4.ip_forward=1
for h in a b c r; do
    ns="tf-$h-$$"
    NS[$h]=$ns
    ip netns add "$ns"
    ip link add "tf$h" type veth peer name eth0 netns "$ns"
    ip addr add "10.99.${K[$h]}.1/24" dev "tf$h"
    ip link set "tf$h" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "10.99.${K[$h]}.2/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip route add default via "10.99.${K[$h]}.1"
done
in_ns() { local h=$1; shift; ip netns exec "${NS[$h]}" "$@"; }
# spawn_in HOST CMD... &: the same in the background, with $! the command's own pid.
spawn_in() { local h=$1; shift; exec ip netns exec "${NS[$h]}" "$@"; }
R=10.99.4.2
ip_of() { echo "10.99.${K[$1]}.2"; }

# Redis: a master, a replica, three sentinels (quorum 2, down after 1 s).
spawn_in r redis-server --port 6379 --bind "$R" --save '' --appendonly no --protected-mode no --dir "$dir" >"$dir/redis-6379.log" 2>&1 &
pids+=($!)
PID[m6379]=$!
spawn_in r redis-server --port 6380 --bind "$R" --save '' --appendonly no --protected-mode no --dir "$dir" --replicaof "$R" 6379 \
    >"$dir/redis-6380.log" 2>&1 &
pids+=($!)
PID[m6380]=$!
for p in 26379 26380 26381; do
    printf 'port %s\nbind %s\nprotected-mode no\nsentinel monitor m %s 6379 2\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 5000\n' \
        "$p" "$R" "$R" >"$dir/sentinel-$p.conf"
    spawn_in r redis-server "$dir/sentinel-$p.conf" --sentinel >"$dir/sentinel-$p.log" 2>&1 &
    pids+=($!)
done
sleep 2
master_port() { redis-cli -h "$R" -p 26379 SENTINEL get-master-addr-by-name m 2>/dev/null | tail -1; }

SECRET=bench-cluster-secret-0123456789
start_node() { # start_node NAME
    local n=$1 ip
    ip=$(ip_of "$n")
    cat >"$dir/$n.toml" <<TOML
[[app]]
name = "live"
dynamic = true
idle_grace_s = 5
[cluster]
redis = "redis+sentinel://$R:26379,$R:26380,$R:26381/m"
node = "$n"
url = "http://$ip:8080"
secret = "$SECRET"
TOML
    spawn_in "$n" env RUST_LOG=info "$TERN" serve --config "$dir/$n.toml" --http "$ip:8080" \
        --media "$ip:10000" --candidate "$ip" --rtmp "$ip:1935" >>"$dir/$n.log" 2>&1 &
    PID[$n]=$!
    pids+=($!)
}
for n in a b c; do start_node "$n"; done
for n in a b c; do
    for i in $(seq 1 100); do
        curl -s -m 1 -o /dev/null "http://$(ip_of "$n"):8080/v1/health" && break
        sleep 0.1
    done
done

encoder() { # encoder NODE SECONDS LOG: ffmpeg publishing live/cam there
    ffmpeg -nostdin -loglevel error -re -f lavfi -i "testsrc2=size=640x360:rate=25" \
        -f lavfi -i "sine=frequency=440:sample_rate=48000" -t "$2" \
        -c:v libx264 -preset ultrafast -tune zerolatency -g 50 -b:v 800k \
        -c:a aac -b:a 64k -f flv "rtmp://$(ip_of "$1"):1935/live/cam" >"$3" 2>&1 &
}
cluster_json() { curl -s -m 2 "http://$(ip_of "$1"):8080/v1/cluster" || echo '{}'; }
# "up ORIGIN NODES" as node $1 sees it.
seen() {
    cluster_json "$1" | python3 -c '
import json, sys
try: v = json.load(sys.stdin)
except Exception: v = {}
o = [x["node"] for x in v.get("origins", []) if x["stream"] == "live/cam"]
print(v.get("redis", "?"), ",".join(o) or "-", ",".join(n["name"] for n in v.get("nodes", [])) or "-")'
}
# Waits (at most $2 s) until every node sees "up a a,b,c"; prints the seconds it took.
wait_settled() { # wait_settled T0 LIMIT
    local t0=$1 limit=$2 n ok
    while :; do
        ok=1
        for n in a b c; do [ "$(seen "$n")" = "up a a,b,c" ] || ok=0; done
        if [ "$ok" = 1 ]; then
            python3 -c "import time; print(f'{time.time()-$t0:.1f}')"
            return 0
        fi
        if python3 -c "import time,sys; sys.exit(0 if time.time()-$t0 > $limit else 1)"; then
            echo "not within ${limit}s ($(for n in a b c; do printf '%s: %s; ' "$n" "$(seen "$n")"; done))"
            return 0
        fi
        sleep 0.2
    done
}
origins_in_redis() {
    local port
    port=$(master_port)
    in_ns r redis-cli -h "$R" -p "$port" --scan --pattern 'tern:origin:*' | while read -r k; do
        printf '%s=%s ' "$k" "$(in_ns r redis-cli -h "$R" -p "$port" GET "$k")"
    done
}

encoder a $((PHASE * 10 + 300)) "$dir/ffmpeg-a.log"
pids+=($!)
# A second stream on a that nobody watches: the sentinel phase's probe pulls it.
ffmpeg -nostdin -loglevel error -re -f lavfi -i "testsrc2=size=320x180:rate=15" \
    -t $((PHASE * 10 + 300)) -c:v libx264 -preset ultrafast -tune zerolatency -g 30 -b:v 200k \
    -f flv "rtmp://$(ip_of a):1935/live/cam2" >"$dir/ffmpeg-a2.log" 2>&1 &
pids+=($!)
t0=$(date +%s.%N)
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $VIEWERS viewers, ${PHASE} s per phase"
echo "== cluster up: $(wait_settled "$t0" 30) s"

# viewers NODES...: VIEWERS spread over them, for PHASE s, JSON to $dir/bench-NODE.json
viewers() {
    local per=$((VIEWERS / $#)) n
    for n in "$@"; do
        "$TERN" bench --url "http://$(ip_of "$n"):8080/live/cam/whep" -n "$per" --cint 10 \
            --life "$PHASE" --sint 600000 --json --details true >"$dir/bench-$n.json" 2>"$dir/bench-$n.err" &
        BENCH+=($!)
    done
}
cut_link() { # cut_link NODE PEER_IP: drops everything between them, in NODE's namespace
    in_ns "$1" iptables -I OUTPUT -d "$2" -j DROP
    in_ns "$1" iptables -I INPUT -s "$2" -j DROP
}
heal_link() { in_ns "$1" iptables -F INPUT; in_ns "$1" iptables -F OUTPUT; }
report() { # report PHASE RECOVERY NOTE
    python3 - "$1" "$2" "$3" "$(origins_in_redis)" "$dir" <<'PY'
import glob, json, sys
phase, recovery, note, origins, d = sys.argv[1:]
clients, summaries = [], []
for f in sorted(glob.glob(f"{d}/bench-*.json")):
    node = f.rsplit("-", 1)[1].split(".")[0]
    for line in open(f):
        try: j = json.loads(line)
        except ValueError: continue
        if j.get("type") == "client": clients.append((node, j))
        if j.get("type") == "summary": summaries.append(j)
n = sum(s["clients"] for s in summaries)
# Kept: never failed (no failure reason, not in the failed state) and played video. (Not
# the final "connected" state: at its end tern bench closes its sessions and waits for
# the node's count, and an edge's clients may read "disconnected" by then.)
def kept_(c):
    return not c["failure"] and c["state"] != "failed" and (c["video"] or {}).get("frames", 0) > 0
kept = sum(1 for _, c in clients if kept_(c))
gaps = sorted((c["video"] or {}).get("max_gap_ms", 1e9) for _, c in clients)
def pct(p):
    if not gaps: return float("nan")
    k = max(1, -(-len(gaps) * p // 100))
    return gaps[int(k) - 1]
lost = sum((c["video"] or {}).get("lost", 0) + (c["audio"] or {}).get("lost", 0) for _, c in clients)
by = {}
for node, c in clients:
    by.setdefault(node, []).append((c["video"] or {}).get("max_gap_ms", 1e9))
per = " ".join(f"{k}:{max(v)/1000:.2f}" for k, v in sorted(by.items()))
states = {}
for _, c in clients:
    states[c["state"]] = states.get(c["state"], 0) + 1
note = (note + "; " if note else "") + "final states " + ",".join(f"{k} {v}" for k, v in sorted(states.items()))
print(f"| {phase} | {kept}/{n} | {pct(50)/1000:.2f} / {pct(99)/1000:.2f} / {gaps[-1]/1000 if gaps else float('nan'):.2f} s ({per}) | {lost} | {recovery} | {origins.strip() or '-'} | {note} |")
PY
}
run_phase() {
    local p=$1 note="" rec t
    BENCH=()
    rm -f "$dir"/bench-*.json
    case "$p" in
        split) viewers a c ;;
        *) viewers a b c ;;
    esac
    sleep 8
    t=$(date +%s.%N)
    case "$p" in
        sentinel)
            local mp
            mp=$(master_port)
            kill -9 "${PID[m$mp]}"
            # Time until the sentinels name another master.
            while [ "$(master_port)" = "$mp" ]; do sleep 0.1; done
            note="replica promoted after $(python3 -c "import time; print(f'{time.time()-$t:.1f}')") s"
            # A WHEP POST that needs the origin map: live/cam2 (published on a, watched
            # nowhere) on c, which has no pull of it yet. Tried until one plays.
            local k answered=""
            for k in $(seq 1 40); do
                if "$TERN" bench --url "http://$(ip_of c):8080/live/cam2/whep" -n 1 --life 1 \
                    --json 2>/dev/null | grep '"type":"client"' | grep -q '"frames":[1-9]'; then
                    answered=$(python3 -c "import time; print(f'{time.time()-$t:.1f}')")
                    break
                fi
                sleep 0.5
            done
            note="$note; a new pull's WHEP POST answered ${answered:-never} s after the kill"
            rec=$(wait_settled "$t" 20)
            # The old master returns; the sentinels make it a replica.
            spawn_in r redis-server --port "$mp" --bind "$R" --save '' --appendonly no --protected-mode no --dir "$dir" \
                >>"$dir/redis-$mp.log" 2>&1 &
            PID[m$mp]=$!
            pids+=($!)
            ;;
        unreachable)
            cut_link r 10.99.0.0/16
            sleep 6
            heal_link r
            t=$(date +%s.%N)
            rec=$(wait_settled "$t" 30)
            ;;
        split)
            cut_link a "$R"
            # a's claim lapses within cluster.ttl_s (3 s); then a second encoder on b.
            local i
            for i in $(seq 1 60); do
                [ "$(seen b | cut -d' ' -f2)" = "-" ] && break
                sleep 0.2
            done
            encoder b 60 "$dir/ffmpeg-b.log"
            local fb=$!
            pids+=($fb)
            sleep 6
            note="b took it: $(seen c | cut -d' ' -f2)"
            heal_link a
            t=$(date +%s.%N)
            rec=$(wait_settled "$t" 30)
            local j
            for j in $(seq 1 50); do kill -0 "$fb" 2>/dev/null || break; sleep 0.2; done
            if kill -0 "$fb" 2>/dev/null; then note="$note; b's encoder still on"; else note="$note; b's encoder disconnected"; fi
            ;;
        partition)
            cut_link c "$(ip_of a)"
            sleep 10
            heal_link c
            t=$(date +%s.%N)
            rec=$(wait_settled "$t" 20)
            ;;
        frozen)
            kill -STOP "${PID[c]}"
            local gone=""
            for i in $(seq 1 50); do
                if [ "$(seen a | cut -d' ' -f3)" = "a,b" ]; then
                    gone=$(python3 -c "import time; print(f'{time.time()-$t:.1f}')")
                    break
                fi
                sleep 0.2
            done
            note="c out of the registry after ${gone:-?} s"
            sleep "$(python3 -c "import time; print(max(0, 10-(time.time()-$t)))")"
            kill -CONT "${PID[c]}"
            t=$(date +%s.%N)
            rec=$(wait_settled "$t" 20)
            ;;
    esac
    wait "${BENCH[@]}" 2>/dev/null || true
    report "$p" "$rec" "$note"
    # Back to the start: one origin (a), every node up, before the next phase.
    wait_settled "$(date +%s.%N)" 30 >/dev/null
    sleep 3
}

echo
echo "| fault | viewers kept | longest video gap per viewer p50 / p99 / max (max per node) | packets lost | recovered (s) | origins in Redis after | note |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for p in $PHASES; do
    run_phase "$p"
done
for n in a b c; do
    grep -E "split brain|claimed by|did not run|publisher ended" "$dir/$n.log" | sed "s/^/$n: /" | tail -4 || true
done
