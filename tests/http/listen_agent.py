"""Starts `asp-agent --listen 127.0.0.1:0` for the raw-socket tests and finds its port
in the log it writes (stderr), within a bound."""
import subprocess
import sys
import time


def start_agent(agent, log):
    """(the process, (host, port)); exits the test when the agent does not come up."""
    p = subprocess.Popen([agent, "--listen", "127.0.0.1:0"], stderr=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(log.name) as f:
            for line in f:
                if line.startswith("asp-agent: listening on "):
                    host, port = line.split()[3].split("//")[1].split(":")
                    return p, (host, int(port))
        if p.poll() is not None:
            break
        time.sleep(0.05)  # polling the log for the address, bounded
    p.kill()
    sys.exit("the agent did not start: " + open(log.name).read())
