#!/usr/bin/python3
"""Work survives a restart of the harness's tool server (docs/tools.md, "Sessions"): a
scripted MCP client starts a background command through `asp mcp` over HTTP (asp-agent
--listen keeps processes for another connection), asp mcp is SIGKILLed and started again
in the same project directory (the default session), bash_list shows the command, and
bash_output returns its `done` once it finishes. Over stdio, whose responder ends its
processes with the connection, the tools say so. Exits 77 (skipped) when the agent has no
HTTP support.

usage: test_tools_restart.py ASP AGENT
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
tmp = os.path.realpath(tempfile.mkdtemp(prefix="asp-tools-restart-"))
project = os.path.join(tmp, "project")
os.mkdir(project)
log = tempfile.NamedTemporaryFile(prefix="asp-listener-", suffix=".log")
listener, (host, port) = start_agent(agent, log)
http_cfg = os.path.join(tmp, "http.asp.json")
with open(http_cfg, "w") as f:
    json.dump({"version": 1, "transport": "http", "cwd": tmp,
               "http": {"url": "http://%s:%d" % (host, port)}}, f)
stdio_cfg = os.path.join(tmp, "stdio.asp.json")
with open(stdio_cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": tmp,
               "stdio": {"command": [agent, "--stdio"]}}, f)


def until(what, fn, bound_s=60):
    """Polls fn until it is true, within a bound."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)  # the poll's interval, not a synchronisation
    raise AssertionError("timed out waiting for " + what)


class Mcp:
    """asp mcp over its stdin and stdout, one request at a time."""

    def __init__(self, cfg):
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen([asp, "--config", cfg, "mcp"], cwd=project,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        self.next_id = 1
        r = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "restart", "version": "0"}})
        assert r["result"]["protocolVersion"] == "2025-06-18", r
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0",
                                       "method": "notifications/initialized"}) + "\n")

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                       "params": params}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()  # asp mcp answers within the tool's own bound
        assert line, "asp mcp closed its stdout"
        msg = json.loads(line)
        assert msg["id"] == rid, msg
        return msg

    def call(self, name, args):
        r = self.request("tools/call", {"name": name, "arguments": args})["result"]
        return "".join(c["text"] for c in r["content"]), r.get("isError", False)

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def kill(self):
        self.p.kill()
        self.p.wait(30)

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)


failed = 0
mcps = []
try:
    gate = os.path.join(tmp, "go")
    command = "echo started; until [ -e %s ]; do sleep 0.1; done; echo done" % gate
    m = Mcp(http_cfg)
    mcps.append(m)
    text, err = m.call("bash", {"command": command, "run_in_background": True})
    assert not err and "Note:" not in text, text
    bash_id = re.search(r"bash_\d+", text).group(0)
    until("the command to start", lambda: "started" in m.call("bash_output",
                                                              {"bash_id": bash_id})[0])
    m.kill()  # the harness dies: no goodbye, its connection just ends

    m = Mcp(http_cfg)
    mcps.append(m)
    text, err = m.call("bash_list", {})
    assert not err, text
    assert "session " + project in text, text
    line = [ln for ln in text.splitlines() if ln.startswith(bash_id + " ")]
    assert line and "(running)" in line[0] and line[0].endswith(command), text
    assert "followed again" in m.stderr(), m.stderr()
    open(gate, "w").close()

    def finished():
        text, err = m.call("bash_output", {"bash_id": bash_id})
        finished.seen += text
        return "<status>exited with code 0</status>" in text
    finished.seen = ""
    until("the command's end", finished)
    assert "done" in finished.seen, finished.seen
    text, _ = m.call("bash_list", {})
    assert bash_id + " (exited with code 0): " + command in text, text
    m.close()
    print("ok - a background command outlived asp mcp (http): bash_list after the restart, "
          "then its output")

    # another session does not see it
    p = subprocess.run([asp, "--config", http_cfg, "tool", "--session", "other", "bash_list",
                        "{}"], capture_output=True, text=True, timeout=120, cwd=project)
    assert p.returncode == 0 and bash_id not in p.stdout and "session other" in p.stdout, \
        p.stdout
    print("ok - another session's bash_list does not show it")

    # stdio: the responder ends its processes with the connection, and the tools say so
    m = Mcp(stdio_cfg)
    mcps.append(m)
    text, err = m.call("bash", {"command": "sleep 60", "run_in_background": True})
    assert not err and "Note: Background commands end when this connection" in text, text
    assert "no reattach" in m.stderr(), m.stderr()
    text, err = m.call("bash_list", {})
    assert "(running): sleep 60" in text and "Note:" in text, text
    m.close()
    print("ok - over stdio the tools say that background commands end with the connection")
except Exception as e:  # noqa: BLE001 -- report every failure
    failed = 1
    print("FAIL - %r" % e)
    for m in mcps:
        print("asp mcp stderr:\n" + m.stderr())
finally:
    for m in mcps:
        if m.p.poll() is None:
            m.kill()
    listener.terminate()
    try:
        listener.wait(5)
    except subprocess.TimeoutExpired:
        listener.kill()
    subprocess.call(["rm", "-rf", tmp])
sys.exit(failed)
