#!/usr/bin/python3
"""Runs a command against a fresh `asp-agent --listen 127.0.0.1:PORT` (loopback, no
token), replacing {url} in its arguments with http://127.0.0.1:PORT. Exits 77 (meson:
skipped) when the agent was built without HTTP support, fails when it does not come up.

usage: with_listener.py AGENT -- COMMAND ARGS...
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402

agent = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]

log = tempfile.NamedTemporaryFile(prefix="asp-listener-", suffix=".log")
listener, (host, port) = start_agent(agent, log)
url = "http://%s:%d" % (host, port)
try:
    rc = subprocess.call([a.replace("{url}", url) for a in cmd], env=dict(os.environ,
                                                                          ASP_TEST_URL=url))
finally:
    listener.terminate()
    try:
        listener.wait(5)
    except subprocess.TimeoutExpired:
        listener.kill()
sys.exit(rc)
