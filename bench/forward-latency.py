#!/usr/bin/env python3
"""The latency a forward adds: two ffmpeg pulls at once, DIRECT (nginx fed by the publisher
itself) and FORWARDED (nginx fed by tern's forward of the same publish), each decoding its
video (one decoder thread, no audio) through `showinfo`, which logs a checksum of every
decoded picture. Each log line is stamped with its arrival time here (monotonic clock); a
picture seen on both pulls (matched by checksum, pictures whose checksum occurs more than once
on a pull are left out) gives forwarded - direct. The first WARMUP seconds of pictures are left
out (ffmpeg's probing buffers the start of each pull and then decodes it in a burst).
Both pulls go through the same decoder and filter, so what they add cancels; the difference is
tern's ingest -> tap -> forward queue -> RTMP out, plus one more loopback TCP hop into nginx.

    forward-latency.py DIRECT_URL FORWARDED_URL SECONDS [WARMUP]

Prints one line: `latency: n=N median=X ms p95=Y ms min=.. max=..` (or `latency: none ...`).
"""
import re
import statistics
import subprocess
import sys
import threading
import time

CHECKSUM = re.compile(rb"\] n:\s*\d+ .*?checksum:([0-9A-F]+)")


def pull(url, seconds, seen, procs):
    cmd = [
        "timeout", str(seconds + 15),
        "ffmpeg", "-hide_banner", "-nostdin", "-nostats", "-loglevel", "info",
        "-rw_timeout", "10000000", "-fflags", "nobuffer", "-threads", "1",
        "-i", url, "-t", str(seconds), "-map", "0:v:0", "-an",
        "-vf", "showinfo", "-f", "null", "-",
    ]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    procs.append(p)
    for line in iter(p.stderr.readline, b""):
        now = time.monotonic()
        m = CHECKSUM.search(line)
        if m:
            seen.append((m.group(1), now))
    p.wait()


def main():
    direct, forwarded, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    warmup = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
    a, b, procs = [], [], []
    threads = [threading.Thread(target=pull, args=(u, seconds, s, procs), daemon=True)
               for u, s in ((direct, a), (forwarded, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 20)
    for p in procs:
        if p.poll() is None:
            p.kill()

    def unique(seen):
        count, at = {}, {}
        for c, t in seen:
            count[c] = count.get(c, 0) + 1
            at[c] = t
        return {c: t for c, t in at.items() if count[c] == 1}

    ua, ub = unique(a), unique(b)
    if not a or not b:
        print("latency: none (direct %d pictures, forwarded %d)" % (len(a), len(b)))
        return
    start = max(a[0][1], b[0][1]) + warmup
    d = sorted((ub[c] - ua[c]) * 1000 for c in ua.keys() & ub.keys() if ua[c] >= start)
    if not d:
        print("latency: none matched (direct %d pictures, forwarded %d)" % (len(a), len(b)))
        return
    p95 = d[min(len(d) - 1, int(round(0.95 * (len(d) - 1))))]
    print("latency: n=%d median=%.1f ms p95=%.1f ms min=%.1f max=%.1f (pictures: direct %d, forwarded %d)"
          % (len(d), statistics.median(d), p95, d[0], d[-1], len(a), len(b)))


if __name__ == "__main__":
    main()
