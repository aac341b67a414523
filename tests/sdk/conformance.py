#!/usr/bin/python3
"""The conformance cases of tests/conformance/cases.c, cases_proc.c (the spawn and proc_
cases, proc_attach's included) and cases_tree.c (tree_write and tree_read, the hostile
streams included), run through the generated Python SDK against a real responder: the
same names, inputs, expected results and error codes, case for case, so a difference
between the C core and the SDK shows up as a failure here.

usage: conformance.py --sdk DIR --table ASP [--aio] (--stdio ARGV... | --http URL
                      [--token T] [--websocket true|false] | --config F) [--only SUBSTRING]

The tree cases are the ones ASP (the asp CLI) lists under `asp conformance --list`: its
table's names, in its order, each run by the body here of that name.

With --aio the same case bodies drive asp.aio.Client (asyncio) through AioFacade.
"""
import argparse
import asyncio
import os
import sys
import threading
import time

SAFETY_TIMEOUT_MS = 20000  # so a broken transport fails a case instead of hanging
# Upper bound on what should take well under a second (a timeout taking effect): generous for a
# starved machine, and still a third of the 30 s the commands would run without it.
SLOW_MS = 10000
MIB = 1024 * 1024


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg="check failed"):
    if not cond:
        raise Fail(msg)


def show(b):
    s = repr(bytes(b[:200]))[2:-1]
    return s + ("..." if len(b) > 200 else "")


class Ctx:
    def __init__(self, client, root, name):
        self.c = client
        self.root = root
        self.dir = root + "/" + name

    def P(self, rel):
        return self.dir + "/" + rel


