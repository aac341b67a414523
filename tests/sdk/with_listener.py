#!/usr/bin/python3
"""Runs a command against a fresh `asp-agent --listen 127.0.0.1:PORT` (loopback, no
token), replacing {url} in its arguments with http://127.0.0.1:PORT. Exits 77 (meson:
skipped) when the agent was built without HTTP support or does not come up.

usage: with_listener.py AGENT -- COMMAND ARGS...
"""
import http.client
import os
import socket
import subprocess
import sys
import time

agent = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/v1/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


port = free_port()
listener = subprocess.Popen([agent, "--listen", "127.0.0.1:%d" % port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
deadline = time.monotonic() + 10
while not healthy(port):
    if listener.poll() is not None or time.monotonic() > deadline:
        err = listener.stderr.read().decode("utf-8", "replace") if listener.poll() is not None \
            else "no answer on /v1/health in 10 s"
        listener.kill()
        print("asp-agent --listen is not available: %s" % err.strip())
        sys.exit(77)
    time.sleep(0.05)
url = "http://127.0.0.1:%d" % port
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
