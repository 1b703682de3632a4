#!/usr/bin/env python3
"""The side-by-side benchmark suite's measuring phase (issue 8), started by bench/run.sh.

bench/run.sh installs and builds everything, then runs this (inside a private network
namespace when it can): every scenario one after the other, one JSON with every figure in
bench/results/<stamp>.json, a plot next to it, and the generated block of BENCHMARKS.md.
Standard library only, apart from matplotlib for the plot.

Every process it starts is in its own process group and killed (SIGTERM, then SIGKILL) when
its scenario ends or the suite stops; every load is bounded in count and time.
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = time.monotonic()
CHILDREN = []  # Popen objects still to be killed


def log(msg):
    print("[suite %6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


# --- processes ---------------------------------------------------------------------------

def start(cmd, out=None, err=None, env=None):
    """Starts cmd in a new process group; remembered until stop()."""
    p = subprocess.Popen(cmd, stdout=out or subprocess.DEVNULL, stderr=err or subprocess.DEVNULL,
                         start_new_session=True, env=env, cwd=ROOT)
    CHILDREN.append(p)
    return p


def stop(p, grace=5.0):
    """SIGTERM to p's process group, SIGKILL after grace seconds; reaps it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    else:
        # The leader is gone; anything left in its group goes too.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if p in CHILDREN:
        CHILDREN.remove(p)


def stop_all(*_):
    for p in list(CHILDREN):
        stop(p, 2.0)


def on_signal(signum, _frame):
    stop_all()
    sys.exit(128 + signum)


