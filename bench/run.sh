#!/usr/bin/env bash
# The side-by-side benchmark suite (issue 8): one command, from a fresh Debian machine
# (as root) to bench/results/<stamp>.json, a plot and the generated block of BENCHMARKS.md.
#
#   bench/run.sh            the full suite (~25 minutes, at most 30)
#   bench/run.sh --quick    a smoke run of every scenario at small N (~5 minutes)
#   bench/run.sh --no-update   measure and write results, leave BENCHMARKS.md alone
#
# 1. Installs what is missing, pinned: Debian packages valgrind (3.19), coturn (4.6.1, for
#    turnserver and turnutils_uclient), python3-matplotlib (3.6.3), iproute2; the Rust
#    toolchain rust-toolchain.toml pins, through scripts/install-deps.sh --rust; Go 1.26.8
#    when no Go >= 1.26 is installed
#    (Debian's Go fetches the pinned toolchain, which the Go module proxy serves as the
#    module golang.org/toolchain); pion/webrtc v4.2.26 via bench/pion-whep/go.sum.
# 2. Builds tern, bench/baselines (str0m-fanout, udp-blaster) and the cargo benches in
#    release mode, and bench/pion-whep.
# 3. Runs bench/suite.py inside a private network namespace (unshare -n, loopback only, so
#    /proc/net/snmp's UDP drop counters are this run's alone): core figures (bench/core.sh:
#    heap per viewer, callgrind instructions per packet per viewer), the buffer-pool pair,
#    str0m under callgrind, pion/str0m/tern under tern bench at N = 50, 100, 200, 400, tern at
#    1000, 2500, 5000, the raw-UDP limit at the same N, each server stepped up to its largest
#    clean N, TURN against coturn (bench/turn.sh), and the management API's overhead.
# 4. Checks that no process it started is left (every one carries TERN_SUITE_RUN in its
#    environment) and fails if one is.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

QUICK=()
UPDATE=()
for a in "$@"; do
    case "$a" in
        --quick) QUICK=(--quick) ;;
        --no-update) UPDATE=(--no-update) ;;
        -h | --help)
            sed -n '2,28p' "$0"
            exit 0
            ;;
        *)
            echo "bench/run.sh: unknown option $a" >&2
            exit 2
            ;;
    esac
done

log() { echo "[run.sh] $*" >&2; }

