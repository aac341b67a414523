#!/usr/bin/python3
"""The Python client beyond the op semantics: what .asp.json adds to calls (cwd, relative
paths, env, timeout), the transports it refuses, spawn as an iterator (or unsupported
while the responder lacks it), argument checking, close.

usage: test_client.py SDK_DIR AGENT [HTTP_URL]
"""
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from wire_log import kill_teed, teed, wire_methods  # noqa: E402

agent = os.path.abspath(sys.argv[2])
passed = failed = 0


def case(fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print("ok - %s" % fn.__doc__)
    except Exception as e:  # noqa: BLE001 -- a test reports every failure
        failed += 1
        print("FAIL - %s: %r" % (fn.__doc__, e))
    return fn


def expect_error(code, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except asp.AspError as e:
        assert e.code == code, "expected %s, got %s: %s" % (code, e.code, e.message)
        return e
    raise AssertionError("expected %s, got ok" % code)


tmp = tempfile.mkdtemp(prefix="asp-sdk-client-")
work = os.path.join(tmp, "work")
os.makedirs(work)
cfg = os.path.join(tmp, ".asp.json")
with open(cfg, "w") as f:
    f.write('{"version": 1, "transport": "stdio", "cwd": "%s", "env": {"ASP_T": "from-config",'
            ' "ASP_U": "u"}, "timeout_ms": 300, "stdio": {"command": ["%s", "--stdio"]}}'
            % (work, agent))


@case
def config_defaults():
    """from_config: cwd, relative paths, env merged under the call's, timeout default"""
    with asp.Client.from_config(cfg) as c:
        assert c.config.path == cfg and c.cwd == work
        r = c.exec(command="pwd; printf '%s %s' \"$ASP_T\" \"$ASP_U\"", env={"ASP_T": "call"})
        assert r.stdout == (work + "\ncall u").encode(), r.stdout
        c.write("rel.txt", b"relative")
        assert open(os.path.join(work, "rel.txt"), "rb").read() == b"relative"
        assert c.read("rel.txt").data == b"relative"
        assert c.stat("./rel.txt").size == 8
        c.mkdir("sub")
        r = c.exec(argv=["pwd"], cwd="sub")
        assert r.stdout == (work + "/sub\n").encode(), r.stdout
        r = c.exec(command="sleep 5")
        assert r.timed_out, "the config's timeout_ms did not apply"
        r = c.exec(command="sleep 0.5; echo done", timeout_ms=5000)
        assert not r.timed_out and r.stdout == b"done\n"
        assert c.list(".").entries[0].name == "rel.txt"


@case
def search_and_edit():
    """glob, grep, edit (protocol 2): the generated methods against asp-agent"""
    with asp.Client.from_config(cfg) as c:
        c.mkdir("srch")
        c.write("srch/a.c", b"int a;\nint b;\n")
        c.write("srch/b.h", b"int a;\n")
        a, b = os.path.join(work, "srch/a.c"), os.path.join(work, "srch/b.h")
        g = c.glob(path="srch", pattern="*.c")  # relative: against the config's cwd
        assert g.paths == [a] and not g.truncated, g
        r = c.grep(path="srch", regex=r"\bint\s+a\b", mode="content")
        assert [(m.path, m.line, m.text) for m in r.matches] == [
            (a, 1, "int a;"), (b, 1, "int a;")], r
        r = c.grep(path="srch", regex="int", mode="count")
        assert [(n.path, n.count) for n in r.counts] == [(a, 2), (b, 1)], r
        e = expect_error("invalid_argument", c.edit, path="srch/a.c", old="int", new="long")
        assert "2" in e.message, e.message
        assert c.edit(path="srch/a.c", old="int", new="long", replace_all=True).replacements == 2
        assert c.read("srch/a.c").data == b"long a;\nlong b;\n"
        expect_error("not_found", c.edit, path="srch/a.c", old="int", new="x")


@case
def discovery_from_cwd():
    """from_config(): .asp.json found in a parent of the working directory"""
    old = os.getcwd()
    saved = os.environ.pop("ASP_CONFIG", None)
    try:
        os.chdir(work)
        with asp.Client.from_config() as c:
            assert c.config.path == cfg, c.config.path
            assert c.hello().protocol == 2
    finally:
        os.chdir(old)
        if saved is not None:
            os.environ["ASP_CONFIG"] = saved


@case
def refuses_ssh():
    """from_config: an ssh config is unsupported, naming the transport and what to use"""
    p = os.path.join(tmp, "ssh.json")
    with open(p, "w") as f:
        f.write('{"version": 1, "transport": "ssh", "ssh": {"host": "box"}}')
    e = expect_error("unsupported", asp.Client.from_config, p)
    assert e.message == ("%s: the Python SDK cannot serve transport ssh; use the asp CLI or the "
                         "C library" % p), e.message


@case
def bad_config():
    """from_config: a bad file is invalid_argument with FILE:LINE:COL: KEY: ..."""
    p = os.path.join(tmp, "bad.json")
    with open(p, "w") as f:
        f.write('{"version": 1,\n "transport": "stdio", "stdio": {"command": "asp-agent"}}')
    e = expect_error("invalid_argument", asp.Client.from_config, p)
    assert e.message == ('%s:2:45: stdio.command: expected a non-empty array of strings, got '
                         '"asp-agent"' % p), e.message


@case
def http_token_missing():
    """from_config: http with an unset token_env says which variable"""
    p = os.path.join(tmp, "http.json")
    with open(p, "w") as f:
        f.write('{"version": 1, "transport": "http", "http": {"url": "http://127.0.0.1:9",'
                ' "token_env": "ASP_SDK_TEST_NO_SUCH_VAR"}}')
    e = expect_error("not_found", asp.Client.from_config, p)
    assert "ASP_SDK_TEST_NO_SUCH_VAR" in e.message, e.message


@case
def http_unreachable():
    """http: nothing listening is transport_error, promptly, for POST and the WebSocket;
    with websocket=False spawn is unsupported, naming the key"""
    c = asp.Client.http("http://127.0.0.1:9")
    expect_error("transport_error", c.hello)
    e = expect_error("transport_error", c.spawn, argv=["true"])
    assert "http://127.0.0.1:9" in e.message, e.message
    c.close()
    c = asp.Client.http("http://127.0.0.1:9", websocket=False)
    e = expect_error("unsupported", c.spawn, argv=["true"])
    assert "http.websocket" in e.message, e.message
    c.close()


@case
def arguments_checked():
    """arguments are checked before sending, naming the field as the responder would"""
    with asp.Client.stdio([agent, "--stdio"]) as c:
        e = expect_error("invalid_argument", c.read, 5)
        assert e.message == "read params: field 'path': expected str, got uint", e.message
        e = expect_error("invalid_argument", c.read, "/x", offset=-1)
        assert e.message == "read params: field 'offset': expected uint, got negative int"
        e = expect_error("invalid_argument", c.exec, command="a", argv=["b"])
        assert e.message == "exec params: give exactly one of fields 'command' and 'argv'"
        e = expect_error("invalid_argument", c.exec, argv=["a", 1])
        assert e.message == "exec params: field 'argv' item: expected str, got uint"
        try:
            c.exec(comand="x")
            raise AssertionError("an unknown keyword was accepted")
        except TypeError:
            pass
        e = expect_error("not_found", c.rename, from_=os.path.join(tmp, "nope"), to=tmp + "/x")
        assert "nope" in e.message, e.message


@case
def raw_byte_paths():
    """paths are raw bytes: bytes and surrogate-escaped str name the same file"""
    with asp.Client.stdio([agent, "--stdio"]) as c:
        name = os.path.join(tmp, "raw").encode() + b"/\xff\xfe.txt"
        c.write(name, b"x", mkdirs=True)
        e = c.list(os.path.join(tmp, "raw")).entries[0]
        assert e.name == "\udcff\udcfe.txt", repr(e.name)
        assert os.path.exists(name)
        assert c.read(os.fsdecode(name)).data == b"x"


@case
def integers_beyond_32_bits():
    """integers beyond 32 bits go and come back exact (sparse offset 2^32+5, mtime_ns)"""
    with asp.Client.stdio([agent, "--stdio"]) as c:
        big = (1 << 32) + 5
        name = os.path.join(tmp, "sparse")
        c.write(name, b"tail", offset=big)
        assert c.stat(name).size == big + 4
        r = c.read(name, offset=big)
        assert r.data == b"tail" and r.size == big + 4 and r.eof, r
        assert c.read(name, offset=(1 << 53) + 1).data == b""
        os.utime(name, ns=(1577934245123456789, 1577934245123456789))
        assert c.stat(name).mtime_ns == 1577934245123456789
        assert c.exec(argv=["true"], timeout_ms=1 << 33).exit_code == 0
        expect_error("not_found", c.proc_wait, (1 << 40) + 1)
        os.unlink(name)


@case
def close_then_call():
    """close: later calls are transport_error; the responder exits"""
    c = asp.Client.stdio([agent, "--stdio"])
    c.hello()
    proc = c._transport._conn.proc
    c.close()
    assert proc.wait(5) == 0
    expect_error("transport_error", c.hello)
    c.close()  # twice is fine


@case
def pipelined_threads():
    """pipelined: 16 threads x 20 calls on one client, every answer to its caller"""
    with asp.Client.stdio([agent, "--stdio"]) as c:
        bad = []

        def worker(i):
            for j in range(20):
                want = "%d-%d" % (i, j)
                r = c.exec(argv=["printf", "%s", want])
                if r.stdout != want.encode():
                    bad.append((want, r.stdout))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not bad, bad[:3]


@case
def spawn_stream():
    """spawn: an iterator of output chunks then the exit (or unsupported before it lands)"""
    with asp.Client.stdio([agent, "--stdio"]) as c:
        if "spawn" not in c.hello().ops:
            expect_error("unsupported", c.spawn, argv=["true"])
            print("# spawn is not in this responder's ops yet: checked it is unsupported")
            return
        p = c.spawn(argv=["sh", "-c", "echo a; echo b >&2; sleep 0.2; echo c; exit 3"],
                    tag="t")
        assert p.proc == p.result.proc
        out, err, ex = p.collect()
        assert out == b"a\nc\n" and err == b"b\n", (out, err)
        assert ex.exit_code == 3 and ex.signal is None and not ex.timed_out
        assert list(p) == []
        p = c.spawn(command="cat")
        p.write(b"hello ")
        p.write(b"there", eof=True)
        out, _, ex = p.collect()
        assert out == b"hello there" and ex.exit_code == 0
        p = c.spawn(command="sleep 30")
        p.signal("KILL")
        evs = list(p)
        assert evs[-1].signal == "KILL", evs
        assert any(x.proc == p.proc for x in c.proc_list().procs)


def wait_for(cond, what, bound=10.0):
    end = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < end, "no %s within %.0f s" % (what, bound)
        time.sleep(0.01)


@case
def hello_cached():
    """hello: asked once per connection, again after a reconnect (the wire shows it)"""
    log, pidf = os.path.join(tmp, "hello.log"), os.path.join(tmp, "hello.pid")
    with asp.Client.stdio(teed(log, pidf, agent)) as c:
        first = c.hello()
        again = c.hello()
        assert again.protocol == first.protocol and again.ops == first.ops
        c.stat("/")
        c.hello()
        wait_for(lambda: wire_methods(log) == ["hello", "stat"], "hello then stat")
        pid = int(open(pidf).read())
        kill_teed(pidf)

        def reconnected():
            try:
                c.stat("/")
                return int(open(pidf).read() or 0) not in (0, pid)
            except asp.AspError as e:
                assert e.code == "transport_error", e
                return False
        wait_for(reconnected, "reconnect")
        c.hello()
        c.hello()
        wait_for(lambda: wire_methods(log).count("hello") == 2, "a second hello")
        assert wire_methods(log).count("hello") == 2, wire_methods(log)


@case
def spawn_scripted():
    """spawn/proc_attach against a scripted responder: order, routing by proc, the exit"""
    fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_responder.py")
    with asp.Client.stdio(["/usr/bin/python3", fake, os.path.join(tmp, "n"), "ok"]) as c:
        p = c.spawn(argv=["x"])
        assert p.proc == 7 and p.result.proc == 7
        evs = list(p)
        assert [type(e).__name__ for e in evs] == ["OutputEvent"] * 3 + ["ExitEvent"], evs
        assert [e.data for e in evs[:3]] == [b"one\n", b"err\n", b"two\n"], evs
        assert evs[0].truncated_before is None and evs[1].stream == "stderr"
        assert p.exit == evs[3] and p.exit.signal == "TERM" and p.exit.timed_out
        assert p.exit.exit_code == -1 and list(p) == []
        a = c.proc_attach(7, stdout_offset=3)
        out, err, ex = a.collect()
        assert out == b"one\ntwo\n" and err == b"err\n" and ex.timed_out
        assert a.result is not None


print("%d passed, %d failed" % (passed, failed))
shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failed else 0)
