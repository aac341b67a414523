#!/usr/bin/python3
"""A misbehaving stdio responder for the SDK tests.

usage: fake_responder.py COUNTER MODE [ARG]

The first process started for COUNTER (a file it creates) misbehaves after reading one
request; later ones answer every request like a minimal responder (hello, exec "echo").
MODE: ok (never misbehave; also scripts spawn and proc_attach: the process's
output and exit notifications, with a notification for another process and one of an
unknown method mixed in), vector FILE (answer with FILE's bytes as one frame), raw FILE (write FILE's bytes
as they are, frame headers included, then exit), big (announce a frame larger
than max_message), die (exit 3 after writing "dying" to stderr), cut (half a frame, then
exit). Three modes answer hello always and misbehave at the first other request:
silent (never answers it or anything after: a wedged responder), wrongid (answers it
with its id + 1000, then nothing more), garbage (answers it with an undecodable frame).
"""
import os
import struct
import sys

import msgpack


def read_frame(f):
    hdr = f.read(4)
    if len(hdr) < 4:
        return None
    (n,) = struct.unpack(">I", hdr)
    return f.read(n)


def write_frame(f, body):
    f.write(struct.pack(">I", len(body)) + body)
    f.flush()


def scripted_events(proc, truncated=False):
    def note(method, params):
        return msgpack.packb([2, method, params], use_bin_type=True)
    first = {"proc": proc, "stream": "stdout", "offset": 0, "data": b"one\n"}
    if truncated:
        first["offset"] = first["truncated_before"] = 10
    return [note("output", first),
            note("output", {"proc": 99, "stream": "stdout", "offset": 0, "data": b"other"}),
            note("output", {"proc": proc, "stream": "stderr", "offset": 0, "data": b"err\n",
                            "unknown_key": 1}),
            note("no_such_notification", {"proc": proc}),
            note("output", {"proc": proc, "stream": "stdout", "offset": 4, "data": b"two\n"}),
            note("exit", {"proc": proc, "exit_code": -1, "signal": "TERM", "timed_out": True})]


def main():
    counter, mode = sys.argv[1], sys.argv[2]
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    first = not os.path.exists(counter)
    open(counter, "a").close()
    broken = False
    while True:
        body = read_frame(inp)
        if body is None:
            return 0
        req = msgpack.unpackb(body, raw=False)
        if broken:
            continue  # the misbehaving connection gives nothing more
        deferred = mode in ("silent", "wrongid", "garbage")
        if first and deferred and req[2] != "hello":
            if mode == "wrongid":
                write_frame(out, msgpack.packb([1, req[1] + 1000, None, {}], use_bin_type=True))
            elif mode == "garbage":
                write_frame(out, b"\xc1")
            broken = True
            continue
        if first and mode != "ok" and not deferred:
            if mode == "vector":
                with open(sys.argv[3], "rb") as fh:
                    write_frame(out, fh.read())
            elif mode == "raw":
                with open(sys.argv[3], "rb") as fh:
                    out.write(fh.read())
                out.flush()
                return 0
            elif mode == "big":
                out.write(struct.pack(">I", 0xFFFFFFF0))
                out.flush()
            elif mode == "die":
                sys.stderr.write("dying\n")
                sys.stderr.flush()
                return 3
            elif mode == "cut":
                out.write(struct.pack(">I", 100) + b"\x94\x01")
                out.flush()
                return 0
            broken = True
            continue
        _, id_, method, params = req
        if method == "spawn":  # scripted: the response, then the process's events
            write_frame(out, msgpack.packb([1, id_, None, {"proc": 7}], use_bin_type=True))
            for ev in scripted_events(7):
                write_frame(out, ev)
        elif method == "proc_attach":  # replay before the response: docs/design.md, "Operations"
            for ev in scripted_events(params["proc"], truncated=True):
                write_frame(out, ev)
            write_frame(out, msgpack.packb([1, id_, None, {}], use_bin_type=True))
        elif method == "hello":
            result = {"protocol": 1, "agent": "fake/1", "ops": ["hello"], "os": "linux",
                      "arch": "x", "cwd": "/", "max_message": 16777216}
            write_frame(out, msgpack.packb([1, id_, None, result], use_bin_type=True))
        else:
            err = {"code": "unsupported", "message": "fake responder: " + method}
            write_frame(out, msgpack.packb([1, id_, err, None], use_bin_type=True))


if __name__ == "__main__":
    sys.exit(main())
