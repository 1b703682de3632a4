#!/usr/bin/env bash
# Installs what building and testing tern needs, and only what is missing.
# Idempotent: a second run on a ready machine does nothing but checks (about a second).
#
#   ./scripts/install-deps.sh          everything scripts/test.sh needs
#   ./scripts/install-deps.sh --rust   only what building tern needs (C toolchain, Rust)
#
# Runs as root; as another user it uses sudo for apt-get when sudo is there.
# What it installs:
#   Debian packages  chromium ffmpeg iproute2 nodejs npm pkg-config build-essential cmake curl
#                    ca-certificates coturn redis-server srt-tools nginx-light openssl libavcodec-dev
#                    libavformat-dev libswscale-dev libclang-dev libopus-dev (each only when its command or
#                    package is missing; npm only when the installed nodejs does not already ship it;
#                    coturn for turnutils_uclient, the TURN interop client; libopus-dev for RTMP's
#                    AAC -> Opus, linked as the one libopus libavcodec also loads; ffmpeg also pushes RTMP in tests;
#                    the libav*-dev and libclang-dev packages build the B-frame transcoder;
#                    redis-server for the cluster tests, which start their own on a free port;
#                    nginx-light, the reverse proxy in front of tern in the HTTPS tests, and
#                    libnginx-mod-rtmp, nginx's RTMP module, the receiver of the forward tests;
#                    openssl, which reads the certificate tern serves; systemd, whose
#                    systemd-analyze checks packaging/tern.service;
#                    python3-gi and GStreamer 1.22's base/good/bad/ugly/libav plugins, gstreamer1.0-nice
#                    and the GStreamer typelibs for the webrtcbin interop tests;
#                    gir1.2-gst-rtsp-server-1.0, GStreamer's RTSP server, the RTSP camera tests' camera,
#                    and glib-networking, GLib's TLS backend for that camera behind TLS (RTSPS);
#                    srt-tools for srt-live-transmit, the SRT ingest tests' libsrt relay;
#                    buildah, podman, runc, prometheus (with promtool) and jq for tests/ops/)
#   Rust             rustup with the toolchain rust-toolchain.toml pins + rustfmt + clippy, if
#                    cargo is missing; that toolchain when rustup lacks it; the rustfmt and
#                    clippy components if only they are missing
#   fuzzing          the nightly toolchain and cargo-fuzz (cargo install --locked)
#   interop tests    a Python venv in tests/interop/.venv with aiortc 1.16.0 (pip); the pion
#                    WHEP viewer in tests/interop/pion-viewer (go build; golang-go when no
#                    Go is installed)
#   browser tests    `npm ci` in tests/browser: playwright-core (no browser download, the
#                    tests drive Debian's /usr/bin/chromium) and ovenplayer (OvenPlayer's
#                    published bundle, played against tern's OME-compatible signalling)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

RUST_ONLY=0
case "${1:-}" in
    --rust) RUST_ONLY=1 ;;
    "") ;;
    -h | --help)
        sed -n '2,18p' "$0"
        exit 0
        ;;
    *)
        echo "install-deps: unknown option $1" >&2
        exit 2
        ;;
esac

