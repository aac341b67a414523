#!/usr/bin/python3
"""Writes the starting seeds of each fuzz target into corpus/<target>/ (docs/fuzzing.md).

The checked-in corpus is these seeds merged with what fuzzing found (libFuzzer -merge=1),
so this script only matters when starting a corpus afresh: ./seeds.py [OUTDIR]."""
import hashlib
import json
import os
import struct
import sys

import msgpack

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
root = os.path.dirname(os.path.dirname(here))


def put(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def frame(obj):
    body = obj if isinstance(obj, bytes) else pack(obj)
    return struct.pack(">I", len(body)) + body


def req(i, method, params):
    return frame([0, i, method, params])


# ---- frame: what a responder reads ----------------------------------------------------
requests = [
    ("hello", {"client": "fuzz", "protocol": 1}),
    ("write", {"path": "f", "data": b"hello\n", "mkdirs": True, "mode": 0o600}),
    ("write", {"path": "d/e/f", "data": b"x" * 40, "mkdirs": True, "atomic": True}),
    ("write", {"path": "f", "data": b"tail", "append": True}),
    ("write", {"path": "f", "data": b"mid", "offset": 2}),
    ("read", {"path": "f", "offset": 1, "length": 3}),
    ("stat", {"path": "f", "follow": False}),
    ("list", {"path": "."}),
    ("mkdir", {"path": "a/b", "parents": True, "mode": 0o700}),
    ("rename", {"from": "f", "to": "a/g", "overwrite": False}),
    ("remove", {"path": "a", "recursive": True}),
    ("exec", {"command": "echo hi", "stdin": b"in", "timeout_ms": 1000, "env": {"A": "b"}}),
    ("exec", {"argv": ["ls", "-l"], "cwd": "sub", "max_output": 4}),
    ("spawn", {"command": "sleep 1", "tag": "t"}),
    ("proc_write", {"proc": 1, "data": b"x", "eof": True}),
    ("proc_signal", {"proc": 1, "signal": "TERM"}),
    ("proc_wait", {"proc": 1, "timeout_ms": 1}),
    ("proc_list", {}),
    ("proc_attach", {"proc": 1, "stdout_offset": 0, "stderr_offset": 0}),
]
for i, (m, p) in enumerate(requests):
    put("frame", req(i + 1, m, p))
put("frame", b"".join(req(i + 1, m, p) for i, (m, p) in enumerate(requests[:11])))
put("frame", req(4294967295, "stat", {"path": "."}) + frame([0, 5, "read", []]))
for name in sorted(os.listdir(os.path.join(root, "tests", "vectors"))):
    if name.startswith(("msg-", "req-")):
        with open(os.path.join(root, "tests", "vectors", name), "rb") as f:
            put("frame", frame(f.read()))

# ---- client: what a client reads: spawn answer, attach replay and answer, then more ----
def resp(i, result, error=None):
    return frame([1, i, error, result])


def note(method, params):
    return frame([2, method, params])


out_ev = lambda proc, stream, off, data: note(
    "output", {"proc": proc, "stream": stream, "offset": off, "data": data})
exit_ev = lambda proc: note("exit", {"proc": proc, "exit_code": 0, "signal": None,
                                     "timed_out": False})
results = [  # id picks the op: id % 15 (ASP_OP_*)
    (0, {"protocol": 1, "agent": "a", "ops": ["hello"], "os": "linux", "arch": "x",
         "cwd": "/", "max_message": 16777216}),
    (1, {"exit_code": 0, "signal": None, "stdout": b"o", "stderr": b"", "stdout_bytes": 1,
         "stderr_bytes": 0, "timed_out": False, "duration_ms": 3}),
    (2, {"data": b"abc", "size": 3, "eof": True}),
    (3, {"written": 3, "size": 3}),
    (4, {"type": "symlink", "size": 1, "mode": 0o777, "mtime_ns": -5, "uid": 0, "gid": 0,
         "target": "x"}),
    (5, {"entries": [{"name": "a", "type": "file", "size": 1, "mode": 0o644,
                      "mtime_ns": 1}]}),
    (12, {"exit_code": -1, "signal": "KILL", "timed_out": True}),
    (13, {"procs": [{"proc": 1, "tag": None, "command": "c", "running": False,
                     "exit_code": 0}]}),
]
base = resp(1, {"proc": 1}) + out_ev(7, "stdout", 0, b"old") + out_ev(7, "stdout", 3, b"new") + \
    out_ev(7, "stderr", 0, b"e") + resp(2, {})
put("client", base)
put("client", base + out_ev(1, "stdout", 0, b"live") + out_ev(1, "stdout", 2, b"veup") +
    exit_ev(1) + exit_ev(7))
put("client", base + b"".join(resp(15 * k + op, r) for k, (op, r) in enumerate(results)))
put("client", resp(1, None, {"code": "not_found", "message": "m", "errno": 2, "path": "/p"}) +
    resp(2, None, {"code": "bogus"}))
put("client", base + out_ev(7, "stdout", 18446744073709551614, b"wrap") +
    out_ev(7, "stdout", 0, b"again"))
put("client", base + note("output", {"proc": 1, "stream": "stdout", "offset": 0,
                                     "data": b"x", "truncated_before": 9}))
for name in sorted(os.listdir(os.path.join(root, "tests", "vectors"))):
    if name.startswith("msg-"):
        with open(os.path.join(root, "tests", "vectors", name), "rb") as f:
            put("client", base + frame(f.read()))

# ---- sftp: [with_dst][cut] then the server's packets ---------------------------------
def pkt(t, body, i=None):
    b = bytes([t]) + (struct.pack(">I", i) if i is not None else b"") + body
    return struct.pack(">I", len(b)) + b


def sstr(s):
    return struct.pack(">I", len(s)) + s


attrs = struct.pack(">I", 0x8000000F) + struct.pack(">Q", 10) + struct.pack(">IIIII", 1, 2, 0o100644, 3, 4) + \
    struct.pack(">I", 1) + sstr(b"ext") + sstr(b"val")
version = pkt(2, struct.pack(">I", 3) + sstr(b"posix-rename@openssh.com") + sstr(b"1") +
              sstr(b"fsync@openssh.com") + sstr(b"1") + sstr(b"limits@openssh.com") + sstr(b"1"))
replies = (pkt(101, struct.pack(">I", 2) + sstr(b"No such file") + sstr(b"en"), 1) +
           pkt(102, sstr(b"handle"), 2) + pkt(103, sstr(b"data bytes"), 3) +
           pkt(104, struct.pack(">I", 2) + sstr(b"a") + sstr(b"-rw a") + attrs + sstr(b"b") +
               sstr(b"drwx b") + struct.pack(">I", 0), 4) +
           pkt(105, attrs, 5) + pkt(201, struct.pack(">QQQ", 262144, 65536, 65536), 6) +
           pkt(103, sstr(b"x" * 100), 7) + pkt(101, struct.pack(">I", 0), 8))
put("sftp", bytes([0x00, 0x00]) + version + replies)
put("sftp", bytes([0xff, 0x07]) + version + replies)
put("sftp", bytes([0x0c, 0x40]) + replies + replies)

# ---- config: the examples and a few variants ------------------------------------------
for d in sorted(os.listdir(os.path.join(root, "examples"))):
    p = os.path.join(root, "examples", d, ".asp.json")
    if os.path.exists(p):
        with open(p, "rb") as f:
            put("config", f.read())
for c in [
    {"transport": "ssh", "cwd": "/work", "env": {"A": "1"}, "timeout_ms": 5,
     "ssh": {"host": "h", "port": 2222, "user": "u", "identity_file": "~/.ssh/id",
             "known_hosts": "kh", "strict_host_key_checking": "accept-new",
             "connect_timeout_ms": 10, "agent": "upload", "password_env": "PW",
             "host_key_sha256": "SHA256:abc"}},
    {"transport": "stdio", "stdio": {"command": ["./asp-agent", "--stdio"]}},
    {"transport": "http", "http": {"url": "https://h:1/p", "token_file": "t",
                                   "ca_file": "/ca", "websocket": False}},
    {"transport": "http", "http": {"url": "http://h", "token_env": "T"}, "extra": 1},
]:
    put("config", json.dumps(c, indent=1).encode())
put("config", b'{"transport": "ssh", "ssh": {"host": "h", "port": 70000}}')
put("config", b'{"transport": "stdio",\n "stdio": {"command": []}, "transport": 1}')

# ---- tar: [piece size] then a tar stream (tree_write's input) ---------------------------
tars = os.path.join(root, "tests", "vectors", "tar")
for name in sorted(os.listdir(tars)):
    if name.endswith(".tar"):
        with open(os.path.join(tars, name), "rb") as f:
            body = f.read()
        put("tar", b"\xff" + body)
        put("tar", b"\x00" + body)

# ---- http: [mode] then bytes -----------------------------------------------------------
for i, (m, p) in enumerate(requests[:12]):
    put("http", b"\x00" + pack([0, i + 1, m, p]))
put("http", b"\x00" + pack([1, 5, None, {}]))
put("http", b"\x00" + pack([0, 5, 7, {}]))
ws = b""
for i, (m, p) in enumerate(requests[:6]):
    body = pack([0, i + 1, m, p])
    half = len(body) // 2
    ws += bytes([0x01 | 0x04, half]) + body[:half] + bytes([0x02, len(body) - half]) + body[half:]
put("http", b"\x01" + ws)
put("http", b"\x01" + bytes([0x03, 3]) + b"\x93\x02\xa1" + bytes([0x02, 1]) + b"x")
put("http", b"\x01" + bytes([0x00, 4]) + b"text")
put("http", b"\x02Bearer s3cret-token")
put("http", b"\x02bearer s3cret-token \t")
for u in [b"http://127.0.0.1:8080", b"https://[::1]:443/prefix/", b"http://h/v1", b"ftp://x"]:
    put("http", b"\x03" + u)
for a in [b"127.0.0.1:0", b"[::1]:9", b":80", b"unix:/tmp/s", b"host"]:
    put("http", b"\x04" + a)