def ok(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except asp.AspError as e:
        raise Fail("expected ok, got %s: %s" % (e.code, e.message))


def err(code, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except asp.AspError as e:
        if e.code != code:
            raise Fail("expected %s, got %s: %s" % (code, e.code, e.message))
        return e
    raise Fail("expected %s, got ok" % code)


# ---- helpers ----

def put(ctx, path, data, mode=0):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    kw = {"mode": mode} if mode else {}
    try:
        ctx.c.write(path, data, mkdirs=True, **kw)
    except asp.AspError as e:
        raise Fail("setup: write %s: %s: %s" % (path, e.code, e.message))


def read_all(ctx, path):
    acc = bytearray()
    for calls in range(4096):
        try:
            r = ctx.c.read(path, offset=len(acc))
        except asp.AspError as e:
            raise Fail("read %s: %s: %s" % (path, e.code, e.message))
        if calls == 0 and r.eof:
            return r.data
        acc += r.data
        if r.eof:
            return bytes(acc)
        if not r.data:
            raise Fail("read %s: no data and no eof at %d" % (path, len(acc)))
    raise Fail("read %s: too many calls" % path)


def sh(ctx, cmd):
    try:
        r = ctx.c.exec(command=cmd, cwd=ctx.dir, timeout_ms=SAFETY_TIMEOUT_MS)
    except asp.AspError as e:
        raise Fail("exec %s: %s: %s" % (cmd, e.code, e.message))
    if r.exit_code != 0:
        raise Fail("exec %s: exit %d signal %s: %s" % (cmd, r.exit_code, r.signal or "-",
                                                        show(r.stderr)))
    return r


def exists(ctx, path):
    try:
        ctx.c.stat(path, follow=False)
        return True
    except asp.AspError as e:
        if e.code == "not_found":
            return False
        raise Fail("stat %s: %s: %s" % (path, e.code, e.message))


def expect_exists(ctx, path, want):
    check(exists(ctx, path) == want, "%s should %sexist" % (path, "" if want else "not "))


def stat(ctx, path, follow=True):
    try:
        return ctx.c.stat(path, follow=follow)
    except asp.AspError as e:
        raise Fail("stat %s: %s: %s" % (path, e.code, e.message))


def listdir(ctx, path):
    try:
        return ctx.c.list(path)
    except asp.AspError as e:
        raise Fail("list %s: %s: %s" % (path, e.code, e.message))


def umask(ctx):
    r = sh(ctx, "umask")
    try:
        m = int(r.stdout[:15].decode().strip(), 8)
    except ValueError:
        raise Fail("cannot parse umask output '%s'" % show(r.stdout))
    check(m <= 0o777, "cannot parse umask output '%s'" % show(r.stdout))
    return m


def do_exec(ctx, **kw):
    if not kw.get("timeout_ms"):
        kw["timeout_ms"] = SAFETY_TIMEOUT_MS
    return ctx.c.exec(**kw)


def mono_ms():
    return time.monotonic() * 1000.0


def pid_state_sh(f):
    return ("p=$(cat " + f + "); st=dead; "
            "if [ -d /proc/$p ]; then s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); "
            "case \"$s\" in ''|Z) ;; *) st=alive ;; esac; "
            "elif [ ! -d /proc/self ] && kill -0 $p 2>/dev/null; then st=alive; fi; "
            "printf %s $st")


def pid_dead(ctx, cmd):
    for _ in range(10):
        r = sh(ctx, cmd)
        if r.stdout == b"dead":
            return
        time.sleep(0.5)
    raise Fail("a process of the timed-out group survived")


def fill_pattern(n, seed):
    return bytes(((i * 131 + seed + (i >> 9)) & 0xFF) for i in range(n))


# ---- hello ----

def hello_fields(ctx):
    r = ok(ctx.c.hello, client="asp-conformance/1", protocol=2)
    check(r.protocol == 2)
    check(r.agent)
    for need in ("hello", "exec", "read", "write", "stat", "list", "mkdir", "remove", "rename"):
        check(need in r.ops, "hello ops lacks '%s'" % need)
    check(r.os and r.os == r.os.lower(), "os '%s' is not lower case" % r.os)
    check(r.arch)
    check(r.cwd.startswith("/"), "cwd '%s' is not absolute" % r.cwd)
    check(r.max_message >= MIB, "max_message %d is below 1 MiB" % r.max_message)


# ---- exec ----

def exec_command_shell(ctx):
    r = ok(do_exec, ctx, command="x=hello; echo \"$x\"; echo err >&2")
    check(r.stdout == b"hello\n", "stdout '%s'" % show(r.stdout))
    check(r.stderr == b"err\n", "stderr '%s'" % show(r.stderr))
    check(r.exit_code == 0)
    check(r.signal is None)
    check(not r.timed_out)
    check(r.stdout_bytes == 6 and r.stderr_bytes == 4)


def exec_argv_direct(ctx):
    r = ok(do_exec, ctx, argv=["printf", "%s|", "a b", "$HOME", "'q'", "`x`", "*"])
    check(r.stdout == b"a b|$HOME|'q'|`x`|*|", "argv went through a shell: '%s'" %
          show(r.stdout))
    check(r.exit_code == 0)


def exec_invalid_params(ctx):
    err("invalid_argument", do_exec, ctx, command="true", argv=["true"])
    err("invalid_argument", do_exec, ctx)
    err("invalid_argument", do_exec, ctx, argv=[])


def exec_missing_program(ctx):
    err("not_found", do_exec, ctx, argv=["asp-conformance-no-such-program", "x"])
    err("not_found", do_exec, ctx, argv=[ctx.P("no-such-file")])
    r = ok(do_exec, ctx, command="asp-conformance-no-such-program")
    check(r.exit_code == 127, "exit %d" % r.exit_code)


def exec_exit_codes(ctx):
    for code in (0, 1, 42, 255):
        r = ok(do_exec, ctx, command="exit %d" % code)
        check(r.exit_code == code, "exit %d gave %d" % (code, r.exit_code))
        check(r.signal is None)
    r = ok(do_exec, ctx, argv=["sh", "-c", "exit 3"])
    check(r.exit_code == 3)


def exec_signal_name(ctx):
    for sig in ("KILL", "TERM", "SEGV", "INT"):
        cmd = "kill -%s $$; sleep 5" % sig
        r = ok(do_exec, ctx, command=cmd)
        check(r.exit_code == -1, "%s: exit_code %d, want -1" % (cmd, r.exit_code))
        check(r.signal == sig, "%s: signal %s" % (cmd, r.signal))
        check(not r.timed_out)


def exec_stdin_binary(ctx):
    n = 256 * 1024
    data = bytearray(fill_pattern(n, 7))
    data[0] = 0
    data = bytes(data)
    r = ok(do_exec, ctx, command="cat", stdin=data)
    check(r.exit_code == 0)
    check(r.stdout == data, "round trip: %d bytes back of %d" % (len(r.stdout), n))
    check(r.stdout_bytes == n)


def exec_stdin_closed(ctx):
    r = ok(do_exec, ctx, command="cat; if read x; then echo got; else echo eof; fi",
           timeout_ms=5000)
    check(not r.timed_out)
    check(r.stdout == b"eof\n", "stdout '%s'" % show(r.stdout))
    r = ok(do_exec, ctx, command="exec 0<&-; echo done", stdin=bytes(MIB))
    check(r.exit_code == 0)
    check(r.stdout == b"done\n")


def exec_large_io(ctx):
    n = 4 * MIB
    data = fill_pattern(n, 3)
    r = ok(do_exec, ctx, command="head -c 1048576 /dev/zero >&2 & cat; wait", stdin=data)
    check(not r.timed_out)
    check(r.exit_code == 0)
    check(r.stdout == data, "stdout %d bytes, want %d" % (len(r.stdout), n))
    check(r.stderr_bytes == MIB and len(r.stderr) == MIB)


def exec_large_output(ctx):
    r = ok(do_exec, ctx, command="head -c 6000000 /dev/zero | tr '\\000' x")
    check(r.exit_code == 0)
    check(r.stdout_bytes == 6000000, "stdout_bytes %d" % r.stdout_bytes)
    check(len(r.stdout) == 6000000, "stdout %d bytes" % len(r.stdout))
    for i in range(0, len(r.stdout), 4093):
        check(r.stdout[i] == ord("x"), "byte %d is %#x" % (i, r.stdout[i]))


def exec_max_output(ctx):
    r = ok(do_exec, ctx, command="i=0; while [ $i -lt 2000 ]; do echo $i; i=$((i+1)); done; "
           "head -c 70000 /dev/zero >&2", max_output=10)
    check(r.exit_code == 0)
    check(r.stdout == b"0\n1\n2\n3\n4\n", "stdout '%s'" % show(r.stdout))
    check(r.stdout_bytes == 8890, "stdout_bytes %d" % r.stdout_bytes)
    check(len(r.stderr) == 10)
    check(r.stderr_bytes == 70000, "stderr_bytes %d" % r.stderr_bytes)
    r = ok(do_exec, ctx, command="printf abc", max_output=0)
    check(len(r.stdout) == 0 and r.stdout_bytes == 3)


def exec_env(ctx):
    e = {"ASP_CONF_A": "a b$c 'q'", "HOME": "/asp-home", "ASP_CONF_EMPTY": ""}
    r = ok(do_exec, ctx, command="printf '%s|%s|%s' \"$ASP_CONF_A\" \"$HOME\" "
           "\"${ASP_CONF_EMPTY-unset}\"", env=e)
    check(r.stdout == b"a b$c 'q'|/asp-home|", "stdout '%s'" % show(r.stdout))
    r = ok(do_exec, ctx, argv=["env"], env=e)
    lines = r.stdout.split(b"\n")
    homes = [x for x in lines if x.startswith(b"HOME=")]
    check(len(homes) == 1 and homes[0] == b"HOME=/asp-home",
          "env shows %d HOME entries, the last not HOME=/asp-home" % len(homes))
    script = b"#!/bin/sh\nprintf 'from-path %s %s' \"$1\" \"$ASP_CONF_A\"\n"
    ok(ctx.c.write, ctx.P("bin/asp-conf-tool"), script, mode=0o755, mkdirs=True)
    e2 = {"PATH": ctx.dir + "/bin:/usr/bin:/bin", "ASP_CONF_A": "v"}
    r = ok(do_exec, ctx, argv=["asp-conf-tool", "x y"], env=e2)
    check(r.stdout == b"from-path x y v", "stdout '%s' stderr '%s'" % (show(r.stdout),
                                                                       show(r.stderr)))


def exec_fresh_process(ctx):
    sh(ctx, "export ASP_CONF_STATE=1; cd /")
    r = ok(do_exec, ctx, command="printf '%s' \"${ASP_CONF_STATE-unset}\"")
    check(r.stdout == b"unset", "shell state carried over: '%s'" % show(r.stdout))


def exec_cwd(ctx):
    put(ctx, ctx.P("marker"), "here")
    r = ok(do_exec, ctx, argv=["cat", "marker"], cwd=ctx.dir)
    check(r.stdout == b"here", "stdout '%s' stderr '%s'" % (show(r.stdout), show(r.stderr)))
    r = ok(do_exec, ctx, command="cat marker", cwd=ctx.dir)
    check(r.stdout == b"here")


def exec_cwd_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    err("not_found", do_exec, ctx, command="true", cwd=ctx.P("missing"))
    err("not_found", do_exec, ctx, argv=["true"], cwd=ctx.P("missing"))
    err("not_a_directory", do_exec, ctx, command="true", cwd=ctx.P("file"))


def exec_timeout_kills_group(ctx):
    t0 = mono_ms()
    r = ok(do_exec, ctx, command="sleep 30 & echo $! > bg.pid; sleep 30", cwd=ctx.dir,
           timeout_ms=300)
    took = mono_ms() - t0
    check(r.timed_out)
    check(took < SLOW_MS, "took %.0f ms; TERM should have ended it" % took)
    check(r.exit_code == -1 and r.signal == "TERM", "exit %d signal %s" % (r.exit_code,
                                                                          r.signal))
    check(250 <= r.duration_ms < SLOW_MS, "duration_ms %d" % r.duration_ms)
    pid_dead(ctx, pid_state_sh("bg.pid"))


def exec_timeout_escalates_to_kill(ctx):
    r = ok(do_exec, ctx, command="trap '' TERM; sleep 30 & echo $! > bg.pid; sleep 30",
           cwd=ctx.dir, timeout_ms=200)
    check(r.timed_out)
    check(r.signal == "KILL", "signal %s" % r.signal)
    check(2000 <= r.duration_ms < 2000 + SLOW_MS, "duration_ms %d: KILL should come 2 s after TERM" %
          r.duration_ms)
    pid_dead(ctx, pid_state_sh("bg.pid"))


def exec_background_holds_output(ctx):
    r = ok(do_exec, ctx, command="(sleep 1; echo late) & echo early")
    check(r.stdout == b"early\nlate\n", "stdout '%s'" % show(r.stdout))
    check(r.duration_ms >= 900, "duration_ms %d" % r.duration_ms)
    check(not r.timed_out and r.exit_code == 0)


def exec_background_timeout(ctx):
    t0 = mono_ms()
    r = ok(do_exec, ctx, command="sleep 30 & echo started", timeout_ms=400)
    took = mono_ms() - t0
    check(r.timed_out)
    check(350 <= took < SLOW_MS, "took %.0f ms" % took)
    check(r.stdout == b"started\n")


def exec_background_detached(ctx):
    t0 = mono_ms()
    r = ok(do_exec, ctx, command="sleep 30 >/dev/null 2>&1 </dev/null & echo $! > bg.pid",
           cwd=ctx.dir)
    took = mono_ms() - t0
    sh(ctx, "kill $(cat bg.pid)")
    check(took < SLOW_MS, "took %.0f ms" % took)
    check(not r.timed_out and r.exit_code == 0)


def exec_own_process_group(ctx):
    r = sh(ctx, "if [ -r /proc/$$/stat ]; then set -- $(sed 's/.*) //' /proc/$$/stat); "
           "echo \"$$ $3 $4\"; else echo noproc; fi")
    if r.stdout == b"noproc\n":
        raise Skip("no /proc in the sandbox")
    parts = r.stdout.split()
    check(len(parts) == 3, "output '%s'" % show(r.stdout))
    pid, pgrp, sid = (int(x) for x in parts)
    check(pid == pgrp == sid, "shell %d is in group %d, session %d: want its own" % (
        pid, pgrp, sid))


def exec_no_inherited_fds(ctx):
    r = sh(ctx, "[ -d /proc/self/fd ] && echo yes || echo no")
    if r.stdout != b"yes\n":
        raise Skip("no /proc/self/fd in the sandbox")
    r = ok(do_exec, ctx, argv=["ls", "/proc/self/fd"])
    fds = [int(x) for x in r.stdout.split()]
    for fd in fds:
        check(fd <= 3, "the command inherited fd %d ('%s')" % (fd, show(r.stdout)))
    check(len(fds) >= 3, "ls saw %d fds" % len(fds))


# In flight until the case writes `release`: whether the quick calls waited for it is then an
# order, not a time, and holds on a machine of any speed.
SLOW_SH = "touch started; while [ ! -e release ]; do sleep 0.02; done"


def exec_concurrent(ctx):
    n = 8
    put(ctx, ctx.P("f"), "data")
    results = {"slow": 0}
    why = {}
    slow_done = threading.Event()

    def slow():
        try:
            r = ctx.c.exec(command=SLOW_SH, cwd=ctx.dir, timeout_ms=SAFETY_TIMEOUT_MS)
            if r.exit_code or r.timed_out:
                results["slow"] += 1
        except asp.AspError:
            results["slow"] += 1
        slow_done.set()

    def worker(i):
        fails = 0
        for j in range(6):
            want = "t%d-%d" % (i, j)
            try:
                if j % 2:
                    r = ctx.c.exec(argv=["printf", "%s", want], timeout_ms=SAFETY_TIMEOUT_MS)
                else:
                    r = ctx.c.exec(command="printf %%s %s" % want,
                                   timeout_ms=SAFETY_TIMEOUT_MS)
                if r.stdout != want.encode():
                    fails += 1
                    why[i] = "%s: wrong output" % want
            except asp.AspError as e:
                fails += 1
                why[i] = "%s: %s %s" % (want, e.code, e.message)
        results[i] = fails

    st = threading.Thread(target=slow)
    st.start()
    # From here every path joins the threads before a check can raise.
    in_flight = False
    until = mono_ms() + SAFETY_TIMEOUT_MS / 2
    try:
        while not in_flight and not slow_done.is_set() and mono_ms() < until:
            in_flight = exists(ctx, ctx.P("started"))
            if not in_flight:
                time.sleep(0.02)
    except Fail:
        pass
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    quick_ok = True
    for _ in range(3):
        try:
            quick_ok = quick_ok and ctx.c.read(ctx.P("f")).data == b"data"
        except asp.AspError:
            quick_ok = False
    qerr = None
    try:
        r = do_exec(ctx, command="echo quick")
    except asp.AspError as e:
        qerr = e
    waited = slow_done.is_set()
    released = True
    try:
        put(ctx, ctx.P("release"), "")
    except Fail:
        released = False
    for t in threads:
        t.join()
    st.join()
    check(in_flight, "the slow exec never created 'started'")
    check(released, "could not write 'release'")
    check(quick_ok)
    check(qerr is None, "expected ok, got %s" % qerr)
    check(r.stdout == b"quick\n")
    check(not waited, "3 reads and an exec waited for a slow exec to end")
    check(results["slow"] == 0, "the slow exec failed or timed out")
    for i in range(n):
        check(results.get(i) == 0, "thread %d: %s failures, last %s" % (i, results.get(i),
                                                                      why.get(i)))


# ---- read ----

def do_read(ctx, path, off=0, length=None):
    return ctx.c.read(path, offset=off, length=length)


def read_ranges(ctx):
    f = ctx.P("digits")
    put(ctx, f, "0123456789")
    r = ok(do_read, ctx, f, 3, 4)
    check(r.data == b"3456", "data '%s'" % show(r.data))
    check(r.size == 10 and not r.eof)
    r = ok(do_read, ctx, f, 6, 4)
    check(r.data == b"6789")
    check(r.eof, "data ending at the end of the file is eof")
    r = ok(do_read, ctx, f, 8)
    check(r.data == b"89" and r.eof and r.size == 10)
    r = ok(do_read, ctx, f, 5, 100)
    check(r.data == b"56789" and r.eof)
    r = ok(do_read, ctx, f, 10)
    check(len(r.data) == 0 and r.eof)
    r = ok(do_read, ctx, f, 20, 5)
    check(len(r.data) == 0 and r.eof and r.size == 10)
    r = ok(do_read, ctx, f, 0, 0)
    check(len(r.data) == 0 and not r.eof and r.size == 10)


def read_whole_binary(ctx):
    n = 300 * 256
    data = fill_pattern(n, 11)
    put(ctx, ctx.P("bin"), data)
    r = ok(do_read, ctx, ctx.P("bin"))
    check(r.data == data)
    check(r.size == n and r.eof)
    put(ctx, ctx.P("empty"), b"")
    r = ok(do_read, ctx, ctx.P("empty"))
    check(len(r.data) == 0 and r.size == 0 and r.eof)


def read_large(ctx):
    n = 3 * MIB + 17
    data = fill_pattern(n, 5)
    put(ctx, ctx.P("big"), data)
    got = read_all(ctx, ctx.P("big"))
    check(got == data, "read back %d bytes of %d" % (len(got), n))


def read_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    e = err("not_found", do_read, ctx, ctx.P("missing"))
    check("missing" in e.message, "the message should name the path: '%s'" % e.message)
    err("is_a_directory", do_read, ctx, ctx.dir)
    err("not_a_directory", do_read, ctx, ctx.P("file/x"))


# ---- write ----

def write_replace(ctx):
    r = ok(ctx.c.write, ctx.P("f"), b"hello world")
    check(r.written == 11 and r.size == 11)
    r = ok(ctx.c.write, ctx.P("f"), b"bye")
    check(r.written == 3 and r.size == 3, "written %d size %d: not truncated?" % (
        r.written, r.size))
    got = read_all(ctx, ctx.P("f"))
    check(got == b"bye", "content '%s'" % show(got))


def write_offset(ctx):
    put(ctx, ctx.P("f"), "abcdef")
    r = ok(ctx.c.write, ctx.P("f"), b"XY", offset=2)
    check(r.written == 2 and r.size == 6)
    got = read_all(ctx, ctx.P("f"))
    check(got == b"abXYef", "content '%s'" % show(got))
    r = ok(ctx.c.write, ctx.P("f"), b"Z", offset=8)
    check(r.size == 9)
    got = read_all(ctx, ctx.P("f"))
    check(got == b"abXYef\0\0Z", "content '%s'" % show(got))


def write_append(ctx):
    put(ctx, ctx.P("f"), "abc")
    r = ok(ctx.c.write, ctx.P("f"), b"def", append=True)
    check(r.written == 3 and r.size == 6)
    got = read_all(ctx, ctx.P("f"))
    check(got == b"abcdef", "content '%s'" % show(got))
    ok(ctx.c.write, ctx.P("new"), b"x", append=True)
    check(read_all(ctx, ctx.P("new")) == b"x")


def write_mkdirs(ctx):
    err("not_found", ctx.c.write, ctx.P("a/b/c.txt"), b"deep")
    ok(ctx.c.write, ctx.P("a/b/c.txt"), b"deep", mkdirs=True)
    check(read_all(ctx, ctx.P("a/b/c.txt")) == b"deep")
    s = stat(ctx, ctx.P("a/b"))
    check(s.type == "dir")


def write_mode(ctx):
    um = umask(ctx)
    put(ctx, ctx.P("default"), "x")
    s = stat(ctx, ctx.P("default"))
    check(s.mode == (0o644 & ~um), "default mode %o, want %o" % (s.mode, 0o644 & ~um))
    put(ctx, ctx.P("private"), "x", 0o600)
    s = stat(ctx, ctx.P("private"))
    check(s.mode == (0o600 & ~um), "mode %o" % s.mode)
    put(ctx, ctx.P("private"), "y", 0o666)
    s = stat(ctx, ctx.P("private"))
    check(s.mode == (0o600 & ~um), "an existing file's mode changed to %o" % s.mode)


def write_atomic(ctx):
    um = umask(ctx)
    put(ctx, ctx.P("f"), "old content", 0o640)
    mode_before = stat(ctx, ctx.P("f")).mode
    r = ok(ctx.c.write, ctx.P("f"), b"new", atomic=True)
    check(r.written == 3 and r.size == 3)
    got = read_all(ctx, ctx.P("f"))
    check(got == b"new", "content '%s'" % show(got))
    s = stat(ctx, ctx.P("f"))
    check(s.mode == mode_before, "atomic write changed mode %o -> %o" % (mode_before, s.mode))
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == 1 and lst.entries[0].name == "f",
          "%d entries (a temp file left behind: '%s')" % (
              len(lst.entries), lst.entries[0].name if lst.entries else ""))
    ok(ctx.c.write, ctx.P("n"), b"fresh", atomic=True, mode=0o600)
    s = stat(ctx, ctx.P("n"))
    check(s.mode == (0o600 & ~um), "mode %o" % s.mode)
    ok(ctx.c.write, ctx.P("x/y/z"), b"deep", atomic=True, mkdirs=True)
    check(read_all(ctx, ctx.P("x/y/z")) == b"deep")
    ok(ctx.c.mkdir, ctx.P("dir"))
    err("is_a_directory", ctx.c.write, ctx.P("dir"), b"x", atomic=True)


def write_invalid_combos(ctx):
    put(ctx, ctx.P("f"), "orig")
    err("invalid_argument", ctx.c.write, ctx.P("f"), b"zz", offset=1, append=True)
    err("invalid_argument", ctx.c.write, ctx.P("f"), b"zz", offset=1, atomic=True)
    got = read_all(ctx, ctx.P("f"))
    check(got == b"orig", "a refused write changed the file: '%s'" % show(got))


def write_binary(ctx):
    data = bytes((255 - i % 256) for i in range(1024))
    put(ctx, ctx.P("bin"), data)
    check(read_all(ctx, ctx.P("bin")) == data)
    r = ok(ctx.c.write, ctx.P("empty"), b"")
    check(r.written == 0 and r.size == 0)
    s = stat(ctx, ctx.P("empty"))
    check(s.type == "file" and s.size == 0)


def write_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    err("is_a_directory", ctx.c.write, ctx.dir, b"x")
    err("not_a_directory", ctx.c.write, ctx.P("file/x"), b"x")


# ---- stat ----

def stat_file_dir(ctx):
    um = umask(ctx)
    put(ctx, ctx.P("f"), "12345", 0o600)
    ok(ctx.c.mkdir, ctx.P("d"), mode=0o700)
    ids = sh(ctx, "printf '%s %s' \"$(id -u)\" \"$(id -g)\"")
    uid, gid = (int(x) for x in ids.stdout.split())
    s = stat(ctx, ctx.P("f"))
    check(s.type == "file", "type %s" % s.type)
    check(s.size == 5)
    check(s.mode == (0o600 & ~um), "mode %o" % s.mode)
    check(s.uid == uid and s.gid == gid, "owner %d:%d, id says %d:%d" % (s.uid, s.gid, uid,
                                                                         gid))
    check(s.target is None)
    s = stat(ctx, ctx.P("d"))
    check(s.type == "dir", "type %s" % s.type)
    check(s.mode == (0o700 & ~um), "mode %o" % s.mode)


def stat_symlink(ctx):
    put(ctx, ctx.P("t.txt"), "12345")
    sh(ctx, "ln -s t.txt link && ln -s missing-target dangling")
    s = stat(ctx, ctx.P("link"), False)
    check(s.type == "symlink", "type %s" % s.type)
    check(s.target == "t.txt", "target %s" % s.target)
    s = stat(ctx, ctx.P("link"), True)
    check(s.type == "file" and s.size == 5, "followed: %s %d" % (s.type, s.size))
    s = ok(ctx.c.stat, ctx.P("link"))
    check(s.type == "file")
    s = stat(ctx, ctx.P("dangling"), False)
    check(s.type == "symlink")
    check(s.target == "missing-target")
    err("not_found", ctx.c.stat, ctx.P("dangling"))


def stat_special(ctx):
    sh(ctx, "mkfifo fifo")
    s = stat(ctx, ctx.P("fifo"))
    check(s.type == "fifo", "type %s" % s.type)
    s = stat(ctx, "/dev/null")
    check(s.type == "char", "/dev/null: type %s" % s.type)
    r = sh(ctx, "if command -v python3 >/dev/null 2>&1; then python3 -c 'import socket; "
           "socket.socket(socket.AF_UNIX).bind(\"sock\")' && echo yes; fi")
    if r.stdout == b"yes\n":
        s = stat(ctx, ctx.P("sock"))
        check(s.type == "socket", "type %s" % s.type)
    r = sh(ctx, "for f in /dev/*; do if [ -b \"$f\" ] && [ ! -L \"$f\" ]; then printf %s "
           "\"$f\"; break; fi; done")
    if r.stdout:
        dev = r.stdout.decode("utf-8", "surrogateescape")
        s = stat(ctx, dev, False)
        check(s.type == "block", "%s: type %s" % (dev, s.type))


def stat_mtime(ctx):
    put(ctx, ctx.P("f"), "x")
    r = ok(do_exec, ctx, command="touch -t 202001020304.05 f", cwd=ctx.dir,
           env={"TZ": "UTC0"})
    check(r.exit_code == 0, "touch: %s" % show(r.stderr))
    s = stat(ctx, ctx.P("f"))
    check(s.mtime_ns // 1000000000 == 1577934245, "mtime_ns %d" % s.mtime_ns)
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == 1 and lst.entries[0].mtime_ns == s.mtime_ns)


def stat_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    err("not_found", ctx.c.stat, ctx.P("missing"))
    err("not_found", ctx.c.stat, ctx.P("missing"), follow=False)
    err("not_a_directory", ctx.c.stat, ctx.P("file/x"), follow=False)


# ---- list ----

def _b(s):
    return s.encode("latin-1").decode("utf-8", "surrogateescape")


def list_sorted_bytewise(ctx):
    want = ["B", "_", "a", "a b", "b", _b("\xc3\xa9"), _b("\xff")]
    create = ["b", _b("\xff"), "a b", "B", _b("\xc3\xa9"), "_", "a"]
    key = lambda s: s.encode("utf-8", "surrogateescape")  # noqa: E731
    check(sorted(create, key=key) == want)  # the test's own premise
    for name in create:
        put(ctx, ctx.P(name), name)
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == len(want), "%d entries, want %d" % (len(lst.entries), len(want)))
    for i, w in enumerate(want):
        e = lst.entries[i]
        check(e.name == w, "entry %d is %r, want %r" % (i, e.name, w))
        check(e.type == "file")
        check(e.size == len(key(w)))


