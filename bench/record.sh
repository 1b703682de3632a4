#!/usr/bin/env bash
# Recording cost (issue 38). STREAMS publishers: up to 64 (tern's RTMP connection cap) over
# RTMP, each an ffmpeg copying (-c copy: no
# encoding here) a pre-encoded 1280x720 30 fps H264 (x264 veryfast, 4 Mbit/s CBR, B-frames,
# a keyframe a second) + AAC 128 kbit/s FLV in a loop, push to `tern serve` on loopback;
# past 64, the rest are `tern bench --publish` WHIP publishers of the built-in clip (H264 +
# Opus, ~1.1 Mbit/s) to declared streams w, w1, w2... (one WHEP viewer on w, in both runs).
# Two runs with the same publishers: recording off, then `record.enabled` into a tmpfs (when
# root; else a folder on disk), so the figures are tern's work, not the disk's. For each run,
# over a WINDOW-second steady state after a warm-up:
#   - tern's CPU (utime + stime of the process), and of its RtmpSession and RecordWriter
#     threads;
#   - tern's RSS at the end, and the recordings pool (used, peak);
#   - bytes written per second, fragments written and fragments late (written more than a
#     second after their part length past their end), recordings stopped by an overrun.
# The cost per recorded stream is (on - off) / STREAMS.
#
#   bench/record.sh [STREAMS] [WINDOW]      (defaults 100 20)
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${1:-100}
WINDOW=${2:-20}
WARMUP=8
# shellcheck source=bench/lib.sh
. bench/lib.sh
tern_build
work=$(mktemp -d)
PIDS=()
cleanup() {
    kill "${PIDS[@]}" "${SP:-}" 2>/dev/null || true
    wait 2>/dev/null || true
    mountpoint -q "$work/rec" && umount "$work/rec"
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/rec"
target="folder on disk"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=6g tmpfs "$work/rec"; then
    target="tmpfs"
fi
src="$work/src.flv"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i testsrc2=size=1280x720:rate=30 \
    -f lavfi -i sine=frequency=440:sample_rate=44100 -t 20 -c:v libx264 -preset veryfast \
    -b:v 4M -minrate 4M -maxrate 4M -bufsize 4M -x264-params nal-hrd=cbr -g 30 -pix_fmt yuv420p \
    -c:a aac -b:a 128k -f flv "$src"
echo "source: $(stat -c %s "$src") bytes for 20 s ($(($(stat -c %s "$src") * 8 / 20 / 1000)) kbit/s); target: $target"

metric() {
    curl -s "http://127.0.0.1:$HTTP/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

RTMPS=$((STREAMS < 64 ? STREAMS : 64))
WHIPS=$((STREAMS - RTMPS))
declared=$(python3 -c "print(', '.join(['\"w\"'] + ['\"w%d\"' % i for i in range(1, $WHIPS)]))")

run() { # $1 = enabled (true/false)
    printf '[[app]]\nname = "live"\nstreams = [%s]\n[app.record]\nenabled = %s\npath = "%s/%%stream-%%Y%%m%%d-%%H%%M%%S"\n' \
        "$declared" "$1" "$work/rec" >"$work/tern.toml"
    HTTP=$(free_port)
    MEDIA=$(free_port)
    RTMP=$(free_port)
    RUST_LOG=warn "$TERN" serve --config "$work/tern.toml" --http "127.0.0.1:$HTTP" \
        --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" 2>"$work/tern-$1.log" &
    SP=$!
    sleep 1
    PIDS=()
    for i in $(seq 1 "$RTMPS"); do
        ffmpeg -hide_banner -nostdin -loglevel error -re -stream_loop -1 -i "$src" -c copy \
            -f flv "rtmp://127.0.0.1:$RTMP/live/s$i" </dev/null &
        PIDS+=($!)
        sleep 0.1
    done
    if [ "$WHIPS" -gt 0 ]; then
        "$TERN" bench -url "http://127.0.0.1:$HTTP/live/w/whep" --publish "$WHIPS" -n 1 \
            -life $((WARMUP + WINDOW + 5)) -sint 600000 --details false >"$work/bench-$1.txt" 2>&1 &
        PIDS+=($!)
    fi
    sleep "$WARMUP"
    local hz t0 r0 w0 b0 p0 l0 t1 r1 w1 b1 p1 l1 rss live
    hz=$(getconf CLK_TCK)
    t0=$(proc_ticks)
    r0=$(thread_ticks RtmpSession)
    w0=$(thread_ticks RecordWriter)
    b0=$(metric tern_record_bytes_total)
    p0=$(metric tern_record_parts_total)
    l0=$(metric tern_record_parts_late_total)
    sleep "$WINDOW"
    t1=$(proc_ticks)
    r1=$(thread_ticks RtmpSession)
    w1=$(thread_ticks RecordWriter)
    b1=$(metric tern_record_bytes_total)
    p1=$(metric tern_record_parts_total)
    l1=$(metric tern_record_parts_late_total)
    rss=$(awk '/VmRSS/ { print $2 }' "/proc/$SP/status")
    live=$(curl -s "http://127.0.0.1:$HTTP/v1/streams" | python3 -c 'import json,sys; print(sum(1 for s in json.load(sys.stdin) if "\"live\":true" in json.dumps(s).replace(" ", "")))')
    echo "record.enabled=$1: $live streams live, $(metric tern_recordings) recording"
    echo "  tern CPU: $(python3 -c "print(f'{($t1 - $t0) / $hz / $WINDOW * 100:.1f}')") % of a core" \
        "(RtmpSession threads $(python3 -c "print(f'{($r1 - $r0) / $hz / $WINDOW * 100:.1f}')") %," \
        "RecordWriter $(python3 -c "print(f'{($w1 - $w0) / $hz / $WINDOW * 100:.1f}')") %)"
    echo "  RSS: $((rss / 1024)) MiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    curl -s "http://127.0.0.1:$HTTP/v1/memory" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pools"]:
    if p["name"] == "recordings":
        print("  recordings pool: used %d B, peak %d B, %d items" % (p["used_bytes"], p["peak_bytes"], p["items_in_use"]))'
    echo "  written: $(python3 -c "print(f'{($b1 - $b0) / $WINDOW / 1e6:.2f}')") MB/s, $((p1 - p0)) fragments, $((l1 - l0)) late," \
        "overruns $(metric tern_record_overruns_total), failures $(metric tern_record_failures_total)," \
        "queued now $(metric tern_record_queued_bytes) B"
    echo "RUN $1 cpu_ticks=$((t1 - t0)) rss_kib=$rss"
    kill "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
    kill "$SP"
    wait "$SP" 2>/dev/null || true
    SP=
}

echo "$STREAMS streams ($RTMPS RTMP at 4 Mbit/s, $WHIPS WHIP clip), ${WINDOW} s window after ${WARMUP} s warm-up, $(nproc) cores"
run false
run true
echo "files: $(find "$work/rec" -name '*.mp4' | wc -l), $(du -sm "$work/rec" | cut -f1) MiB"
