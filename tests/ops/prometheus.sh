#!/usr/bin/env bash
# The Grafana dashboard and the Prometheus rules against a running tern (issue 57, points 2
# and 3):
#
#   tests/ops/prometheus.sh            (TERN_BIN=path/to/tern; default $CARGO_TARGET_DIR or target/, release/tern)
#
# 1. `promtool check rules` and `promtool test rules` on packaging/prometheus/.
# 2. One `tern demo` on loopback (every port chosen by the kernel) with everything the
#    dashboard shows busy: the demo clip, an SRT publisher (ffmpeg, live/cam), an RTSP camera
#    pulled from start-up (tests/rtsp/camera.py, live/door), WebRTC viewers (`tern bench`)
#    of all three, two of them through tern's TURN server (`--relay`) and a
#    `turnutils_uclient` run relaying through it too, recording on for the app, an LL-HLS
#    reader, an admission webhook (a local Python server) that denies one probe a second,
#    a one-node cluster on a redis-server of its own, and HTTPS with a certificate that
#    expires in 10 days.
# 3. Debian's `prometheus` scraping tern's /metrics every second, with tern-rules.yml
#    loaded. Once every figure is in its database and 20 s of samples are there, every
#    panel target of packaging/grafana/tern.json is run through /api/v1/query with the
#    dashboard's variables set ($instance to tern's, $app to All and then to "live",
#    $__rate_interval to 15s): each must answer without error and with at least one finite
#    value; a failure names the panel. The variables' own queries must list tern's instance
#    and app. A misspelt metric is run through the same check first and must fail it.
# 4. Every metric the rules name is in a scrape of /metrics; every rule evaluates without
#    error in the live Prometheus, and TernCertificateExpiresSoon fires there (the
#    certificate ends in 10 days), its value the certificate's own notAfter.
#
# Needs (Debian): prometheus (with promtool), ffmpeg, coturn (turnutils_uclient),
# redis-server, openssl, curl, python3, and for the camera python3-gi,
# gir1.2-gst-rtsp-server-1.0 with GStreamer's good/ugly/libav plugins. Builds nothing.
# Every wait is bounded; traffic stays on 127.0.0.1; everything started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$REPO/$TARGET ;; esac
TERN=${TERN_BIN:-$TARGET/release/tern}
DASH=$REPO/packaging/grafana/tern.json
RULES=$REPO/packaging/prometheus/tern-rules.yml
RULES_TEST=$REPO/packaging/prometheus/tern-rules.test.yml
STARTED=$SECONDS

fail() { echo "FAIL: $*" >&2; exit 1; }
say() { echo "== $*"; }

[ -x "$TERN" ] || fail "no tern binary at $TERN: run \`cargo build --release -p tern\` or set TERN_BIN"
TERN=$(realpath "$TERN")
for c in prometheus:prometheus promtool:prometheus ffmpeg:ffmpeg turnutils_uclient:coturn \
    redis-server:redis-server openssl:openssl curl:curl python3:python3; do
    command -v "${c%%:*}" >/dev/null || fail "${c%%:*} missing (Debian package ${c#*:})"
done
# The camera needs the system Python's GObject bindings (not a virtualenv's).
GI_PY=/usr/bin/python3
"$GI_PY" -c 'import gi; gi.require_version("GstRtspServer", "1.0")' 2>/dev/null ||
    fail "GStreamer's RTSP server for Python missing (python3-gi, gir1.2-gst-rtsp-server-1.0)"

