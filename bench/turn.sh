#!/usr/bin/env bash
# TURN: tern's built-in server against coturn (Debian 4.6.1) under the same
# turnutils_uclient load, one after the other in one run, on loopback.
#
#   bench/turn.sh [CLIENTS_ALLOC] [CLIENTS] [MESSAGES]     (defaults 400 50 4000)
#
# For each server:
#   1. allocation phase: `turnutils_uclient -y -c -m CLIENTS_ALLOC -n 1` (UDP, long-term
#      credentials): uclient makes CLIENTS_ALLOC/2 allocations (with -y it pairs its clients;
#      tern's /v1/memory counts them), creates permissions, binds channels and sends one
#      message per client. uclient exits without deleting its allocations, so they stay alive
#      (600 s lifetime) and the memory they hold is measured after it exits:
#      heap per allocation (tern only: counting allocator's live bytes, GET /v1/memory) and
#      RSS per allocation (both: VmRSS of the server process), server CPU per allocation
#      (from /proc/PID/task/*/schedstat, ns resolution: all threads, and for tern also its
#      TurnWorker thread alone, since the whole process includes the idle media engine's 20 ms
#      ticks over the phase) and the wall-clock rate uclient achieved (uclient sets its
#      clients up one by one, a few per second: that rate is the client's limit, not the
#      server's; 1 s / CPU per allocation bounds the server's).
#   2. relay phase: `turnutils_uclient -y -c -m CLIENTS -n MESSAGES -l 172 -z 1` (UDP):
#      server CPU per relayed packet. With -y every message crosses the server twice (client
#      -> its relay -> the peer's relay -> the peer), so packets = 2 x messages sent.
#   3. allocation-rate phase: crates/tern-rtc/examples/turn_alloc_rate, RATE_CLIENTS (8)
#      concurrent clients each looping Allocate (401, then signed) + Refresh(0) for RATE_SECS
#      (10) s: allocations per second the server sustains, and server CPU per allocation.
# The two servers run alone on the machine in turn; uclient runs on the other core.
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOCS=${1:-400}
CLIENTS=${2:-50}
MSGS=${3:-4000}
TARGET=${CARGO_TARGET_DIR:-target}
RATE_CLIENTS=${RATE_CLIENTS:-8}
RATE_SECS=${RATE_SECS:-10}
cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
cargo build --release -p tern-rtc --example turn_alloc_rate >/dev/null 2>&1 ||
    cargo build --release -p tern-rtc --example turn_alloc_rate
BIN=$TARGET/release/tern
RATE=$TARGET/release/examples/turn_alloc_rate
command -v turnutils_uclient >/dev/null || ./scripts/install-deps.sh
tmp=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {print s}'; }
# CPU of the thread named $2 (tern's TurnWorker), ns.
thread_ns() {
    local t
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm")" = "$2" ]; then awk '{print $1}' "$t/schedstat"; fi
    done
}
rss_kb() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
now() { date +%s.%N; }

USER=alice
PASS=wonderland

uclient() { # uclient PORT ARGS...
    local port=$1
    shift
    turnutils_uclient -y -c -l 172 -u $USER -w $PASS -p "$port" "$@" 127.0.0.1 2>&1
}

measure() { # measure NAME PID PORT [HTTP]
    local name=$1 pid=$2 port=$3 http=${4:-}
    sleep 1
    local rss0 cpu0 live0=0 t0 t1 rss1 cpu1 live1=0 cpu2 sent recv lost w0=0 w1=0 w2=0
    rss0=$(rss_kb "$pid")
    cpu0=$(cpu_ns "$pid")
    [ -n "$http" ] && w0=$(thread_ns "$pid" TurnWorker)
    [ -n "$http" ] && live0=$(curl -s "http://$http/v1/memory" | grep -o '"live_bytes":[0-9]*' | cut -d: -f2)
    t0=$(now)
    uclient "$port" -m "$ALLOCS" -n 1 -z 20 >"$tmp/$name.alloc.log"
    t1=$(now)
    sleep 1
    rss1=$(rss_kb "$pid")
    cpu1=$(cpu_ns "$pid")
    if [ -n "$http" ]; then
        w1=$(thread_ns "$pid" TurnWorker)
        curl -s "http://$http/v1/memory" >"$tmp/$name.mem.json"
        live1=$(grep -o '"live_bytes":[0-9]*' "$tmp/$name.mem.json" | cut -d: -f2)
        HELD=$(curl -s "http://$http/v1/memory?format=dd" | awk '$1 == "turn_allocations" {print $6}' | tr -d ,)
        echo "$name: allocations held after the allocation phase: $HELD (turn_allocations in /v1/memory)"
    fi
    grep -E 'Total lost|tot_send_msgs=[0-9]+, tot_recv' "$tmp/$name.alloc.log" | tail -2 | sed "s/^/$name alloc phase: /"
    uclient "$port" -m "$CLIENTS" -n "$MSGS" -z 1 >"$tmp/$name.relay.log"
    cpu2=$(cpu_ns "$pid")
    [ -n "$http" ] && w2=$(thread_ns "$pid" TurnWorker)
    sent=$(grep -o 'tot_send_msgs=[0-9]*' "$tmp/$name.relay.log" | tail -1 | cut -d= -f2)
    recv=$(grep -o 'tot_recv_msgs=[0-9]*' "$tmp/$name.relay.log" | tail -1 | cut -d= -f2)
    lost=$(grep -o 'Total lost packets [0-9]*' "$tmp/$name.relay.log" | tail -1 | awk '{print $4}')
    awk -v n="$name" -v a="$HELD" -v w0="$w0" -v w1="$w1" -v w2="$w2" -v r0="$rss0" -v r1="$rss1" -v l0="$live0" -v l1="$live1" \
        -v c0="$cpu0" -v c1="$cpu1" -v c2="$cpu2" -v t0="$t0" -v t1="$t1" \
        -v s="$sent" -v rc="$recv" -v lo="$lost" -v http="$http" 'BEGIN {
        if (http != "") printf "%s: heap per allocation %.0f B (allocator live bytes %d -> %d)\n", n, (l1-l0)/a, l0, l1
        printf "%s: RSS per allocation %.0f B (VmRSS %d -> %d KiB)\n", n, (r1-r0)*1024/a, r0, r1
        printf "%s: server CPU per allocation %.1f us (whole process); uclient-driven rate %.1f allocations/s\n", n, (c1-c0)/1000/a, a/(t1-t0)
        if (http != "") printf "%s: TurnWorker thread CPU per allocation %.1f us\n", n, (w1-w0)/1000/a
        printf "%s: relay phase: %d sent, %d received, %d lost; server CPU per relayed packet %.2f us (%.3f s CPU for %d packets, whole process)\n", n, s, rc, lo, (c2-c1)/1000/(2*s), (c2-c1)/1e9, 2*s
        if (http != "") printf "%s: TurnWorker thread CPU per relayed packet %.2f us\n", n, (w2-w1)/1000/(2*s)
    }'
}

