"""Large POST bodies one after another on a keep-alive connection, seen from outside.

Checked on one keep-alive connection:
  - a 1 MiB write, then a 200 KiB write to another file: each file holds exactly its
    request's bytes (nothing of the larger body before it);
  - then a POST whose msgpack says its bin is 1 MiB while its Content-Length covers
    only 200 KiB: a 400, and no file is written;
  - the connection still serves a write after that; a replacing write of fewer bytes
    leaves the file exactly those bytes (the write opens without O_TRUNC and cuts the
    file after writing); a replacing write to /dev/null succeeds;
and over 24 connections in turn, each uploading 4 MiB and closing: nothing of theirs
stays (the agent's VmRSS grows by far less than the 96 MiB their bodies took; under
ASan, whose quarantine keeps freed memory, the leak check at the agent's exit says it
instead). The agent must exit 0 on SIGTERM.

usage: test_http_body.py ASP_AGENT
"""
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402
from test_http_inline import Conn, mp_bin, mp_str, request  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def pattern(n, seed):
    return bytes((i * 131 + seed) & 0xff for i in range(256)) * (n // 256)


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def has_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def write(c, path, data):
    return c.ok("write", [("path", mp_str(path)), ("data", mp_bin(data))])


def content(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def run(agent, work):
    log = tempfile.NamedTemporaryFile("w+", prefix="asp-body-log-")
    p, addr = start_agent(agent, log)
    try:
        c = Conn(addr)
        big, small = pattern(1 << 20, 1), pattern(200 * 1024, 7)
        f1, f2, f3 = (os.path.join(work, n) for n in ("f1", "f2", "f3"))
        check(write(c, f1, big) and content(f1) == big, "1 MiB write stored exactly")
        check(write(c, f2, small) and content(f2) == small,
              "200 KiB write after it on the same connection stored exactly its bytes")

        # The bin claims 1 MiB; the body ends after 200 KiB of it.
        c.rid += 1
        head = b"\x94\x00\xce" + struct.pack(">I", c.rid) + mp_str("write") + b"\x82" + \
            mp_str("path") + mp_str(f3) + mp_str("data") + b"\xc6" + \
            struct.pack(">I", 1 << 20)
        st, _ = c.post(head + small)
        check(st == 400, "a body shorter than its bin says is 400 (got %d)" % st)
        check(content(f3) is None, "and writes nothing")

        shorter = pattern(100 * 1024, 3)
        check(write(c, f1, shorter) and content(f1) == shorter,
              "the connection still serves; replacing 1 MiB by 100 KiB leaves exactly "
              "the 100 KiB")
        # A device is written, not cut to length (O_TRUNC would leave it alone too).
        check(write(c, "/dev/null", small), "a replacing write to /dev/null succeeds")
        c.s.close()

        four = pattern(4 << 20, 5)
        asan = has_asan(p.pid)
        before = vm_rss_kib(p.pid)
        ok = True
        for i in range(24):
            d = Conn(addr)
            ok = ok and write(d, os.path.join(work, "up"), four)
            d.s.close()
        check(ok and content(os.path.join(work, "up")) == four,
              "24 connections in turn each uploaded 4 MiB")
        grown = (vm_rss_kib(p.pid) - before) / 1024
        if asan:
            print("ok   (ASan: VmRSS not judged, %.0f MiB; the exit's leak check is)"
                  % grown)
        else:
            check(grown < 48, "closed connections left nothing behind: VmRSS grew "
                  "%.1f MiB, not ~96" % grown)
    finally:
        p.terminate()
        rc = p.wait(60)
        check(rc == 0, "the agent exited 0 on SIGTERM (and, under ASan, leaked nothing)")
        if rc != 0:
            log.seek(0)
            print(log.read()[-4000:])
    return 1 if failures else 0


def main(agent):
    work = os.path.realpath(tempfile.mkdtemp(prefix="asp-body-"))
    try:
        return run(agent, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