def find_entry(lst, name):
    for e in lst.entries:
        if e.name == name:
            return e
    return None


def list_types(ctx):
    put(ctx, ctx.P("file"), "abc", 0o600)
    sh(ctx, "mkdir sub && ln -s sub ldir && ln -s file lfile && mkfifo fifo")
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == 5, "%d entries" % len(lst.entries))
    for e in lst.entries:
        check(e.name not in (".", ".."), "lists '%s'" % e.name)
    e = find_entry(lst, "file")
    check(e and e.type == "file" and e.size == 3)
    check((e.mode & 0o700) == 0o600 and not (e.mode & 0o77), "mode %o" % e.mode)
    e = find_entry(lst, "sub")
    check(e and e.type == "dir")
    e = find_entry(lst, "ldir")
    check(e and e.type == "symlink", "symlink to dir shown as %s" % (e.type if e else "absent"))
    e = find_entry(lst, "lfile")
    check(e and e.type == "symlink")
    e = find_entry(lst, "fifo")
    check(e and e.type == "fifo")
    check(len(listdir(ctx, ctx.P("sub")).entries) == 0)


def list_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    err("not_a_directory", ctx.c.list, ctx.P("file"))
    err("not_found", ctx.c.list, ctx.P("missing"))


# ---- mkdir ----