alloc_rate() { # alloc_rate NAME PID PORT [HTTP]
    local name=$1 pid=$2 port=$3 http=${4:-} c0 c1 w0=0 w1=0 out
    c0=$(cpu_ns "$pid")
    [ -n "$http" ] && w0=$(thread_ns "$pid" TurnWorker)
    out=$(timeout $((RATE_SECS + 30)) "$RATE" "127.0.0.1:$port" "$USER" "$PASS" "$RATE_CLIENTS" "$RATE_SECS")
    c1=$(cpu_ns "$pid")
    [ -n "$http" ] && w1=$(thread_ns "$pid" TurnWorker)
    python3 - "$name" "$out" "$c0" "$c1" "$w0" "$w1" "$http" <<'PY'
import json, sys
name, out, c0, c1, w0, w1, http = sys.argv[1:]
r = json.loads(out)
n = max(r["allocations"], 1)
print("%s: allocation rate %.0f allocations/s (%d clients, Allocate + Refresh(0) loop, %.0f s): %d made, %d deleted, %d failed; server CPU per allocation %.1f us (whole process)" % (
    name, r["allocations_per_s"], r["clients"], r["seconds"], r["allocations"], r["deleted"], r["failed"], (float(c1) - float(c0)) / 1000 / n))
if r["failed"]:
    print("%s: first failure: %s" % (name, r["first_failure"]))
if http:
    print("%s: TurnWorker thread CPU per allocation (rate phase) %.1f us" % (name, (float(w1) - float(w0)) / 1000 / n))
PY
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
echo "== load: allocation phase uclient -y -c -m $ALLOCS -n 1; relay phase uclient -y -c -m $CLIENTS -n $MSGS -l 172 -z 1"

# tern: serve (no demo stream, so the heap moves only with TURN), relay ports 40000-47999.
port=$(free_port)
http=127.0.0.1:$(free_port)
cat >"$tmp/tern.toml" <<EOF
[turn]
relay_port_min = 40000
relay_port_max = 47999
max_allocations = 20000
max_allocations_per_user = 20000
# The clients and peers of this benchmark all live on loopback, which the relay refuses by
# default; every allocation comes from 127.0.0.1.
allowed_peers = ["127.0.0.0/8"]

[limits]
turn_allocations_per_ip = 100000
EOF
RUST_LOG=warn "$BIN" serve --http "$http" --media "127.0.0.1:$(free_port)" --candidate 127.0.0.1 \
    --config "$tmp/tern.toml" --turn "127.0.0.1:$port" --turn-user "$USER:$PASS" \
    --turn-relay-ip 127.0.0.1 2>"$tmp/tern.log" &
PIDS+=($!)
measure tern "$!" "$port" "$http"
alloc_rate tern "${PIDS[-1]}" "$port" "$http"
kill "${PIDS[-1]}"
wait "${PIDS[-1]}" 2>/dev/null || true

# coturn 4.6.1 with the equivalent settings, relay ports 48000-55999.
port=$(free_port)
turnserver -n --listening-ip 127.0.0.1 -p "$port" -E 127.0.0.1 --min-port 48000 --max-port 55999 \
    -a -u "$USER:$PASS" -r tern --no-tls --no-dtls --no-cli --allow-loopback-peers \
    --log-file stdout --simple-log >"$tmp/coturn.log" 2>&1 &
PIDS+=($!)
measure coturn "$!" "$port"   # per-allocation figures divided by tern's count ($HELD): same uclient run
alloc_rate coturn "${PIDS[-1]}" "$port"
echo "coturn: $(grep -c . "$tmp/coturn.log") log lines; threads $(ls /proc/"${PIDS[-1]}"/task | wc -l)"