if [ -z "${TERN_SUITE_INSIDE:-}" ]; then
    # The whole run (installs and build included) must end within 30 minutes; the suite
    # fits its open-ended part (stepping each server up to its largest clean N) to this.
    export TERN_SUITE_DEADLINE=$(( $(date +%s) + 29 * 60 ))
    # ---------------------------------------------------------------- install (host network)
    export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
    apt_pkgs=()
    have() { command -v "$1" >/dev/null 2>&1; }
    pin() { # pin PACKAGE VERSION-GLOB: PACKAGE=VERSION when apt has it, else the candidate
        local v
        v=$(apt-cache madison "$1" 2>/dev/null | awk -v g="$2" '$3 ~ g {print $3; exit}')
        if [ -n "$v" ]; then echo "$1=$v"; else echo "$1"; fi
    }
    need_pkgs() {
        have valgrind || apt_pkgs+=(valgrind:'^1:3\.19')
        have turnutils_uclient || apt_pkgs+=(coturn:'^4\.6\.1')
        /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt_pkgs+=(python3-matplotlib:'^3\.6\.3')
        have ip || apt_pkgs+=(iproute2:.)
        have unshare || apt_pkgs+=(util-linux:.)
        have curl || apt_pkgs+=(curl:.)
    }
    need_pkgs
    if [ ${#apt_pkgs[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || { log "need root to install: ${apt_pkgs[*]}"; exit 1; }
        apt-get update -qq
        spec=()
        for p in "${apt_pkgs[@]}"; do spec+=("$(pin "${p%%:*}" "${p#*:}")"); done
        log "apt-get install ${spec[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${spec[@]}" >/dev/null
    fi
    have cargo || ./scripts/install-deps.sh --rust

    # Go: a Go >= 1.26 (bench/pion-whep/go.mod), else Debian's Go fetching the pinned one.
    GO_PIN=1.26.8
    go_ok() { "$1" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; }
    GO=$(command -v go || true)
    if [ -z "$GO" ] || ! go_ok "$GO"; then
        if ! have go; then
            [ "$(id -u)" = 0 ] || { log "need root to install golang-go"; exit 1; }
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go ca-certificates >/dev/null
        fi
        log "fetching Go $GO_PIN (module golang.org/toolchain from the Go module proxy)"
        dir=$(cd /tmp && GOFLAGS= GO111MODULE=on go mod download -json \
            "golang.org/toolchain@v0.0.1-go$GO_PIN.linux-amd64" | awk -F'"' '/"Dir"/ {print $4}')
        # A module zip keeps no file modes: copy the tree out of the read-only module cache
        # and make its programs executable (what `go` itself does when it switches toolchains).
        goroot=$HOME/.local/go$GO_PIN
        if [ -n "$dir" ] && [ ! -x "$goroot/bin/go" ]; then
            rm -rf "$goroot"
            mkdir -p "$(dirname "$goroot")"
            cp -r "$dir" "$goroot"
            chmod -R u+w "$goroot"
            chmod +x "$goroot"/bin/* "$goroot"/pkg/tool/*/*
        fi
        GO=$goroot/bin/go
        go_ok "$GO" || { log "no usable Go toolchain at $GO (from ${dir:-nothing})"; exit 1; }
    fi
    export GO

    # ---------------------------------------------------------------- build
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    export CARGO_TARGET_DIR=$TARGET
    log "cargo build --release (tern, bench/baselines, benches)"
    cargo build --release -p tern -p tern-baselines
    cargo bench -p tern-proto --bench srtp --no-run
    cargo bench -p tern-pool --bench pair --no-run
    log "go build bench/pion-whep"
    PION=$TARGET/pion-whep
    (cd bench/pion-whep && "$GO" mod download && "$GO" build -trimpath -o "$PION" .)
    GO_VERSION=$("$GO" version)
    PION_VERSION=$(cd bench/pion-whep && "$GO" list -m -f '{{.Version}}' github.com/pion/webrtc/v4)
    export TARGET PION GO_VERSION PION_VERSION

    # ---------------------------------------------------------------- measure
    export TERN_SUITE_RUN="suite-$$-$(date +%s%N)"
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    status=0
    if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
        TERN_SUITE_INSIDE=1 unshare -n "$0" "${QUICK[@]}" "${UPDATE[@]}" || status=$?
    else
        log "not root or no unshare: measuring on the host's loopback"
        TERN_SUITE_INSIDE=host "$0" "${QUICK[@]}" "${UPDATE[@]}" || status=$?
    fi

    # ---------------------------------------------------------------- nothing left behind
    sleep 1
    # The scan's own commands must not carry the marker.
    marker=$TERN_SUITE_RUN
    export -n TERN_SUITE_RUN
    left=()
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}
        pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        if { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qx "TERN_SUITE_RUN=$marker"; then
            left+=("$pid:$(cat "/proc/$pid/comm" 2>/dev/null)")
        fi
    done
    if [ ${#left[@]} -gt 0 ]; then
        log "FAIL: processes left behind: ${left[*]}"
        for p in "${left[@]}"; do kill -9 "${p%%:*}" 2>/dev/null || true; done
        exit 1
    fi
    log "no process left behind"
    exit "$status"
fi

# -------------------------------------------------------------------- inside the namespace
if [ "$TERN_SUITE_INSIDE" = 1 ]; then
    ip link set lo up
    NETWORK="private network namespace (unshare -n), loopback"
else
    NETWORK="host loopback"
fi
exec /usr/bin/python3 bench/suite.py "${QUICK[@]}" "${UPDATE[@]}" --target "$TARGET" --pion "$PION" \
    --network "$NETWORK" --command "${TERN_SUITE_COMMAND:-bench/run.sh}"
