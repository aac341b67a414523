#!/usr/bin/python3
"""A stdio responder whose errors say only strerror, as SFTP's do: every op but hello
fails permission_denied with the path in the error's `path` field and not in its
message. The CLI must still name the path."""
import struct
import sys

import msgpack

OPS = ["hello", "exec", "read", "write", "stat", "list", "mkdir", "remove", "rename"]


def main():
    rd, wr = sys.stdin.buffer, sys.stdout.buffer
    while True:
        hdr = rd.read(4)
        if len(hdr) < 4:
            return
        (n,) = struct.unpack(">I", hdr)
        _, msgid, method, params = msgpack.unpackb(rd.read(n), raw=False)
        if method == "hello":
            body = [1, msgid, None, {"protocol": 1, "agent": "terse", "ops": OPS, "os": "linux",
                                     "arch": "x86_64", "cwd": "/", "max_message": 1 << 24}]
        else:
            err = {"code": "permission_denied", "message": "Permission denied"}
            if isinstance(params, dict) and isinstance(params.get("path"), str):
                err["path"] = params["path"]
            body = [1, msgid, err, None]
        out = msgpack.packb(body, use_bin_type=True)
        wr.write(struct.pack(">I", len(out)) + out)
        wr.flush()


main()
