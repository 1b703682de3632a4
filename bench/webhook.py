#!/usr/bin/env python3
"""A minimal admission webhook for bench/admission.sh: allows everything, answers at once.

    bench/webhook.py PORT

HTTP/1.1 with keep-alive (tern's client pools connections), one thread per connection.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Admit(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes: without this, Nagle holds the body until
    # the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def do_POST(self):
        ask = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"allow": True} if ask["action"] != "close" else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Admit).serve_forever()
