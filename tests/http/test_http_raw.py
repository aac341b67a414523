"""asp-agent --listen seen from a raw socket, for what HTTP client libraries never send.

Headers beyond the server's header table (4096 bytes) are answered with the status line
`HTTP/1.1 431 Request Header Fields Too Large` before the connection closes, not a bare
close: 1 MiB of one header on a fresh connection, the same on a kept-alive connection
(with other connections open, so the server cannot tell them apart from its log alone),
thousands of small headers, and a 1 MiB request line. The server goes on serving.

Then a WebSocket frame a client sent unmasked (RFC 6455 §5.1: the server MUST close the
connection; §7.4.1: status 1002). libwebsockets parses the frames, and before 5.0.0 it
does not check the mask bit and offers no way to see it (docs/faults.md), so with an
older lws this checks the documented behaviour (the frame is served as if masked) and
says so; with lws 5 or later it wants the close with 1002. A masked frame first, so the
framing of this test is known to be right.

usage: test_http_raw.py ASP_AGENT LWS_VERSION
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402

failures = []
MIB = 1 << 20


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def read_all(s, limit=1 << 16):
    """Everything the server sends until it closes (or 20 s pass)."""
    s.settimeout(20)
    out = b""
    try:
        while len(out) < limit:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError as e:  # a reset after the answer still leaves what came before it
        out += b" <%s>" % type(e).__name__.encode()
    return out


def send_behind(s, data):
    """Sends in a thread: the server stops reading once it has answered."""
    def run():
        try:
            s.sendall(data)
        except OSError:
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def health(s):
    """One GET /v1/health on a kept-alive connection; the whole answer."""
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n\r\n")
    s.settimeout(20)
    got = b""
    while not got.endswith(b"ok\n"):
        b = s.recv(4096)
        if not b:
            break
        got += b
    return got


STATUS_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\n"


def header_cases(addr):
    big = b"X-Big: " + b"a" * MIB + b"\r\n"
    with socket.create_connection(addr) as s:
        send_behind(s, b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n" + big + b"\r\n")
        out = read_all(s)
        check(out.startswith(STATUS_431), "1 MiB header, fresh connection: %r" % out[:60])
        check(b"Connection: close" in out and b"4096 bytes" in out,
              "the 431 closes the connection and says the limit")

    with socket.create_connection(addr) as s:
        send_behind(s, b"GET /v1/health?" + b"q" * MIB + b" HTTP/1.1\r\nHost: asp\r\n\r\n")
        out = read_all(s)
        check(out.startswith(STATUS_431), "1 MiB request line: %r" % out[:60])

    with socket.create_connection(addr) as s:
        many = b"".join(b"X-%d: v\r\n" % i for i in range(3000))
        send_behind(s, b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n" + many + b"\r\n")
        out = read_all(s)
        check(out.startswith(STATUS_431), "3000 small headers: %r" % out[:60])

    # Kept alive after one answer, while two other connections also wait for headers.
    with socket.create_connection(addr) as a, socket.create_connection(addr) as b, \
            socket.create_connection(addr) as s:
        check(health(a).startswith(b"HTTP/1.1 200"), "another connection, kept alive")
        check(health(s).startswith(b"HTTP/1.1 200"), "first request answered")
        send_behind(s, b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n" + big + b"\r\n")
        out = read_all(s)
        check(out.startswith(STATUS_431),
              "1 MiB header on a kept-alive connection, among others: %r" % out[:60])
        check(health(a).startswith(b"HTTP/1.1 200"), "the other connection still served")
        b.sendall(b"GET /v1/health HTTP/1.1\r\nHost: asp\r\nConnection: close\r\n\r\n")
        out = read_all(b)
        check(out.startswith(b"HTTP/1.1 200") and out.count(b"HTTP/1.1") == 1,
              "the fresh one too, and nothing else came to it: %r" % out[:60])

    # Fresh, while a fresh and a kept-alive connection wait idle.
    with socket.create_connection(addr) as a, socket.create_connection(addr) as b, \
            socket.create_connection(addr) as s:
        check(health(a).startswith(b"HTTP/1.1 200"), "an idle kept-alive connection")
        send_behind(s, b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n" + big + b"\r\n")
        out = read_all(s)
        check(out.startswith(STATUS_431),
              "1 MiB header on a fresh connection, among idle ones: %r" % out[:60])
        check(health(a).startswith(b"HTTP/1.1 200"), "the idle ones are still served")

    # The case left (docs/faults.md): a first request while another connection is part
    # way through its headers closes, with or without the 431; the other one is served.
    with socket.create_connection(addr) as a, socket.create_connection(addr) as s:
        a.sendall(b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n")  # read by now, or not
        send_behind(s, b"GET /v1/health HTTP/1.1\r\nHost: asp\r\n" + big + b"\r\n")
        out = read_all(s)
        check(out == b"" or out.startswith(STATUS_431),
              "beside a half-sent request: 431 or a bare close, %r" % out[:60])
        a.sendall(b"Connection: close\r\n\r\n")
        out = read_all(a)
        check(out.startswith(b"HTTP/1.1 200") and out.count(b"HTTP/1.1") == 1,
              "the half-sent request, finished, is answered alone: %r" % out[:60])

    with socket.create_connection(addr) as s:
        check(health(s).startswith(b"HTTP/1.1 200"), "the server goes on serving")


HELLO = b"\x94\x00\x07\xa5hello\x80"  # msgpack [0, 7, "hello", {}]


def ws_frame(payload, masked):
    head = bytes([0x82])  # FIN, binary
    n = len(payload)
    mbit = 0x80 if masked else 0
    if n < 126:
        head += bytes([mbit | n])
    else:
        head += bytes([mbit | 126]) + struct.pack(">H", n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def ws_open(addr):
    s = socket.create_connection(addr, timeout=20)
    s.sendall(b"GET /v1/ws HTTP/1.1\r\nHost: asp\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: asp.v1\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return s, got.split(b"\r\n\r\n", 1)


def ws_next(s, rest):
    """(opcode, payload) of the next server frame, or (None, why)."""
    buf = rest
    s.settimeout(20)
    try:
        while True:
            if len(buf) >= 2:
                n = buf[1] & 0x7F
                at = 2
                if n == 126 and len(buf) >= 4:
                    n, at = struct.unpack(">H", buf[2:4])[0], 4
                elif n == 127 and len(buf) >= 10:
                    n, at = struct.unpack(">Q", buf[2:10])[0], 10
                if n < 126 or at > 2:
                    if len(buf) >= at + n:
                        return buf[0] & 0x0F, buf[at:at + n]
            b = s.recv(65536)
            if not b:
                return None, "closed without a close frame"
            buf += b
    except OSError as e:
        return None, type(e).__name__


def ws_cases(addr, lws_major):
    s, (status, rest) = ws_open(addr)
    with s:
        check(status.startswith(b"HTTP/1.1 101"), "WebSocket upgrade: %r" % status[:40])
        s.sendall(ws_frame(HELLO, True))
        op, payload = ws_next(s, rest)
        check(op == 2 and payload[:3] == b"\x94\x01\x07", "a masked hello is answered")

    s, (status, rest) = ws_open(addr)
    with s:
        s.sendall(ws_frame(HELLO, False))
        op, payload = ws_next(s, rest)
        if lws_major >= 5:
            code = None
            if op == 8 and len(payload) >= 2:
                code = struct.unpack(">H", payload[:2])[0]
            check(code == 1002,
                  "an unmasked frame: closed with 1002 (got %r %r)" % (op, payload[:20]))
        else:
            check(op == 2 and payload[:3] == b"\x94\x01\x07",
                  "known (docs/faults.md): lws %d.x serves an unmasked frame as if masked"
                  % lws_major)


def main(agent, lws_version):
    lws_major = int(lws_version.split(".")[0])
    with tempfile.NamedTemporaryFile("w+", prefix="asp-http-raw-", suffix=".log") as log:
        p, addr = start_agent(agent, log)
        try:
            header_cases(addr)
            ws_cases(addr, lws_major)
        finally:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        with open(log.name) as f:
            text = f.read()
        n = text.count("answered 431")
        check(n in (5, 6), "the agent logs each 431 with the peer (%d)" % n)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), sys.argv[2]))
