#!/usr/bin/python3
"""A hostile stdio responder for the SDKs' tree tests: it answers hello with tree_read,
and tree_read with the tar stream in FILE as the handle's output and a clean exit, so
the client's own checks are all that stands between the stream and its disk.

usage: hostile_tree.py FILE
"""
import struct
import sys

import msgpack

inp, out = sys.stdin.buffer, sys.stdout.buffer
stream = open(sys.argv[1], "rb").read()


def send(obj):
    b = msgpack.packb(obj, use_bin_type=True)
    out.write(struct.pack(">I", len(b)) + b)
    out.flush()


while True:
    h = inp.read(4)
    if len(h) < 4:
        break
    _, rid, method, params = msgpack.unpackb(inp.read(struct.unpack(">I", h)[0]), raw=False)
    if method == "hello":
        send([1, rid, None, {"protocol": 2, "agent": "hostile", "ops": ["tree_read"],
                             "os": "linux", "arch": "x", "cwd": "/", "max_message": 1 << 24,
                             "features": ["follow"]}])
    elif method == "tree_read":
        send([1, rid, None, {"proc": 7}])
        send([2, "output", {"proc": 7, "stream": "stdout", "offset": 0, "data": stream}])
        send([2, "exit", {"proc": 7, "exit_code": 0, "signal": None, "timed_out": False,
                          "entries": 2, "bytes": 1}])
    else:
        send([1, rid, None, {}])
