#!/usr/bin/python3
"""The Python SDK's HTTP client against a listener that wants a token (run under
http_bridge.py --token or with_listener.py): bearer auth, unauthorized, the token from
.asp.json's token_env and token_file, notifications refused, threads sharing one client,
and asyncio calls in flight that wait for one another.
usage: test_http.py SDK_DIR URL TOKEN"""
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402

url, token = sys.argv[2], sys.argv[3]
passed = failed = 0


def check(what, fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print("ok - " + what)
    except Exception as e:  # noqa: BLE001
        failed += 1
        print("FAIL - %s: %r" % (what, e))


def code_of(fn):
    try:
        fn()
    except asp.AspError as e:
        return e.code
    return "ok"


def right_token():
    with asp.Client.http(url, token) as c:
        assert c.hello().protocol == 2
        assert c.exec(argv=["printf", "hi"]).stdout == b"hi"


def wrong_token():
    assert code_of(asp.Client.http(url, "nope").hello) == "unauthorized"
    assert code_of(asp.Client.http(url).hello) == "unauthorized"


tmp = tempfile.mkdtemp()


def token_env():
    p = os.path.join(tmp, "env.json")
    with open(p, "w") as f:
        f.write('{"version":1,"transport":"http","cwd":"%s","http":{"url":"%s",'
                '"token_env":"ASP_SDK_TEST_TOKEN"}}' % (tmp, url))
    os.environ["ASP_SDK_TEST_TOKEN"] = token
    with asp.Client.from_config(p) as c:
        c.write("f.txt", b"over http")
        assert open(os.path.join(tmp, "f.txt"), "rb").read() == b"over http"


def token_file():
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write(token + "\n")
    p = os.path.join(tmp, "file.json")
    with open(p, "w") as f:
        f.write('{"version":1,"transport":"http","http":{"url":"%s","token_file":"token",'
                '"websocket":false}}' % url)
    with asp.Client.from_config(p) as c:
        assert c.read(os.path.join(tmp, "f.txt")).data == b"over http"
        assert code_of(lambda: c.spawn(argv=["true"])) == "unsupported"


def many_threads():
    import threading
    with asp.Client.http(url, token) as c:
        bad = []

        def w(i):
            for j in range(10):
                if c.exec(argv=["printf", "%d-%d" % (i, j)]).stdout != b"%d-%d" % (i, j):
                    bad.append((i, j))
        ts = [threading.Thread(target=w, args=(i,)) for i in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not bad


check("bearer token accepted", right_token)
check("a wrong or missing token is unauthorized", wrong_token)
check("from_config: token from token_env, cwd applied", token_env)
check("from_config: token from token_file (one newline stripped); websocket false: spawn "
      "unsupported",
      token_file)
def aio_waiting_calls():
    """asyncio: a tree_write's 40 pieces in flight at once, sent last first, so each waits
    at its offset for the ones before it while holding its POST's thread: the client must
    not stop at a few threads (the loop's default executor), where they would wait for
    pieces queued behind them until the responder gave up."""
    import asyncio
    import asp.aio
    from asp import _tar
    body = bytes(range(256)) * 80
    stream = (_tar.header(_tar.Member(_tar.FILE, "f", None, 0o644, 0, len(body))) + body +
              _tar.END)
    cut = [len(stream) * i // 40 for i in range(41)]
    target = os.path.join(tmp, "tree")

    async def run():
        c = asp.aio.Client.http(url, token)
        try:
            r = await c.tree_write(target)
            await asyncio.gather(*(c.proc_write(r.proc, data=stream[cut[i]:cut[i + 1]],
                                                offset=cut[i], eof=i == 39)
                                   for i in range(39, -1, -1)))
            w = await c.proc_wait(r.proc, timeout_ms=30000)
            assert w.exit_code == 0 and w.entries == 1, w
        finally:
            await c.close()
    asyncio.run(run())
    assert open(os.path.join(target, "f"), "rb").read() == body


check("8 threads share one HTTP client", many_threads)
check("asyncio: 40 calls in flight that wait for one another", aio_waiting_calls)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
