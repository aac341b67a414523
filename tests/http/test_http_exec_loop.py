"""POST execs that asp-agent --listen runs on its service thread, seen from outside.

Where starting a command cannot hang (every mount local or the kernel's own, no /proc path
in the request, stdin of at most PIPE_BUF bytes), an exec is started on the service
thread and its pipes and exit are waited for there (docs/http.md). Workers are started on
demand and never end, so the agent's thread count (/proc/PID/task, but the job-cgroup
thread the first exec starts) tells which way an exec went:
  - execs of every kind (argv, a shell command, stdin, a missing program, a timeout, one
    left running while another connection is served) are answered as a worker answers
    them, and no worker thread appears;
  - an exec whose cwd is in /proc, and one with stdin over PIPE_BUF, go to a worker;
  - SIGTERM while such an exec runs waits for it and its answer; a second SIGTERM ends
    the agent at once and kills the command (nothing left running).

usage: test_http_exec_loop.py ASP_AGENT
"""
import os
import select
import signal
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_http_inline import (Conn, check, logs, mp_bin, mp_str, report,  # noqa: E402
                              start_inline_agent)

BOUND_S = 30


def threads(p):
    """The agent's serving threads: not the job-cgroup one (the first exec starts it) nor
    the reaper (it runs while the agent has children)."""
    task = "/proc/%d/task" % p.pid
    return sum(open("%s/%s/comm" % (task, t)).read().strip() not in ("asp-jobcg", "asp-reaper")
               for t in os.listdir(task))


def argv(*words):
    return bytes([0x90 | len(words)]) + b"".join(mp_str(w) for w in words)


def mp_uint(n):
    return b"\xce" + struct.pack(">I", n)


def field(name, value):
    """The bytes of `name: value` in an answer's map (our encoder packs them so)."""
    return mp_str(name) + value


def answered(c, pairs):
    st, b = c.call("exec", pairs)
    return st == 200 and b[:2] == b"\x94\x01", b


def sent(c, pairs):
    """Sends an exec without reading its answer."""
    from test_http_inline import request
    c.rid += 1
    body = request(c.rid, "exec", pairs)
    c.s.sendall(b"POST /v1/rpc HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/msgpack\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)


def has_bytes(c):
    return bool(c.buf) or bool(select.select([c.s], [], [], 0)[0])


def wait_for(cond, what):
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)  # polling a condition, bounded
    check(False, what + " within %d s" % BOUND_S)
    return False


def fresh_agent(agent):
    p, addr = start_inline_agent(agent)
    return p, Conn(addr)


def stop(p):
    p.terminate()
    check(p.wait(BOUND_S) == 0, "the agent exited 0 on SIGTERM")


def on_the_loop(agent, work):
    p, c = fresh_agent(agent)
    try:
        t0 = threads(p)
        ok = True
        for _ in range(20):
            ok = answered(c, [("argv", argv("true"))])[0] and ok
        check(ok, "20 execs of true answered")
        ok, b = answered(c, [("argv", argv("cat")), ("stdin", mp_bin(b"hello"))])
        check(ok and field("stdout", b"\xc4\x05hello") in b, "stdin reaches the command")
        ok, b = answered(c, [("command", mp_str("echo out; echo err >&2; exit 3"))])
        check(ok and field("exit_code", b"\x03") in b and
              field("stdout", b"\xc4\x04out\n") in b and field("stderr", b"\xc4\x04err\n") in b,
              "a shell command's output, error output and exit code")
        ok, b = answered(c, [("argv", argv(os.path.join(work, "missing")))])
        check(ok and b"not_found" in b, "a missing program is not_found")
        ok, b = answered(c, [("argv", argv("sleep", "30")), ("timeout_ms", mp_uint(200))])
        check(ok and field("timed_out", b"\xc3") in b and field("signal", mp_str("TERM")) in b,
              "a timeout ends the command (TERM)")

        # While one exec runs, another connection is served: the loop does not wait for it.
        other = Conn(c.s.getpeername())
        flag = os.path.join(work, "go")
        sent(c, [("command", mp_str("while [ ! -e %s ]; do sleep 0.01; done" % flag))])
        check(other.ok("hello", []) and not has_bytes(c),
              "another connection answered while an exec waits")
        open(flag, "w").close()
        st, b = read_answer(c)
        check(st == 200 and field("exit_code", b"\x00") in b, "then the exec answered")
        check(threads(p) == t0,
              "no worker started for them (%d threads, %d before)" % (threads(p), t0))
    finally:
        stop(p)


