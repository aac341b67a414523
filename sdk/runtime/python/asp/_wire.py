"""The wire format (docs/design.md, "Wire format"), as core/src/wire.c does it.

Messages are msgpack arrays: request [0, id, method, params], response
[1, id, error, result], notification [2, method, params]. On stdio each travels in a
frame: a 4-byte big-endian length, then that many bytes. Every incoming message is
prescanned before msgpack allocates anything: a container claiming more elements than
bytes remain, or nesting deeper than 32, is a protocol_error.
"""

import struct

import msgpack

from ._errors import AspError

MAX_DEPTH = 32
FRAME_HEADER = 4

REQUEST, RESPONSE, NOTIFY = 0, 1, 2

# type byte -> (header bytes, fixed bytes to skip, is container, counts pairs)
_FIXED = {
    0xC4: (1, 0, False), 0xD9: (1, 0, False),  # bin8, str8
    0xC5: (2, 0, False), 0xDA: (2, 0, False),  # bin16, str16
    0xC6: (4, 0, False), 0xDB: (4, 0, False),  # bin32, str32
    0xC7: (1, 1, False), 0xC8: (2, 1, False), 0xC9: (4, 1, False),  # ext8/16/32
    0xCA: (0, 4, False), 0xCB: (0, 8, False),  # float32, float64
    0xCC: (0, 1, False), 0xD0: (0, 1, False),
    0xCD: (0, 2, False), 0xD1: (0, 2, False),
    0xCE: (0, 4, False), 0xD2: (0, 4, False),
    0xCF: (0, 8, False), 0xD3: (0, 8, False),
    0xD4: (0, 2, False), 0xD5: (0, 3, False), 0xD6: (0, 5, False),  # fixext
    0xD7: (0, 9, False), 0xD8: (0, 17, False),
    0xDC: (2, 0, True), 0xDE: (2, 0, True),  # array16, map16
    0xDD: (4, 0, True), 0xDF: (4, 0, True),  # array32, map32
}


def _malformed(why, at):
    return AspError("protocol_error", "malformed message: %s at byte %d" % (why, at))


def prescan(data):
    """Walks one message without allocating; raises protocol_error when it is unsafe."""
    n = len(data)
    pending = [1]
    pos = 0
    while pending:
        if pending[-1] == 0:
            pending.pop()
            continue
        pending[-1] -= 1
        if pos >= n:
            raise _malformed("truncated", pos)
        t = data[pos]
        pos += 1
        skip = count = 0
        container = False
        if t <= 0x7F or t >= 0xE0 or t in (0xC0, 0xC2, 0xC3):
            pass
        elif 0x80 <= t <= 0x8F:
            count, container = (t & 0x0F) * 2, True
        elif 0x90 <= t <= 0x9F:
            count, container = t & 0x0F, True
        elif 0xA0 <= t <= 0xBF:
            skip = t & 0x1F
        else:
            spec = _FIXED.get(t)
            if spec is None:
                raise _malformed("invalid type byte", pos - 1)
            hdr, skip, container = spec
            if hdr:
                if n - pos < hdr:
                    raise _malformed("truncated", pos)
                v = int.from_bytes(data[pos:pos + hdr], "big")
                pos += hdr
                if container:
                    count = v * 2 if t in (0xDE, 0xDF) else v
                else:
                    skip += v
        if container:
            if len(pending) + 1 > MAX_DEPTH + 1:
                raise AspError("protocol_error",
                               "malformed message: nested deeper than %d" % MAX_DEPTH)
            if count > n - pos:
                raise AspError(
                    "protocol_error",
                    "malformed message: a container at byte %d claims %d elements but "
                    "only %d bytes remain" % (pos, count, n - pos))
            if count > 0:
                pending.append(count)
            continue
        if skip > n - pos:
            raise _malformed("truncated", pos)
        pos += skip
    if pos != n:
        raise _malformed("trailing bytes", pos)


class Message:
    """A decoded message. ``type`` is REQUEST, RESPONSE or NOTIFY."""

    __slots__ = ("type", "id", "method", "params", "error", "result")

    def __init__(self, type_, id_=None, method=None, params=None, error=None, result=None):
        self.type = type_
        self.id = id_
        self.method = method
        self.params = params
        self.error = error
        self.result = result


def _is_uint(v):
    return type(v) is int and v >= 0


def _u32(v):
    return _is_uint(v) and v <= 0xFFFFFFFF


def unpack(data):
    """msgpack -> Python, after the prescan. Strings keep raw bytes (surrogateescape)."""
    prescan(data)
    try:
        return msgpack.unpackb(bytes(data), raw=False, unicode_errors="surrogateescape",
                               strict_map_key=False, use_list=True)
    except Exception:
        raise AspError("protocol_error", "malformed message: msgpack could not decode it")


def decode(data):
    """One message body -> Message. protocol_error when it is not an ASP message; a
    request with a good id but a bad method or params raises invalid_argument."""
    o = unpack(data)
    if not isinstance(o, list) or len(o) < 3 or not _is_uint(o[0]):
        raise AspError("protocol_error", "not an ASP message: expected [type, ...] array")
    t = o[0]
    if t == REQUEST:
        if len(o) != 4 or not _u32(o[1]):
            raise AspError("protocol_error",
                           "malformed request: expected [0, uint32 id, method, params]")
        if not isinstance(o[2], str):
            raise AspError("invalid_argument", "request %d: method must be a str" % o[1])
        if not isinstance(o[3], dict) and o[3] is not None:
            raise AspError("invalid_argument", "request %d: params must be a map" % o[1])
        return Message(REQUEST, o[1], method=o[2], params=o[3])
    if t == RESPONSE:
        if len(o) != 4 or not _u32(o[1]):
            raise AspError("protocol_error",
                           "malformed response: expected [1, uint32 id, error, result]")
        err, res = o[2], o[3]
        if not isinstance(err, dict) and err is not None:
            raise AspError("protocol_error",
                           "malformed response %d: error must be nil or a map" % o[1])
        if not isinstance(res, dict) and (res is not None or err is None):
            raise AspError("protocol_error",
                           "malformed response %d: result must be a map" % o[1])
        return Message(RESPONSE, o[1], error=err, result=res)
    if t == NOTIFY:
        if len(o) != 3 or not isinstance(o[1], str) or not isinstance(o[2], dict):
            raise AspError("protocol_error",
                           "malformed notification: expected [2, method, params]")
        return Message(NOTIFY, method=o[1], params=o[2])
    raise AspError("protocol_error", "not an ASP message: unknown type %d" % t)


def error_from_map(e, known_codes):
    """A response's error map -> AspError, as asp_wire_error_decode reads it."""
    code = e.get("code")
    if not isinstance(code, str) or code not in known_codes:
        code = "internal"
    msg = e.get("message")
    msg = msg.replace("\0", "?") if isinstance(msg, str) else ""
    path = e.get("path")
    path = path.replace("\0", "?") if isinstance(path, str) else None
    errno = e.get("errno")
    errno = errno if type(errno) is int else None
    if not msg:
        msg = "%s (the responder gave no message)" % code
    return AspError(code, msg, errno=errno, path=path)


def pack(obj):
    """Python -> msgpack: str as str (raw bytes kept), bytes as bin."""
    return msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogateescape")


def request(id_, method, params):
    return pack([REQUEST, id_, method, params])


def frame(body):
    return struct.pack(">I", len(body)) + body