def do_mkdir(ctx, path, parents=False, mode=0):
    kw = {"mode": mode} if mode else {}
    return ctx.c.mkdir(path, parents=parents, **kw)


def mkdir_basic(ctx):
    ok(do_mkdir, ctx, ctx.P("d"))
    check(stat(ctx, ctx.P("d")).type == "dir")
    err("already_exists", do_mkdir, ctx, ctx.P("d"))
    ok(do_mkdir, ctx, ctx.P("d"), True)
    um = umask(ctx)
    ok(do_mkdir, ctx, ctx.P("private"), False, 0o700)
    s = stat(ctx, ctx.P("private"))
    check(s.mode == (0o700 & ~um), "mode %o" % s.mode)


def mkdir_parents(ctx):
    err("not_found", do_mkdir, ctx, ctx.P("x/y"))
    ok(do_mkdir, ctx, ctx.P("a/b/c"), True)
    check(stat(ctx, ctx.P("a")).type == "dir")
    check(stat(ctx, ctx.P("a/b/c")).type == "dir")
    ok(do_mkdir, ctx, ctx.P("a/b/c"), True)
    ok(do_mkdir, ctx, ctx.P("a/b/c/"), True)


def mkdir_errors(ctx):
    put(ctx, ctx.P("file"), "x")
    err("already_exists", do_mkdir, ctx, ctx.P("file"))
    err("already_exists", do_mkdir, ctx, ctx.P("file"), True)
    err("not_a_directory", do_mkdir, ctx, ctx.P("file/sub"))
    err("not_a_directory", do_mkdir, ctx, ctx.P("file/sub/deeper"), True)


# ---- remove ----

def remove_file_and_dir(ctx):
    put(ctx, ctx.P("f"), "x")
    ok(ctx.c.remove, ctx.P("f"))
    expect_exists(ctx, ctx.P("f"), False)
    ok(do_mkdir, ctx, ctx.P("d"))
    ok(ctx.c.remove, ctx.P("d"))
    expect_exists(ctx, ctx.P("d"), False)
    err("not_found", ctx.c.remove, ctx.P("missing"))
    err("not_found", ctx.c.remove, ctx.P("missing"), recursive=True)


def remove_not_empty(ctx):
    put(ctx, ctx.P("d/f"), "x")
    err("not_empty", ctx.c.remove, ctx.P("d"))
    expect_exists(ctx, ctx.P("d/f"), True)


def remove_recursive(ctx):
    put(ctx, ctx.P("outside/keep"), "keep")
    sh(ctx, "mkdir -p t/a/b/c t/e && echo 1 > t/a/b/c/f && echo 2 > t/a/g && "
       "echo 3 > 't/sp ace' && echo 4 > 't/$(q)' && ln -s ../outside t/a/lnk && "
       "ln -s ../outside/keep t/flink && mkfifo t/a/fifo")
    err("not_empty", ctx.c.remove, ctx.P("t"))
    ok(ctx.c.remove, ctx.P("t"), recursive=True)
    expect_exists(ctx, ctx.P("t"), False)
    check(read_all(ctx, ctx.P("outside/keep")) == b"keep", "a symlink inside was followed")


def remove_symlink_to_dir(ctx):
    put(ctx, ctx.P("target/file"), "precious")
    sh(ctx, "ln -s target l1 && ln -s target l2")
    ok(ctx.c.remove, ctx.P("l1"))
    ok(ctx.c.remove, ctx.P("l2"), recursive=True)
    expect_exists(ctx, ctx.P("l1"), False)
    expect_exists(ctx, ctx.P("l2"), False)
    check(read_all(ctx, ctx.P("target/file")) == b"precious",
          "removing a symlink touched its target")


# ---- rename ----

def rename_overwrite(ctx):
    put(ctx, ctx.P("a"), "A")
    put(ctx, ctx.P("b"), "B")
    check(asp.RenameParams(from_="x", to="y").overwrite)  # the default
    ok(ctx.c.rename, ctx.P("a"), ctx.P("b"))
    expect_exists(ctx, ctx.P("a"), False)
    check(read_all(ctx, ctx.P("b")) == b"A")


def rename_no_overwrite(ctx):
    put(ctx, ctx.P("a"), "A")
    put(ctx, ctx.P("b"), "B")
    err("already_exists", ctx.c.rename, ctx.P("a"), ctx.P("b"), overwrite=False)
    check(read_all(ctx, ctx.P("a")) == b"A")
    check(read_all(ctx, ctx.P("b")) == b"B")
    ok(ctx.c.rename, ctx.P("a"), ctx.P("c"), overwrite=False)
    expect_exists(ctx, ctx.P("a"), False)
    check(read_all(ctx, ctx.P("c")) == b"A")
    ok(do_mkdir, ctx, ctx.P("d1"))
    ok(do_mkdir, ctx, ctx.P("d2"))
    err("already_exists", ctx.c.rename, ctx.P("d1"), ctx.P("d2"), overwrite=False)
    expect_exists(ctx, ctx.P("d1"), True)


def rename_errors_and_dirs(ctx):
    err("not_found", ctx.c.rename, ctx.P("missing"), ctx.P("x"))
    err("not_found", ctx.c.rename, from_=ctx.P("missing"), to=ctx.P("x"), overwrite=False)
    put(ctx, ctx.P("d/inner"), "in")
    ok(ctx.c.rename, ctx.P("d"), ctx.P("e"))
    expect_exists(ctx, ctx.P("d"), False)
    check(read_all(ctx, ctx.P("e/inner")) == b"in")


# ---- hostile paths and arguments ----

HOSTILE = ["with space", "quote'single", "dq\"x", "$(touch pwned)", "`touch pwned2`",
           "new\nline", "-leading-dash", "--", "semi;colon&amp|pipe", "tab\tx",
           "back\\slash", "*glob?[a]", "~tilde", "percent%s%n", _b("\xff\xfe raw")]


def hostile_names(ctx):
    for h in HOSTILE:
        put(ctx, ctx.P(h), h)
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == len(HOSTILE), "%d entries, want %d (a name split or ran as a "
          "command?)" % (len(lst.entries), len(HOSTILE)))
    for h in HOSTILE:
        hb = h.encode("utf-8", "surrogateescape")
        check(find_entry(lst, h) is not None, "%r not listed verbatim" % h)
        got = read_all(ctx, ctx.P(h))
        check(got == hb, "%r read back '%s'" % (h, show(got)))
        s = stat(ctx, ctx.P(h), False)
        check(s.size == len(hb))
        r = ok(do_exec, ctx, argv=["cat", "--", ctx.P(h)])
        check(r.stdout == hb, "cat %r gave '%s' / '%s'" % (h, show(r.stdout), show(r.stderr)))
    ok(ctx.c.rename, ctx.P(HOSTILE[3]), ctx.P(HOSTILE[4]))
    for i, h in enumerate(HOSTILE):
        if i == 3:
            continue
        ok(ctx.c.remove, ctx.P(h))
    lst = listdir(ctx, ctx.dir)
    check(len(lst.entries) == 0, "%d entries left, first %r" % (
        len(lst.entries), lst.entries[0].name if lst.entries else ""))


def hostile_exec_args(ctx):
    argv = ["printf", "%s|"] + HOSTILE + [""]
    want = b"".join(h.encode("utf-8", "surrogateescape") + b"|" for h in HOSTILE) + b"|"
    d = ctx.P("d $(touch pwned) 'q' `x`")
    ok(do_mkdir, ctx, d)
    put(ctx, d + "/marker", "in-hostile-dir")
    r = ok(do_exec, ctx, argv=argv, cwd=d)
    check(r.stdout == want, "got '%s'" % show(r.stdout))
    r = ok(do_exec, ctx, command="cat marker; printf '|%s' \"$ASP_CONF_V\"", cwd=d,
           env={"ASP_CONF_V": "$(touch pwned) `touch pwned` 'q' \"dq\"\n;x"})
    check(r.stdout == b"in-hostile-dir|$(touch pwned) `touch pwned` 'q' \"dq\"\n;x",
          "got '%s'" % show(r.stdout))
    expect_exists(ctx, ctx.P("pwned"), False)
    expect_exists(ctx, d + "/pwned", False)



# ---- spawned processes (tests/conformance/cases_proc.c) ----

def spawn(ctx, **kw):
    """A Process; Skip where the transport carries no notifications (HTTP in the SDKs)."""
    try:
        return ctx.c.spawn(**kw)
    except asp.AspError as e:
        if e.code == "unsupported":
            raise Skip("spawn: " + e.message)
        raise Fail("spawn %r: %s: %s" % (kw, e.code, e.message))


def follow(proc, seen=b""):
    """Reads the process to its exit: stdout, stderr, the exit event, the chunks seen
    (stream, offset, size, when) and the time the exit came. `seen`: the stdout already
    read from it."""
    out, err, chunks = bytearray(seen), bytearray(), []
    while True:
        ev = proc.next_event(timeout=SAFETY_TIMEOUT_MS / 1000)
        if ev is None:
            return bytes(out), bytes(err), proc.exit, chunks, mono_ms()
        if getattr(ev, "stream", None) is not None:
            check(ev.proc == proc.proc, "output names process %s, spawn %s" % (ev.proc, proc.proc))
            acc = out if ev.stream == "stdout" else err
            check(ev.offset == len(acc), "%s chunk at offset %d after %d bytes" %
                  (ev.stream, ev.offset, len(acc)))
            acc += ev.data
            chunks.append((ev.stream, ev.offset, len(ev.data), mono_ms()))


