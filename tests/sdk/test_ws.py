#!/usr/bin/python3
"""The Python SDK's WebSocket client (asp._ws under the sync and asyncio HTTP transports)
against a scripted server on loopback, one behaviour per URL path: a refused upgrade
names the HTTP status, the bearer token is sent, a server that closes mid-stream fails
the calls in flight with transport_error, large messages go both ways (fragmented, a
ping between the fragments), a message above max_message is a protocol_error.
usage: test_ws.py SDK_DIR"""
import asyncio
import socket
import socketserver
import struct
import sys
import threading

import msgpack

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from asp import _aio_transport, _transport, _ws  # noqa: E402

WAIT = 20  # seconds: the bound of every wait here
MIB = 1024 * 1024
passed = failed = 0


def server_frame(op, payload, fin=True):
    n = len(payload)
    b0 = (0x80 if fin else 0) | op
    if n < 126:
        head = struct.pack("!BB", b0, n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 126, n)
    else:
        head = struct.pack("!BBQ", b0, 127, n)
    return head + payload


class Conn:
    """The server's side of one connection: reads client frames (masked)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def need(self, n):
        while len(self.buf) < n:
            b = self.sock.recv(65536)
            if not b:
                raise EOFError
            self.buf += b
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            b = self.sock.recv(4096)
            if not b:
                raise EOFError
            self.buf += b
        h, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = h.decode("latin-1").split("\r\n")
        hdrs = {k.strip().lower(): v.strip() for k, v in
                (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        return lines[0].split(" ")[1], hdrs

    def message(self):
        """One whole client message (reassembled), or a control frame's (op, payload)."""
        parts = []
        while True:
            b0, b1 = self.need(2)
            assert b1 & 0x80, "a client frame must be masked"
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self.need(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self.need(8))[0]
            key = self.need(4)
            data = _ws.mask(self.need(n), key)
            op = b0 & 0x0F
            if op >= 8:
                return op, data
            parts.append(data)
            if b0 & 0x80:
                return 2, b"".join(parts)

    def send(self, data):
        self.sock.sendall(data)


def accept(c, hdrs):
    import base64
    import hashlib
    key = hdrs["sec-websocket-key"].encode()
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                           .digest()).decode()
    c.send(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
            "Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: asp.v1\r\n\r\n"
            % acc).encode())


