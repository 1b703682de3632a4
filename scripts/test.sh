#!/usr/bin/env bash
# The one test command: installs what is missing, then runs every check in order, and goes on
# after a failure so that one run shows them all. Exits non-zero if any stage failed.
#
#   ./scripts/test.sh                 everything (CI runs this through .ci/run)
#   ./scripts/test.sh --quick         no fuzz runs, no browser or ops tests, no soak
#   ./scripts/test.sh --only STAGE    just STAGE (a comma-separated list works too); deps runs
#                                     only when listed, e.g. --only deps,browser
#   ./scripts/test.sh --no-deps       skip scripts/install-deps.sh
#
# Stages, in order:
#   deps        scripts/install-deps.sh
#   fmt         cargo fmt --all --check
#   lib         cargo test --workspace --lib, in debug: every crate's unit tests, the fast
#               check that runs before the release builds (limit 600 s)
#   clippy      cargo clippy --workspace --all-targets --profile fast -- -D warnings, in the lib
#               stage's profile so that it reuses the build scripts (AWS-LC's C build among
#               them) and proc macros that stage built (release: 148 s, debug: 57 s after the
#               lib stage, cold cache, this machine; in the dev profile, CI's 121 s rebuilt them)
#   test        cargo test --workspace --release --bins --test '*', then --doc: the integration
#               tests and binaries' tests in release (the unit tests ran in the lib stage);
#               vendor, fuzz-build and fuzz run beside it in the idle scheduling class (see
#               BESIDE_STAGES below), and are reported in their turn
#   vendor      the vendored crates' own tests: dimpl's (vendor/dimpl/PATCHES.md) unit tests and
#               DTLS 1.2 and 1.3 handshake suites, OpenSSL and wolfSSL interop included; retina's
#               (vendor/retina/PATCHES.md) and srt-protocol's (vendor/srt-protocol/PATCHES.md)
#               unit tests; the three share one target folder ($CARGO_TARGET_DIR or target/,
#               then vendor/), so what they have in common (AWS-LC, tokio) is built once
#   fuzz-build  cd fuzz && cargo fuzz build -O --sanitizer none, on the dated nightly that
#               fuzz/rust-toolchain.toml names (tern's fuzzed code is safe Rust;
#               docs/src/contributing.md says why no AddressSanitizer)
#   fuzz        each target in fuzz/fuzz_targets/ for $FUZZ_SECONDS seconds (default 10),
#               $FUZZ_JOBS targets at a time (default: nproc; each uses one core)
#   browser     cargo build --release -p tern, then node --test for each file of tests/browser/,
#               each inside a fresh network namespace (scripts/netns-run.sh), $BROWSER_JOBS
#               files at a time (default 2)
#   ops         the operator's kit: tests/ops/image.sh (the container image built with buildah,
#               run under podman, health-checked, played by a pion viewer) and
#               tests/ops/prometheus.sh (Prometheus scraping a live tern answers every
#               dashboard panel's query; promtool checks and tests the alert rules)
#   soak        bench/soak.sh $SOAK_MINUTES (default 1): 1,000 steady viewers, 50/s churning,
#               publishers and TURN allocations cycling; heap and descriptors back to idle
#
# Environment: BESIDE_TEST (1, the default: vendor, fuzz-build and fuzz run beside the test
# stage; 0: in their turn), FUZZ_SECONDS (default 10; 14 beside the test stage), FUZZ_JOBS
# (targets fuzzed at once, default nproc), BROWSER_JOBS (browser test files run at once,
# default 2), E2E_THREADS (end-to-end tests at work at once, default 3; libtest starts them
# all), SOAK_MINUTES (default 1),
# CARGO_TARGET_DIR (respected by every stage; the fuzz build then goes to
# $CARGO_TARGET_DIR/fuzz), TERN_BIN (binary for the browser tests).
# Every stage runs under a time limit (see stage_limit), so a hung stage fails instead of
# eating the CI budget.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
SELF="$ROOT/scripts/test.sh"
export PATH="$HOME/.cargo/bin:$PATH"
FUZZ_SECONDS_GIVEN="${FUZZ_SECONDS:-}"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
export FUZZ_SECONDS
FUZZ_JOBS="${FUZZ_JOBS:-$(nproc)}"
export FUZZ_JOBS
SOAK_MINUTES="${SOAK_MINUTES:-1}"
export SOAK_MINUTES
BROWSER_JOBS="${BROWSER_JOBS:-2}"
export BROWSER_JOBS
E2E_THREADS="${E2E_THREADS:-3}"
export E2E_THREADS
# The build and the runs must agree, or each run rebuilds. Safe Rust: no AddressSanitizer.
FUZZ_FLAGS="--sanitizer none"