tmp=$(mktemp -d)
PIDS=()
# Whether process $1 runs (an exited child stays a zombie until waited for).
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${s:0:1}" != Z ]; }
cleanup() {
    local p i
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # tern stops within 5 s of SIGTERM (docs/src/operations.md "Shutdown").
    for i in $(seq 50); do
        local up=0
        for p in "${PIDS[@]}"; do alive "$p" && up=1; done
        [ $up = 1 ] || break
        sleep 0.1
    done
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "${KEEP_TMP:-}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# On failure, the last lines of each log.
logs() {
    local f
    for f in "$tmp"/*.log; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f") (last 15 lines)" >&2
        tail -n 15 "$f" >&2
    done
}
die() { logs; fail "$@"; }

free_tcp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (at most $1 s) until the command in the remaining arguments succeeds.
wait_for() {
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || die "$what: not within $limit s"
        sleep 0.5
    done
}

# ---- 1. The rules on their own.
say "promtool check rules / test rules"
promtool check rules "$RULES" >"$tmp/promtool-check.log" 2>&1 ||
    { cat "$tmp/promtool-check.log" >&2; fail "promtool check rules"; }
RULE_COUNT=$(sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p' "$tmp/promtool-check.log")
promtool test rules "$RULES_TEST" >"$tmp/promtool-test.log" 2>&1 ||
    { cat "$tmp/promtool-test.log" >&2; fail "promtool test rules"; }
RULE_TESTS=$(grep -c '^  - interval:' "$RULES_TEST")
echo "$RULE_COUNT rules; $RULE_TESTS unit-test groups pass"

# ---- 2. tern and its load.
say "starting tern with its load"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 10 \
    -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >"$tmp/openssl.log" 2>&1 || die "openssl req"
NOT_AFTER=$(openssl x509 -noout -enddate -in "$tmp/cert.pem" | LC_ALL=C python3 -c '
import calendar, sys, time
print(calendar.timegm(time.strptime(sys.stdin.read().strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z")))')

RP=$(free_tcp)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
PIDS+=($!)
wait_for 10 "redis-server answering" bash -c "exec 3<>/dev/tcp/127.0.0.1/$RP"

CAM=$(free_tcp)
"$GI_PY" tests/rtsp/camera.py "$CAM" >"$tmp/camera.log" 2>&1 &
PIDS+=($!)
wait_for 15 "the RTSP camera" grep -q ready "$tmp/camera.log"

# The admission webhook: allows every session but the ones whose token is "deny-me".
cat >"$tmp/hook.py" <<'PY'
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Admit(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self):
        ask = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        allow = ask.get("action") == "close" or ask.get("token") != "deny-me"
        body = json.dumps({"allow": allow, "reason": "test denial"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

s = ThreadingHTTPServer(("127.0.0.1", 0), Admit)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$tmp/hook.py" >"$tmp/hook.port" 2>"$tmp/hook.log" &
PIDS+=($!)
wait_for 10 "the admission webhook" test -s "$tmp/hook.port"
HOOK=$(head -1 "$tmp/hook.port")

mkdir -p "$tmp/rec"
cat >"$tmp/tern.toml" <<EOF
[[app]]
name = "live"
streams = ["cam"]

[app.record]
enabled = true
path = "$tmp/rec/%app/%stream/%Y-%m-%d_%H-%M-%S"
segment_s = 4

[app.admission]
url = "http://127.0.0.1:$HOOK/admit"

[[app.source]]
stream = "door"
url = "rtsp://127.0.0.1:$CAM/cam"
on_demand = false

[turn]
# turnutils_uclient relays between its own clients on 127.0.0.1.
allowed_peers = ["127.0.0.0/8"]

[limits]
turn_allocations_per_ip = 1000

[cluster]
redis = "redis://127.0.0.1:$RP/0"
node = "a"
secret = "prometheus-test-secret-0123456789"
EOF
RUST_LOG=${RUST_LOG:-info} "$TERN" demo --config "$tmp/tern.toml" --http 127.0.0.1:0 \
    --media 127.0.0.1:0 --candidate 127.0.0.1 --rtmp none --srt 127.0.0.1:0 \
    --turn 127.0.0.1:0 --turn-user u:p --turn-relay-ip 127.0.0.1 \
    --https 127.0.0.1:0 --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" \
    >"$tmp/tern.out" 2>"$tmp/tern.log" &
PIDS+=($!)
wait_for 20 "tern's listening line" grep -q '^listening ' "$tmp/tern.out"
addr() { sed -n "s/^listening .*\b$1=\([^ ]*\).*/\1/p" "$tmp/tern.out"; }
HTTP=$(addr http)
SRT=$(addr srt)
TURN=$(addr turn)
echo "tern: http=$HTTP srt=$SRT turn=$TURN https=$(addr https)"
BASE=http://$HTTP
wait_for 10 "GET /metrics" curl -sf "$BASE/metrics"

# Everything below runs until the end of the test (bounded by LIFE; killed on exit).
LIFE=240
ffmpeg -hide_banner -nostdin -loglevel warning -re -f lavfi -i testsrc=size=320x240:rate=30 \
    -re -f lavfi -i sine=frequency=440:sample_rate=48000 -t "$LIFE" \
    -c:v libx264 -profile:v baseline -tune zerolatency -pix_fmt yuv420p -g 30 -bf 0 \
    -c:a aac -f mpegts "srt://$SRT?streamid=live/cam" >"$tmp/ffmpeg.log" 2>&1 &
PIDS+=($!)
bench() { # bench NAME STREAM N [ARGS...]
    local name=$1 stream=$2 n=$3
    shift 3
    "$TERN" bench --url "$BASE/live/$stream/whep" -n "$n" --cint 200 --life "$LIFE" \
        --sint 600000 --json "$@" >"$tmp/bench-$name.log" 2>&1 &
    PIDS+=($!)
}
bench demo demo 3
bench relay demo 2 --relay
live() { curl -sf "$BASE/metrics" | grep -q "^tern_stream_live{stream=\"live/$1\"} 1"; }
wait_for 20 "live/cam live (SRT)" live cam
wait_for 20 "live/door live (RTSP camera)" live door
bench cam cam 1
bench door door 1
turnutils_uclient -y -c -l 172 -z 20 -m 2 -n 400 -u u -w p -p "${TURN##*:}" 127.0.0.1 \
    >"$tmp/uclient.log" 2>&1 &
UCLIENT=$!
PIDS+=($UCLIENT)

# An LL-HLS reader (playlist and newest part each 0.5 s) and an admission probe a second
# that the webhook denies.
cat >"$tmp/client.py" <<'PY'
import re, sys, time, urllib.error, urllib.request
base, life = sys.argv[1], float(sys.argv[2])
end = time.time() + life
def get(path):
    try:
        with urllib.request.urlopen(base + path, timeout=5) as r:
            return r.status, r.read().decode("latin1")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""
media, parts, denied, last_probe = None, 0, 0, 0
while time.time() < end:
    if media is None:
        code, body = get("/live/demo/index.m3u8")
        if code == 200:
            media = next((l for l in body.splitlines() if l and not l.startswith("#")), None)
    else:
        code, body = get("/live/demo/" + media)
        uris = re.findall(r'URI="([^"]+)"', body) + [l for l in body.splitlines() if l and not l.startswith("#")]
        if code != 200:
            media = None
        elif uris:
            if get("/live/demo/" + uris[-1])[0] == 200:
                parts += 1
    if time.time() - last_probe >= 1:
        last_probe = time.time()
        if get("/live/demo/index.m3u8?token=deny-me")[0] == 403:
            denied += 1
        print(f"parts {parts} denied {denied}", flush=True)
    time.sleep(0.5)
PY
python3 "$tmp/client.py" "$BASE" "$LIFE" >"$tmp/client.log" 2>&1 &
PIDS+=($!)

# ---- 3. Prometheus.
say "starting prometheus"
PP=$(free_tcp)
PROM=http://127.0.0.1:$PP
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
scrape_configs:
  - job_name: tern
    static_configs:
      - targets: ["$HTTP"]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$PP" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
PIDS+=($!)
wait_for 30 "prometheus ready" curl -sf "$PROM/-/ready"

# The figures every part of the dashboard shows, as Prometheus has them; then 20 s of
# samples so that every rate window has several.
CONDITIONS='up{job="tern"} == 1
tern_viewers >= 7
tern_publishers >= 2
tern_srt_publishers >= 1
tern_source_state{stream="live/door",state="live"} == 1
tern_turn_allocations >= 2
tern_recordings >= 3
tern_record_files_total >= 1
tern_hls_sessions >= 1
tern_hls_media_bytes_total > 0
tern_admission_total{action="play",result="deny"} > 0
tern_admission_webhook_seconds_count > 0
tern_cluster_nodes >= 1
tern_cluster_origins >= 3
tern_tls_cert_not_after_seconds > 0
count_over_time(up{job="tern"}[1m]) >= 20'
cat >"$tmp/promq.py" <<'PY'
# promq.py PROM QUERY: exit 0 when QUERY answers at least one sample.
import json, sys, urllib.parse, urllib.request
data = urllib.parse.urlencode({"query": sys.argv[2]}).encode()
r = json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/query", data, timeout=5))
sys.exit(0 if r.get("status") == "success" and r["data"]["result"] else 1)
PY
say "waiting for every figure in Prometheus"
end=$((SECONDS + 120))
while IFS= read -r q; do
    until python3 "$tmp/promq.py" "$PROM" "$q" 2>/dev/null; do
        if [ $SECONDS -ge $end ]; then
            curl -s "$BASE/metrics" | grep -v '^#' >"$tmp/metrics-at-failure.log" || true
            die "Prometheus never had: $q"
        fi
        sleep 1
    done
    echo "  ok: $q"
done <<<"$CONDITIONS"

# ---- 4. Every panel's query, the variables, the rules' metrics, the rules in Prometheus.
say "checking the dashboard and the rules against Prometheus"
curl -sf "$BASE/metrics" >"$tmp/metrics.txt" || die "GET /metrics"
if ! python3 - "$PROM" "$DASH" "$RULES" "$tmp/metrics.txt" "$HTTP" "$NOT_AFTER" "$RULE_COUNT" <<'PY'
import json, math, re, sys, time, urllib.parse, urllib.request

prom, dash_path, rules_path, metrics_path, instance, not_after, rule_count = sys.argv[1:]
errors = []

def api(path, params):
    data = urllib.parse.urlencode(params, doseq=True).encode()
    return json.load(urllib.request.urlopen(prom + path, data, timeout=10))

def query(expr):
    """(error, finite values) of an instant query."""
    try:
        r = api("/api/v1/query", {"query": expr})
    except urllib.error.HTTPError as e:
        body = json.load(e)
        return body.get("error", str(e)), []
    if r.get("status") != "success":
        return r.get("error", "status " + r.get("status", "?")), []
    d = r["data"]
    rows = d["result"] if d["resultType"] in ("vector", "matrix") else [{"value": d["result"]}]
    vals = []
    for row in rows:
        for _, v in [row["value"]] if "value" in row else row["values"]:
            f = float(v)
            if math.isfinite(f):
                vals.append(f)
    return None, vals

dash = json.load(open(dash_path))
assert 36 <= dash.get("schemaVersion", 0) <= 41, "schemaVersion %s" % dash.get("schemaVersion")
variables = {v["name"]: v for v in dash["templating"]["list"]}
for need in ("datasource", "instance", "app"):
    if need not in variables:
        errors.append(f"the dashboard has no '{need}' variable")

def substitute(expr, values):
    out = expr
    for name, value in values.items():
        out = out.replace("${%s}" % name, value).replace("[[%s]]" % name, value)
        out = re.sub(r"\$%s\b" % re.escape(name), lambda _: value, out)
    left = re.findall(r"\$\{?[A-Za-z_]\w*", out)
    if left:
        raise ValueError("variables left in the query: " + ", ".join(sorted(set(left))))
    return out

# The variables' own queries: label_values(SELECTOR, LABEL), then the variable's regex.
def label_values(var, values):
    q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
    if not m:
        errors.append(f"variable {var['name']}: not label_values(...): {q}")
        return []
    r = json.load(urllib.request.urlopen(
        prom + f"/api/v1/label/{m.group(2)}/values?"
        + urllib.parse.urlencode({"match[]": substitute(m.group(1), values)}), timeout=10))
    got = r["data"]
    rx = var.get("regex") or ""
    if rx:
        body = re.fullmatch(r"/(.*)/[a-z]*", rx).group(1).replace("\\/", "/")
        got = sorted({(mm.group(1) if mm.groups() else mm.group(0))
                      for v in got for mm in [re.search(body, v)] if mm})
    return got

base = {"__rate_interval": "15s", "__interval": "5s", "__range": "1m",
        "__range_s": "60", "__interval_ms": "5000"}
instances = label_values(variables["instance"], base)
if instance not in instances:
    errors.append(f"variable instance lists {instances}, not tern's {instance}")
apps = label_values(variables["app"], dict(base, instance=instance))
if "live" not in apps:
    errors.append(f"variable app lists {apps}, not live")

def targets(panels):
    for p in panels:
        yield from targets(p.get("panels", []))
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p.get("title", "?"), t.get("refId", "?"), t["expr"]

found = list(targets(dash["panels"]))

def count_panels(panels):
    return sum(count_panels(p.get("panels", [])) + (1 if p.get("targets") else 0) for p in panels)
all_value = variables["app"].get("allValue") or ".*"

def check(title, ref, expr, values):
    try:
        q = substitute(expr, values)
    except ValueError as e:
        return f"panel '{title}' ({ref}): {e}"
    err, vals = query(q)
    if err:
        return f"panel '{title}' ({ref}) with app={values['app']}: query error: {err}\n    {q}"
    if not vals:
        return f"panel '{title}' ({ref}) with app={values['app']}: no data\n    {q}"
    return None

# The check must be able to fail: a misspelt metric is reported.
canary = check("canary", "A", 'sum(tern_viewerz{instance=~"$instance"})', dict(base, instance=instance, app=all_value))
if canary is None:
    errors.append("the check accepted a misspelt metric (tern_viewerz)")

checked = 0
for app in (all_value, "live"):
    values = dict(base, instance=instance, app=app)
    for title, ref, expr in found:
        checked += 1
        e = check(title, ref, expr, values)
        if e:
            errors.append(e)

# Every metric the rules name, and every metric the dashboard names, is in /metrics.
exposed = set()
for line in open(metrics_path):
    if line and not line.startswith("#"):
        exposed.add(re.split(r"[{ ]", line, 1)[0])
rules_text = "\n".join(l.split("#", 1)[0] if l.lstrip().startswith("#") else l
                       for l in open(rules_path).read().splitlines())
rule_metrics = sorted(set(re.findall(r"\btern_[a-z0-9_]+", rules_text)))
for m in rule_metrics:
    if m not in exposed:
        errors.append(f"the rules name {m}, which tern's /metrics does not have")
dash_metrics = sorted({m for _, _, e in found for m in re.findall(r"\btern_[a-z0-9_]+", e)})
for m in dash_metrics:
    if m not in exposed:
        errors.append(f"the dashboard names {m}, which tern's /metrics does not have")

# The rules in the live Prometheus: all loaded, none failing; the certificate alert fires
# (tern's certificate ends in 10 days) and its value is the certificate's notAfter.
rules = json.load(urllib.request.urlopen(prom + "/api/v1/rules", timeout=10))["data"]["groups"]
loaded = [r for g in rules for r in g["rules"]]
if len(loaded) != int(rule_count):
    errors.append(f"Prometheus loaded {len(loaded)} rules, promtool counted {rule_count}")
for r in loaded:
    if r.get("health") != "ok":
        errors.append(f"rule {r.get('name')}: health {r.get('health')}: {r.get('lastError')}")
deadline = time.time() + 15
cert = []
while time.time() < deadline:
    alerts = json.load(urllib.request.urlopen(prom + "/api/v1/alerts", timeout=10))["data"]["alerts"]
    cert = [a for a in alerts if a["labels"]["alertname"] == "TernCertificateExpiresSoon" and a["state"] == "firing"]
    if cert:
        break
    time.sleep(1)
if not cert:
    errors.append("TernCertificateExpiresSoon does not fire for a certificate that ends in 10 days")
err, vals = query(f'tern_tls_cert_not_after_seconds{{instance="{instance}"}}')
if err or vals != [float(not_after)]:
    errors.append(f"tern_tls_cert_not_after_seconds is {vals or err}, the certificate's notAfter is {not_after}")
firing = sorted({a["labels"]["alertname"] for a in alerts if a["state"] == "firing"})

print(f"dashboard: {count_panels(dash['panels'])} panels, {len(found)} targets, {checked} queries "
      f"(app = All and live), variables: instance {instances}, app {apps}; "
      f"a misspelt metric {'is rejected' if canary else 'PASSED the check'}")
print(f"rules: {len(loaded)} loaded and healthy in Prometheus; {len(rule_metrics)} tern metrics "
      f"they name all in /metrics; firing now: {', '.join(firing) or 'none'}")
if errors:
    print("\n".join("FAIL: " + e for e in errors), file=sys.stderr)
    sys.exit(1)
PY
then
    die "the dashboard or the rules (above)"
fi

# turnutils_uclient sends 400 messages 20 ms apart per client: done within a few seconds.
end=$((SECONDS + 30))
while alive "$UCLIENT"; do
    [ $SECONDS -lt $end ] || die "turnutils_uclient still running after 30 s"
    sleep 0.5
done
relayed=$(sed -n 's/.*tot_recv_msgs=\([0-9]*\).*/\1/p' "$tmp/uclient.log" | tail -1)
[ "${relayed:-0}" -gt 0 ] || die "turnutils_uclient relayed nothing through tern's TURN"
echo "turnutils_uclient: $relayed messages relayed; $(tail -1 "$tmp/client.log") (LL-HLS parts read, probes denied)"
echo "PASS: prometheus.sh in $((SECONDS - STARTED)) s"
