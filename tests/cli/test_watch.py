"""asp watch against a real asp-agent: the JSON lines for what happens in the sandbox.

usage: test_watch.py ASP AGENT TRANSPORT
TRANSPORT: stdio (asp-agent --stdio) or http (asp-agent --listen on loopback, WebSocket).

Checked: created, modified, renamed (with old_path), removed; a new subdirectory and a
file inside it (recursive), nothing from below without -r; a burst of writes to one file
coalesced; an overflow reported as a line when the reader of asp watch's stdout stalls
(the whole chain then holds back: asp's stdout pipe, the client, the agent's sink, its
watcher, until the kernel's inotify queue overflows; the queue's limit
fs.inotify.max_queued_events is one setting for the whole machine, so the test does not
lower it); the watched directory's removal ends asp watch with exit 0; INT ends it with
exit 0. Every wait polls for a line within a generous bound; nothing sleeps to
synchronise.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BOUND = 40.0
OVERFLOW_FILES = 40000  # beyond the default queue (16384) plus what the pipes hold

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
transport = sys.argv[3]
tmp = tempfile.mkdtemp(prefix="asp-watch-")
failures = []
cleanups = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


config = os.path.join(tmp, "asp.json")
if transport == "stdio":
    cfg = {"version": 1, "transport": "stdio", "stdio": {"command": [agent, "--stdio"]}}
elif transport == "http":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = subprocess.Popen([agent, "--listen", "127.0.0.1:%d" % port],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cleanups.append(srv.kill)
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            break
        except OSError:
            time.sleep(0.02)
    cfg = {"version": 1, "transport": "http", "http": {"url": "http://127.0.0.1:%d" % port}}
else:
    sys.exit("unknown transport " + transport)
with open(config, "w") as f:
    json.dump(cfg, f)


class Watch:
    """asp watch with its lines collected by a thread (or left unread: stall=True)."""

    def __init__(self, path, recursive=True, stall=False):
        args = [asp, "--config", config, "watch"] + (["-r"] if recursive else []) + [path]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        cleanups.append(self.p.kill)
        self.lines = []
        self.cv = threading.Condition()
        if not stall:
            self.start_reading()

    def start_reading(self):
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            with self.cv:
                self.lines.append(json.loads(raw))
                self.cv.notify_all()

    def wait(self, pred, what, bound=BOUND):
        end = time.monotonic() + bound
        with self.cv:
            while True:
                for ev in self.lines:
                    if pred(ev):
                        return ev
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError("no line for %s in %s" % (what, self.lines[-10:]))
                self.cv.wait(left)

    def has(self, pred):
        with self.cv:
            return any(pred(ev) for ev in self.lines)


def is_(kind, path, **kw):
    return lambda ev: ev["kind"] == kind and ev["path"] == path and all(
        ev.get(k) == v for k, v in kw.items())


def ready(w, root):
    """The watch is in place once a probe file's creation is seen (then the probe goes)."""
    probe = os.path.join(root, ".probe")
    end = time.monotonic() + BOUND
    while not w.has(is_("created", probe)):
        if time.monotonic() > end:
            raise RuntimeError("asp watch never saw its probe")
        with open(probe, "w"):
            pass
        try:
            w.wait(is_("created", probe), "probe", 0.5)
        except RuntimeError:
            os.unlink(probe)
    os.unlink(probe)
    w.wait(is_("removed", probe), "probe removed")


