"""Which POST requests asp-agent --listen serves on its service thread, seen from outside.

A small stat, read, write or hello on a local filesystem is served on the service thread
(no worker hand-off, docs/http.md); everything that might wait for long goes to a worker.
Workers are started on demand and never end, so the agent's thread count
(/proc/PID/task) tells which way a request went:
  - stat, read, write and hello on a file in a local temporary directory: answered
    correctly, and no worker thread appears;
  - then a stat on /proc (procfs is not on the list of local filesystems): a worker does;
  - on fresh agents, a relative path, a path with "..", a path through a symlink (which
    may lead into a network mount), an atomic write (fsync), a write over 64 KiB, a read
    of a file over 1 MiB and of a directory each start one.

usage: test_http_inline.py ASP_AGENT
"""
import os
import shutil
import socket
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402

failures = []
logs = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def report():
    """The exit code: 1 with the failures and the agents' logs printed, else 0."""
    if failures:
        print("%d failed:\n  " % len(failures) + "\n  ".join(failures))
        for log in logs:
            print(open(log.name).read())
        return 1
    return 0


def start_inline_agent(agent):
    log = tempfile.NamedTemporaryFile("w+", prefix="asp-inline-log-")
    logs.append(log)
    return start_agent(agent, log)


# ---- just enough msgpack ----

def mp_str(s):
    b = s.encode() if isinstance(s, str) else s
    if len(b) < 32:
        return bytes([0xa0 | len(b)]) + b
    return b"\xd9" + bytes([len(b)]) + b


def mp_bin(b):
    return b"\xc6" + struct.pack(">I", len(b)) + b


def request(rid, method, pairs):
    body = b"\x94\x00\xce" + struct.pack(">I", rid) + mp_str(method)
    body += bytes([0x80 | len(pairs)])
    for k, v in pairs:
        body += mp_str(k) + v
    return body


class Conn:
    def __init__(self, addr):
        self.s = socket.create_connection(addr, timeout=20)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.rid = 0

    def call(self, method, pairs):
        """POST /v1/rpc; (status, body)."""
        self.rid += 1
        return self.post(request(self.rid, method, pairs))

    def post(self, body):
        """POST /v1/rpc with exactly `body` (whatever it says inside); (status, body)."""
        self.s.sendall(b"POST /v1/rpc HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Type: application/msgpack\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while b"\r\n\r\n" not in self.buf:
            self.more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        clen = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                clen = int(v)
        while len(self.buf) < clen:
            self.more()
        out, self.buf = self.buf[:clen], self.buf[clen:]
        return status, out

    def more(self):
        b = self.s.recv(1 << 20)
        if not b:
            raise OSError("the agent closed the connection")
        self.buf += b

    def ok(self, method, pairs):
        """Whether the answer is [1, id, nil, {...}] for this id."""
        st, b = self.call(method, pairs)
        return st == 200 and b[:3] == b"\x94\x01\xce" and \
            struct.unpack(">I", b[3:7])[0] == self.rid and b[7:8] == b"\xc0" or \
            st == 200 and b[:2] == b"\x94\x01" and b[2] == self.rid and b[3:4] == b"\xc0"


def threads(p):
    return len(os.listdir("/proc/%d/task" % p.pid))


LOCAL = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs"}


def fs_type(path):
    """The type of the mount `path` is on, by the longest matching mount point."""
    best, kind = "", None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mnt = left.split()[4].encode().decode("unicode_escape")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and \
                    len(mnt) >= len(best):
                best, kind = mnt, right.split()[0]
    return kind


def main(agent):
    work = os.path.realpath(tempfile.mkdtemp(prefix="asp-inline-"))
    try:
        return run(agent, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(agent, work):
    f = os.path.join(work, "f")
    with open(f, "wb") as fh:
        fh.write(b"x" * 4096)
    kind = fs_type(work)
    if kind not in LOCAL:
        print("SKIP: %s is on %s, not a local filesystem this test knows" % (work, kind))
        return 77
    p, addr = start_inline_agent(agent)
    try:
        c = Conn(addr)
        t0 = threads(p)
        ok = all([c.ok("hello", []),
                  c.ok("stat", [("path", mp_str(f))]),
                  c.ok("read", [("path", mp_str(f))]),
                  c.ok("write", [("path", mp_str(f)), ("data", mp_bin(b"y" * 4096))]),
                  c.ok("write", [("atomic", b"\xc2"), ("path", mp_str(f)),
                                 ("data", mp_bin(b"z" * 100))])])
        for _ in range(20):
            ok = c.ok("stat", [("path", mp_str(f))]) and ok
        check(ok, "hello, stat, read, write on %s (%s) answered" % (work, kind))
        with open(f, "rb") as fh:
            check(fh.read() == b"z" * 100, "the writes served inline reached the file")
        check(threads(p) == t0,
              "no worker started for them (%d threads, %d before)" % (threads(p), t0))
        st, b = c.call("stat", [("path", mp_str(os.path.join(work, "missing")))])
        check(st == 200 and b"not_found" in b and threads(p) == t0,
              "an error answer (not_found) is served inline too")
        check(c.ok("stat", [("path", mp_str("/proc/self"))]) and threads(p) > t0,
              "a stat on /proc (procfs) went to a worker")
    finally:
        p.terminate()
        check(p.wait(30) == 0, "the agent exited 0 on SIGTERM")

    big = os.path.join(work, "big")
    with open(big, "wb") as fh:
        fh.write(b"x" * (2 << 20))
    # A symlink may lead into a network mount that hangs, which the mount table hides.
    os.symlink(f, os.path.join(work, "link"))
    os.symlink(work, os.path.join(work, "dirlink"))
    to_worker = [
        ("a relative path", "stat", [("path", mp_str("."))]),
        ("a path with ..", "stat", [("path", mp_str(work + "/../" +
                                                   os.path.basename(work)))]),
        ("an atomic write", "write", [("path", mp_str(f)), ("atomic", b"\xc3"),
                                      ("data", mp_bin(b"a"))]),
        ("a write over 64 KiB", "write", [("path", mp_str(f)),
                                          ("data", mp_bin(b"b" * 70000))]),
        ("a read of a file over 1 MiB", "read", [("path", mp_str(big))]),
        ("a read of a directory", "read", [("path", mp_str(work))]),
        ("a stat through a symlink", "stat", [("path", mp_str(work + "/link"))]),
        ("a read through a symlinked directory", "read",
         [("path", mp_str(work + "/dirlink/f"))]),
    ]
    for what, method, pairs in to_worker:
        p, addr = start_inline_agent(agent)
        try:
            c = Conn(addr)
            t0 = threads(p)
            st, b = c.call(method, pairs)  # answered (the directory with an error)
            check(st == 200 and b[:2] == b"\x94\x01" and threads(p) > t0,
                  what + " went to a worker")
        finally:
            p.terminate()
            check(p.wait(30) == 0, "the agent exited 0 on SIGTERM")

    return report()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
