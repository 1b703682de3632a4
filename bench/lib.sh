# Sourced by the RTMP benchmarks (rtmp.sh, transcode.sh, hls.sh): one way to build tern,
# start `tern serve --rtmp` on free loopback ports with app "live" and its stream "cam",
# clean up on exit, and read the CPU time of tern's threads by name.
#
#   tern_build                  sets TERN (building it if needed)
#   start_rtmp_server LEVEL     sets dir, HTTP, MEDIA, RTMP, SP; RUST_LOG=LEVEL into $dir/tern.log;
#                               on exit kills SP and FP (the caller's ffmpeg, if it sets FP)
#   thread_ticks NAME           utime + stime (clock ticks, /proc/…/stat) of the threads NAME
#   thread_ns NAME              time on CPU (ns, /proc/…/schedstat: finer) of the threads NAME
#
# And for the lite-clip server benchmarks (server-ab.sh, server-profile.sh), one server and
# one tester at a time on fixed loopback ports (each runs in a network namespace of its own):
#
#   lite_pair_init              sets tmp (a fresh folder), server and bench (empty); on exit
#                               kills both and removes tmp
#   start_lite_demo BIN [ARG…]  `BIN demo --clip lite` on 127.0.0.1:18180 (HTTP) and :18181
#                               (media), log in $tmp/server.log; sets server
#   start_lite_bench BIN N LIFE [ARG…]
#                               BIN's `tern bench` of N viewers of live/demo 2 ms apart for
#                               LIFE s, output in $tmp/bench.out; sets bench

tern_build() {
    local target=${CARGO_TARGET_DIR:-target}
    cargo build --release -p tern >/dev/null 2>&1 || cargo build --release -p tern
    TERN="$target/release/tern"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_rtmp_server() {
    dir=$(mktemp -d)
    trap 'kill "${SP:-}" "${FP:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
    printf '[[app]]\nname = "live"\nstreams = ["cam"]\n' >"$dir/tern.toml"
    HTTP=$(free_port)
    MEDIA=$(free_port)
    RTMP=$(free_port)
    RUST_LOG=$1 "$TERN" serve --config "$dir/tern.toml" --http "127.0.0.1:$HTTP" \
        --media "127.0.0.1:$MEDIA" --candidate 127.0.0.1 --rtmp "127.0.0.1:$RTMP" 2>"$dir/tern.log" &
    SP=$!
    sleep 1
}

# CPU clock ticks (utime + stime) of the whole process $1, or of $SP (the server) without
# one, its ended threads included.
proc_ticks() {
    local st
    read -r -a st <<<"$(sed 's/.*) //' "/proc/${1:-$SP}/stat")"
    echo $((st[11] + st[12]))
}

thread_ticks() {
    local sum=0 t st
    for t in /proc/$SP/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = "$1" ]; then
            read -r -a st <<<"$(sed 's/.*) //' "$t/stat" 2>/dev/null)" || continue
            sum=$((sum + st[11] + st[12]))
        fi
    done
    echo "$sum"
}

thread_ns() {
    local sum=0 t ns
    for t in /proc/$SP/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = "$1" ]; then
            read -r ns _ <"$t/schedstat" 2>/dev/null || continue
            sum=$((sum + ns))
        fi
    done
    echo "$sum"
}

lite_pair_init() {
    tmp=$(mktemp -d)
    server=""
    bench=""
    trap lite_pair_cleanup EXIT
}

lite_pair_cleanup() {
    [ -n "$bench" ] && kill "$bench" 2>/dev/null || true
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}

start_lite_demo() {
    local bin=$1
    shift
    "$bin" demo --clip lite --rtmp none --http 127.0.0.1:18180 --media 127.0.0.1:18181 \
        --candidate 127.0.0.1 "$@" >"$tmp/server.log" 2>&1 &
    server=$!
}

start_lite_bench() {
    local bin=$1 n=$2 life=$3
    shift 3
    "$bin" bench -url http://127.0.0.1:18180/live/demo/whep -n "$n" -cint 2 -life "$life" \
        -sint 600000 "$@" >"$tmp/bench.out" 2>&1 &
    bench=$!
}
