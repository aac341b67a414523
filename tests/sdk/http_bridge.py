#!/usr/bin/python3
"""A stand-in for `asp-agent --listen` while the agent has no HTTP support: the HTTP side
of the wire format (docs/design.md, "Wire format": POST /v1/rpc with one msgpack request
per body, Bearer token, status 200 for every RPC answer, 400 for a body that is not a
request, 401 for a missing or wrong token, 413 above max_message, GET /v1/health) in front
of one `asp-agent --stdio` that every request is relayed to (pipelined, ids remapped). It
lets the SDKs' HTTP clients run the conformance cases against the real responder's
semantics.

usage: http_bridge.py AGENT [--token T] -- COMMAND ARGS...   ({url} in ARGS is replaced)
"""
import hmac
import http.server
import os
import struct
import subprocess
import sys
import threading

import msgpack

MAX_MESSAGE = 16 * 1024 * 1024

args = sys.argv[1:]
agent = args[0]
token = args[args.index("--token") + 1] if "--token" in args else None
cmd = args[args.index("--") + 1:]


class Relay:
    """One asp-agent --stdio; requests from many HTTP threads, answers matched by id."""

    def __init__(self):
        self.p = subprocess.Popen([agent, "--stdio"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self.lock = threading.Lock()
        self.waiting = {}
        self.next = 1
        threading.Thread(target=self.reader, daemon=True).start()

    def reader(self):
        out = self.p.stdout
        while True:
            hdr = out.read(4)
            if len(hdr) < 4:
                break
            body = out.read(struct.unpack(">I", hdr)[0])
            msg = msgpack.unpackb(body, raw=False, unicode_errors="surrogateescape",
                                  strict_map_key=False)
            if msg[0] != 1:
                continue  # notifications: HTTP POST cannot carry them
            with self.lock:
                slot = self.waiting.pop(msg[1], None)
            if slot:
                slot[1] = msg
                slot[0].set()
        with self.lock:
            for slot in self.waiting.values():
                slot[0].set()

    def call(self, req):
        slot = [threading.Event(), None]
        with self.lock:
            my = self.next
            self.next += 1
            self.waiting[my] = slot
            their = req[1]
            req[1] = my
            data = msgpack.packb(req, use_bin_type=True, unicode_errors="surrogateescape")
            self.p.stdin.write(struct.pack(">I", len(data)) + data)
            self.p.stdin.flush()
        slot[0].wait()
        resp = slot[1]
        if resp is None:
            resp = [1, my, {"code": "transport_error", "message": "the agent died"}, None]
        resp[1] = their
        return msgpack.packb(resp, use_bin_type=True, unicode_errors="surrogateescape")


relay = Relay()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave in two writes

    def log_message(self, *a):
        pass

    def answer(self, status, body=b"", ctype="application/msgpack"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/health":
            self.answer(200, b"ok\n", "text/plain")
        else:
            self.answer(404, b"not found\n", "text/plain")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.path != "/v1/rpc":
            self.rfile.read(n)
            return self.answer(404, b"not found\n", "text/plain")
        if token is not None:
            auth = self.headers.get("Authorization", "")
            if not hmac.compare_digest(auth.encode(), ("Bearer " + token).encode()):
                self.rfile.read(n)
                return self.answer(401, b"unauthorized\n", "text/plain")
        if n > MAX_MESSAGE:
            while n > 0:  # read and discard, so the client sees the status
                n -= len(self.rfile.read(min(n, 1 << 20)) or b"x" * n)
            return self.answer(413, b"too large\n", "text/plain")
        body = self.rfile.read(n)
        try:
            req = msgpack.unpackb(body, raw=False, unicode_errors="surrogateescape",
                                  strict_map_key=False)
            ok = isinstance(req, list) and len(req) == 4 and req[0] == 0 and \
                isinstance(req[1], int) and 0 <= req[1] <= 0xFFFFFFFF
        except Exception:  # noqa: BLE001 -- any undecodable body is a 400
            ok = False
        if not ok:
            return self.answer(400, b"not a request\n", "text/plain")
        self.answer(200, relay.call(req))


# a listen backlog for a client's burst of connections (the default, 5, overflowed under
# load: 80 overlapping calls from a keep-alive pool saw ECONNRESET)
http.server.ThreadingHTTPServer.request_queue_size = 128
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()
url = "http://127.0.0.1:%d" % server.server_address[1]
try:
    rc = subprocess.call([a.replace("{url}", url) for a in cmd],
                         env=dict(os.environ, ASP_TEST_URL=url))
finally:
    server.shutdown()
    relay.p.stdin.close()
    relay.p.wait(10)
sys.exit(rc)
