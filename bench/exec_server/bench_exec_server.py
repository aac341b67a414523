#!/usr/bin/python3
"""Per-call latency of asp exec-server (over stdio to a local asp-agent) against Codex's own
exec-server (`codex exec-server --listen stdio`, the pinned version the harness tests use),
both driven the same way over stdin/stdout, interleaved in a random order each round:
process/start of `true` until its process/closed, fs/readFile of a 1 KiB file, and
fs/getMetadata. Prints medians and p99 per call and asp's difference. A program, never a
timed test: `meson compile -C build bench-exec-server`.

usage: bench_exec_server.py ASP AGENT NPM_WORK [ROUNDS]
"""
import base64
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

asp, agent, work = (os.path.abspath(a) for a in sys.argv[1:4])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 400
found = glob.glob(os.path.join(work, "node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
if not found:
    sys.exit("no codex binary under " + work)
codex = found[0]
version = subprocess.run([codex, "--version"], capture_output=True, text=True).stdout.strip()
root = os.path.realpath(tempfile.mkdtemp(prefix="asp-bench-exec-server-"))
cfg = os.path.join(root, "asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": root,
               "stdio": {"command": [agent, "--stdio"]}}, f)
small = os.path.join(root, "small.txt")
with open(small, "wb") as f:
    f.write(os.urandom(768).hex()[:1024].encode())


# as Codex sends it (its own server requires every field)
POLICY = {"inherit": "all", "ignoreDefaultExcludes": True, "exclude": [], "set": {},
          "includeOnly": []}


class Server:
    def __init__(self, name, argv):
        self.name = name
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root)
        self.n = 0
        self.pid = 0
        self.call("initialize", {"clientName": "bench", "resumeSessionId": None})
        self.p.stdin.write(b'{"method":"initialized","params":{}}\n')
        self.p.stdin.flush()

    def send(self, method, params):
        self.n += 1
        self.p.stdin.write(json.dumps({"id": self.n, "method": method, "params": params}).encode()
                           + b"\n")
        self.p.stdin.flush()
        return self.n

    def until(self, pred):
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit(self.name + " closed its output")
            m = json.loads(line)
            if pred(m):
                return m

    def call(self, method, params):
        i = self.send(method, params)
        m = self.until(lambda m: m.get("id") == i)
        if "error" in m:
            raise SystemExit("%s: %s: %s" % (self.name, method, m["error"]))
        return m

    def exec_true(self):
        self.pid += 1
        pid = "b%d" % self.pid
        self.send("process/start", {"processId": pid, "argv": ["true"], "cwd": "file://" + root,
                                    "env": {}, "envPolicy": POLICY, "tty": False,
                                    "pipeStdin": False, "arg0": None, "sandbox": None})
        m = self.until(lambda m: m.get("id") == self.n or (m.get("method") == "process/closed" and
                       m["params"]["processId"] == pid))
        if "error" in m:
            raise SystemExit("%s: process/start: %s" % (self.name, m["error"]))
        if m.get("id") == self.n:
            self.until(lambda m: m.get("method") == "process/closed" and
                       m["params"]["processId"] == pid)
        self.call("process/terminate", {"processId": pid})

    def read_file(self):
        r = self.call("fs/readFile", {"path": "file://" + small, "sandbox": None})
        assert len(base64.b64decode(r["result"]["dataBase64"])) == 1024

    def metadata(self):
        self.call("fs/getMetadata", {"path": "file://" + small, "sandbox": None})


servers = [Server("codex", [codex, "exec-server", "--listen", "stdio"]),
           Server("asp", [asp, "--config", cfg, "exec-server"])]
ops = [("exec true (start to closed)", "exec_true"), ("fs/readFile 1 KiB", "read_file"),
       ("fs/getMetadata", "metadata")]
times = {(s.name, op): [] for s in servers for _, op in ops}
rng = random.Random(7)
for r in range(rounds + 20):
    turns = [(s, op) for s in servers for _, op in ops]
    rng.shuffle(turns)
    for s, op in turns:
        t0 = time.perf_counter()
        getattr(s, op)()
        dt = time.perf_counter() - t0
        if r >= 20:  # warm-up rounds are not counted
            times[(s.name, op)].append(dt * 1000)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


load = open("/proc/loadavg").read().split()[0]
print("asp exec-server vs %s's exec-server, both over stdio; %d rounds, load %s" %
      (version, rounds, load))
print("| call | codex median | codex p99 | asp median | asp p99 | asp - codex (median) |")
print("|---|---|---|---|---|---|")
for label, op in ops:
    c, a = times[("codex", op)], times[("asp", op)]
    print("| %s | %.3f ms | %.3f ms | %.3f ms | %.3f ms | %+.3f ms |" %
          (label, pct(c, 0.5), pct(c, 0.99), pct(a, 0.5), pct(a, 0.99), pct(a, 0.5) - pct(c, 0.5)))
for s in servers:
    s.p.stdin.close()
    s.p.wait(timeout=30)
shutil.rmtree(root, ignore_errors=True)