try:
    root = os.path.join(tmp, "tree")
    os.mkdir(root)
    os.mkdir(os.path.join(root, "old"))
    w = Watch(root)
    ready(w, root)
    a = os.path.join(root, "a.txt")
    with open(a, "w") as f:
        f.write("one")
    check(bool(w.wait(is_("created", a, type="file"), "created")), "created, type file")
    with open(a, "a") as f:
        f.write("two")
    check(bool(w.wait(is_("modified", a, type="file"), "modified")), "modified")
    b = os.path.join(root, "b.txt")
    os.rename(a, b)
    check(bool(w.wait(is_("renamed", b, old_path=a), "renamed")), "renamed, with old_path")
    os.unlink(b)
    check(bool(w.wait(is_("removed", b), "removed")), "removed")

    sub = os.path.join(root, "new")
    os.mkdir(sub)
    inner = os.path.join(sub, "inner.txt")
    with open(inner, "w") as f:
        f.write("x")
    check(bool(w.wait(is_("created", sub, type="dir"), "new dir")), "a new subdirectory")
    check(bool(w.wait(is_("created", inner), "file in new dir")),
          "a file in the new subdirectory (watched once it appeared)")
    deep = os.path.join(root, "old", "deep.txt")
    with open(deep, "w") as f:
        f.write("x")
    check(bool(w.wait(is_("created", deep), "file in existing subdir")),
          "a file in a subdirectory that existed before")

    # A burst of writes to one file: far fewer lines than writes.
    burst = os.path.join(root, "burst.txt")
    with open(burst, "w") as f:
        for i in range(2000):
            f.write("x")
            f.flush()
    marker = os.path.join(root, "after-burst")
    os.mkdir(marker)
    w.wait(is_("created", marker), "marker after the burst")
    with w.cv:
        n = sum(1 for ev in w.lines if ev["path"] == burst)
    check(1 <= n <= 50, "2000 writes to one file coalesced into %d lines" % n)

    # Without -r: a subdirectory's changes are not reported.
    flat = Watch(root, recursive=False)
    ready(flat, root)
    below = os.path.join(root, "old", "below.txt")
    with open(below, "w") as f:
        f.write("x")
    top = os.path.join(root, "top.txt")
    with open(top, "w") as f:
        f.write("x")
    flat.wait(is_("created", top), "top-level file")
    check(not flat.has(lambda ev: ev["path"] == below),
          "without -r a file below a subdirectory is not reported")
    flat.p.send_signal(signal.SIGINT)
    check(flat.p.wait(BOUND) == 0, "INT ends asp watch with exit 0")

    # Overflow: nobody reads asp watch's stdout while the tree changes a lot.
    many = os.path.join(tmp, "many")
    os.mkdir(many)
    stalled = Watch(many, stall=True)
    # In place once the agent lists it (the stalled reader cannot see a probe).
    end = time.monotonic() + BOUND
    while True:
        ps = subprocess.run([asp, "--config", config, "--json", "ps"],
                            capture_output=True, text=True)
        if transport != "stdio" and '"watch' in ps.stdout:
            break
        if transport == "stdio":
            # Each stdio asp has its own agent: wait for the watcher's inotify instance.
            kids = subprocess.run(["pgrep", "-P", str(stalled.p.pid)], capture_output=True,
                                  text=True).stdout.split()
            found = False
            for k in kids:
                try:
                    for fd in os.listdir("/proc/%s/fd" % k):
                        if "inotify" in os.readlink("/proc/%s/fd/%s" % (k, fd)):
                            found = True
                except OSError:
                    pass
            if found:
                break
        if time.monotonic() > end:
            raise RuntimeError("the stalled watch never started")
        time.sleep(0.05)
    for i in range(OVERFLOW_FILES):
        with open(os.path.join(many, "f%05d" % i), "w"):
            pass
    stalled.start_reading()
    ev = stalled.wait(lambda ev: ev["kind"] == "overflow", "overflow")
    check(ev["path"] == many, "an overflow while the reader stalled is a line naming the "
          "watched path")
    stalled.p.send_signal(signal.SIGINT)
    stalled.p.wait(BOUND)

    # The watched directory's removal ends it.
    shutil.rmtree(root)
    w.wait(is_("removed", root), "root removed")
    try:
        rc = w.p.wait(BOUND)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "removing the watched directory ends asp watch with exit 0 (rc %r)" % rc)
finally:
    for c in reversed(cleanups):
        try:
            c()
        except Exception:
            pass
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d failed" % len(failures))
    sys.exit(1)
print("all passed")
