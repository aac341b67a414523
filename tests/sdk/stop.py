"""Stopping and continuing a process for the fault tests.

kill(SIGSTOP) returns once the signal is queued; a thread of the target not yet reached
can still answer a request. stop() returns once every thread has stopped.
"""
import os
import signal
import time


def _stopped(pid):
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    states = []
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                states.append(f.read().rpartition(")")[2][1:2])
        except OSError:
            pass  # a thread that just exited
    return bool(states) and all(s in ("T", "t") for s in states)


def stop(pid, timeout=10.0):
    """SIGSTOP to pid; raises when it has not stopped within timeout seconds."""
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while not _stopped(pid):
        if time.monotonic() > end:
            raise RuntimeError("process %d did not stop within %g s of SIGSTOP" % (pid, timeout))
        time.sleep(0.001)


def cont(pid):
    """SIGCONT to pid, unless it is gone already (the client killed it)."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
