#!/usr/bin/python3
"""Fault injection through the Python SDK's stdio client (docs/faults.md), against real
processes: a SIGSTOPped asp-agent, a wedged responder, one answering the wrong id, one
answering garbage. Nothing hangs; the next call reconnects.

usage: test_faults.py SDK_DIR AGENT
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from stop import cont, stop  # noqa: E402

agent = sys.argv[2]
fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_responder.py")
passed = failed = 0


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


def read_pid(path, old=0):
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            pid = int(open(path).read().strip() or 0)
            if pid and pid != old:
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return 0


with tempfile.TemporaryDirectory() as tmp:
    pidfile = os.path.join(tmp, "pid")
    argv = ["/bin/sh", "-c", "echo $$ > %s; exec %s --stdio" % (pidfile, agent)]
    c = asp.Client.stdio(argv, call_timeout_ms=300)
    c.hello()
    pid = read_pid(pidfile)
    stop(pid)
    code, msg, took = attempt(lambda: c.stat("/"))
    report(code == "timeout" and 0.25 <= took < 5 and "stat" in msg and "300 ms" in msg,
           "a stopped agent: the call fails with timeout naming the op and the limit",
           repr((code, msg, took)))
    code, msg, took = attempt(lambda: c.stat("/"))
    report(code == "transport_error" and took < 8 and "second missed deadline" in msg,
           "a second missed deadline closes the connection", repr((code, msg, took)))
    cont(pid)
    code, msg, took = attempt(lambda: c.stat("/"))
    report(code == "ok" and read_pid(pidfile, pid) not in (0, pid),
           "the next call starts a new agent", repr((code, msg)))

    # an exec without a timeout outlives call_timeout_ms: the probes are answered
    code, msg, took = attempt(lambda: c.exec(command="sleep 0.8"))
    report(code == "ok", "an exec without a timeout outlives call_timeout_ms", repr((code, msg)))
    # ... and ends when the agent stops answering them
    c.hello()
    pid = read_pid(pidfile, pid)
    res = {}
    th = threading.Thread(target=lambda: res.update(r=attempt(lambda: c.exec(command="sleep 30"))))
    th.start()
    stop(pid)  # before or after the exec arrives: the probe goes unanswered
    th.join(15)
    code, msg, took = res.get("r", ("hung", "", 0))
    report(code == "transport_error" and "liveness probe" in msg,
           "an exec on a stopped agent ends when the probe is not answered", repr((code, msg)))
    cont(pid)
    c.close()

    for mode, want in (("wrongid", "no call is waiting for"), ("garbage", "bad message")):
        counter = os.path.join(tmp, "counter-" + mode)
        c = asp.Client.stdio(["/usr/bin/python3", fake, counter, mode])
        c.hello()  # answered: the fake misbehaves at the first other request
        code, msg, took = attempt(lambda: c.stat("/"))
        report(code == "protocol_error" and took < 5 and want in msg,
               "%s: the call fails with protocol_error at once, saying why" % mode,
               repr((code, msg)))
        code, msg, took = attempt(lambda: c.stat("/"))
        report(code == "unsupported", "%s: the next call reconnects" % mode, repr((code, msg)))
        c.close()

    counter = os.path.join(tmp, "counter-silent")
    c = asp.Client.stdio(["/usr/bin/python3", fake, counter, "silent"], call_timeout_ms=200)
    code, msg, took = attempt(lambda: c.stat("/"))
    report(code == "timeout" and took < 5, "a wedged responder: timeout", repr((code, msg)))
    c.close()

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