log() { echo "install-deps: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

SUDO=()
CAN_APT=1
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then
        SUDO=(sudo)
    else
        CAN_APT=0
    fi
fi

# --- Debian packages -------------------------------------------------------------------------
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
need_cmd() { # need_cmd COMMAND PACKAGE
    have "$1" || missing+=("$2")
}
need_cmd cc build-essential
need_cmd make build-essential
need_cmd pkg-config pkg-config
need_cmd cmake cmake
need_cmd curl curl
pkg_installed ca-certificates || missing+=(ca-certificates)
# libavcodec (H264 decoder, libx264 encoder) for transcoding B-frame RTMP video, through the
# ffmpeg-next crate, whose sys crate reads the headers with bindgen (libclang).
for p in libavcodec-dev libavformat-dev libswscale-dev libclang-dev; do
    pkg_installed "$p" || missing+=("$p")
done
# libopus for RTMP's AAC -> Opus (the `opus` crate's sys crate finds it with pkg-config),
# the same shared library libavcodec loads: building a copy from source took 29 s of each
# cold build (scripts/test.sh's lib stage).
pkg_installed libopus-dev || missing+=(libopus-dev)
# The vendored dimpl's interop tests (scripts/test.sh's vendor stage): the openssl crate
# against the system's OpenSSL, and wolfSSL built from source with autotools.
for p in libssl-dev autoconf automake libtool; do
    pkg_installed "$p" || missing+=("$p")
done
if [ "$RUST_ONLY" -eq 0 ]; then
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    need_cmd ffmpeg ffmpeg
    need_cmd ip iproute2
    need_cmd unshare util-linux
    need_cmd node nodejs
    need_cmd turnutils_uclient coturn
    need_cmd redis-server redis-server
    need_cmd nginx nginx-light
    pkg_installed libnginx-mod-rtmp || missing+=(libnginx-mod-rtmp)
    need_cmd openssl openssl
    need_cmd systemd-analyze systemd
    # GStreamer 1.22 through PyGObject for the webrtcbin interop tests (tests/interop/gst_*):
    # webrtcbin (plugins-bad, its GstWebRTC/GstSdp typelibs), libnice's ICE elements, x264 and
    # Opus encoders (ugly, base), RTP payloaders (good), the H264 decoder (libav).
    for p in python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 \
        gir1.2-gst-plugins-bad-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
        gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-nice gstreamer1.0-libav \
        gir1.2-gst-rtsp-server-1.0 glib-networking; do
        pkg_installed "$p" || missing+=("$p")
    done
    need_cmd srt-live-transmit srt-tools
    # The operator's kit (tests/ops/): the container image built from scratch and run
    # (buildah, podman over runc: crun refuses this kernel's cgroups, FIELD-NOTES.md), and
    # Prometheus with promtool for the dashboard's queries and the alert rules; jq reads the
    # dashboard's JSON.
    need_cmd buildah buildah
    need_cmd podman podman
    need_cmd runc runc
    need_cmd prometheus prometheus
    need_cmd promtool prometheus
    need_cmd jq jq
fi
# Deduplicate, keep order.
if [ "${#missing[@]}" -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
fi

apt_install() {
    if [ "$CAN_APT" -eq 0 ]; then
        log "need root or sudo to install: $*"
        return 1
    fi
    log "apt-get install $*"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi
# Debian's nodejs comes without npm; NodeSource's ships it (and conflicts with Debian's npm),
# so look for the command only after nodejs is there.
if [ "$RUST_ONLY" -eq 0 ] && ! have npm; then
    apt_install npm
fi

# --- Rust ------------------------------------------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
# The toolchain rust-toolchain.toml pins; cargo in this tree runs it.
PINNED=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
if ! have cargo; then
    if ! have rustup; then
        # rustup-init straight from static.rust-lang.org, checked against its published
        # SHA-256: sh.rustup.rs (the usual installer script) does not resolve from every
        # network these machines are on, static.rust-lang.org does.
        log "installing rustup with the $PINNED toolchain"
        url=https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init
        tmp=$(mktemp -d)
        curl --proto '=https' --tlsv1.2 -sSf -o "$tmp/rustup-init" "$url"
        want=$(curl --proto '=https' --tlsv1.2 -sSf "$url.sha256" | awk '{print $1}')
        got=$(sha256sum "$tmp/rustup-init" | awk '{print $1}')
        if [ -z "$want" ] || [ "$want" != "$got" ]; then
            log "rustup-init checksum mismatch (want '$want', got '$got')"
            exit 1
        fi
        chmod +x "$tmp/rustup-init"
        "$tmp/rustup-init" -y --no-modify-path --profile minimal --default-toolchain "$PINNED" \
            -c rustfmt -c clippy
        rm -rf "$tmp"
    else
        rustup toolchain install "$PINNED" --profile minimal -c rustfmt -c clippy
    fi
fi
# rustup installs a pinned toolchain on first use only when allowed to (RUSTUP_AUTO_INSTALL).
if have rustup && ! rustup run "$PINNED" rustc --version >/dev/null 2>&1; then
    log "installing the $PINNED toolchain (rust-toolchain.toml)"
    rustup toolchain install "$PINNED" --profile minimal -c rustfmt -c clippy
fi
if ! cargo fmt --version >/dev/null 2>&1; then
    rustup component add rustfmt
fi
if ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add clippy
fi

if [ "$RUST_ONLY" -eq 1 ]; then
    exit 0
fi

# --- fuzzing: nightly + cargo-fuzz -----------------------------------------------------------
# The dated nightly that fuzz/rust-toolchain.toml names.
fuzz_toolchain=$(sed -n 's/^channel = "\(.*\)"$/\1/p' "$ROOT/fuzz/rust-toolchain.toml")
if ! rustup run "$fuzz_toolchain" rustc --version >/dev/null 2>&1; then
    log "installing the fuzz toolchain $fuzz_toolchain"
    rustup toolchain install "$fuzz_toolchain" --profile minimal
fi
if ! have cargo-fuzz; then
    log "cargo install --locked cargo-fuzz@0.13.2"
    cargo install --locked cargo-fuzz@0.13.2
fi

# --- browser tests: playwright-core from npm -------------------------------------------------
# No browser download, whatever the package's defaults: the tests use /usr/bin/chromium.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
lock="$ROOT/tests/browser/package-lock.json"
stamp="$ROOT/tests/browser/node_modules/.tern-npm-ci.stamp"
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
    log "npm ci in tests/browser"
    (cd "$ROOT/tests/browser" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$lock" "$stamp"
fi

# --- adaptive tests: the pion WHEP viewer (tests/interop/pion-viewer), built with Go -------
# A pion/webrtc v4 player with its default interceptors (transport-wide feedback, NACK), for
# tests/browser/adaptive-clients.test.mjs and nack-budget.test.mjs. Debian's Go fetches the
# toolchain go.mod names (GOTOOLCHAIN=auto) from the Go module proxy, as the modules.
GO_BIN=$(command -v go || true)
[ -z "$GO_BIN" ] && [ -x /usr/local/go/bin/go ] && GO_BIN=/usr/local/go/bin/go
if [ -z "$GO_BIN" ]; then
    apt_install golang-go
    GO_BIN=$(command -v go)
fi
pion="$ROOT/tests/interop/pion-viewer"
if [ ! -x "$pion/pion-viewer" ] || [ -n "$(find "$pion" -name '*.go' -newer "$pion/pion-viewer" -o -name 'go.sum' -newer "$pion/pion-viewer")" ]; then
    log "go build tests/interop/pion-viewer"
    (cd "$pion" && "$GO_BIN" build -trimpath -o pion-viewer .)
fi

# --- interop tests: aiortc from PyPI, in a venv of its own ----------------------------------
# aiortc (with PyAV, whose wheels carry their own FFmpeg) is the Python WebRTC peer of
# tests/browser/interop.test.mjs; pinned so a release cannot change the test under us.
venv="$ROOT/tests/interop/.venv"
want="aiortc==1.16.0"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import aiortc, sys; sys.exit(aiortc.__version__ != "1.16.0")' 2>/dev/null; then
    log "python venv with $want in tests/interop/.venv"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        apt_install python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$want"
fi
