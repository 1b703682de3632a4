#!/usr/bin/env bash
# `tern bench` against a second, independent WHEP server: the pion/webrtc v4 fan-out baseline
# in bench/pion-whep, beside `tern demo --clip lite`, with the same clip and the same load in
# the same run (issue 8, "peers"; issue 4, "a documented run against a second WHEP server").
#
#   bench/pion.sh [N ...]        default: 50 100 200 400
#
# For each N and each server: a fresh server on loopback (its idle CPU and RSS measured over 3 s), `tern bench -n N -cint CINT -life
# LIFE` over WHEP, and per run the server's RSS (idle before the bench, peak VmRSS sampled
# every second during it, VmHWM at the end), the server's CPU seconds (utime+stime from
# /proc/PID/stat, from just before the bench starts to just after it ends) per million RTP
# packets the bench received, the kernel's UDP receive-buffer drops, and bench's fps, loss,
# latency and connect times. Writes bench/results/pion-<date>.json and prints a table.
#
# pion runs with `-lite -dtls-passive` (ICE lite, answer a=setup:passive), as tern does: with
# pion's defaults (full ICE, a=setup:active) tern's lean client cannot connect (see
# BENCHMARKS.md). Everything is on 127.0.0.1, inside a private network namespace when the
# script runs as root (the build runs outside it); every server and bench is killed on exit.
#
# Env: TERN (tern binary; default: cargo build --release -p tern), GO (go binary), LIFE
# (seconds per run, default 30), CINT (ms between connects, default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
LIFE=${LIFE:-30}
CINT=${CINT:-20}
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(50 100 200 400)
if [ -z "${PION_SH_NETNS:-}" ]; then
    # Build stage, on the host network (the Go module proxy is needed once).
    TARGET=${CARGO_TARGET_DIR:-$PWD/target}
    GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
    if [ -z "${TERN:-}" ]; then
        cargo build --release -p tern
        TERN=$TARGET/release/tern
    fi
    PION=$TARGET/pion-whep
    (cd bench/pion-whep && "$GO" mod download && "$GO" build -trimpath -o "$PION" .)
    GO_VERSION=$("$GO" version)
    PION_VERSION=$(cd bench/pion-whep && "$GO" list -m -f '{{.Version}}' github.com/pion/webrtc/v4)
    export TERN PION GO_VERSION PION_VERSION
    # Measure in a private network namespace when we can (root): only this run's sockets are
    # in it, so /proc/net/snmp's UDP drop counter is this run's alone.
    if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
        PION_SH_NETNS=1 exec unshare -n "$0" "$@"
    fi
    NETWORK="host loopback"
else
    ip link set lo up
    NETWORK="private network namespace (unshare -n), loopback"
fi