def read_answer(c):
    """The next answer on `c` (status, body), as Conn.call reads it."""
    while b"\r\n\r\n" not in c.buf:
        c.more()
    head, c.buf = c.buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    clen = 0
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            clen = int(v)
    while len(c.buf) < clen:
        c.more()
    out, c.buf = c.buf[:clen], c.buf[clen:]
    return int(lines[0].split()[1]), out


def to_a_worker(agent):
    cases = [
        ("an exec whose cwd is in /proc", [("argv", argv("true")), ("cwd", mp_str("/proc"))]),
        ("an exec with stdin over PIPE_BUF", [("argv", argv("cat")),
                                              ("stdin", mp_bin(b"s" * 5000))]),
    ]
    for what, pairs in cases:
        p, c = fresh_agent(agent)
        try:
            t0 = threads(p)
            ok, b = answered(c, pairs)
            check(ok and field("exit_code", b"\x00") in b and threads(p) > t0,
                  what + " went to a worker")
        finally:
            stop(p)


def shutdown(agent, work):
    # SIGTERM waits for an exec the loop runs, and its answer goes out.
    p, c = fresh_agent(agent)
    flag = os.path.join(work, "started")
    sent(c, [("command", mp_str("touch %s; sleep 1" % flag))])
    wait_for(lambda: os.path.exists(flag), "the exec started")
    p.terminate()
    st, b = read_answer(c)
    check(st == 200 and field("exit_code", b"\x00") in b, "SIGTERM: the running exec answered")
    check(p.wait(BOUND_S) == 0, "then the agent exited 0")

    # A second SIGTERM does not wait: the agent ends and the command with it.
    p, c = fresh_agent(agent)
    pidfile = os.path.join(work, "pid")
    sent(c, [("command", mp_str("echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 60" %
                                (pidfile, pidfile, pidfile)))])
    wait_for(lambda: os.path.exists(pidfile), "the exec wrote its pid")
    pid = int(open(pidfile).read())
    p.send_signal(signal.SIGTERM)
    # Two signals sent at once may arrive as one: the second goes once the first is seen.
    log = logs[-1].name
    wait_for(lambda: "stopping:" in open(log, errors="replace").read(), "the agent stopping")
    p.send_signal(signal.SIGTERM)
    rc = p.wait(BOUND_S)
    check(rc == 1, "two SIGTERMs: the agent exited 1 at once (it was %s)" % rc)

    def gone():
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
    check(wait_for(gone, "the command ended with the agent"), "the command ended with the agent")


# srv_work.c's lists: local filesystems and the kernel's own.
BOUNDED = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "f2fs", "zfs",
           "bcachefs", "squashfs", "erofs", "vfat", "exfat", "jfs", "reiserfs", "proc",
           "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "securityfs",
           "debugfs", "tracefs", "pstore", "bpf", "hugetlbfs", "configfs", "fusectl", "nsfs",
           "efivarfs", "selinuxfs", "binfmt_misc"}


def other_mounts():
    with open("/proc/self/mountinfo") as f:
        return {line.partition(" - ")[2].split()[0] for line in f} - BOUNDED


def main(agent):
    others = other_mounts()
    if others:
        print("SKIP: mounts of %s here: every exec goes to a worker" % ", ".join(sorted(others)))
        return 77
    work = os.path.realpath(tempfile.mkdtemp(prefix="asp-exec-loop-"))
    try:
        on_the_loop(agent, work)
        to_a_worker(agent)
        shutdown(agent, work)
    finally:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)
    return report()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
