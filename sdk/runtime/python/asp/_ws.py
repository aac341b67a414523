"""The client side of RFC 6455 as pure functions over bytes, shared by the synchronous
and the asyncio HTTP transports (only their I/O differs): the upgrade request for
``GET PREFIX/v1/ws`` with subprotocol ``asp.v1`` and the bearer token, the check of the
server's answer (a refused upgrade names its HTTP status), masked frames out, and a
decoder for frames in that reassembles fragmented messages within max_message and
reports pings, pongs and close frames. One binary message is one msgpack message, as a
stdio frame (docs/http.md)."""

import base64
import hashlib
import os
import struct

from ._errors import AspError

SUBPROTOCOL = "asp.v1"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# The most an upgrade answer's status line and headers may take.
MAX_HEAD = 16384

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

NORMAL, GOING_AWAY, PROTOCOL_ERROR, UNSUPPORTED_DATA, TOO_BIG = 1000, 1001, 1002, 1003, 1009


class WsError(Exception):
    """The server broke the framing: close the WebSocket with ``code``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def handshake(host, port, default_port, path, token, key=None, extra=()):
    """The upgrade request (with the `extra` (name, value) headers) and the
    Sec-WebSocket-Accept value the answer must carry."""
    key = key or base64.b64encode(os.urandom(16)).decode("ascii")
    hostport = host if port == default_port else "%s:%d" % (host, port)
    if ":" in host and not host.startswith("["):
        hostport = "[%s]" % host if port == default_port else "[%s]:%d" % (host, port)
    lines = ["GET %s HTTP/1.1" % path, "Host: " + hostport, "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Key: " + key,
             "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: " + SUBPROTOCOL]
    if token:
        lines.append("Authorization: Bearer " + token)
    lines.extend("%s: %s" % (k, v) for k, v in extra)
    req = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    accept = base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest())
    return req, accept.decode("ascii")


def head_end(buf):
    """Where the answer's headers end (just past the blank line), or -1 for not yet;
    raises when they pass MAX_HEAD."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        if len(buf) > MAX_HEAD:
            raise AspError("protocol_error", "the WebSocket upgrade answer's headers pass "
                           "%d bytes" % MAX_HEAD)
        return -1
    return i + 4


def check_answer(head, rest, url, accept):
    """Checks the server's answer to the upgrade (its head, and what came after it);
    raises AspError saying why the upgrade was refused."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise AspError("protocol_error", "%s answered the WebSocket upgrade with %r, not "
                       "HTTP" % (url, lines[0][:80]))
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if status == 401:
        raise AspError("unauthorized", "%s answered 401 Unauthorized to the WebSocket "
                       "upgrade: the bearer token is missing or wrong; set the one "
                       "asp-agent --listen was given (http.token_env or http.token_file)" % url)
    if status == 403:
        raise AspError("unauthorized", "%s answered 403 Forbidden to the WebSocket upgrade: "
                       "something in front of asp-agent --listen refused it; if a gateway "
                       "wants a header of its own, set http.headers" % url)
    if status != 101:
        body = rest[:200].decode("utf-8", "replace").strip()
        raise AspError("transport_error", "%s answered HTTP %d to the WebSocket upgrade, not "
                       "101%s; is it asp-agent --listen, and does every proxy on the way pass "
                       "WebSocket upgrades (else set http.websocket to false)?" % (
                           url, status, (" (%s)" % body) if body else ""))
    if headers.get("upgrade", "").lower() != "websocket" or \
            "upgrade" not in headers.get("connection", "").lower():
        raise AspError("protocol_error", "%s answered 101 without Upgrade: websocket" % url)
    if headers.get("sec-websocket-accept") != accept:
        raise AspError("protocol_error", "%s answered the WebSocket upgrade with a wrong "
                       "Sec-WebSocket-Accept" % url)
    if headers.get("sec-websocket-protocol") != SUBPROTOCOL:
        raise AspError("protocol_error", "%s did not agree to the WebSocket subprotocol %s" %
                       (url, SUBPROTOCOL))


def mask(payload, key):
    """payload XOR the 4-byte key repeated (RFC 6455 5.3), at C speed via big ints."""
    n = len(payload)
    if not n:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(k, "little")).to_bytes(
        n, "little")


def frame(opcode, payload=b"", fin=True, key=None):
    """One client frame: masked, as a client's must be."""
    key = key or os.urandom(4)
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    return head + key + mask(payload, key)


