"""What a responder read, for tests that count requests on the wire: a responder run as
`tee -a LOG | asp-agent --stdio` leaves every request frame in LOG."""
import os
import signal

import msgpack


def teed(log, pidfile, agent):
    """A stdio argv that logs the requests to `log` and writes the agent's pid to
    `pidfile` (tee's to `pidfile`.tee)."""
    return ["/bin/sh", "-c", "sh -c 'echo $$ > \"%s.tee\"; exec tee -a \"%s\"' | "
            "sh -c 'echo $$ > \"%s\"; exec \"%s\" --stdio'" % (pidfile, log, pidfile, agent)]


def kill_teed(pidfile):
    """Kills the agent and its tee: the connection ends at once (a tee alone would keep
    taking requests for an agent that is gone)."""
    for p in (pidfile, pidfile + ".tee"):
        os.kill(int(open(p).read()), signal.SIGKILL)


def wire_methods(log):
    """The methods of the requests in `log`, in order (a frame still being written is
    left out)."""
    data, out, at = open(log, "rb").read(), [], 0
    while at + 4 <= len(data):
        n = int.from_bytes(data[at:at + 4], "big")
        if at + 4 + n > len(data):
            break
        out.append(msgpack.unpackb(data[at + 4:at + 4 + n], raw=False)[2])
        at += 4 + n
    return out