def run(cmd, timeout, env=None):
    """Runs cmd to completion (own process group, killed at timeout); returns stdout text."""
    p = start(cmd, out=subprocess.PIPE, err=subprocess.STDOUT, env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(p)
        raise RuntimeError("%s: timed out after %ss" % (cmd[0], timeout))
    stop(p)
    return out.decode(errors="replace")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        udp = s.getsockname()[1]
    with socket.socket() as t:
        try:
            t.bind(("127.0.0.1", udp))
            return udp
        except OSError:
            return free_port()


# --- /proc -------------------------------------------------------------------------------

def threads(pid):
    """{tid: (comm, run ns)} from /proc/PID/task/*/{comm,schedstat}."""
    out = {}
    base = "/proc/%d/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for t in tids:
        try:
            with open("%s/%s/comm" % (base, t)) as f:
                comm = f.read().strip()
            with open("%s/%s/schedstat" % (base, t)) as f:
                ns = int(f.read().split()[0])
            out[t] = (comm, ns)
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_ns(pid):
    return sum(ns for _, ns in threads(pid).values())


def group_of(comm):
    """Thread group: the name without a trailing number (SocketWorker-1 -> SocketWorker)."""
    return re.sub(r"[-_#:. ]?\d+$", "", comm) or comm


def group_delta(a, b):
    """CPU seconds per thread group between two threads() snapshots (new threads count
    from zero; threads gone by b lose what they ran in the window)."""
    g = {}
    for tid, (comm, ns) in b.items():
        before = a.get(tid, (comm, 0))[1]
        g[group_of(comm)] = g.get(group_of(comm), 0) + (ns - before) / 1e9
    return g


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rcvbuf_errors():
    with open("/proc/net/snmp") as f:
        rows = [l.split() for l in f if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def http_json(url, timeout=3.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except Exception:
        return None


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "memory_bytes": mem}


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def become_subreaper():
    """Orphans of the suite's scripts (a server a shell script killed but did not wait for)
    are re-parented to the suite instead of init, so `reap_orphans` can count their CPU."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans():
    """Reaps every exited descendant re-parented to the suite (after the last scenario:
    a blanket wait while Popen objects still wait for their own children would rob them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def cpu_mark():
    """The machine's busy CPU seconds (/proc/stat: user, nice, system, irq, softirq, steal)
    and the CPU seconds of this process and its reaped descendants (every process the suite
    starts is waited for), for `others_cpu_share`."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system, time.monotonic()


def others_cpu_share(mark):
    """Share of the machine's CPU (all cores) that processes outside the suite used since
    `mark`: the figure that says whether the run had the machine to itself. (The load
    average cannot: right after the build it stays high for minutes on an idle machine.)"""
    busy0, own0, t0 = mark
    busy1, own1, t1 = cpu_mark()
    wall = (t1 - t0) * (os.cpu_count() or 1)
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / wall if wall > 0 else None


# --- WHEP servers under tern bench -------------------------------------------------------

class Server:
    """One WHEP server (tern, str0m or pion) on fresh ports."""

    def __init__(self, kind, bins, tmp):
        self.kind = kind
        self.http = "127.0.0.1:%d" % free_port()
        udp = free_port()
        self.log = open(os.path.join(tmp, "%s-%s.log" % (kind, self.http.split(":")[1])), "wb")
        if kind == "tern":
            cmd = [bins["tern"], "demo", "--clip", "lite", "--http", self.http,
                   "--media", "127.0.0.1:%d" % udp, "--candidate", "127.0.0.1"]
        elif kind == "str0m":
            cmd = [bins["str0m"], "--http", self.http, "--udp", "127.0.0.1:%d" % udp]
        elif kind == "pion":
            # pion's defaults (full ICE, a=setup:active): tern bench's lean client handles both.
            cmd = [bins["pion"], "-http", self.http, "-udp", str(udp), "-ip", "127.0.0.1",
                   "-clip", "assets/clip/lite.h264", "-audio", "assets/clip/demo.opus"]
        else:
            raise ValueError(kind)
        self.url = "http://%s/live/demo/whep" % self.http
        self.p = start(cmd, out=self.log, err=self.log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                req = urllib.request.Request(self.url, method="HEAD")
                with urllib.request.urlopen(req, timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        else:
            raise RuntimeError("%s did not start (log %s)" % (kind, self.log.name))

    def heap(self):
        """Live heap bytes: tern's and str0m's counting allocator, Go's HeapAlloc for pion."""
        path = "/v1/memory" if self.kind == "tern" else "/stats"
        j = http_json("http://%s%s" % (self.http, path))
        if not isinstance(j, dict):
            return None
        if self.kind == "tern":
            # Live heap plus the pools' mapped regions (the prefaulted packet pool).
            a = j.get("allocator") or {}
            return a["live_bytes"] + a.get("mapped_bytes", 0) if "live_bytes" in a else None
        return j.get("live_bytes")

    def packets_out(self):
        """tern's SRTP media packets sent so far (`tern_packets_out_total`); None elsewhere."""
        if self.kind != "tern":
            return None
        try:
            with urllib.request.urlopen("http://%s/metrics" % self.http, timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("tern_packets_out_total "):
                        return int(float(line.split()[1]))
        except Exception:
            return None
        return None

    def close(self):
        stop(self.p)
        self.log.close()


def bench_run(bins, server, n, cint, life, tmp, extra_wait=60):
    """tern bench -n N against server; returns a row with every figure of a scenario."""
    time.sleep(1)  # let the source start and the runtime settle
    pid = server.p.pid
    c0 = cpu_ns(pid)
    time.sleep(3)
    idle_cpu = (cpu_ns(pid) - c0) / 3e9
    idle_rss = status_kib(pid, "VmRSS")
    idle_heap = server.heap()
    r0 = rcvbuf_errors()
    s0, w0 = cpu_ns(pid), time.monotonic()
    th0 = threads(pid)
    out_path = os.path.join(tmp, "bench-%s-%d.json" % (server.kind, n))
    with open(out_path, "wb") as out:
        b = start([bins["tern"], "bench", "-url", server.url, "-n", str(n), "-cint", str(cint),
                   "-life", str(life), "-sint", "600000", "--json", "--details", "true"],
                  out=out, err=subprocess.DEVNULL)
        ramp_end = w0 + n * cint / 1000.0
        samples = []  # (t, rss KiB, heap B, server CPU ns, packets out)
        deadline = w0 + life + extra_wait
        while b.poll() is None and time.monotonic() < deadline:
            t = time.monotonic()
            samples.append((t, status_kib(pid, "VmRSS"), server.heap(), cpu_ns(pid),
                            server.packets_out()))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
        stop(b)
    s1, w1 = cpu_ns(pid), time.monotonic()
    th1 = threads(pid)
    r1 = rcvbuf_errors()
    hwm = status_kib(pid, "VmHWM")
    summary, tserver, clients = {}, {}, []
    with open(out_path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            t = o.get("type")
            if t == "summary":
                summary = o
            elif t == "server":
                tserver = o
            elif t == "client":
                clients.append(o)
    # Steady state: from 3 s after the last connect to 2 s before the bench's end.
    steady = [s for s in samples if ramp_end + 3 <= s[0] <= w0 + life - 2]
    if not steady:
        steady = samples[len(samples) // 2:]
    rss_steady = statistics.median([s[1] for s in steady if s[1]]) if steady else None
    heaps = [s[2] for s in steady if s[2] is not None]
    heap_steady = statistics.median(heaps) if heaps else None
    rss_peak = max([s[1] for s in samples if s[1]] or [0])
    # Egress per CPU-second in the steady window only: the ramp's handshakes and the idle
    # tail are not egress (tern only: it counts what it sent).
    eg = [s for s in steady if s[3] is not None and s[4] is not None]
    steady_egress = None
    if len(eg) >= 2 and eg[-1][3] > eg[0][3]:
        steady_egress = {"window_s": eg[-1][0] - eg[0][0],
                         "server_cpu_s": (eg[-1][3] - eg[0][3]) / 1e9,
                         "packets_out": eg[-1][4] - eg[0][4]}
        steady_egress["pkts_per_cpu_s"] = steady_egress["packets_out"] / steady_egress["server_cpu_s"]

    def p50(k):
        v = sorted(c[k] for c in clients if c.get(k) is not None)
        return statistics.median(v) if v else None

    cpu = (s1 - s0) / 1e9
    wall = w1 - w0
    packets = summary.get("total_packets", 0)
    st = summary.get("states", {})
    fps = summary.get("fps") or {}
    row = {
        "server": server.kind, "n": n, "cint_ms": cint, "life_s": life,
        "connected": st.get("connected", 0), "failed": st.get("failed", 0),
        "failures": summary.get("failures", {}),
        "packets": packets, "bytes": summary.get("total_bytes", 0),
        "losses": summary.get("total_losses", 0), "duplicates": summary.get("duplicates", 0),
        "reordered": summary.get("reordered", 0), "nacks": summary.get("nacks", 0),
        "recovered": summary.get("recovered", 0),
        "udp_rcvbuf_errors": r1 - r0,
        "fps": fps, "bps": summary.get("bps"),
        "video_latency_ms": summary.get("video_latency_ms"),
        "audio_latency_ms": summary.get("audio_latency_ms"),
        "catchup_packets": summary.get("catchup_packets"),
        "video_jitter_ms": summary.get("video_jitter_ms"),
        "dtls_ms_p50": p50("dtls_ms"), "first_frame_ms_p50": p50("first_frame_ms"),
        "bench_cpu_us_per_packet": summary.get("cpu_us_per_packet"),
        "server_cpu_s": cpu, "wall_s": wall, "server_cpu_share": cpu / wall if wall else None,
        "server_idle_cpu_share": idle_cpu,
        "server_cpu_s_per_mpkt": cpu * 1e6 / packets if packets else None,
        "server_thread_groups_cpu_s": group_delta(th0, th1),
        "server_packets_out": tserver.get("packets_out"),
        "server_bytes_out": tserver.get("bytes_out"),
        "server_egress_pkts_per_cpu_s": (tserver.get("packets_out") or packets) / cpu if cpu else None,
        "server_steady_egress": steady_egress,
        "rss_idle_kib": idle_rss, "rss_steady_kib": rss_steady, "rss_peak_kib": rss_peak,
        "vmhwm_kib": hwm,
        "rss_per_viewer_bytes": (rss_steady - idle_rss) * 1024 / n if rss_steady and idle_rss else None,
        "heap_idle_bytes": idle_heap, "heap_steady_bytes": heap_steady,
        "heap_per_viewer_bytes": (heap_steady - idle_heap) / n
        if heap_steady is not None and idle_heap is not None else None,
        "heap_samples": len(heaps),
    }
    row["clean"] = (row["connected"] == n and row["failed"] == 0 and row["losses"] == 0
                    and (fps.get("min") or 0) >= 29.0)
    return row


def scenario(bins, kind, n, cint, hold, tmp):
    life = int(n * cint / 1000) + hold
    s = Server(kind, bins, tmp)
    try:
        row = bench_run(bins, s, n, cint, life, tmp)
    finally:
        s.close()
    log("%s N=%d: connected %d/%d, lost %d, fps min %.2f, CPU %.2f s/Mpkt, heap/viewer %s B, RSS/viewer %s B%s"
        % (kind, n, row["connected"], n, row["losses"], (row["fps"] or {}).get("min") or 0,
           row["server_cpu_s_per_mpkt"] or 0, fmt_int(row["heap_per_viewer_bytes"]),
           fmt_int(row["rss_per_viewer_bytes"]), "" if row["clean"] else "  (not clean)"))
    return row


def fmt_int(v):
    return "-" if v is None else "{:,.0f}".format(v)


# --- the other scenarios -----------------------------------------------------------------

def core(n):
    out = run(["bash", "bench/core.sh", str(n)], timeout=900)
    r = {"command": "bench/core.sh %d" % n, "viewers": n}
    m = re.search(r"steady state \(streaming\)\s+(\d+)\s+(-?\d+)\s+(-?\d+)", out)
    if m:
        r["heap_per_viewer_bytes"] = int(m.group(3))
    m = re.search(r"peak during handshakes\s+\d+\s+\d+\s+(\d+)", out)
    if m:
        r["handshake_peak_per_viewer_bytes"] = int(m.group(1))
    m = re.search(r"inline Viewer struct.*?: (\d+) B; per connected viewer, heap \+ inline: (\d+) B", out)
    if m:
        r["inline_viewer_bytes"] = int(m.group(1))
        r["heap_plus_inline_per_viewer_bytes"] = int(m.group(2))
    m = re.search(r"=> (\d+) handshakes/s per core", out)
    if m:
        r["handshakes_per_s_per_core"] = int(m.group(1))
    m = re.search(r"fan-out: (\d+) ns per forwarded packet per viewer in write_media \(server calls only\)\n", out)
    if m:
        r["fanout_ns_per_packet_per_viewer"] = int(m.group(1))
    m = re.search(r"process CPU incl\. sendmmsg\+loopback ([\d.]+) s per million packets", out)
    if m:
        r["lab_udp_cpu_s_per_mpkt"] = float(m.group(1))
    m = re.search(r"instructions per forwarded packet per viewer: (\d+)", out)
    if m:
        r["instructions_per_packet_per_viewer"] = int(m.group(1))
    r["srtp_instructions_per_packet"] = {k: int(v) for k, v in
                                         re.findall(r"^(\w+)\s+(\d+) instructions/packet", out, re.M)}
    r["output_tail"] = out[-3000:]
    return r


def str0m_callgrind(bins, viewers, seconds, fps, tmp):
    """Instructions per forwarded packet per viewer in str0m-fanout's fan_out, under
    callgrind, with tern lab's synthetic packets (1188-byte video payloads + 120-byte
    audio), at a low frame rate so the emulated CPU keeps up in real time."""
    http = "127.0.0.1:%d" % free_port()
    udp = "127.0.0.1:%d" % free_port()
    cg = os.path.join(tmp, "str0m.callgrind")
    out_path = os.path.join(tmp, "str0m-callgrind.out")
    with open(out_path, "wb") as out:
        p = start(["valgrind", "--tool=callgrind", "--toggle-collect=*fan_out*",
                   "--callgrind-out-file=" + cg, bins["str0m"], "--source", "synthetic",
                   "--synthetic-fps", str(fps), "--seconds", str(seconds),
                   "--http", http, "--udp", udp], out=out, err=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and http_json("http://%s/stats" % http, 2) is None:
            time.sleep(0.5)
        life = max(5, seconds - 15)
        bench = run([bins["tern"], "bench", "-url", "http://%s/live/demo/whep" % http,
                     "-n", str(viewers), "-cint", "200", "-life", str(life), "-sint", "600000",
                     "--connect-timeout", "30", "--json"], timeout=life + 90)
        try:
            p.wait(seconds + 120)
        except subprocess.TimeoutExpired:
            pass
        stop(p)
    stats = {}
    with open(out_path) as f:
        for line in f:
            if line.startswith("{"):
                stats = json.loads(line)
    total = None
    with open(cg) as f:
        for line in f:
            if line.startswith("summary:"):
                total = int(line.split()[1])
    summ = next((json.loads(l) for l in bench.splitlines()[::-1] if '"type":"summary"' in l), {})
    writes = stats.get("fanout_writes") or 0
    r = {"command": "valgrind --tool=callgrind --toggle-collect='*fan_out*' str0m-fanout --source synthetic --synthetic-fps %d; tern bench -n %d" % (fps, viewers),
         "viewers": viewers, "synthetic_fps": fps, "instructions": total, "fanout_writes": writes,
         "fanout_transmits": stats.get("fanout_transmits"),
         "bench_connected": (summ.get("states") or {}).get("connected"),
         "instructions_per_packet_per_viewer": total / writes if total and writes else None}
    log("str0m callgrind: %s instructions per packet per viewer (%s writes, %s viewers connected)"
        % (fmt_int(r["instructions_per_packet_per_viewer"]), writes, r["bench_connected"]))
    return r


def str0m_synthetic_heap(bins, n, seconds, tmp):
    """str0m's heap per viewer at tern lab's 4 Mbit/s synthetic stream (its NACK history
    fills to 1000 packets per viewer), for comparison with tern lab's heap per viewer."""
    http = "127.0.0.1:%d" % free_port()
    udp = "127.0.0.1:%d" % free_port()
    p = start([bins["str0m"], "--source", "synthetic", "--http", http, "--udp", udp])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and http_json("http://%s/stats" % http, 1) is None:
            time.sleep(0.2)
        time.sleep(2)
        idle = http_json("http://%s/stats" % http)["live_bytes"]
        b = start([bins["tern"], "bench", "-url", "http://%s/live/demo/whep" % http, "-n", str(n),
                   "-cint", "20", "-life", str(seconds), "-sint", "600000"])
        time.sleep(seconds - 2)
        st = http_json("http://%s/stats" % http)
        stop(b)
    finally:
        stop(p)
    r = {"viewers": n, "connected": st.get("connected"), "idle_bytes": idle,
         "live_bytes": st.get("live_bytes"),
         "heap_per_viewer_bytes": (st["live_bytes"] - idle) / n if st.get("connected") else None}
    log("str0m synthetic 4 Mbit/s: heap per viewer %s B (%s connected)" % (fmt_int(r["heap_per_viewer_bytes"]), r["connected"]))
    return r


def blaster(bins, mode, receivers, seconds):
    out = run([bins["blaster"], "--mode", mode, "--receivers", str(receivers), "--seconds", str(seconds)],
              timeout=seconds + 60)
    line = [l for l in out.splitlines() if l.startswith("{")]
    if not line:
        raise RuntimeError("udp-blaster: " + out[-500:])
    r = json.loads(line[-1])
    log("udp-blaster %s, %d receivers: %.0f packets per sender CPU-second (%.0f packets/s, mean %.0f B)"
        % (mode, receivers, r["packets_per_cpu_s"], r["packets_per_s"], r["mean_datagram_bytes"]))
    return r


def turn(args):
    out = run(["bash", "bench/turn.sh"] + [str(a) for a in args], timeout=900)
    r = {"command": "bench/turn.sh " + " ".join(str(a) for a in args), "tern": {}, "coturn": {}}
    for name in ("tern", "coturn"):
        d = r[name]
        m = re.search(name + r": heap per allocation (-?[\d.]+) B", out)
        if m:
            d["heap_per_allocation_bytes"] = float(m.group(1))
        m = re.search(name + r": RSS per allocation (-?[\d.]+) B", out)
        if m:
            d["rss_per_allocation_bytes"] = float(m.group(1))
        m = re.search(name + r": server CPU per allocation ([\d.]+) us \(whole process\); uclient-driven rate ([\d.]+)", out)
        if m:
            d["cpu_us_per_allocation"] = float(m.group(1))
            d["allocations_per_s_uclient"] = float(m.group(2))
        m = re.search(name + r": TurnWorker thread CPU per allocation ([\d.]+) us", out)
        if m:
            d["turnworker_cpu_us_per_allocation"] = float(m.group(1))
        m = re.search(name + r": relay phase: (\d+) sent, (\d+) received, (\d+) lost; server CPU per relayed packet ([\d.]+) us", out)
        if m:
            d.update(relay_sent=int(m.group(1)), relay_received=int(m.group(2)),
                     relay_lost=int(m.group(3)), cpu_us_per_relayed_packet=float(m.group(4)))
        m = re.search(name + r": TurnWorker thread CPU per relayed packet ([\d.]+) us", out)
        if m:
            d["turnworker_cpu_us_per_relayed_packet"] = float(m.group(1))
    m = re.search(r"allocations held after the allocation phase: (\d+)", out)
    if m:
        r["allocations"] = int(m.group(1))
    r["output_tail"] = out[-3000:]
    log("TURN: tern %s, coturn %s" % (json.dumps(r["tern"]), json.dumps(r["coturn"])))
    return r


def api_overhead(n, rounds, win):
    """Issue 7: bench/api-overhead.sh (server CPU per thread group in interleaved quiet and
    busy windows: a /v1/events subscriber plus a /metrics scrape every second)."""
    env = dict(os.environ, ROUNDS=str(rounds), WIN=str(win))
    out = run(["bash", "bench/api-overhead.sh", str(n)], timeout=n * 2 / 1000 + 2 * rounds * (win + 3) + 120, env=env)
    r = {"command": "ROUNDS=%d WIN=%d bench/api-overhead.sh %d" % (rounds, win, n), "viewers": n,
         "rounds": rounds, "window_s": win, "windows": []}
    m = re.search(r"(\d+) viewers requested, (\d+) connected", out)
    if m:
        r["connected"] = int(m.group(2))
    for kind, rnd, total, media, http, packets, ns in re.findall(
            r"^(quiet|busy)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$", out, re.M):
        r["windows"].append({"kind": kind, "round": int(rnd), "server_cpu_s": float(total),
                             "media_cpu_s": float(media), "http_cpu_s": float(http),
                             "packets": int(packets), "media_ns_per_packet": float(ns)})
    for key, pat in (("http_overhead_pct_of_server", r"attributable overhead .*?: ([+-][\d.]+)%"),
                     ("media_per_packet_busy_vs_quiet_pct", r"media CPU per packet, busy vs quiet: ([+-][\d.]+)%"),
                     ("whole_process_overhead_pct", r"whole-process CPU, busy vs quiet \(noisy\): ([+-][\d.]+)%"),
                     ("metrics_scrape_median_ms", r"GET /metrics wall time: median ([\d.]+) ms")):
        m = re.search(pat, out)
        if m:
            r[key] = float(m.group(1))
    if "http_overhead_pct_of_server" not in r:
        raise RuntimeError("api-overhead.sh: no result: " + out[-800:])
    log("API overhead at %s viewers: HTTP threads %+.3f%% of the server's CPU; whole process %+.2f%%"
        % (r.get("connected"), r["http_overhead_pct_of_server"], r.get("whole_process_overhead_pct", 0)))
    return r


def pool_pair():
    """Issue 3's pool target: allocate+free of a 1500-byte buffer, pool against glibc."""
    out = run(["cargo", "bench", "-q", "-p", "tern-pool", "--bench", "pair"], timeout=600)
    r = {"command": "cargo bench -p tern-pool --bench pair"}
    for key, pat in (("pool_same_thread_ns", r"pool, same thread"),
                     ("glibc_same_thread_ns", r"glibc Vec, same thread"),
                     ("pool_cross_thread_ns", r"pool, alloc on one thread, free on another"),
                     ("glibc_cross_thread_ns", r"glibc Vec, alloc on one thread, free on another")):
        m = re.search(r"^" + pat + r"\s+([\d.]+)\s+([\d.]+)", out, re.M)
        if m:
            r[key] = {"best": float(m.group(1)), "median": float(m.group(2))}
    log("pool pair: %s" % json.dumps({k: v for k, v in r.items() if k.endswith("_ns")}))
    return r


# --- largest N ---------------------------------------------------------------------------

def largest_clean(rows, kind):
    """The largest N of an unbroken run of clean results, in ascending N."""
    best = None
    for r in sorted((r for r in rows if r["server"] == kind), key=lambda r: r["n"]):
        if not r["clean"]:
            break
        best = r["n"]
    return best


def step_up(bins, rows, kind, steps, cint, hold, tmp, budget_s, bisect=2):
    """Brackets the largest clean N: steps N up from the largest clean N measured so far
    until a run is not clean, then halves the gap between the last clean and the first
    failed N (at most `bisect` times, while the gap is over 10 %). Bounded by the steps,
    the bisections and the time budget."""
    t_end = time.monotonic() + budget_s

    def bracket():
        ok, bad = None, None
        for r in sorted((r for r in rows if r["server"] == kind), key=lambda r: r["n"]):
            if r["clean"] and bad is None:
                ok = r["n"]
            elif not r["clean"] and bad is None:
                bad = r["n"]
        return ok, bad

    def try_n(n):
        est = n * cint / 1000 + hold + 12
        if time.monotonic() + est > t_end:
            log("%s: N=%d skipped (time budget)" % (kind, n))
            return False
        row = scenario(bins, kind, n, cint, hold, tmp)
        row["step_up"] = True
        rows.append(row)
        return True

    for n in steps:
        ok, bad = bracket()
        if bad is not None:
            break
        if ok is not None and n <= ok:
            continue
        if not try_n(n):
            return
    for _ in range(bisect):
        ok, bad = bracket()
        if ok is None or bad is None or (bad - ok) <= ok * 0.1:
            return
        mid = int(round((ok + bad) / 2, -1))
        if not try_n(mid):
            return


# --- output ------------------------------------------------------------------------------

def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = {"tern": "tab:green", "str0m": "tab:orange", "pion": "tab:blue"}
    rows = doc["whep"]["rows"]
    for kind in ("tern", "str0m", "pion"):
        rs = sorted((r for r in rows if r["server"] == kind and r["connected"]), key=lambda r: r["n"])
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        heap = [r["heap_per_viewer_bytes"] for r in rs]
        rss = [r["rss_per_viewer_bytes"] for r in rs]
        if all(h is not None and h > 0 for h in heap):
            ax1.plot(ns, [h / 1024 for h in heap], "o-", color=colors[kind], label="%s heap" % kind)
        if all(x is not None and x > 0 for x in rss):
            ax1.plot(ns, [x / 1024 for x in rss], "s--", color=colors[kind], alpha=0.6, label="%s RSS" % kind)
        ax2.plot(ns, [r["server_cpu_s_per_mpkt"] or 0 for r in rs], "o-", color=colors[kind], label=kind)
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("viewers (N)")
    ax1.set_ylabel("KiB per viewer (above idle)")
    ax1.set_title("Memory per viewer")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    lim = doc.get("raw_udp", {}).get("max")
    if lim and lim.get("packets_per_cpu_s"):
        ax2.axhline(1e6 / lim["packets_per_cpu_s"], color="grey", ls=":",
                    label="raw UDP, no crypto (sendmmsg)")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("viewers (N)")
    ax2.set_ylabel("server CPU-seconds per million packets")
    ax2.set_title("CPU per packet sent")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle("tern vs str0m vs pion, tern bench over WHEP, lite clip, %s (%s)" % (doc["date"], doc["mode"]),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def fnum(v, d=0):
    if v is None:
        return "–"
    return ("{:,.%df}" % d).format(v)


def tables(doc, plot_rel, json_rel):
    m = doc["machine"]
    L = []
    L.append("Generated by `%s` on %s (%s mode, %.1f min). Raw figures: [`%s`](%s); plot: [`%s`](%s)."
             % (doc["command"], doc["date"], doc["mode"], doc["duration_s"] / 60, json_rel, json_rel,
                plot_rel, plot_rel))
    others = doc.get("others_cpu_share")
    if others is not None:
        # Measured: CPU that processes outside the suite used during the run.
        share = "; processes outside the suite used %.1f %% of the machine's CPU during the run%s" % (
            100 * others, " (**shared: CPU figures are noisy, instruction counts and bytes are not**)" if others > 0.05 else "")
    else:
        # Older results: only the load average, which the suite's own build also raises.
        share = " (**busy: other engineers were compiling on the same cores; CPU figures are noisy, instruction counts and bytes are not**)" \
            if max(doc["load_before"][0], doc["load_after"][0]) > 1.5 else ""
    L.append("Machine: %d × `%s`, Linux %s, %.0f GiB; load average %s before, %s after%s. %s"
             % (m["cores"], m["cpu"], m["kernel"], m["memory_bytes"] / 2**30,
                " / ".join("%.2f" % x for x in doc["load_before"]),
                " / ".join("%.2f" % x for x in doc["load_after"]), share,
                "Network: " + doc["network"] + "."))
    L.append("")
    L.append("![per-viewer memory and CPU against N](%s)" % plot_rel)
    L.append("")
    core, cg, rows = doc.get("core", {}), doc.get("str0m_callgrind", {}), doc["whep"]["rows"]
    nmax = max((r["n"] for r in rows if r["server"] == "pion" and not r.get("step_up")), default=None)

    def at(kind, n, key):
        r = next((r for r in rows if r["server"] == kind and r["n"] == n), None)
        return r.get(key) if r else None

    syn = doc.get("str0m_synthetic_heap", {})
    L.append("### Targets beside the peers (one run)")
    L.append("")
    L.append("| figure | target | tern | str0m 0.25 (RTP mode) | pion/webrtc v4 | coturn 4.6.1 | raw UDP, no crypto |")
    L.append("|---|---|---:|---:|---:|---:|---:|")
    L.append("| heap per streaming viewer, in-process (`tern lab`, 4 Mbit/s synthetic) vs str0m at the same stream | ≤ 4 KiB | %s B (+ %s B inline = %s B) | %s B | | | |"
             % (fnum(core.get("heap_per_viewer_bytes")), fnum(core.get("inline_viewer_bytes")),
                fnum(core.get("heap_plus_inline_per_viewer_bytes")), fnum(syn.get("heap_per_viewer_bytes"))))
    if nmax:
        L.append("| heap per viewer above idle, WHEP server at N = %d (lite clip; pion: Go HeapAlloc) | | %s B | %s B | %s B | | |"
                 % (nmax, fnum(at("tern", nmax, "heap_per_viewer_bytes")), fnum(at("str0m", nmax, "heap_per_viewer_bytes")),
                    fnum(at("pion", nmax, "heap_per_viewer_bytes"))))
        L.append("| RSS per viewer above idle at N = %d | | %s B | %s B | %s B | | |"
                 % (nmax, fnum(at("tern", nmax, "rss_per_viewer_bytes")), fnum(at("str0m", nmax, "rss_per_viewer_bytes")),
                    fnum(at("pion", nmax, "rss_per_viewer_bytes"))))
    L.append("| instructions per forwarded packet per viewer (callgrind, 1188-byte payloads) | ≤ 2,500 | %s | %s | | | |"
             % (fnum(core.get("instructions_per_packet_per_viewer")), fnum(cg.get("instructions_per_packet_per_viewer"))))
    if nmax:
        L.append("| server CPU-seconds per million packets at N = %d | | %s | %s | %s | | %s |"
                 % (nmax, fnum(at("tern", nmax, "server_cpu_s_per_mpkt"), 2), fnum(at("str0m", nmax, "server_cpu_s_per_mpkt"), 2),
                    fnum(at("pion", nmax, "server_cpu_s_per_mpkt"), 2),
                    fnum(1e6 / doc["raw_udp"]["max"]["packets_per_cpu_s"], 2) if doc.get("raw_udp", {}).get("max") else "–"))
    lc = doc["largest_clean_n"]

    def largest(k):
        v = lc.get(k)
        if v is None:
            return "–"
        failed = [r["n"] for r in rows if r["server"] == k and not r["clean"] and r["n"] > v]
        return "%s (%s)" % (fnum(v), "fails at %s" % fnum(min(failed)) if failed else "none failed: bounded by the steps/time")
    L.append("| largest N with 0 loss, all connected, min fps ≥ 29 (N tried: %s) | 10,000 | %s | %s | %s | | |"
             % ("; ".join("%s %s" % (k, ", ".join(str(n) for n in v)) for k, v in doc["whep"]["tried"].items()),
                largest("tern"), largest("str0m"), largest("pion")))
    L.append("| handshakes per second per core (`tern lab`) | | %s | | | | |" % fnum(core.get("handshakes_per_s_per_core")))
    pool = doc.get("pool", {})
    if pool.get("pool_same_thread_ns"):
        L.append("| buffer pool allocate+free, same thread / across threads, ns (median; glibc beside it) | ≤ 15 | %s / %s (glibc %s / %s) | | | | |" % (
            fnum(pool["pool_same_thread_ns"]["median"], 1), fnum(pool.get("pool_cross_thread_ns", {}).get("median"), 1),
            fnum(pool.get("glibc_same_thread_ns", {}).get("median"), 1), fnum(pool.get("glibc_cross_thread_ns", {}).get("median"), 1)))
    tu = doc.get("turn", {})
    t, c = tu.get("tern", {}), tu.get("coturn", {})
    L.append("| TURN heap per allocation | ≤ 1 KiB | %s B | | | n/a | |" % fnum(t.get("heap_per_allocation_bytes")))
    L.append("| TURN RSS per allocation | | %s B | | | %s B | |" % (fnum(t.get("rss_per_allocation_bytes")), fnum(c.get("rss_per_allocation_bytes"))))
    L.append("| TURN server CPU per relayed packet (whole process) | ≤ 1 µs | %s µs | | | %s µs | |"
             % (fnum(t.get("cpu_us_per_relayed_packet"), 2), fnum(c.get("cpu_us_per_relayed_packet"), 2)))
    L.append("| TURN relay loss | | %s of %s | | | %s of %s | |"
             % (fnum(t.get("relay_lost")), fnum(t.get("relay_sent")), fnum(c.get("relay_lost")), fnum(c.get("relay_sent"))))
    ao = doc.get("api_overhead", {})
    if ao:
        L.append("| management overhead: HTTP threads' extra CPU with a `/v1/events` subscriber + `/metrics` each second, share of the server's CPU at %s viewers | ≤ 1 %% | %s %% | | | | |"
                 % (fnum(ao.get("connected")), fnum(ao.get("http_overhead_pct_of_server"), 3)))
    L.append("")
    L.append("### WHEP servers under `tern bench` (lite clip, ~94 packets/s per viewer)")
    L.append("")
    L.append("CPU is the server's run time summed over its threads (`/proc/PID/task/*/schedstat`) while the bench runs, per million packets the bench received; heap and RSS are medians of 1 s samples in the steady window (3 s after the last connect to 2 s before the end) minus the idle value before the bench. Video latency is from each packet's capture time (abs-capture-time) to its kernel arrival time, over packets captured after the viewer connected; the catch-up column counts those captured before (a keyframe cache replayed at join: tern has one, the str0m and pion fan-outs make a new viewer wait for the next keyframe, which shows in the first-frame time).")
    L.append("")
    L.append("| server | N | connected | lost | fps min | video latency ms | catch-up packets | jitter ms | first frame p50 ms | server CPU s / M packets | server CPU | heap / viewer | RSS / viewer | RSS peak MiB | clean |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(rows, key=lambda r: (r["n"], r["server"])):
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s B | %s B | %s | %s |" % (
            r["server"], fnum(r["n"]), fnum(r["connected"]), fnum(r["losses"]), fnum((r["fps"] or {}).get("min"), 2),
            fnum((r["video_latency_ms"] or {}).get("avg"), 1), fnum(r.get("catchup_packets")),
            fnum((r["video_jitter_ms"] or {}).get("avg"), 2),
            fnum(r["first_frame_ms_p50"]), fnum(r["server_cpu_s_per_mpkt"], 2),
            "%.0f%%" % (100 * r["server_cpu_share"]) if r["server_cpu_share"] else "–",
            fnum(r["heap_per_viewer_bytes"]), fnum(r["rss_per_viewer_bytes"]),
            fnum((r["rss_peak_kib"] or 0) / 1024, 1), "yes" if r["clean"] else "**no**"))
    L.append("")
    ru = doc.get("raw_udp", {})
    if ru.get("clip"):
        L.append("### tern's egress against the raw-UDP limit")
        L.append("")
        L.append("`udp-blaster --mode clip --receivers N`: the lite clip's packets (payload + 44 bytes: RTP header, extension, SRTP tag) in real time to N loopback sockets through tern's own `sendmmsg` batch, no crypto, no sessions; packets per CPU-second of the sending thread. tern: packets it sent (`tern_packets_out_total`) per CPU-second of the whole server in the steady window (3 s after the last connect to 2 s before the end: no handshakes), same N, same clip; the whole run's figure (handshakes and idle tail included) beside it.")
        L.append("")
        L.append("| N | tern packets / server CPU-s, steady | raw UDP packets / sender CPU-s | tern ÷ raw | whole run: tern packets / CPU-s, ÷ raw | tern bytes out / media packet | raw mean datagram B |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|")
        for x in ru["clip"]:
            tr = next((r for r in rows if r["server"] == "tern" and r["n"] == x["receivers"]), None)
            tw = tr and tr.get("server_egress_pkts_per_cpu_s")
            tp = tr and (tr.get("server_steady_egress") or {}).get("pkts_per_cpu_s")
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                fnum(x["receivers"]), fnum(tp), fnum(x["packets_per_cpu_s"]),
                "**%.2f**" % (tp / x["packets_per_cpu_s"]) if tp else "–",
                "%s, %.2f" % (fnum(tw), tw / x["packets_per_cpu_s"]) if tw else "–",
                fnum(tr["server_bytes_out"] / tr["server_packets_out"]) if tr and tr.get("server_bytes_out") and tr.get("server_packets_out") else "–",
                fnum(x["mean_datagram_bytes"])))
        for k, label in (("max", "same datagrams back to back (one core's sendmmsg limit)"),
                         ("gso", "UDP GSO, 14 × 1200-byte segments per message (the kernel's ceiling; not usable for a fan-out)")):
            if ru.get(k):
                L.append("")
                L.append("- %s: **%s packets per sender CPU-second** (%s packets/s, %s receivers)." % (
                    label, fnum(ru[k]["packets_per_cpu_s"]), fnum(ru[k]["packets_per_s"]), fnum(ru[k]["receivers"])))
        L.append("")
    if ao:
        L.append("### Management API overhead (issue 7), per thread group")
        L.append("")
        L.append("`%s` (called by the suite): `tern demo --clip lite` with %s viewers connected; windows of %d s alternate quiet and busy (a WebSocket subscriber on `/v1/events` and `GET /metrics` every second), %d rounds. CPU per thread from `/proc/PID/task/*/schedstat`: media threads (`SPICE-*`, `AW-*`, `StreamWorker*`) and HTTP threads (`HttpWorker`) summed apart."
                 % (ao["command"], fnum(ao.get("connected")), ao["window_s"], ao["rounds"]))
        L.append("")
        L.append("| window | round | server CPU s | media CPU s | HTTP CPU s | packets sent | media ns/packet |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for w in ao["windows"]:
            L.append("| %s | %d | %.3f | %.3f | %.4f | %s | %.1f |" % (w["kind"], w["round"], w["server_cpu_s"], w["media_cpu_s"],
                                                                   w["http_cpu_s"], fnum(w["packets"]), w["media_ns_per_packet"]))
        L.append("")
        L.append("HTTP threads' extra CPU when busy: **%+.3f %% of the server's CPU** (target ≤ 1 %%); media CPU per packet busy vs quiet %+.2f %%; whole process %+.2f %% (noisy); `GET /metrics` median %s ms."
                 % (ao["http_overhead_pct_of_server"], ao.get("media_per_packet_busy_vs_quiet_pct", 0),
                    ao.get("whole_process_overhead_pct", 0), fnum(ao.get("metrics_scrape_median_ms"), 1)))
        L.append("")
    return "\n".join(L)


def update_benchmarks(block):
    path = os.path.join(ROOT, "BENCHMARKS.md")
    with open(path) as f:
        text = f.read()
    begin, end = "<!-- suite:begin -->", "<!-- suite:end -->"
    if begin not in text or end not in text:
        raise RuntimeError("BENCHMARKS.md has no %s ... %s block" % (begin, end))
    a = text.index(begin) + len(begin)
    b = text.index(end)
    text = text[:a] + "\n" + block.rstrip() + "\n" + text[b:]
    with open(path, "w") as f:
        f.write(text)


# --- main --------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--target", required=True)
    ap.add_argument("--pion", required=True)
    ap.add_argument("--network", default="host loopback")
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--no-update", action="store_true", help="do not touch BENCHMARKS.md")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    bins = {"tern": os.path.join(a.target, "release", "tern"),
            "str0m": os.path.join(a.target, "release", "str0m-fanout"),
            "blaster": os.path.join(a.target, "release", "udp-blaster"), "pion": a.pion}
    for k, v in bins.items():
        if not os.access(v, os.X_OK):
            raise SystemExit("missing binary %s: %s" % (k, v))
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%Y-%m-%d-%H%M") + ("-quick" if a.quick else "")
    tmp = os.path.join(ROOT, "bench", "results", "tmp", stamp)
    os.makedirs(tmp, exist_ok=True)
    q = a.quick
    become_subreaper()
    mark = cpu_mark()
    doc = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "mode": "quick" if q else "full",
           "command": a.command + (" --quick" if q else ""), "machine": machine(),
           "load_before": loadavg(), "network": a.network,
           "versions": {"rustc": subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip(),
                        "pion_webrtc": os.environ.get("PION_VERSION", "?"), "go": os.environ.get("GO_VERSION", "?"),
                        "coturn": subprocess.run(["sh", "-c", "dpkg-query -W -f='${Version}' coturn"], capture_output=True, text=True).stdout},
           "errors": []}

    def step(name, f):
        log("== " + name)
        try:
            return f()
        except Exception as e:  # one broken scenario must not lose the others
            log("%s failed: %s" % (name, e))
            doc["errors"].append("%s: %s" % (name, e))
            stop_all()
            return None

    doc["core"] = step("core (bench/core.sh)", lambda: core(200 if q else 1000)) or {}
    doc["pool"] = step("pool (cargo bench --bench pair)", pool_pair) or {}
    doc["str0m_callgrind"] = step("str0m callgrind", lambda: str0m_callgrind(bins, 3 if q else 4, 30 if q else 40, 5, tmp)) or {}
    doc["str0m_synthetic_heap"] = step("str0m heap at 4 Mbit/s", lambda: str0m_synthetic_heap(bins, 20 if q else 50, 10 if q else 15, tmp)) or {}

    # WHEP matrix: pion, str0m and tern at the same N, same clip, back to back.
    whep_ns = [50] if q else [50, 100, 200, 400]
    hold = 8 if q else 15
    rows = []
    for n in whep_ns:
        for kind in ("pion", "str0m", "tern"):
            r = step("%s N=%d" % (kind, n), lambda: scenario(bins, kind, n, 20, hold, tmp))
            if r:
                rows.append(r)
    # tern's scale points (cint 2 ms as bench/scale.sh) and the raw-UDP limit at the same N.
    scale_ns = [1000] if q else [1000, 2500, 5000]
    raw = {"clip": []}
    for n in scale_ns:
        r = step("tern N=%d" % n, lambda: scenario(bins, "tern", n, 2, hold, tmp))
        if r:
            rows.append(r)
        x = step("udp-blaster clip N=%d" % n, lambda: blaster(bins, "clip", n, 5 if q else 10))
        if x:
            raw["clip"].append(x)
    raw["max"] = step("udp-blaster max", lambda: blaster(bins, "max", 1000, 3 if q else 5))
    raw["gso"] = step("udp-blaster gso", lambda: blaster(bins, "gso", 1000, 3 if q else 5))
    doc["raw_udp"] = raw
    doc["turn"] = step("TURN (bench/turn.sh)", lambda: turn([40, 10, 500] if q else [400, 50, 4000])) or {}
    # Issue 7 asks for 5,000 viewers; on a machine (or a load) where tern does not hold
    # 5,000 cleanly the figure would measure an overloaded server, so it is taken at the
    # largest scale point that was clean, and the table says which.
    api_n = 500 if q else 5000
    held = [r["n"] for r in rows if r["server"] == "tern" and r["clean"] and r["cint_ms"] == 2]
    if not q and not any(r["server"] == "tern" and r["n"] == 5000 and r["clean"] for r in rows) and held:
        api_n = max(held)
        log("tern did not hold 5,000 viewers cleanly here: API overhead at %d" % api_n)
    doc["api_overhead"] = step("API overhead (bench/api-overhead.sh)", lambda: api_overhead(api_n, 1 if q else 3, 5 if q else 10)) or {}
    # Largest clean N: step each server up from where the matrix left it, within what is
    # left of the whole run's 30 minutes: bench/run.sh passes the wall-clock deadline it set
    # when it started (installs and build included); run by hand, the suite takes 26 minutes.
    # A minute is kept for writing results and the last scenario's overrun.
    if not q:
        deadline = os.environ.get("TERN_SUITE_DEADLINE")
        if deadline:
            left = lambda: float(deadline) - 60 - time.time()
        else:
            left = lambda: 26 * 60 - (time.monotonic() - T0)
        log("%.0f s left for stepping up" % left())
        step("step up pion", lambda: step_up(bins, rows, "pion", [600, 800, 1000, 1300], 10, 15, tmp, min(200, left() / 3)))
        step("step up str0m", lambda: step_up(bins, rows, "str0m", [600, 800, 1000, 1300, 1600, 2000, 2500], 10, 15, tmp, min(260, left() / 2)))
        step("step up tern", lambda: step_up(bins, rows, "tern", [6000, 7000, 8000], 2, 15, tmp, min(240, left())))
    tried = {}
    for kind in ("pion", "str0m", "tern"):
        tried[kind] = sorted(r["n"] for r in rows if r["server"] == kind)
    doc["whep"] = {"rows": rows, "tried": tried, "bench": "tern bench -n N -cint CINT -life RAMP+HOLD -sint 600000 --json --details true",
                   "hold_s": hold}
    doc["largest_clean_n"] = {k: largest_clean(rows, k) for k in ("pion", "str0m", "tern")}
    doc["load_after"] = loadavg()
    stop_all()
    reap_orphans()
    doc["others_cpu_share"] = others_cpu_share(mark)
    doc["duration_s"] = time.monotonic() - T0

    res = os.path.join(ROOT, "bench", "results")
    json_path = os.path.join(res, stamp + ".json")
    svg_path = os.path.join(res, stamp + ".svg")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    log("wrote " + json_path)
    try:
        plot(doc, svg_path)
        log("wrote " + svg_path)
    except Exception as e:
        doc["errors"].append("plot: %s" % e)
        log("plot failed: %s" % e)
    block = tables(doc, os.path.relpath(svg_path, ROOT), os.path.relpath(json_path, ROOT))
    with open(os.path.join(res, stamp + ".md"), "w") as f:
        f.write(block + "\n")
    if not a.no_update:
        update_benchmarks(block)
        log("updated the suite block of BENCHMARKS.md")
    shutil.rmtree(tmp, ignore_errors=True)
    if doc["errors"]:
        log("errors: %s" % doc["errors"])
        return 1
    return 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        stop_all()
    sys.exit(code)