def spawn_output_live(ctx):
    t0 = mono_ms()
    p = spawn(ctx, command="for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done")
    out, _, ex, chunks, t_end = follow(p)
    check(out == b"line1\nline2\nline3\nline4\nline5\n", "stdout '%s'" % show(out))
    check(ex.exit_code == 0 and not ex.signal, "exit %s signal %s" % (ex.exit_code, ex.signal))
    outs = [c for c in chunks if c[0] == "stdout"]
    check(len(outs) >= 4, "%d chunks: the output came in one piece, not live" % len(outs))
    check(t_end - outs[0][3] >= 500, "first chunk %.0f ms after the spawn, exit %.0f ms after:"
          " not live" % (outs[0][3] - t0, t_end - t0))


def spawn_output_order(ctx):
    p = spawn(ctx, command="printf out1; printf err1 >&2; head -c 2097152 /dev/zero | "
              "tr '\\000' x; printf err2 >&2; printf end; exit 5")
    out, err_, ex, _, _ = follow(p)
    check(out == b"out1" + b"x" * (2 * MIB) + b"end", "stdout %d bytes" % len(out))
    check(err_ == b"err1err2", "stderr '%s'" % show(err_))
    check(ex.exit_code == 5 and not ex.timed_out and ex.proc == p.proc, "exit %r" % (ex,))
    w = ok(ctx.c.proc_wait, p.proc, timeout_ms=5000)
    check(w.exit_code == 5 and not w.signal, "proc_wait %r" % (w,))


def spawn_stdin_binary(ctx):
    n = 256 + 300 * 1024
    data = bytes(range(256)) + bytes((i * 7 + (i >> 9)) & 0xFF for i in range(256, n))
    p = spawn(ctx, argv=["cat"])
    ok(ctx.c.proc_write, p.proc, data=data[:256])
    ok(ctx.c.proc_write, p.proc, data=data[256:256 + 100 * 1024])
    ok(ctx.c.proc_write, p.proc, data=data[256 + 100 * 1024:], eof=True)
    out, _, ex, _, _ = follow(p)
    check(out == data, "cat gave back %d of %d bytes, or other bytes" % (len(out), n))
    check(ex.exit_code == 0, "exit %s" % ex.exit_code)
    err("invalid_argument", ctx.c.proc_write, p.proc, data=b"x")
    err("invalid_argument", ctx.c.proc_write, p.proc, eof=True)
    err("not_found", ctx.c.proc_write, 0x7fffffffffff, data=b"x")


def spawn_timeout_kills_group(ctx):
    t0 = mono_ms()
    p = spawn(ctx, command="sleep 30 & echo $! > bg.pid; sleep 30", cwd=ctx.dir,
              timeout_ms=300)
    _, _, ex, _, t_end = follow(p)
    check(ex.timed_out and ex.exit_code == -1 and ex.signal == "TERM",
          "timed_out %s exit %s signal %s" % (ex.timed_out, ex.exit_code, ex.signal))
    check(250 <= t_end - t0 < SLOW_MS, "ended after %.0f ms" % (t_end - t0))
    check(ok(ctx.c.proc_wait, p.proc, timeout_ms=5000).timed_out, "proc_wait: not timed_out")
    for _ in range(20):
        if sh(ctx, 'kill -0 "$(cat bg.pid)" 2>/dev/null && echo alive || echo dead').stdout \
                == b"dead\n":
            return
        time.sleep(0.5)  # polling the condition, bounded at 10 s
    raise Fail("a process of the timed-out group survived")


def spawn_errors(ctx):
    follow(spawn(ctx, command="true"))  # Skip where nothing can spawn
    err("not_found", ctx.c.spawn, argv=["/nonexistent/asp-conf-prog"])
    err("not_found", ctx.c.spawn, command="true", cwd="/nonexistent/asp-conf-dir")
    err("invalid_argument", ctx.c.spawn, command="true", argv=["true"])


def proc_signal_each(ctx):
    for name in ("TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"):
        p = spawn(ctx, command="ulimit -c 0 2>/dev/null; exec sleep 30", cwd=ctx.dir)
        ok(ctx.c.proc_signal, p.proc, name)
        w = ok(ctx.c.proc_wait, p.proc, timeout_ms=10000)
        check(w.exit_code == -1 and w.signal == name,
              "%s: exit %s signal %s" % (name, w.exit_code, w.signal))
        ok(ctx.c.proc_signal, p.proc, name)  # a finished process: a no-op
        if name == "TERM":
            err("invalid_argument", ctx.c.proc_signal, p.proc, "FOO")
            err("invalid_argument", ctx.c.proc_signal, p.proc, "STOP")
        p.close()
    err("not_found", ctx.c.proc_signal, 0x7fffffffffff, "TERM")


def proc_wait_timeout(ctx):
    p = spawn(ctx, command="exec sleep 30")
    t0 = mono_ms()
    err("timeout", ctx.c.proc_wait, p.proc, timeout_ms=300)
    took = mono_ms() - t0
    check(250 <= took < SLOW_MS, "the timeout came after %.0f ms" % took)
    ok(ctx.c.proc_signal, p.proc, "KILL")
    w = ok(ctx.c.proc_wait, p.proc)
    check(w.signal == "KILL" and not w.timed_out, "signal %s" % w.signal)
    err("not_found", ctx.c.proc_wait, 0x7fffffffffff, timeout_ms=10)
    p.close()


def proc_list_fields(ctx):
    done = spawn(ctx, argv=["sh", "-c", "exit 3"], tag="conf-done")
    ok(ctx.c.proc_wait, done.proc, timeout_ms=10000)
    running = spawn(ctx, command="exec sleep 30", tag="conf-running")
    procs = {e.proc: e for e in ok(ctx.c.proc_list).procs}
    d, r = procs.get(done.proc), procs.get(running.proc)
    check(d is not None and r is not None,
          "proc_list lacks %s" % ("the running one" if d else "the finished one"))
    check(d.tag == "conf-done", "tag %s" % d.tag)
    check(d.command == "sh -c 'exit 3'", "argv shown as [%s]" % d.command)
    check(not d.running and d.exit_code == 3, "finished: running %s exit %s" %
          (d.running, d.exit_code))
    check(r.command == "exec sleep 30" and r.running and r.exit_code is None
          and r.tag == "conf-running", "running: %r" % (r,))
    ok(ctx.c.proc_signal, running.proc, "KILL")
    ok(ctx.c.proc_wait, running.proc, timeout_ms=10000)
    done.close()
    running.close()


def attach(ctx, proc, **kw):
    """proc_attach as a Process; Skip where the transport carries no notifications."""
    try:
        return ctx.c.proc_attach(proc, **kw)
    except asp.AspError as e:
        if e.code == "unsupported":
            raise Skip("proc_attach: " + e.message)
        raise Fail("proc_attach %s %r: %s: %s" % (proc, kw, e.code, e.message))


def follow_from(proc):
    """Reads an attached process to its exit: {stream: (first offset, bytes)}, the exit.
    Chunks of a stream follow each other without a gap from wherever the replay began."""
    got = {}
    while True:
        ev = proc.next_event(timeout=SAFETY_TIMEOUT_MS / 1000)
        if ev is None:
            return {k: (v[0], bytes(v[1])) for k, v in got.items()}, proc.exit
        if getattr(ev, "stream", None) is not None:
            first, acc = got.setdefault(ev.stream, (ev.offset, bytearray()))
            check(ev.offset == first + len(acc), "%s chunk at offset %d after %d bytes from %d"
                  % (ev.stream, ev.offset, len(acc), first))
            acc += ev.data


def proc_attach_replay(ctx):
    p = spawn(ctx, command="printf 0123456789; printf ab >&2; sleep 0.3; printf tail")
    out, _, _, _, _ = follow(p)
    check(out == b"0123456789tail", "stdout '%s'" % show(out))
    # a finished process: replay from the offsets, then the exit, before the answer
    a = attach(ctx, p.proc, stdout_offset=4, stderr_offset=1)
    check(a.exit is not None, "attach to a finished process returned before its exit")
    got, ex = follow_from(a)
    check(got.get("stdout") == (4, b"456789tail"), "replay from 4: %r" % (got.get("stdout"),))
    check(got.get("stderr") == (1, b"b"), "stderr replay %r" % (got.get("stderr"),))
    check(ex.exit_code == 0 and ex.proc == p.proc, "exit %r" % (ex,))
    # errors follow nothing
    err("invalid_argument", ctx.c.proc_attach, p.proc, stdout_offset=15)
    err("not_found", ctx.c.proc_attach, 0x7fffffffffff)
    # a running process, again on this connection after a detach: replay, then live
    live = spawn(ctx, command="printf start; sleep 0.6; printf end")
    ev = live.next_event(timeout=5)
    check(getattr(ev, "data", b"")[:5] == b"start", "first event %r" % (ev,))
    live.close()  # detached: it keeps running
    got, ex = follow_from(attach(ctx, live.proc))
    check(got.get("stdout") == (0, b"startend"), "got %r" % (got.get("stdout"),))
    check(ex.exit_code == 0, "exit %r" % (ex,))


def proc_attach_truncated(ctx):
    # 3 MiB + 1: the responder holds the last 1 MiB. The spawn's own stream is read to
    # its exit first: its last notifications may come after proc_wait's answer, and a
    # follower of the same process on this connection would get them too.
    p = spawn(ctx, command="head -c 3145728 /dev/zero | tr '\\000' y; printf Z")
    follow(p)
    ok(ctx.c.proc_wait, p.proc, timeout_ms=20000)
    got, ex = follow_from(attach(ctx, p.proc))
    first, data = got.get("stdout", (None, b""))
    check(first == 3 * MIB + 1 - MIB, "replay starts at %s, expected %d" % (first, 2 * MIB + 1))
    check(len(data) == MIB and data[-1:] == b"Z" and data[:1] == b"y",
          "replayed %d bytes" % len(data))
    check(ex.exit_code == 0, "exit %r" % (ex,))


