"""Starts `asp-agent --listen 127.0.0.1:0` and finds its port in the log it writes
(stderr), within a bound. The kernel picks the port, so no other test can take it between
a probe and the agent's bind. An agent built without HTTP support exits the test with 77
(meson: skipped); one that does not come up fails it."""
import subprocess
import sys
import time

NO_HTTP = "not built with HTTP support"


def start_agent(agent, log, env=None, bound_s=60):
    """(the process, (host, port)); `log` is an open file the agent's stderr goes to."""
    p = subprocess.Popen([agent, "--listen", "127.0.0.1:0"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        with open(log.name, errors="replace") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith("asp-agent: listening on "):
                host, port = line.split()[3].split("//")[1].split(":")
                return p, (host, int(port.rstrip("/")))
        if p.poll() is not None:
            if NO_HTTP in text:
                print("asp-agent --listen is not available: " + text.strip())
                sys.exit(77)
            break
        time.sleep(0.05)  # polling the log for the address, bounded
    why = "exited with status %s" % p.returncode if p.poll() is not None else \
        "did not log its address within %d s" % bound_s
    p.kill()
    p.wait()
    with open(log.name, errors="replace") as f:
        sys.exit("the agent %s: %s" % (why, f.read()))
