#!/usr/bin/python3
"""A background bash outlives the `asp tool` call that started it where the responder stays
(asp-agent --listen, HTTP with WebSocket): bash_output from another process re-attaches and
sees the output from the start, kill_bash from a third kills the group (a child of the shell
too), and the exit shows.
Exits 77 (skipped) when the agent has no HTTP support.

usage: test_tools_reattach.py ASP AGENT
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
tmp = tempfile.mkdtemp(prefix="asp-tools-reattach-")
log = tempfile.NamedTemporaryFile(prefix="asp-listener-", suffix=".log")
listener, (host, port) = start_agent(agent, log)
cfg = os.path.join(tmp, "asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "http", "cwd": tmp,
               "http": {"url": "http://%s:%d" % (host, port)}}, f)


def tool(name, args):
    """One `asp tool` process: (exit code, text)."""
    p = subprocess.run([asp, "--config", cfg, "tool", name, json.dumps(args)],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout


def until(what, fn, bound_s=60):
    """Polls fn until it is true, within a bound."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)  # the poll's interval, not a synchronisation
    raise AssertionError("timed out waiting for " + what)


failed = 0
try:
    rc, out = tool("bash", {"command": "echo one; echo two; sleep 300 & echo $! > pid; wait",
                            "run_in_background": True})
    assert rc == 0, out
    bash_id = re.search(r"bash_\d+", out).group(0)
    pid_file = os.path.join(tmp, "pid")

    def seen_both():
        rc, out = tool("bash_output", {"bash_id": bash_id})
        assert rc == 0, out
        return out if "two" in out else None
    out = until("the output from another process", seen_both)
    assert out.startswith("one\ntwo\n") and out.endswith("<status>running</status>\n"), out
    pid = int(until("the pid file", lambda: os.path.exists(pid_file) and
                    open(pid_file).read().strip()))
    rc, out = tool("kill_bash", {"bash_id": bash_id})
    assert rc == 0 and "Killed background shell" in out, out
    out = until("the kill to show", lambda: (lambda r: "killed by signal KILL" in r[1] and r[1])(
        tool("bash_output", {"bash_id": bash_id})))
    until("the sleep to die", lambda: not os.path.exists("/proc/%d" % pid) or
          open("/proc/%d/stat" % pid).read().split(") ")[1].startswith("Z"))
    print("ok - background bash re-attached from other asp tool processes, then killed")

    # an exec_command session continued by write_stdin from other asp tool processes
    rc, out = tool("exec_command", {"cmd": "cat", "login": False, "yield_time_ms": 250})
    assert rc == 0, out
    sid = int(re.search(r"Process running with session ID (\d+)", out).group(1))
    rc, out = tool("write_stdin", {"session_id": sid, "chars": "purr\n"})
    assert rc == 0, out
    seen = out
    seen = until("cat's echo", lambda: (lambda r: "purr\n" in seen + r[1] and seen + r[1])(
        tool("write_stdin", {"session_id": sid, "yield_time_ms": 5000})))
    rc, out = tool("kill_bash", {"bash_id": str(sid)})
    assert rc == 0, out
    until("the session's exit", lambda: "Process exited with code 137" in
          tool("write_stdin", {"session_id": sid})[1])
    print("ok - an exec_command session continued by write_stdin from other asp tool processes")
except Exception as e:  # noqa: BLE001 -- report every failure
    failed = 1
    print("FAIL - %r" % e)
finally:
    listener.terminate()
    try:
        listener.wait(5)
    except subprocess.TimeoutExpired:
        listener.kill()
    subprocess.call(["rm", "-rf", tmp])
sys.exit(failed)