ALL_STAGES=(deps fmt lib clippy test vendor fuzz-build fuzz browser ops soak)
# Lines of a failed stage's log that the summary repeats.
FAILURE_LINES='^test .* FAILED$|^ *not ok |panicked at|^error(\[E[0-9]+\])?:|^(Diff in|!! )|ERROR: libFuzzer|^SUMMARY: |^(Base64|artifact_prefix|Test unit written to)|^fuzz targets that failed|FAIL|^    [A-Za-z_0-9:]+$'

fuzz_targets() {
    local f
    for f in "$ROOT"/fuzz/fuzz_targets/*.rs; do
        [ -e "$f" ] || continue
        basename "$f" .rs
    done
}

# Browser test files that run alone, before the others: they assert that a viewer on an
# unlimited link never freezes while another one is squeezed, which a second Chromium
# decoding beside them can break on 2 cores (it did once, 1.16 s of freezes, with a build
# running too); and that hls.js climbs back to the top of an LL-HLS ladder within 20 s of a
# throttle lifting, which it did not beside another file (its bandwidth estimate stayed low).
BROWSER_SOLO=(adaptive-clients adaptive hls-ladder)
# The other browser test files, the longest first (seconds each, one at a time, at stop 64),
# then the rest in name order.
BROWSER_LONG=(slate interop bframes codecs gstreamer recording reload pause hls gso nack-budget
    directory srt)
browser_files() {
    local f n seen=" "
    for n in "${BROWSER_SOLO[@]}"; do seen+="$n.test.mjs "; done
    for n in "${BROWSER_LONG[@]}"; do
        [ -e "$ROOT/tests/browser/$n.test.mjs" ] || continue
        echo "$n.test.mjs"
        seen+="$n.test.mjs "
    done
    for f in "$ROOT"/tests/browser/*.test.mjs; do
        f=$(basename "$f")
        [[ "$seen" == *" $f "* ]] || echo "$f"
    done
}

# run_pool JOBS CMD ITEM...: runs `CMD ITEM` for each ITEM, JOBS at a time, each one's output
# to a file of its own that is printed whole when it ends (so parallel logs never
# interleave); the items whose command failed are left in the array POOL_FAILED.
run_pool() {
    local jobs=$1 cmd=$2 item logs
    shift 2
    local -A running=()
    POOL_FAILED=()
    logs=$(mktemp -d)
    reap() { # pid, exit status
        cat "$logs/${running[$1]}"
        [ "$2" -eq 0 ] || POOL_FAILED+=("${running[$1]}")
        unset "running[$1]"
    }
    # Waits for one item to end and reaps it. `wait -n` knows only the jobs still in the job
    # table: one that ended before the call may already have left it (wait -n then says "no
    # such job" and names none), so the ended ones are found with kill -0 and their status
    # read with a plain `wait PID`, which remembers it.
    reap_one() {
        local pid= st p
        wait -n -p pid "${!running[@]}" 2>/dev/null
        st=$?
        if [ -n "$pid" ] && [ -n "${running[$pid]+set}" ]; then
            reap "$pid" "$st"
            return
        fi
        for p in "${!running[@]}"; do
            if ! kill -0 "$p" 2>/dev/null; then
                wait "$p"
                reap "$p" $?
            fi
        done
    }
    for item in "$@"; do
        while [ "${#running[@]}" -ge "$jobs" ]; do
            reap_one
        done
        "$cmd" "$item" >"$logs/$item" 2>&1 &
        running[$!]=$item
    done
    while [ "${#running[@]}" -gt 0 ]; do
        reap_one
    done
    rm -rf "$logs"
}

fuzz_target_dir() {
    if [ -n "${CARGO_TARGET_DIR:-}" ]; then
        echo "$CARGO_TARGET_DIR/fuzz"
    else
        echo "$ROOT/fuzz/target"
    fi
}

describe_stage() {
    case "$1" in
        deps) echo "scripts/install-deps.sh" ;;
        fmt) echo "cargo fmt --all --check" ;;
        lib) echo "cargo test --workspace --lib --no-fail-fast --profile fast (debug, no debug info)" ;;
        clippy) echo "cargo clippy --workspace --all-targets --profile fast -- -D warnings" ;;
        test) echo "E2E_THREADS=$E2E_THREADS cargo test --workspace --release --no-fail-fast --bins --test '*' -- --test-threads=256; cargo test --workspace --release --no-fail-fast --doc" ;;
        vendor) echo "OPENSSL_NO_VENDOR=1 cargo test --manifest-path vendor/dimpl/Cargo.toml --lib --test dtls12 --test dtls13; cargo test --manifest-path vendor/retina/Cargo.toml --lib; cargo test --manifest-path vendor/srt-protocol/Cargo.toml --lib" ;;
        fuzz-build) echo "cd fuzz && cargo fuzz build -O $FUZZ_FLAGS" ;;
        fuzz) echo "cargo fuzz run -O $FUZZ_FLAGS TARGET -- -max_total_time=$FUZZ_SECONDS, for $(fuzz_targets | tr '\n' ' ')" ;;
        browser) echo "cargo build --release -p tern; scripts/netns-run.sh node --test tests/browser/FILE, $BROWSER_JOBS files at a time" ;;
        ops) echo "cargo build --release -p tern; tests/ops/image.sh; tests/ops/prometheus.sh" ;;
        soak) echo "bench/soak.sh $SOAK_MINUTES 1000 50" ;;
    esac
}

# Seconds a stage may take before it is stopped and counted as failed.
stage_limit() {
    case "$1" in
        deps) echo 1800 ;;
        fmt) echo 300 ;;
        lib) echo 600 ;;
        clippy | test | fuzz-build) echo 2400 ;;
        vendor) echo 1800 ;;
        fuzz) echo $(($(fuzz_targets | wc -l) * (FUZZ_SECONDS + 90) + 60)) ;;
        browser) echo 1800 ;;
        ops) echo 900 ;;
        soak) echo $((SOAK_MINUTES * 60 + 900)) ;;
    esac
}

run_stage_body() {
    set -e
    case "$1" in
        deps)
            "$ROOT/scripts/install-deps.sh"
            ;;
        fmt)
            cargo fmt --all --check
            ;;
        lib)
            cargo test --workspace --lib --no-fail-fast --profile fast
            ;;
        clippy)
            cargo clippy --workspace --all-targets --profile fast -- -D warnings
            ;;
        test)
            # The unit tests ran in the lib stage (debug, with overflow checks); compiling
            # every crate's test harness again in release took 37 s of this stage.
            # --no-fail-fast: one failing binary must not hide the ones after it (cargo stops
            # at the first otherwise; twice a timing run lost 21 of 22 binaries that way).
            local rc=0
            # $E2E_THREADS tests at work at a time (default 3): most of them wait on real
            # time (encoders, timeouts, viewers' sessions), so a third on this 2-core machine
            # took the e2e binary from 811 s to 711 s, every test passing. libtest starts
            # every test at once and each takes one of $E2E_THREADS slots first
            # (crates/tern/tests/e2e/common/slot.rs): a test waiting on its module's lock
            # holds no slot, where under --test-threads=3 it held a thread (the cluster
            # tests' 193 s of work took 482 s of threads).
            cargo test --workspace --release --no-fail-fast --bins --test '*' -- \
                --test-threads=256 || rc=1
            cargo test --workspace --release --no-fail-fast --doc || rc=1
            return "$rc"
            ;;
        vendor)
            # Every crate's tests run even after one fails (set -e would stop at the first), as
            # in the test stage; the stage fails if any of them failed.
            local rc=0
            # Each vendored crate is a workspace of its own: without a shared target folder
            # each built its dependencies in its own (CI: 240 s for the stage).
            # (No `local`: it would hide the caller's CARGO_TARGET_DIR; the stage is a process
            # of its own.)
            export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/vendor"
            # The system's OpenSSL for the interop tests, not one built from source.
            OPENSSL_NO_VENDOR=1 cargo test --manifest-path "$ROOT/vendor/dimpl/Cargo.toml" \
                --lib --test dtls12 --test dtls13 || rc=1
            cargo test --manifest-path "$ROOT/vendor/retina/Cargo.toml" --lib || rc=1
            cargo test --manifest-path "$ROOT/vendor/srt-protocol/Cargo.toml" --lib || rc=1
            return "$rc"
            ;;
        fuzz-build)
            cd "$ROOT/fuzz"
            cargo fuzz build -O $FUZZ_FLAGS --target-dir "$(fuzz_target_dir)"
            ;;
        fuzz)
            # libFuzzer runs one target on one core: $FUZZ_JOBS targets at a time (default: one
            # per core), each still for its $FUZZ_SECONDS, so the stage does the same fuzzing in
            # 1/FUZZ_JOBS of the wall time. Each target's output is printed whole when it ends.
            set +e
            cd "$ROOT/fuzz"
            fuzz_one() {
                echo "--- fuzz $1: ${FUZZ_SECONDS}s"
                cargo fuzz run -O $FUZZ_FLAGS --target-dir "$(fuzz_target_dir)" "$1" -- \
                    -max_total_time="$FUZZ_SECONDS" -print_final_stats=1
            }
            # shellcheck disable=SC2046 # one word per target
            run_pool "$FUZZ_JOBS" fuzz_one $(fuzz_targets)
            if [ "${#POOL_FAILED[@]}" -gt 0 ]; then
                echo "fuzz targets that failed: ${POOL_FAILED[*]} (crash inputs under fuzz/artifacts/)"
                return 1
            fi
            ;;
        browser)
            # $BROWSER_JOBS files at a time (default 2), each in a network namespace of its own
            # (scripts/netns-run.sh), so two files never share an address, a port or a `tc`
            # qdisc. Most of a file's time is waiting on real time (encoders, congestion
            # control, timeouts), not the cores: one file at a time took 978 s of this stage.
            # The files in BROWSER_SOLO run first, one at a time; then the longest start first
            # so that the lanes end together; each file's output is printed whole when it ends.
            cargo build --release -p tern
            set +e
            local f n bad=()
            browser_one() {
                echo "--- browser $1"
                "$ROOT/scripts/netns-run.sh" node --test "$ROOT/tests/browser/$1"
            }
            for n in "${BROWSER_SOLO[@]}"; do
                f="$n.test.mjs"
                [ -e "$ROOT/tests/browser/$f" ] || continue
                echo "--- browser $f (alone)"
                "$ROOT/scripts/netns-run.sh" node --test "$ROOT/tests/browser/$f" || bad+=("$f")
            done
            # shellcheck disable=SC2046 # one word per file
            run_pool "$BROWSER_JOBS" browser_one $(browser_files)
            bad+=("${POOL_FAILED[@]}")
            if [ "${#bad[@]}" -gt 0 ]; then
                echo "browser test files that failed: ${bad[*]}"
                return 1
            fi
            ;;
        ops)
            # The operator's kit: the container image (built, loaded, run, health-checked,
            # played), then Prometheus over a live tern (every dashboard panel's query) and
            # the alert rules (promtool). Both run even if the first fails.
            cargo build --release -p tern
            local rc=0
            "$ROOT/tests/ops/image.sh" || rc=1
            "$ROOT/tests/ops/prometheus.sh" || rc=1
            return "$rc"
            ;;
        soak)
            "$ROOT/bench/soak.sh" "$SOAK_MINUTES" 1000 50
            ;;
        *)
            echo "unknown stage $1" >&2
            return 2
            ;;
    esac
}

# Internal: `test.sh --stage NAME` runs one stage body (used under `timeout`).
if [ "${1:-}" = "--stage" ]; then
    run_stage_body "$2"
    exit $?
fi

usage() { sed -n '2,/^set /{/^#/p}' "$SELF"; }

QUICK=0
DEPS=1
ONLY=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --no-deps) DEPS=0 ;;
        --only)
            [ "$#" -ge 2 ] || {
                echo "--only needs a stage: ${ALL_STAGES[*]}" >&2
                exit 2
            }
            ONLY="$2"
            shift
            ;;
        --only=*) ONLY="${1#--only=}" ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "unknown option $1" >&2
            usage >&2
            exit 2
            ;;
    esac
    shift
done

# Which stages run, and which are skipped (and why).
declare -A SKIP=()
if [ -n "$ONLY" ]; then
    IFS=',' read -r -a wanted <<<"$ONLY"
    for w in "${wanted[@]}"; do
        ok=0
        for s in "${ALL_STAGES[@]}"; do [ "$s" = "$w" ] && ok=1; done
        if [ "$ok" -eq 0 ]; then
            echo "unknown stage '$w'; stages: ${ALL_STAGES[*]}" >&2
            exit 2
        fi
    done
    for s in "${ALL_STAGES[@]}"; do
        keep=0
        for w in "${wanted[@]}"; do [ "$s" = "$w" ] && keep=1; done
        [ "$keep" -eq 1 ] || SKIP[$s]=1
    done
else
    if [ "$QUICK" -eq 1 ]; then
        SKIP[fuzz]=1
        SKIP[browser]=1
        SKIP[ops]=1
        SKIP[soak]=1
    fi
fi
[ "$DEPS" -eq 1 ] || SKIP[deps]=1

CUR_PID=""
BESIDE_PID=""
STAGE_LOGS=$(mktemp -d) # each stage's log, for the summary; removed at the end
on_signal() {
    echo
    echo "test.sh: interrupted"
    if [ -n "$CUR_PID" ]; then kill -TERM "$CUR_PID" 2>/dev/null || true; fi
    if [ -n "$BESIDE_PID" ]; then
        # The chain's subshell and the `timeout` it runs (which passes the signal on).
        pkill -TERM -P "$BESIDE_PID" 2>/dev/null || true
        kill -TERM "$BESIDE_PID" 2>/dev/null || true
    fi
    # Close our end of the stage's tee, or it never sees the end of its input and `wait`
    # waits for it forever.
    if [ -n "${tee_fd:-}" ]; then exec {tee_fd}>&-; fi
    wait 2>/dev/null
    rm -rf "$STAGE_LOGS"
    exit 130
}
trap on_signal INT TERM

# Stages run beside the test stage: its integration tests mostly wait on real time (encoders,
# timeouts, viewers' sessions; two thirds of this 2-core machine's CPU time was idle while
# they ran), so these run then, one after another, in the idle scheduling class (`chrt
# --idle 0`: they get only CPU time that no other process wants, so the tests' timing is not
# theirs to disturb). Each keeps its own time limit and log, printed whole when the loop
# reaches it; the loop waits there for the chain to end, so nothing else runs beside the
# browser tests after it. Only when the test stage and all of these run (and chrt is there);
# BESIDE_TEST=0 runs them in their turn.
BESIDE_STAGES=(vendor fuzz-build fuzz)
beside=0
if [ "${BESIDE_TEST:-1}" = 1 ] && [ -z "${SKIP[test]:-}" ] && command -v chrt >/dev/null; then
    beside=1
    for b in "${BESIDE_STAGES[@]}"; do [ -z "${SKIP[$b]:-}" ] || beside=0; done
fi
# In the idle class the fuzz targets ran 0.73 of the inputs of their turn in 10 s each
# (44.7 M against 61.0 M, both CI runs on this machine): 14 s each keeps the amount.
if [ "$beside" -eq 1 ] && [ -z "$FUZZ_SECONDS_GIVEN" ]; then
    FUZZ_SECONDS=14
fi
is_beside() {
    local b
    [ "$beside" -eq 1 ] || return 1
    for b in "${BESIDE_STAGES[@]}"; do [ "$b" = "$1" ] && return 0; done
    return 1
}
# Starts the chain; each stage leaves its exit status, seconds and start time in $STAGE_LOGS.
start_beside() {
    (
        for b in "${BESIDE_STAGES[@]}"; do
            local t0
            t0=$(date +%s)
            date -u '+%Y-%m-%d %H:%M:%S UTC' >"$STAGE_LOGS/$b.started"
            timeout --kill-after=30 "$(stage_limit "$b")" chrt --idle 0 "$SELF" --stage "$b" \
                </dev/null >"$STAGE_LOGS/$b" 2>&1
            echo $? >"$STAGE_LOGS/$b.rc"
            echo $(($(date +%s) - t0)) >"$STAGE_LOGS/$b.elapsed"
        done
    ) &
    BESIDE_PID=$!
}

stage_header() { # stage, number, started at
    local limit
    limit=$(stage_limit "$1")
    echo
    echo "=================================================================================="
    echo "== [$2/$n_total] $1: $(describe_stage "$1")"
    if is_beside "$1"; then
        echo "== started $3 beside the test stage (idle class), limit ${limit}s"
    else
        echo "== started $3, limit ${limit}s"
    fi
    echo "=================================================================================="
}

stage_result() { # stage, exit status
    if [ "$2" -eq 0 ]; then
        RESULT[$1]=ok
    else
        RESULT[$1]=FAIL
        [ "$2" -eq 124 ] && echo "!! $1: stopped after its $(stage_limit "$1")s limit"
    fi
    RAN+=("$1")
    echo "== $1: ${RESULT[$1]} (${ELAPSED[$1]}s, exit $2)"
}

declare -A RESULT=() ELAPSED=()
RAN=()
total_start=$(date +%s)
n_total=0
for s in "${ALL_STAGES[@]}"; do [ -n "${SKIP[$s]:-}" ] || n_total=$((n_total + 1)); done
i=0
for s in "${ALL_STAGES[@]}"; do
    [ -n "${SKIP[$s]:-}" ] && continue
    i=$((i + 1))
    if is_beside "$s"; then
        # The chain was started with the test stage: wait for it, then report this stage.
        if [ -n "$BESIDE_PID" ]; then
            wait "$BESIDE_PID"
            BESIDE_PID=""
        fi
        stage_header "$s" "$i" "$(cat "$STAGE_LOGS/$s.started" 2>/dev/null || echo '(never)')"
        cat "$STAGE_LOGS/$s" 2>/dev/null
        ELAPSED[$s]=$(cat "$STAGE_LOGS/$s.elapsed" 2>/dev/null || echo 0)
        stage_result "$s" "$(cat "$STAGE_LOGS/$s.rc" 2>/dev/null || echo 1)"
        continue
    fi
    [ "$s" = test ] && [ "$beside" -eq 1 ] && start_beside
    limit=$(stage_limit "$s")
    stage_header "$s" "$i" "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    start=$(date +%s)
    # The stage's output goes to the terminal and to its log, from which the summary quotes the
    # lines that say what failed (CI shows only the end of a long run's output).
    exec {tee_fd}> >(tee "$STAGE_LOGS/$s")
    tee_pid=$!
    timeout --kill-after=30 "$limit" "$SELF" --stage "$s" </dev/null >&"$tee_fd" 2>&1 &
    CUR_PID=$!
    wait "$CUR_PID"
    rc=$?
    CUR_PID=""
    exec {tee_fd}>&-
    wait "$tee_pid" 2>/dev/null
    ELAPSED[$s]=$(($(date +%s) - start))
    stage_result "$s" "$rc"
done

passed=0
failed=0
skipped=0
echo
echo "=================================================================================="
echo "== summary ($(($(date +%s) - total_start))s in all)"
echo "=================================================================================="
for s in "${ALL_STAGES[@]}"; do
    if [ -n "${SKIP[$s]:-}" ]; then
        echo "$s: skipped"
        skipped=$((skipped + 1))
    elif [ "${RESULT[$s]}" = ok ]; then
        echo "$s: ok (${ELAPSED[$s]}s)"
        passed=$((passed + 1))
    else
        echo "$s: FAIL (${ELAPSED[$s]}s)"
        failed=$((failed + 1))
        # What failed, in the words of the tools (cargo test, node --test, libFuzzer, the
        # stage's own messages): at most 40 lines, each cut at 300 characters.
        # node --test gives an assertion's message under `error:` (on that line, or on the
        # next ones after `error: |-`): those lines too, the first of a block's.
        # (The pattern comes through the environment: `awk -v` would read its backslashes.)
        FAILURE_LINES="$FAILURE_LINES" awk '
            BEGIN { re = ENVIRON["FAILURE_LINES"] }
            $0 ~ re { print; next }
            /^ +error: / { print; if ($0 ~ /error: [|>]-?$/) more = 2; next }
            more > 0 { print; more-- }
        ' "$STAGE_LOGS/$s" | cut -c1-300 | head -40 | sed 's/^/    /'
    fi
done
rm -rf "$STAGE_LOGS"
if [ "$skipped" -gt 0 ]; then
    echo "stages: $passed passed, $failed failed, $skipped skipped"
else
    echo "stages: $passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
