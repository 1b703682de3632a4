#!/usr/bin/env python3
"""A WebSocket subscriber with nothing but the standard library, for bench scripts.

    ws_subscribe.py HOST:PORT PATH SECONDS

Opens ws://HOST:PORT/PATH, checks the 101 upgrade, reads frames for SECONDS and prints
"frames=N bytes=M". Exits 1 when the upgrade fails, so a benchmark that means to measure
a subscriber never measures without one. Python rather than Node because Debian's Node 18
has no WebSocket client and a fresh machine has nothing else to hand.
"""
import base64
import os
import socket
import sys
import time


def main():
    host, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    h, p = host.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, key)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status + b" ":
        print("ws_subscribe: upgrade refused: %s" % status.decode(errors="replace"), file=sys.stderr)
        return 1
    frames, total = 0, len(rest)
    end = time.monotonic() + seconds
    pending = rest
    while True:
        # Count complete frames in what has arrived (server frames are unmasked).
        while len(pending) >= 2:
            n = pending[1] & 0x7F
            off = 2
            if n == 126:
                if len(pending) < 4:
                    break
                n, off = int.from_bytes(pending[2:4], "big"), 4
            elif n == 127:
                if len(pending) < 10:
                    break
                n, off = int.from_bytes(pending[2:10], "big"), 10
            if len(pending) < off + n:
                break
            pending = pending[off + n:]
            frames += 1
        left = end - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        total += len(chunk)
        pending += chunk
    s.close()
    print("frames=%d bytes=%d" % (frames, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
