#!/usr/bin/python3
"""The Python SDK's HTTP clients (asp.Client.http and asp.aio.Client.http) keep the
deadlines of docs/faults.md against a real `asp-agent --listen` on loopback that is
SIGSTOPped: a call fails with timeout naming the op and the limit, exec's limit is its
timeout_ms + call_timeout_ms, an exec without one is probed with hello (answered: it
waits on; unanswered: transport_error), and after SIGCONT calls work again. Exits 77
when the agent has no HTTP support.

usage: test_http_faults.py SDK_DIR AGENT
"""
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import asp  # noqa: E402
from listen_agent import start_agent  # noqa: E402
from stop import cont, stop  # noqa: E402

agent = sys.argv[2]
passed = failed = 0
LIMIT_MS = 300


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok - %s" % name)
    else:
        failed += 1
        print("FAIL - %s %s" % (name, detail))


def attempt(fn):
    t0 = time.monotonic()
    try:
        fn()
        return "ok", "", time.monotonic() - t0
    except asp.AspError as e:
        return e.code, e.message, time.monotonic() - t0


log = tempfile.NamedTemporaryFile(prefix="asp-listener-", suffix=".log")
listener, (host, port) = start_agent(agent, log)
url = "http://%s:%d" % (host, port)


def stopped(fn):
    """fn() while the agent is stopped; it continues whatever happens."""
    stop(listener.pid)
    try:
        return fn()
    finally:
        cont(listener.pid)


def sync_cases():
    c = asp.Client.http(url, call_timeout_ms=LIMIT_MS)
    report(attempt(lambda: c.stat("/"))[0] == "ok", "sync: a call answered in time")
    report(attempt(c.hello)[0] == "ok", "sync: hello answered")
    code, msg, _ = stopped(lambda: attempt(c.hello))
    report(code == "ok", "sync: hello again is answered from the cache, agent stopped",
           repr((code, msg)))
    code, msg, _ = attempt(lambda: c.exec(command="sleep 0.8"))
    report(code == "ok", "sync: an exec without timeout outlives call_timeout_ms (probes "
           "answered)", repr((code, msg)))
    code, msg, took = stopped(lambda: attempt(lambda: c.stat("/")))
    report(code == "timeout" and 0.25 <= took < 5 and "stat" in msg and "300 ms" in msg,
           "sync: a stopped agent: timeout naming the op and the limit", repr((code, msg, took)))
    code, msg, took = stopped(lambda: attempt(lambda: c.exec(command="true", timeout_ms=200)))
    report(code == "timeout" and 0.45 <= took < 6 and "exec" in msg and "500 ms" in msg and
           "timeout_ms 200" in msg, "sync: exec's limit is its timeout_ms + call_timeout_ms",
           repr((code, msg, took)))
    code, msg, took = stopped(lambda: attempt(lambda: c.exec(command="sleep 30")))
    report(code == "transport_error" and "liveness probe" in msg and took < 8,
           "sync: an exec without timeout on a stopped agent ends when the probe is not "
           "answered", repr((code, msg, took)))
    code, msg, _ = stopped(lambda: attempt(c.hello))
    report(code == "timeout", "sync: after a transport_error hello is asked again",
           repr((code, msg)))
    code, msg, _ = attempt(lambda: c.stat("/"))
    report(code == "ok", "sync: after SIGCONT calls work again", repr((code, msg)))
    res = []
    threads = [threading.Thread(target=lambda: res.append(attempt(lambda: c.stat("/"))[0]))
               for _ in range(4)]
    stopped(lambda: ([t.start() for t in threads], [t.join(15) for t in threads]))
    report(res == ["timeout"] * 4, "sync: calls from 4 threads each time out", repr(res))
    c.close()


async def aio_cases():
    c = asp.aio.Client.http(url, call_timeout_ms=LIMIT_MS)
    report((await c.stat("/")).type == "dir", "asyncio: a call answered in time")
    stop(listener.pid)
    try:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(c.stat("/"), 15)
            code, msg = "ok", ""
        except asp.AspError as e:
            code, msg = e.code, e.message
        took = time.monotonic() - t0
    finally:
        cont(listener.pid)
    report(code == "timeout" and 0.25 <= took < 5 and "stat" in msg and "300 ms" in msg,
           "asyncio: a stopped agent: timeout naming the op and the limit",
           repr((code, msg, took)))
    report((await c.stat("/")).type == "dir", "asyncio: after SIGCONT calls work again")
    await c.close()


try:
    sync_cases()
    asyncio.run(aio_cases())
finally:
    listener.send_signal(signal.SIGCONT)
    listener.terminate()
    try:
        listener.wait(10)
    except subprocess.TimeoutExpired:
        listener.kill()
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