# ---- terminals (spawn with tty, proc_resize) ----

def need_pty(ctx):
    """Skip (n/a) where the responder's hello lists no "pty" feature."""
    h = ok(ctx.c.hello)
    if "pty" not in (h.features or []):
        raise Skip("n/a: the responder's hello lists no pty feature")


def tty_spawn(ctx):
    need_pty(ctx)
    p = spawn(ctx, argv=["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo isatty; "
                         "stty size; echo err >&2; echo T=$TERM"],
              tty=asp.Tty(rows=30, cols=100))
    out, err_, ex, _, _ = follow(p)
    check(b"isatty" in out, "not on a terminal: '%s'" % show(out))
    check(b"30 100" in out, "stty size: '%s'" % show(out))
    check(b"err" in out and err_ == b"", "stderr not on the terminal: out '%s' err '%s'" %
          (show(out), show(err_)))
    check(b"T=xterm-256color" in out, "TERM: '%s'" % show(out))
    check(ex.exit_code == 0, "exit %s" % ex.exit_code)


def tty_resize(ctx):
    need_pty(ctx)
    p = spawn(ctx, argv=["sh", "-c", "stty size; read x; stty size"], tty=asp.Tty(term="dumb"))
    first = bytearray()
    while b"24 80" not in first:  # resized only once the first size is out
        ev = p.next_event(timeout=SAFETY_TIMEOUT_MS / 1000)
        check(ev is not None and getattr(ev, "stream", None) == "stdout",
              "no first size: '%s'" % show(bytes(first)))
        first += ev.data
    ok(p.resize, 50, 132)
    ok(p.write, b"go\n")
    out, _, ex, _, _ = follow(p, bytes(first))
    check(b"24 80" in out and b"50 132" in out, "sizes: '%s'" % show(out))
    check(ex.exit_code == 0, "exit %s" % ex.exit_code)
    err("invalid_argument", ctx.c.proc_resize, p.proc, 50, 132)  # finished
    err("not_found", ctx.c.proc_resize, 0x7fffffffffff, 24, 80)
    q = spawn(ctx, command="exec sleep 30")
    err("invalid_argument", ctx.c.proc_resize, q.proc, 24, 80)  # no terminal
    ok(ctx.c.proc_signal, q.proc, "KILL")
    q.close()
    r = spawn(ctx, command="exec sleep 30", tty=asp.Tty())
    err("invalid_argument", r.resize, 0, 80)
    err("invalid_argument", r.resize, 24, 4097)
    ok(ctx.c.proc_signal, r.proc, "KILL")
    r.close()


# ---- trees (tests/conformance/cases_tree.c) ----
# The streams are built here byte by byte (the hostile ones as no honest writer makes
# them), and what tree_read sends is decoded with the standard library's tarfile, so the
# SDK's own tar code is not what judges it.

TREE_MTIME = 1700000000
TAR_END = bytes(1024)


def tar_raw(name, typeflag, link="", size=0, mode=0o644):
    """One ustar header of any name and type flag, checksummed."""
    h = bytearray(512)
    nm, ln = name.encode()[:100], link.encode()[:100]
    h[0:len(nm)] = nm
    h[100:108] = b"%07o\0" % mode
    h[108:116] = h[116:124] = b"%07o\0" % 0
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % TREE_MTIME
    h[156:157] = typeflag
    h[157:157 + len(ln)] = ln
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def tar_member(kind, path, mode, link="", data=b""):
    if kind == "dir":
        return tar_raw((path or ".") + "/", b"5", mode=mode)
    if kind == "symlink":
        return tar_raw(path, b"2", link, mode=mode)
    return tar_raw(path, b"0", size=len(data), mode=mode) + data + bytes(-len(data) % 512)


def tar_pax_path(path):
    """A pax header naming the next member `path`, then an innocent ustar header."""
    body = " path=%s\n" % path
    n = len(body) + 1
    while len(str(n)) + len(body) != n:  # the length counts its own digits
        n += 1
    rec = ("%d%s" % (n, body)).encode()
    return (tar_raw("././@PaxHeader", b"x", size=len(rec)) + rec + bytes(-len(rec) % 512) +
            tar_member("file", "innocent", 0o644, data=b"x"))


def tree_sample():
    """The honest tree most cases write: a root, files of three modes, a directory, a link."""
    return b"".join([
        tar_member("dir", "", 0o755),
        tar_member("file", "a.txt", 0o644, data=b"hello\n"),
        tar_member("file", "run.sh", 0o755, data=b"#!/bin/sh\n"),
        tar_member("dir", "sub", 0o750),
        tar_member("file", "sub/secret", 0o600, data=b"s"),
        tar_member("symlink", "sub/link", 0o777, "../a.txt"),
        tar_member("file", "sub/empty", 0o644, data=b""),
    ]) + TAR_END


def dir_count(ctx, path, n):
    names = [e.name for e in listdir(ctx, path).entries]
    check(len(names) == n, "%s holds %d entries, not %d (%s)" % (path, len(names), n,
                                                                 ", ".join(names) or "-"))


def file_is(ctx, path, want):
    got = read_all(ctx, path)
    check(got == want, "%s has %d bytes, not the %d written" % (path, len(got), len(want)))