# The server and bench of the run in progress; cleared once reaped, so a reused PID is never hit.
SERVER_PID=
BENCH_PID=
cleanup() {
    for p in $BENCH_PID $SERVER_PID; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

mkdir -p bench/results/tmp
TMP=$(mktemp -d bench/results/tmp/pion.XXXXXX)
STAMP=$(date +%Y-%m-%d-%H%M)
OUT=bench/results/pion-$STAMP.json
ROWS=$TMP/rows.jsonl
: >"$ROWS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
rcvbuf_errors() { awk '/^Udp:/ {if (!h) {for (i = 1; i <= NF; i++) if ($i == "RcvbufErrors") c = i; h = 1} else print $c}' /proc/net/snmp; }

# run SERVER N [LIFE]: one fresh server, one bench run, one row in $ROWS. SERVER is pion,
# tern, or pion-defaults (pion without -lite -dtls-passive, the interop probe).
run() {
    local server=$1 n=$2 life=${3:-$LIFE} http port sp
    local flags=(-lite -dtls-passive)
    if [ "$server" != tern ]; then
        [ "$server" = pion ] || flags=()
        http=127.0.0.1:18580
        port=18581
        "$PION" -http "$http" -udp "$port" -ip 127.0.0.1 "${flags[@]}" \
            -clip assets/clip/lite.h264 -audio assets/clip/demo.opus >"$TMP/$server-$n.log" 2>&1 &
    else
        http=127.0.0.1:18590
        port=18591
        "$TERN" demo --clip lite --http "$http" --media "127.0.0.1:$port" --candidate 127.0.0.1 \
            >"$TMP/$server-$n.log" 2>&1 &
    fi
    sp=$!
    SERVER_PID=$sp
    local url=http://$http/live/demo/whep
    for _ in $(seq 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' -I "$url")" = 200 ] && break
        sleep 0.1
    done
    sleep 1 # let the source start and the runtime settle before the idle figures
    local idle i0 i1 s0 r0 t0 bp peak=0 rss
    i0=$(cpu_ticks "$sp")
    sleep 3
    i1=$(cpu_ticks "$sp")
    idle=$(status_kib "$sp" VmRSS)
    r0=$(rcvbuf_errors)
    s0=$(cpu_ticks "$sp")
    t0=$(date +%s.%N)
    timeout $((life + 60)) "$TERN" bench -url "$url" -n "$n" -cint "$CINT" -life "$life" -sint 600000 \
        --json --details true >"$TMP/bench-$server-$n.json" 2>"$TMP/bench-$server-$n.err" &
    bp=$!
    BENCH_PID=$bp
    while kill -0 "$bp" 2>/dev/null; do
        rss=$(status_kib "$sp" VmRSS)
        [ "${rss:-0}" -gt "$peak" ] && peak=$rss
        sleep 1
    done
    wait "$bp" || true
    BENCH_PID=
    local s1 t1 r1 hwm
    s1=$(cpu_ticks "$sp")
    t1=$(date +%s.%N)
    r1=$(rcvbuf_errors)
    hwm=$(status_kib "$sp" VmHWM)
    kill "$sp"
    wait "$sp" 2>/dev/null || true
    SERVER_PID=
    python3 - "$server" "$n" "$TMP/bench-$server-$n.json" "$s0" "$s1" "$hz" "$t0" "$t1" \
        "$idle" "$peak" "$hwm" "$r0" "$r1" "$((i1 - i0))" >>"$ROWS" <<'PY'
import json, statistics, sys
server, n, path, s0, s1, hz, t0, t1, idle, peak, hwm, r0, r1, idle_ticks = sys.argv[1:]
summary, tern_server, clients = {}, {}, []
for line in open(path):
    if not line.startswith("{"):
        continue
    o = json.loads(line)
    if o.get("type") == "summary":
        summary = o
    elif o.get("type") == "server":
        tern_server = o
    elif o.get("type") == "client":
        clients.append(o)
def p50(key):
    v = sorted(c[key] for c in clients if c.get(key) is not None)
    return statistics.median(v) if v else None
cpu = (int(s1) - int(s0)) / int(hz)
wall = float(t1) - float(t0)
packets = summary.get("total_packets", 0)
st = summary.get("states", {})
row = {
    "server": server, "n": int(n),
    "connected": st.get("connected", 0), "failed": st.get("failed", 0),
    "failures": summary.get("failures", {}),
    "packets": packets, "bytes": summary.get("total_bytes", 0),
    "losses": summary.get("total_losses", 0), "duplicates": summary.get("duplicates", 0),
    "reordered": summary.get("reordered", 0), "nacks": summary.get("nacks", 0),
    "recovered": summary.get("recovered", 0), "srtp_failures": summary.get("srtp_failures", 0),
    "udp_rcvbuf_errors": int(r1) - int(r0),
    "fps": summary.get("fps"), "bps": summary.get("bps"),
    "video_latency_ms": summary.get("video_latency_ms"),
    "audio_latency_ms": summary.get("audio_latency_ms"),
    "video_jitter_ms": summary.get("video_jitter_ms"),
    "dtls_ms_p50": p50("dtls_ms"), "first_frame_ms_p50": p50("first_frame_ms"),
    "bench_cpu_us_per_packet": summary.get("cpu_us_per_packet"),
    "server_cpu_s": cpu, "wall_s": wall,
    "server_idle_cpu_pct": int(idle_ticks) * 100 / int(hz) / 3,
    "server_cpu_s_per_mpkt": cpu * 1e6 / packets if packets else None,
    "server_packets_out": tern_server.get("packets_out"),
    "rss_idle_kib": int(idle), "rss_peak_kib": int(peak), "vmhwm_kib": int(hwm),
    "rss_kib_per_viewer": (int(peak) - int(idle)) / int(n),
}
print(json.dumps(row))
PY
}

progress() {
    tail -1 "$ROWS" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("# %(server)s N=%(n)d: connected %(connected)d, failed %(failed)d %(failures)s, packets %(packets)d, losses %(losses)d" % r)'
}
# Interop probe: pion with its defaults (full ICE, answerer a=setup:active), 5 viewers for
# 15 s (longer than bench's 10 s connect timeout).
run pion-defaults 5 15
progress
for n in "${NS[@]}"; do
    for server in pion tern; do
        run "$server" "$n"
        progress
    done
done

python3 - "$ROWS" "$OUT" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)" "$LIFE" "$CINT" \
    "$GO_VERSION" "$PION_VERSION" "$NETWORK" <<'PY'
import json, os, platform, sys
rows_path, out, load0, load1, life, cint, gover, pionver, network = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "command": "bench/pion.sh " + " ".join(str(r["n"]) for r in rows if r["server"] == "pion"),
    "pion_defaults_probe": "pion-defaults rows: pion without -lite -dtls-passive, 5 viewers, 15 s",
    "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
    "network": network,
    "load_average_before": load0, "load_average_after": load1,
    "life_s": int(life), "cint_ms": int(cint), "go": gover, "pion_webrtc": pionver,
    "pion_flags": "-lite -dtls-passive", "clip": "lite (assets/clip/lite.h264 + demo.opus)",
    "rows": rows,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
def g(d, k):
    return (d or {}).get(k) or 0
print("# %s, %d cores, %s; load average %s before, %s after" % (cpu, os.cpu_count(), platform.release(), load0, load1))
print("# pion/webrtc %s (%s), tern bench -cint %s -life %s, %s; written to %s" % (pionver, gover, cint, life, network, out))
hdr = ("server", "N", "conn", "fail", "packets", "lost", "rcvbuf", "fps avg", "fps min", "lat v ms", "lat a ms", "jitter v ms",
       "dtls p50", "1st frame", "cpu s/Mpkt", "cpu %", "idle cpu %", "RSS idle", "RSS peak", "KiB/viewer")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join(["---"] * 2 + ["---:"] * (len(hdr) - 2)) + "|")
for r in rows:
    print("| %s | %d | %d | %d | %d | %d | %d | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f | %.0f | %.2f | %.0f%% | %.1f%% | %.1f MiB | %.1f MiB | %.0f |" % (
        r["server"], r["n"], r["connected"], r["failed"], r["packets"], r["losses"], r["udp_rcvbuf_errors"],
        g(r["fps"], "avg"), g(r["fps"], "min"), g(r["video_latency_ms"], "avg"), g(r["audio_latency_ms"], "avg"),
        g(r["video_jitter_ms"], "avg"), r["dtls_ms_p50"] or 0, r["first_frame_ms_p50"] or 0, r["server_cpu_s_per_mpkt"] or 0,
        r["server_cpu_s"] * 100 / r["wall_s"], r["server_idle_cpu_pct"], r["rss_idle_kib"] / 1024, r["rss_peak_kib"] / 1024,
        r["rss_kib_per_viewer"]))
PY