def message(payload, max_frame=0):
    """A binary message as frames: one, or pieces of max_frame bytes (continuations)."""
    if not max_frame or len(payload) <= max_frame:
        return [frame(BINARY, payload)]
    out = []
    for at in range(0, len(payload), max_frame):
        last = at + max_frame >= len(payload)
        out.append(frame(BINARY if at == 0 else CONT, payload[at:at + max_frame], fin=last))
    return out


def close_frame(code=NORMAL, reason=""):
    return frame(CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:120])


def close_reason(payload):
    """(code, reason) of a close frame's payload; (None, "") for an empty one."""
    if len(payload) < 2:
        return None, ""
    return struct.unpack("!H", payload[:2])[0], payload[2:].decode("utf-8", "replace")


class Decoder:
    """Server frames in, events out: ("message", bytes), ("ping", bytes), ("pong",
    bytes), ("close", code, reason). Raises WsError on a framing error, a text message
    (the protocol is binary) or a message above max_message."""

    def __init__(self, max_message):
        self.max_message = max_message
        self.buf = bytearray()
        self.parts = []
        self.size = 0
        self.fragmented = False

    def feed(self, data):
        self.buf += data
        events = []
        while True:
            ev = self._next()
            if ev is None:
                return events
            if ev is not True:
                events.append(ev)

    def _next(self):
        buf = self.buf
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        fin, op, n, at = b0 & 0x80, b0 & 0x0F, b1 & 0x7F, 2
        if b0 & 0x70:
            raise WsError(PROTOCOL_ERROR, "the server set reserved bits of a frame")
        if b1 & 0x80:
            raise WsError(PROTOCOL_ERROR, "the server sent a masked frame")
        if n == 126:
            if len(buf) < 4:
                return None
            n, at = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n, at = struct.unpack_from("!Q", buf, 2)[0], 10
        if op >= 0x8:
            if n > 125 or not fin:
                raise WsError(PROTOCOL_ERROR, "the server sent a control frame that is "
                              "fragmented or longer than 125 bytes")
        elif op == TEXT:
            raise WsError(UNSUPPORTED_DATA, "the server sent a text message; asp.v1 is binary")
        elif op not in (CONT, BINARY):
            raise WsError(PROTOCOL_ERROR, "the server sent a frame of opcode %d" % op)
        elif op == CONT and not self.fragmented:
            raise WsError(PROTOCOL_ERROR, "the server sent a continuation frame outside a "
                          "message")
        elif op == BINARY and self.fragmented:
            raise WsError(PROTOCOL_ERROR, "the server began a message inside another one")
        if op < 0x8 and self.size + n > self.max_message:
            raise WsError(TOO_BIG, "the server sent a message larger than max_message (%d)" %
                          self.max_message)
        if len(buf) < at + n:
            return None
        payload = bytes(buf[at:at + n])
        del buf[:at + n]
        if op == PING:
            return ("ping", payload)
        if op == PONG:
            return ("pong", payload)
        if op == CLOSE:
            return ("close",) + close_reason(payload)
        self.parts.append(payload)
        self.size += n
        if not fin:
            self.fragmented = True
            return True
        whole = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
        self.parts, self.size, self.fragmented = [], 0, False
        return ("message", whole)


def closed_error(url, code, reason):
    """The transport_error of a WebSocket the server closed, as the C client words it."""
    if code == GOING_AWAY:
        return AspError("transport_error", "%s closed the WebSocket: going away (the listener "
                        "is shutting down)" % url)
    if code is not None:
        return AspError("transport_error", "%s closed the WebSocket (code %d%s%s)" % (
            url, code, ": " if reason else "", reason))
    return AspError("transport_error", "the connection to %s was lost (did the listener "
                    "stop?)" % url)


def connect_error(url, e, ca_file=None):
    """The transport_error of a WebSocket that could not be opened (OSError, TLS)."""
    import ssl
    if isinstance(e, ssl.SSLError):
        return AspError("transport_error", "TLS with %s failed: %s; is the server's "
                        "certificate signed by %s, and issued for this host name?" % (
                            url, getattr(e, "reason", None) or e,
                            ca_file or "a CA this system trusts"))
    if isinstance(e, TimeoutError):
        return AspError("transport_error", "%s did not complete the WebSocket upgrade "
                        "within call_timeout_ms" % url)
    return AspError("transport_error", "cannot connect to %s: %s; is asp-agent --listen "
                    "running there?" % (url, getattr(e, "strerror", None) or e))
