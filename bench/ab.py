#!/usr/bin/env python3
"""Two tern binaries side by side on the figures a refactor must not move: instructions per
forwarded packet per viewer (callgrind over `tern lab`'s fan_out_packet, as bench/core.sh
counts it) and heap per viewer above idle of a WHEP server at N viewers (bench/suite.py's
own scenario, as the suite's headline row). The arms alternate, A B A B, so the machine's
drift falls on both; run it inside a private network namespace (bench/ab.sh does).

Usage: ab.py BIN_A BIN_B [--rounds R] [--viewers N]"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import suite  # noqa: E402  (suite.ROOT is the repository)

V = 50  # callgrind viewers, as bench/core.sh


def instructions(binary, tmp):
    """(I(3000) - I(1000)) / (2000 * V): the per-packet, per-viewer count, set-up cancelled."""
    counts = {}
    for p in (1000, 3000):
        out = os.path.join(tmp, "cg.%d" % p)
        subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=tern::lab::fan_out_packet",
                        "--callgrind-out-file=" + out, binary, "lab", "--viewers", str(V),
                        "--packets", str(p)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            counts[p] = int(re.search(r"^summary: (\d+)", f.read(), re.M).group(1))
    return (counts[3000] - counts[1000]) / (2000 * V)


def heap(binary, n, tmp):
    """Heap per viewer above idle at N WHEP viewers (lite clip), and whether the run was clean."""
    row = suite.scenario({"tern": binary}, "tern", n, 20, 15, tmp)
    return row["heap_per_viewer_bytes"], row["clean"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--viewers", type=int, default=400)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, suite.on_signal)
    signal.signal(signal.SIGINT, suite.on_signal)
    rows = {"a": [], "b": []}
    try:
        for r in range(args.rounds):
            for arm in ("a", "b"):
                binary = os.path.abspath(getattr(args, arm))
                with tempfile.TemporaryDirectory(prefix="tern-ab-") as tmp:
                    ins = instructions(binary, tmp)
                    hb, clean = heap(binary, args.viewers, tmp)
                rows[arm].append({"instructions_per_packet_per_viewer": round(ins),
                                  "heap_per_viewer_bytes": round(hb) if hb else None,
                                  "clean": clean})
                print("round %d %s: %.0f instructions/packet/viewer, %s B heap/viewer%s"
                      % (r + 1, arm.upper(), ins, hb and round(hb), "" if clean else " (not clean)"),
                      flush=True)
    finally:
        suite.stop_all()
    for key in ("instructions_per_packet_per_viewer", "heap_per_viewer_bytes"):
        a = [x[key] for x in rows["a"] if x[key]]
        b = [x[key] for x in rows["b"] if x[key]]
        if a and b:
            ma, mb = sorted(a)[len(a) // 2], sorted(b)[len(b) // 2]
            print("%s: A %s, B %s, B/A %.4f" % (key, a, b, mb / ma))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