def tree_write_small(ctx):
    t = ctx.P("new/deeper/t")  # parents made too
    r = ok(ctx.c.tree_write, t, data=tree_sample(), eof=True)
    check(r.entries == 6 and r.bytes == 17, "tree_write answered %s entries, %s bytes; want 6 "
          "and 17" % (r.entries, r.bytes))
    for name, kind, mode in (("", "dir", 0o755), ("a.txt", "file", 0o644),
                             ("run.sh", "file", 0o755), ("sub", "dir", 0o750),
                             ("sub/secret", "file", 0o600), ("sub/empty", "file", 0o644),
                             ("sub/link", "symlink", 0)):
        q = t + "/" + name if name else t
        s = stat(ctx, q, False)
        check(s.type == kind, "%s is a %s, not a %s" % (q, s.type, kind))
        if mode:
            check(s.mode == mode, "%s has mode %o, not %o" % (q, s.mode, mode))
        if kind != "symlink":
            check(s.mtime_ns // 10**9 == TREE_MTIME, "%s has mtime %d s, not the stream's %d"
                  % (q, s.mtime_ns // 10**9, TREE_MTIME))
        else:
            check(s.target == "../a.txt", "%s points to %s, not ../a.txt" % (q, s.target))
    file_is(ctx, t + "/sub/link", b"hello\n")
    dir_count(ctx, ctx.dir, 1)


def tree_write_chunked(ctx):
    # 3 MiB in three files, sent as a first chunk and six writes all in flight at once
    sizes = (2 * MIB, MIB - 7, 5)
    data = [bytes((k * 31 + i * 7 + k // 4099) & 0xFF for k in range(n))
            for i, n in enumerate(sizes)]
    stream = b"".join(tar_member("file", "f%d" % i, 0o644, data=d)
                      for i, d in enumerate(data)) + TAR_END
    t = ctx.P("t")
    first = 100000
    r = ok(ctx.c.tree_write, t, data=stream[:first])
    each = (len(stream) - first) // 6
    cuts = [first + each * i for i in range(6)] + [len(stream)]
    results = {}

    def send(i):
        lo, hi = (cuts[i], cuts[i + 1]) if i < 6 else (len(stream), len(stream))
        try:
            ctx.c.proc_write(r.proc, data=stream[lo:hi], offset=lo, eof=i == 6)
            results[i] = None
        except asp.AspError as e:
            results[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6, -1, -1)]
    for th in threads:  # the last first: the responder puts them in order
        th.start()
    for th in threads:
        th.join(SAFETY_TIMEOUT_MS / 1000 * 3)
    check(len(results) == 7, "%d of 7 writes answered" % len(results))
    for i, e in sorted(results.items()):
        check(e is None, "write %d: %s: %s" % (i, e and e.code, e and e.message))
    w = ok(ctx.c.proc_wait, r.proc, timeout_ms=30000)
    check(w.exit_code == 0, "the stream ended with %d: %s" % (w.exit_code, w.error))
    check(w.entries == 3 and w.bytes == 3 * MIB - 2, "proc_wait says %s entries, %s bytes" %
          (w.entries, w.bytes))
    for i, d in enumerate(data):
        file_is(ctx, ctx.P("t/f%d" % i), d)
    try:  # the handle is done: a write after its end is refused
        ctx.c.proc_write(r.proc, data=b"x")
    except asp.AspError:
        return
    raise Fail("a proc_write after eof was taken")


def tree_write_merge(ctx):
    # an existing directory: "a" replaced, "keep" kept, "sub" merged into
    t = ctx.P("t")
    old = b"".join([tar_member("file", "a", 0o644, data=b"old"),
                    tar_member("file", "keep", 0o644, data=b"k"),
                    tar_member("file", "sub/x", 0o644, data=b"x")]) + TAR_END
    new = b"".join([tar_member("file", "a", 0o644, data=b"new"), tar_member("dir", "sub", 0o755),
                    tar_member("file", "sub/y", 0o644, data=b"y")]) + TAR_END
    ok(ctx.c.tree_write, t, data=old, eof=True)
    ok(ctx.c.tree_write, t, data=new, eof=True)
    for name, want in (("a", b"new"), ("keep", b"k"), ("sub/x", b"x"), ("sub/y", b"y")):
        file_is(ctx, ctx.P("t/" + name), want)
    dir_count(ctx, t, 3)
    # a file of the stream where the target has a directory: nothing moves
    conflict = (tar_member("file", "a", 0o644, data=b"newer") +
                tar_member("file", "sub", 0o644, data=b"f") + TAR_END)
    err("is_a_directory", ctx.c.tree_write, t, data=conflict, eof=True)
    file_is(ctx, ctx.P("t/a"), b"new")
    dir_count(ctx, t, 3)
    err("not_a_directory", ctx.c.tree_write, ctx.P("t/a"), data=tree_sample(), eof=True)


TREE_HOSTILE = [
    ("a name climbing out", "../escape",
     lambda: tar_member("file", "ok", 0o644, data=b"fine") + tar_raw("../escape", b"0") + TAR_END),
    ("a '..' inside a name", "a/../../escape",
     lambda: tar_raw("a/../../escape", b"0") + TAR_END),
    ("an absolute name", "/tmp/asp-conf-escape",
     lambda: tar_raw("/tmp/asp-conf-escape", b"0") + TAR_END),
    ("a symlink out, then a file through it", "l/escape",
     lambda: (tar_member("symlink", "l", 0o777, "..") +
              tar_member("file", "l/escape", 0o644, data=b"x") + TAR_END)),
    ("a symlink to /tmp, then a directory through it", "d/asp-conf-escape",
     lambda: (tar_member("symlink", "d", 0o777, "/tmp") +
              tar_member("dir", "d/asp-conf-escape", 0o755) + TAR_END)),
    ("a hard link", "h", lambda: tar_raw("h", b"1", "/etc/passwd") + TAR_END),
    ("a fifo", "p", lambda: tar_raw("p", b"6") + TAR_END),
    ("a device", "null", lambda: tar_raw("null", b"3") + TAR_END),
    ("a pax path climbing out", "../escape", lambda: tar_pax_path("../escape") + TAR_END),
    ("a stream cut inside a file", "cut",  # into the data of "cut", no end blocks
     lambda: (tar_member("file", "a", 0o644, data=b"whole") +
              tar_member("file", "cut", 0o644, data=b"0123456789"))[:-(512 - 4)]),
    ("a stream without its end", "last", lambda: tar_member("file", "last", 0o644, data=b"x")),
    ("bytes that are not tar", None,
     lambda: b"this is not a tar stream at all, not even close" + bytes(1024)),
]


def tree_write_hostile(ctx):
    t = ctx.P("t")
    for what, member, build in TREE_HOSTILE:
        try:
            e = err("invalid_argument", ctx.c.tree_write, t, data=build(), eof=True)
        except Fail as f:
            raise Fail("%s: %s" % (what, f))
        check(not member or member in e.message, "%s: the error does not name '%s': %s" %
              (what, member, e.message))
        check(not exists(ctx, t), "%s: the refused stream left its target" % what)
        check(not exists(ctx, "/tmp/asp-conf-escape"), "%s: /tmp/asp-conf-escape exists" % what)
        dir_count(ctx, ctx.dir, 0)


def tree_write_cancel(ctx):
    t = ctx.P("t")
    half = tree_sample()[:512 * 3]
    # half the stream, then KILL: nothing stays
    r = ok(ctx.c.tree_write, t, data=half)
    ok(ctx.c.proc_signal, r.proc, "KILL")
    w = ok(ctx.c.proc_wait, r.proc, timeout_ms=15000)
    check(w.exit_code == -1 and w.signal == "KILL", "a cancelled tree_write ended with %d (%s)"
          % (w.exit_code, w.signal or "no signal"))
    check(not exists(ctx, t), "a cancelled tree_write left %s" % t)
    # half the stream, then eof: the cut is the handle's error, named
    r = ok(ctx.c.tree_write, t, data=half)
    try:
        ctx.c.proc_write(r.proc, offset=len(half), eof=True)
    except asp.AspError as e:
        if e.code != "invalid_argument":
            raise Fail("the eof after a cut: %s: %s" % (e.code, e.message))
    w = ok(ctx.c.proc_wait, r.proc, timeout_ms=15000)
    check(w.exit_code == 1 and w.error_code == "invalid_argument" and w.error,
          "a cut tree_write ended with %d, error_code %s" % (w.exit_code, w.error_code))
    check(not exists(ctx, t), "a cut tree_write left %s" % t)
    # an offset before what came is refused
    r = ok(ctx.c.tree_write, t, data=tree_sample())
    err("invalid_argument", ctx.c.proc_write, r.proc, data=b"x", offset=10)
    ok(ctx.c.proc_signal, r.proc, "KILL")


def tree_write_empty_path(ctx):
    # an empty archive, so a responder that took "" has nothing to put there
    end = bytes(1024)
    e = err("not_found", ctx.c.tree_write, "", data=end, eof=True)
    check("empty" in e.message, "the message does not say the path is empty: %s" % e.message)
    # and as the start of a stream, KILLed if it opens
    try:
        r = ctx.c.tree_write("", data=end)
    except asp.AspError as e:
        check(e.code == "not_found", "a stream to '': expected not_found, got %s: %s" %
              (e.code, e.message))
        return
    ctx.c.proc_signal(r.proc, "KILL")
    raise Fail("a stream to '': expected not_found, got a handle")


def tree_read_stream(ctx, path, exclude=None):
    """tree_read of `path` followed to its end: the members as 'kind mode name size' lines,
    the file bytes, the exit. Skip where nothing can follow it."""
    import io
    import tarfile
    try:
        p = ctx.c.tree_read(path, exclude=exclude)
    except asp.AspError as e:
        if e.code == "unsupported":
            raise Skip("n/a: tree_read cannot be followed here: " + e.message)
        raise Fail("tree_read %s: %s: %s" % (path, e.code, e.message))
    out, _, ex, _, _ = follow(p)
    check(ex is not None and ex.exit_code == 0, "tree_read ended with %s: %s" %
          (ex and ex.exit_code, ex and ex.error))
    lines, nbytes = [], 0
    try:
        with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tf:
            for m in tf:
                kind = "d" if m.isdir() else "f" if m.isfile() else "l" if m.issym() else "?"
                name = m.name[2:] if m.name.startswith("./") else m.name
                lines.append("%s %o %s%s %d" % (kind, m.mode, name.rstrip("/") or ".",
                                                " -> " + m.linkname if m.issym() else "", m.size))
                nbytes += m.size if m.isfile() else 0
    except tarfile.TarError as e:
        raise Fail("tree_read's stream of %d bytes: %s" % (len(out), e))
    return lines, nbytes, ex


def tree_read_roundtrip(ctx):
    t = ctx.P("t")
    ok(ctx.c.tree_write, t, data=tree_sample(), eof=True)
    lines, nbytes, ex = tree_read_stream(ctx, t)
    # a symlink's mode is whatever the system keeps: compare without it
    got = [("l 777" + x[5:]) if x.startswith("l ") else x for x in lines]
    want = ["d 755 . 0", "f 644 a.txt 6", "f 755 run.sh 10", "d 750 sub 0", "f 644 sub/empty 0",
            "l 777 sub/link -> ../a.txt 0", "f 600 sub/secret 1"]
    check(got == want, "tree_read sent\n%s\nwant\n%s" % ("\n".join(got), "\n".join(want)))
    check(nbytes == 17 and ex.entries == 6 and ex.bytes == 17,
          "%d bytes of data; exit says %s entries, %s bytes" % (nbytes, ex.entries, ex.bytes))
    lines, _, _ = tree_read_stream(ctx, t, exclude=["*.sh", "sub"])
    check(lines == ["d 755 . 0", "f 644 a.txt 6"], "excluding *.sh and sub sent\n%s" %
          "\n".join(lines))


def tree_read_error(ctx, path, code):
    """tree_read's refusal of `path`: the call fails, nothing is followed."""
    try:
        p = ctx.c.tree_read(path)
    except asp.AspError as e:
        if e.code == "unsupported":
            raise Skip("n/a: " + e.message)
        check(e.code == code, "tree_read %s: expected %s, got %s: %s" % (path, code, e.code,
                                                                         e.message))
        return e
    p.close()
    raise Fail("tree_read %s: expected %s, got a stream" % (path, code))


def tree_read_errors(ctx):
    tree_read_error(ctx, ctx.P("missing"), "not_found")
    ok(ctx.c.tree_write, ctx.P("t"), data=tree_sample(), eof=True)
    tree_read_error(ctx, ctx.P("t/a.txt"), "not_a_directory")


def tree_read_empty_path(ctx):
    e = tree_read_error(ctx, "", "not_found")
    check("empty" in e.message, "the message does not say the path is empty: %s" % e.message)


CASES = [
    ("hello_fields", hello_fields, "hello: protocol 2, the unary ops, os, arch, absolute cwd"),
    ("exec_command_shell", exec_command_shell, "exec command runs through /bin/sh -c; stdout/stderr apart"),
    ("exec_argv_direct", exec_argv_direct, "exec argv runs without a shell"),
    ("exec_invalid_params", exec_invalid_params, "exec needs exactly one of command and argv"),
    ("exec_missing_program", exec_missing_program, "exec argv of a missing program is not_found"),
    ("exec_exit_codes", exec_exit_codes, "exec returns non-zero exits as results"),
    ("exec_signal_name", exec_signal_name, "exec: a signalled process gives exit -1 and the signal name"),
    ("exec_stdin_binary", exec_stdin_binary, "exec stdin round trip with every byte value"),
    ("exec_stdin_closed", exec_stdin_closed, "exec stdin is closed after the data; unread input is fine"),
    ("exec_large_io", exec_large_io, "exec with 4 MiB in and out at once does not deadlock"),
    ("exec_large_output", exec_large_output, "exec returns 6 MB of output whole"),
    ("exec_max_output", exec_max_output, "exec keeps the first max_output bytes and counts the rest"),
    ("exec_env", exec_env, "exec env adds and overrides variables, PATH included"),
    ("exec_fresh_process", exec_fresh_process, "exec: no shell state carries over between calls"),
    ("exec_cwd", exec_cwd, "exec runs in cwd"),
    ("exec_cwd_errors", exec_cwd_errors, "exec cwd missing is not_found, a file is not_a_directory"),
    ("exec_timeout_kills_group", exec_timeout_kills_group, "exec timeout TERMs the whole group"),
    ("exec_timeout_escalates_to_kill", exec_timeout_escalates_to_kill, "exec timeout KILLs 2 s later what ignores TERM"),
    ("exec_background_holds_output", exec_background_holds_output, "exec waits for a background child holding stdout"),
    ("exec_background_timeout", exec_background_timeout, "exec timeout ends a background child holding stdout"),
    ("exec_background_detached", exec_background_detached, "exec does not wait for a child that let go of output"),
    ("exec_own_process_group", exec_own_process_group, "exec gives the command its own session and group"),
    ("exec_no_inherited_fds", exec_no_inherited_fds, "exec: the command inherits only fds 0-2"),
    ("exec_concurrent", exec_concurrent, "exec: parallel calls stay apart; a slow one blocks nothing"),
    ("read_ranges", read_ranges, "read offset/length, size and eof"),
    ("read_whole_binary", read_whole_binary, "read the whole file, binary and empty"),
    ("read_large", read_large, "read a 3 MiB file back whole"),
    ("read_errors", read_errors, "read missing, a directory, through a file"),
    ("write_replace", write_replace, "write replaces the whole file by default"),
    ("write_offset", write_offset, "write at an offset keeps the rest; past the end leaves a hole"),
    ("write_append", write_append, "write append adds to the end"),
    ("write_mkdirs", write_mkdirs, "write mkdirs creates parents; without it not_found"),
    ("write_mode", write_mode, "write mode applies to new files only, under the umask"),
    ("write_atomic", write_atomic, "write atomic replaces whole, keeps the mode, leaves no temp"),
    ("write_invalid_combos", write_invalid_combos, "write offset with append or atomic is invalid_argument"),
    ("write_binary", write_binary, "write binary and empty data"),
    ("write_errors", write_errors, "write to a directory, through a file"),
    ("stat_file_dir", stat_file_dir, "stat file and dir: type, size, mode, owner"),
    ("stat_symlink", stat_symlink, "stat symlink with follow true/false, target, dangling"),
    ("stat_special", stat_special, "stat fifo, char device, socket and block device where present"),
    ("stat_mtime", stat_mtime, "stat and list mtime_ns"),
    ("stat_errors", stat_errors, "stat missing, through a file"),
    ("list_sorted_bytewise", list_sorted_bytewise, "list sorts bytewise, high bytes last"),
    ("list_types", list_types, "list types; symlinks not followed; no . and .."),
    ("list_errors", list_errors, "list a file, missing"),
    ("mkdir_basic", mkdir_basic, "mkdir, already_exists, mode"),
    ("mkdir_parents", mkdir_parents, "mkdir parents, and not_found without"),
    ("mkdir_errors", mkdir_errors, "mkdir over a file, through a file"),
    ("remove_file_and_dir", remove_file_and_dir, "remove a file, an empty dir; missing is not_found"),
    ("remove_not_empty", remove_not_empty, "remove a non-empty dir without recursive is not_empty"),
    ("remove_recursive", remove_recursive, "remove recursive, never following symlinks inside"),
    ("remove_symlink_to_dir", remove_symlink_to_dir, "remove a symlink to a dir leaves the dir alone"),
    ("rename_overwrite", rename_overwrite, "rename replaces the target by default"),
    ("rename_no_overwrite", rename_no_overwrite, "rename overwrite=false is already_exists on a target"),
    ("rename_errors_and_dirs", rename_errors_and_dirs, "rename missing is not_found; directories move"),
    ("hostile_names", hostile_names, "names with shell metacharacters, newlines, raw bytes"),
    ("hostile_exec_args", hostile_exec_args, "argv, cwd and env values with shell metacharacters"),
    ("spawn_output_live", spawn_output_live, "spawn: output arrives while the process runs"),
    ("spawn_output_order", spawn_output_order, "spawn: offsets in order per stream, 2 MiB, exit after all output"),
    ("spawn_stdin_binary", spawn_stdin_binary, "spawn: proc_write binary stdin in pieces, eof, then invalid_argument"),
    ("spawn_timeout_kills_group", spawn_timeout_kills_group, "spawn timeout TERMs the whole group, timed_out in exit"),
    ("spawn_errors", spawn_errors, "spawn: invalid params, a missing program or cwd"),
    ("proc_signal_each", proc_signal_each, "proc_signal: each signal by name ends the group and is reported"),
    ("proc_wait_timeout", proc_wait_timeout, "proc_wait timeout is a timeout error; the process keeps running"),
    ("proc_list_fields", proc_list_fields, "proc_list: tag, command (argv shell-quoted), running, exit_code"),
    ("proc_attach_replay", proc_attach_replay, "proc_attach: replay from offsets, the exit before the answer; live after a detach"),
    ("proc_attach_truncated", proc_attach_truncated, "proc_attach: the responder keeps the last 1 MiB of output"),
    ("tty_spawn", tty_spawn, "spawn with tty: isatty on 0, 1, 2, its size, TERM, all output on stdout"),
    ("tty_resize", tty_resize, "Process.resize: the new size; finished, unknown, no terminal, bad sizes"),
]

# Cases whose list comes from the C table itself (`asp conformance --list`), by prefix: each
# of its names runs the body of that name here, and a name without one fails, so a case
# added to the table is run here too or shows up as missing.
TABLE_PREFIXES = ("tree_",)
TABLE_BODIES = {f.__name__: f for f in (tree_write_small, tree_write_chunked, tree_write_merge,
                                        tree_write_hostile, tree_write_cancel,
                                        tree_write_empty_path, tree_read_roundtrip,
                                        tree_read_errors, tree_read_empty_path)}


def table_cases(asp_cli):
    """(name, body, what) of the C table's cases under TABLE_PREFIXES, in its order."""
    import subprocess
    r = subprocess.run([asp_cli, "conformance", "--list"], capture_output=True, timeout=60)
    if r.returncode != 0:
        sys.exit("%s conformance --list: exit %d: %s" % (asp_cli, r.returncode,
                                                         r.stderr.decode(errors="replace")))
    out = []
    for line in r.stdout.decode().splitlines():
        name, _, what = line.partition(" ")
        if name.startswith(TABLE_PREFIXES):
            out.append((name, TABLE_BODIES.get(name), what.strip()))
    if not out:
        sys.exit("%s conformance --list names no case starting %s" % (asp_cli,
                                                                     " or ".join(TABLE_PREFIXES)))
    return out


def run_case(client, root, name, fn):
    ctx = Ctx(client, root, name)
    t0 = mono_ms()
    status, msg = "PASS", ""
    try:
        try:
            client.mkdir(ctx.dir)
        except asp.AspError as e:
            if e.code != "already_exists":
                raise Fail("cannot create the case directory %s: %s: %s" % (ctx.dir, e.code,
                                                                            e.message))
            client.remove(ctx.dir, recursive=True)
            client.mkdir(ctx.dir)
        fn(ctx)
    except Skip as e:
        status, msg = "SKIP", str(e)
    except Fail as e:
        status, msg = "FAIL", str(e)
    except asp.AspError as e:
        status, msg = "FAIL", "unexpected %s: %s" % (e.code, e.message)
    if status != "FAIL":
        try:
            client.remove(ctx.dir, recursive=True)
        except asp.AspError as e:
            status, msg = "FAIL", "cleanup: remove %s: %s: %s" % (ctx.dir, e.code, e.message)
    return status, msg, mono_ms() - t0


class AioProcess:
    """An asp.aio Process behind the synchronous one's surface: the case bodies' events
    come from its `async for` protocol (__anext__), awaited on the facade's loop."""

    def __init__(self, facade, proc):
        self._f, self._p = facade, proc
        self.proc, self.result = proc.proc, proc.result

    @property
    def exit(self):
        return self._p.exit

    def next_event(self, timeout=None):
        async def step():
            try:
                return await asyncio.wait_for(self._p.__anext__(), timeout)
            except StopAsyncIteration:
                return None
        try:
            return self._f._run(step())
        except asyncio.TimeoutError:
            raise TimeoutError("no event from process %s in %s s" % (self.proc, timeout))

    def __iter__(self):
        return self

    def __next__(self):
        ev = self.next_event()
        if ev is None:
            raise StopIteration
        return ev

    def write(self, *a, **kw):
        return self._f._run(self._p.write(*a, **kw))

    def resize(self, rows, cols):
        return self._f._run(self._p.resize(rows, cols))

    def close(self):
        async def stop():
            self._p.close()
        self._f._run(stop())


class AioFacade:
    """asp.aio.Client behind the synchronous surface the case bodies call: each method
    runs as a coroutine on one event loop in its own thread, so calls from a case's
    threads run as concurrent tasks on the one connection."""

    def __init__(self, make):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = self._run(make())

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if asyncio.iscoroutinefunction(attr):
            def call(*a, **kw):
                r = self._run(attr(*a, **kw))
                return AioProcess(self, r) if hasattr(r, "__anext__") else r
            return call
        return attr

    def close(self):
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


def main():
    global asp
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdk", required=True, help="the generated Python package's folder")
    ap.add_argument("--http")
    ap.add_argument("--token")
    ap.add_argument("--websocket", choices=("true", "false"),
                    help="http.websocket; absent: POST, and a WebSocket for streams")
    ap.add_argument("--config")
    ap.add_argument("--only")
    ap.add_argument("--table", required=True, metavar="ASP",
                    help="the asp CLI, whose `conformance --list` names the tree cases")
    ap.add_argument("--label", default="")
    ap.add_argument("--aio", action="store_true", help="through asp.aio.Client (asyncio)")
    ap.add_argument("--stdio", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    sys.path.insert(0, a.sdk)
    ws = None if a.websocket is None else a.websocket == "true"
    import asp as asp_module
    asp = asp_module
    if a.aio:
        async def make():
            if a.stdio:
                return await asp.aio.Client.stdio(a.stdio)
            if a.http:
                return asp.aio.Client.http(a.http, a.token, websocket=ws)
            return await asp.aio.Client.from_config(a.config)
        client = AioFacade(make)
    elif a.stdio:
        client = asp.Client.stdio(a.stdio)
    elif a.http:
        client = asp.Client.http(a.http, a.token, websocket=ws)
    else:
        client = asp.Client.from_config(a.config)
    label = a.label or client.transport
    root = "/tmp/asp-sdk-py-conf-%d-%d" % (os.getpid(), int(time.time() * 1000))
    client.mkdir(root)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    t0 = mono_ms()
    for name, fn, _what in CASES + table_cases(a.table):
        if a.only and a.only not in name:
            continue
        if fn is None:
            status, msg, ms = "FAIL", "the C table has this case; this driver has no body for it", 0
        else:
            status, msg, ms = run_case(client, root, name, fn)
        counts[status] += 1
        print("%s %-34s %6.0f ms%s" % (status, name, ms, "  " + msg if msg else ""),
              flush=True)
    try:
        client.remove(root, recursive=True)
    except asp.AspError:
        pass
    client.close()
    print("python SDK%s over %s: %d cases in %.1f s" % (" (asyncio)" if a.aio else "", label, sum(counts.values()),
                                                       (mono_ms() - t0) / 1000))
    print("%d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"],
                                                 counts["SKIP"]))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