def answer(c, req, result):
    c.send(server_frame(2, msgpack.packb([1, req[1], None, result], use_bin_type=True)))


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        c = Conn(self.request)
        try:
            path, hdrs = c.head()
            kind = path.split("/")[1]
            if kind == "r401":
                c.send(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"asp\"\r\n"
                       b"Content-Length: 13\r\nConnection: close\r\n\r\nunauthorized\n")
                return
            if kind == "r400":
                body = b"Sec-WebSocket-Protocol: asp.v1 is required\n"
                c.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\nConnection: close"
                       b"\r\n\r\n%s" % (len(body), body))
                return
            if kind == "tok" and hdrs.get("authorization") != "Bearer s3cret":
                c.send(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                return
            accept(c, hdrs)
            getattr(self, "serve_" + kind)(c)
        except (EOFError, OSError):
            pass

    def serve_tok(self, c):
        while True:
            op, data = c.message()
            if op == 8:
                c.send(server_frame(8, data))
                return
            req = msgpack.unpackb(data, raw=False)
            answer(c, req, {"method": req[2]})

    def serve_drop(self, c):
        # the first request is answered, the next three are not: the server goes away
        op, data = c.message()
        answer(c, msgpack.unpackb(data, raw=False), {"n": 1})
        for _ in range(3):
            c.message()
        c.send(server_frame(2, msgpack.packb([2, "output", {"proc": 1}])))
        c.sock.shutdown(socket.SHUT_RDWR)

    def serve_close(self, c):
        c.message()
        c.send(server_frame(8, struct.pack("!H", 1011) + b"internal error"))
        c.message()  # the client's close answer

    def serve_big(self, c):
        while True:
            op, data = c.message()
            if op == 8:
                c.send(server_frame(8, data))
                return
            if op == 10:
                continue  # our ping's pong
            req = msgpack.unpackb(data, raw=False)
            n = req[3].get("n", 0)
            got = len(req[3].get("data", b""))
            body = msgpack.packb([1, req[1], None, {"got": got, "data": b"z" * n}],
                                 use_bin_type=True)
            step = 65536
            for at in range(0, len(body), step):
                c.send(server_frame(2 if at == 0 else 0, body[at:at + step],
                                    fin=at + step >= len(body)))
                if at == step:
                    c.send(server_frame(9, b"are you there"))

    def serve_huge(self, c):
        c.message()
        c.send(struct.pack("!BBQ", 0x82, 127, 17 * MIB))  # the header alone is refused


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = "http://127.0.0.1:%d" % srv.server_address[1]


def check(what, fn):
    global passed, failed
    for mode in ("sync", "asyncio"):
        try:
            fn(mode)
            passed += 1
            print("ok - %s (%s)" % (what, mode))
        except Exception as e:  # noqa: BLE001
            failed += 1
            print("FAIL - %s (%s): %r" % (what, mode, e))


class Client:
    """The transport under test, sync or asyncio, driven with plain calls."""

    def __init__(self, mode, path, token=None, max_message=16 * MIB):
        self.notes = []
        self.mode = mode
        kw = dict(call_timeout_ms=WAIT * 1000, websocket=True, on_notify=self.on_notify)
        if mode == "sync":
            self.t = _transport.HttpTransport(base + path, token, max_message, **kw)
        else:
            self.loop = asyncio.new_event_loop()
            self.t = _aio_transport.AioHttpTransport(base + path, token, max_message, **kw)

    def on_notify(self, conn, method, params):
        self.notes.append((method, params))

    def call(self, method, params):
        if self.mode == "sync":
            return self.t.call(method, params)
        return self.loop.run_until_complete(
            asyncio.wait_for(self.t.call(method, params), WAIT))

    def calls(self, n, method, params):
        """n calls at once: their results or AspErrors."""
        if self.mode == "sync":
            out = [None] * n

            def one(i):
                try:
                    out[i] = self.t.call(method, params)
                except asp.AspError as e:
                    out[i] = e
            ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
            [t.start() for t in ts]
            [t.join(WAIT) for t in ts]
            return out

        async def all_():
            return await asyncio.gather(*[self.t.call(method, params) for _ in range(n)],
                                        return_exceptions=True)
        return self.loop.run_until_complete(asyncio.wait_for(all_(), WAIT))

    def close(self):
        if self.mode == "sync":
            self.t.close()
        else:
            self.loop.run_until_complete(asyncio.wait_for(self.t.close(), WAIT))
            self.loop.close()


def expect(code, fn):
    try:
        fn()
    except asp.AspError as e:
        assert e.code == code, "expected %s, got %s: %s" % (code, e.code, e.message)
        return e
    raise AssertionError("expected %s, got no error" % code)


def refused(mode):
    c = Client(mode, "/r401")
    e = expect("unauthorized", lambda: c.call("stat", {}))
    assert "401" in e.message, e.message
    c.close()
    c = Client(mode, "/r400")
    e = expect("transport_error", lambda: c.call("stat", {}))
    assert "HTTP 400" in e.message and "asp.v1" in e.message, e.message
    c.close()


def token(mode):
    c = Client(mode, "/tok", token="s3cret")
    assert c.call("stat", {"path": "/"}).result == {"method": "stat"}
    c.close()
    c = Client(mode, "/tok", token="wrong")
    expect("unauthorized", lambda: c.call("stat", {}))
    c.close()


def drop(mode):
    c = Client(mode, "/drop")
    assert c.call("stat", {}).result == {"n": 1}
    res = c.calls(3, "stat", {})
    for r in res:
        assert isinstance(r, asp.AspError) and r.code == "transport_error", repr(r)
    assert base + "/drop" in res[0].message, res[0].message
    c.close()


def closed(mode):
    c = Client(mode, "/close")
    e = expect("transport_error", lambda: c.call("stat", {}))
    assert "code 1011: internal error" in e.message, e.message
    c.close()


def big(mode):
    c = Client(mode, "/big")
    m = c.call("read", {"n": 5 * MIB, "data": b"q" * (3 * MIB)})
    assert m.result["got"] == 3 * MIB and m.result["data"] == b"z" * (5 * MIB), "sizes"
    res = c.calls(4, "read", {"n": MIB})
    assert all(getattr(r, "result", {}).get("data") == b"z" * MIB for r in res), repr(res)[:200]
    c.close()


def huge(mode):
    c = Client(mode, "/huge")
    e = expect("protocol_error", lambda: c.call("stat", {}))
    assert "max_message" in e.message, e.message
    c.close()


def unreachable(mode):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    if mode == "sync":
        t = _transport.HttpTransport("http://127.0.0.1:%d" % port, None, MIB, websocket=True)
        e = expect("transport_error", lambda: t.call("stat", {}))
    else:
        loop = asyncio.new_event_loop()
        t = _aio_transport.AioHttpTransport("http://127.0.0.1:%d" % port, None, MIB,
                                            websocket=True)
        e = expect("transport_error", lambda: loop.run_until_complete(
            asyncio.wait_for(t.call("stat", {}), WAIT)))
        loop.close()
    assert "cannot connect to http://127.0.0.1:%d" % port in e.message, e.message


def frames(mode):
    # the pure framing: a message split in continuations and reassembled, a ping between
    d = _ws.Decoder(MIB)
    raw = b"".join(server_frame(2 if i == 0 else 0, b"ab", fin=i == 2) for i in range(3))
    evs = d.feed(raw[:6]) + d.feed(raw[6:8] + server_frame(9, b"p")) + d.feed(raw[8:])
    assert evs == [("ping", b"p"), ("message", b"ababab")], evs
    for bad, code in ((server_frame(1, b"t"), 1003), (server_frame(0, b"c"), 1002),
                      (b"\x82\x81abcd0", 1002), (server_frame(9, b"x" * 126), 1002)):
        try:
            _ws.Decoder(MIB).feed(bad)
            raise AssertionError("accepted %r" % bad)
        except _ws.WsError as e:
            assert e.code == code, (bad, e.code)
    f = _ws.frame(2, b"hello", key=b"\x01\x02\x03\x04")
    assert f[1] == 0x85 and _ws.mask(f[6:], b"\x01\x02\x03\x04") == b"hello"


check("a refused upgrade names the HTTP status (401 unauthorized, 400 with the body)",
      refused)
check("the bearer token goes with the upgrade", token)
check("a server that goes away mid-stream fails every call in flight with transport_error",
      drop)
check("a close frame from the server is transport_error with its code and reason", closed)
check("large messages both ways: 3 MiB out, 5 MiB in fragments with a ping between", big)
check("a message above max_message is protocol_error from its header", huge)
check("nothing listening is transport_error naming the URL", unreachable)
check("framing: continuations, control frames between, bad frames' close codes", frames)
srv.shutdown()
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
