"""asp forward against ssh -L: forwarded throughput and small-request latency.

usage: bench_forward.py ASP AGENT SSHD_HELPER [ROUNDS] [MIB]

Paths, all to one TCP server on 127.0.0.1 (a Python server this bench starts):
  asp forward over stdio         (asp-agent --stdio as a local child)
  asp forward over SSH agent mode (the tests/ssh OpenSSH fixture, asp-agent over a channel)
  asp forward over native SSH     (the same sshd: direct-tcpip channels)
  ssh -N -L to the same sshd      (OpenSSH's client, its own forwarding)
  ssh + relay process             (OpenSSH in agent mode's shape: per connection, a
                                   ControlMaster session runs bash's /dev/tcp and two cats
                                   in the sandbox, so the bytes cross sshd, a pipe and a
                                   relay process as they cross asp-agent; echo and download
                                   only: bash cannot half-close the socket, so no upload)
  floor: straight to the server   (no forwarder)
Each forwarder is started once and kept for the run. Every round runs every path in a
fresh random order: MIB MiB downloaded (the server sends, the path's reading direction;
timed from the first bytes, so a path's connection setup does not count),
MIB MiB uploaded (the server counts and answers), and 200 one-byte echo round trips on
a connection opened before the timing. Throughput is the median over rounds, latency the
median (and p99) of all round trips; ratios are against ssh -L in the same run. Then,
where perf is installed, each forwarding process's CPU and context switches per round
trip over 2,000 more echoes (perf stat -p). A program, never a timed test; the figures
go to docs/benchmarks.md by hand.
"""
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

asp, agent, helper = (os.path.abspath(a) for a in sys.argv[1:4])
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
MIB = int(sys.argv[5]) if len(sys.argv) > 5 else 256
TOTAL = MIB << 20
ECHOES = 200
BOUND = 60.0

tmp = tempfile.mkdtemp(prefix="asp-bench-forward-")
cleanups = [lambda: shutil.rmtree(tmp, ignore_errors=True)]  # runs last

# ---- the server: GEN N (send N bytes), SINK (count to EOF, answer), ECHO (echo bytes) ----

CHUNK = os.urandom(1 << 20)


def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = c.makefile("rb")
    try:
        line = f.readline().split()
        if line[:1] == [b"GEN"]:
            left = int(line[1])
            view = memoryview(CHUNK)
            while left:
                n = min(left, len(CHUNK))
                c.sendall(view[:n])
                left -= n
        elif line[:1] == [b"SINK"]:
            n = 0
            while True:
                d = f.read1(1 << 20)
                if not d:
                    break
                n += len(d)
            c.sendall(b"%d\n" % n)
        elif line[:1] == [b"ECHO"]:
            c.sendall(b"+")
            while True:
                d = c.recv(64)
                if not d:
                    break
                c.sendall(d)
    except OSError:
        pass
    c.close()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
TARGET = srv.getsockname()[1]


def accept_loop():
    while True:
        try:
            c, _ = srv.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(c,), daemon=True).start()


threading.Thread(target=accept_loop, daemon=True).start()

# ---- the forwarders ---------------------------------------------------------------------


def start_sshd(extra, name):
    cfg = os.path.join(tmp, name + ".json")
    pf = os.path.join(tmp, name + ".port")
    p = subprocess.Popen([helper, cfg, tmp, "--port-file", pf] + extra,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cleanups.append(lambda: (p.stdin.close(), p.wait(BOUND)))
    if p.stdout.readline().strip() != "ready":
        sys.exit("the sshd fixture did not start")
    with open(pf) as f:
        port, user, key, kh = f.read().split()
    return cfg, int(port), user, key, kh


pids = {}  # path -> the forwarding process, for the perf figures


def asp_forward(config):
    p = subprocess.Popen([asp, "--config", config, "--json", "forward", "0:%d" % TARGET],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    cleanups.append(lambda: (p.terminate(), p.wait(BOUND)))
    line = p.stdout.readline()
    if not line:
        sys.exit("asp forward did not start (%s)" % config)
    port = int(json.loads(line)["listen"].rsplit(":", 1)[1])
    pids[port] = p.pid
    return port


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_open(port):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


stdio_cfg = os.path.join(tmp, "stdio.json")
with open(stdio_cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "stdio": {"command": [agent, "--stdio"]}}, f)
native_cfg, sport, user, key, kh = start_sshd([], "native")
agent_cfg = os.path.join(tmp, "agent.json")
with open(native_cfg) as f:
    c = json.load(f)
c["ssh"]["agent"] = agent
with open(agent_cfg, "w") as f:
    json.dump(c, f)

paths = {
    "asp forward, stdio": asp_forward(stdio_cfg),
    "asp forward, SSH agent mode": asp_forward(agent_cfg),
    "asp forward, native SSH": asp_forward(native_cfg),
}
lport = free_port()
ssh = subprocess.Popen(["ssh", "-N", "-L", "127.0.0.1:%d:127.0.0.1:%d" % (lport, TARGET),
                        "-p", str(sport), "-i", key, "-o", "UserKnownHostsFile=" + kh,
                        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                        "-o", "ExitOnForwardFailure=yes", "%s@127.0.0.1" % user],
                       stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
cleanups.append(lambda: (ssh.terminate(), ssh.wait(BOUND)))
end = time.monotonic() + BOUND
while not port_open(lport):
    if ssh.poll() is not None or time.monotonic() > end:
        sys.exit("ssh -L did not listen")
    time.sleep(0.05)  # polling ssh's listener: it says nothing when ready
paths["ssh -L"] = lport
pids[lport] = ssh.pid

ctl = os.path.join(tmp, "ctl")
ssh_base = ["ssh", "-p", str(sport), "-i", key, "-o", "UserKnownHostsFile=" + kh,
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-S", ctl]
master = subprocess.Popen(ssh_base + ["-M", "-N", "%s@127.0.0.1" % user],
                          stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
cleanups.append(lambda: (master.terminate(), master.wait(BOUND)))
end = time.monotonic() + BOUND
while not os.path.exists(ctl):
    if master.poll() is not None or time.monotonic() > end:
        sys.exit("the ssh ControlMaster did not start")
    time.sleep(0.05)  # polling for its socket: it says nothing when ready
relayed = []  # the sessions' mux clients, reaped at the end
relay_srv = socket.socket()
relay_srv.bind(("127.0.0.1", 0))
relay_srv.listen(64)
# (the fixture's login shell prints noise before every command but sftp-server's: the
# comment keeps the relayed stream clean)
RELAY = "exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3 & exec cat >&3 # sftp-server" % TARGET


def relay_loop():
    while True:
        try:
            c, _ = relay_srv.accept()
        except OSError:
            return
        # the mux client hands the socket itself to the master, which then reads it
        relayed.append(subprocess.Popen(ssh_base + ["%s@127.0.0.1" % user, RELAY],
                                        stdin=c, stdout=c, stderr=subprocess.DEVNULL))
        c.close()


threading.Thread(target=relay_loop, daemon=True).start()
cleanups.append(lambda: [p.kill() for p in relayed])
RELAY_PATH = "ssh + relay process"
paths[RELAY_PATH] = relay_srv.getsockname()[1]
pids[paths[RELAY_PATH]] = master.pid
paths["floor: no forwarder"] = TARGET

# ---- the measurements -------------------------------------------------------------------


def conn(port, what):
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(what + b"\n")
    return s


def download(port):
    s = conn(port, b"GEN %d" % TOTAL)
    buf = bytearray(1 << 20)
    got = s.recv_into(buf)
    t0 = time.monotonic()  # from the first bytes: a path's connection setup is not throughput
    while 0 < got < TOTAL:
        n = s.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.monotonic() - t0
    s.close()
    if got != TOTAL:
        sys.exit("download short: %d of %d" % (got, TOTAL))
    return TOTAL / dt / 1e6


def upload(port):
    s = conn(port, b"SINK")
    view = memoryview(CHUNK)
    t0 = time.monotonic()
    left = TOTAL
    while left:
        n = min(left, len(CHUNK))
        s.sendall(view[:n])
        left -= n
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while not answer.endswith(b"\n"):
        d = s.recv(64)
        if not d:
            break
        answer += d
    dt = time.monotonic() - t0
    s.close()
    if answer.strip() != str(TOTAL).encode():
        sys.exit("upload short: %r" % answer)
    return TOTAL / dt / 1e6


def echoes(port):
    s = conn(port, b"ECHO")
    if s.recv(1) != b"+":
        sys.exit("no echo greeting")
    out = []
    for _ in range(ECHOES):
        t0 = time.perf_counter_ns()
        s.sendall(b"x")
        if s.recv(1) != b"x":
            sys.exit("echo lost")
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    s.close()
    return out


def per_trip(pid, port, n=2000):
    """The forwarder's CPU (µs) and context switches per one-byte round trip (perf stat)."""
    s = conn(port, b"ECHO")
    s.recv(1)
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "task-clock,context-switches",
                             "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # perf says nothing once attached; a bench, not a test
    for _ in range(n):
        s.sendall(b"x")
        s.recv(1)
    perf.send_signal(2)
    out = perf.communicate(timeout=BOUND)[1]
    s.close()
    v = {f[2]: float(f[0]) for f in (l.split(",") for l in out.splitlines())
         if len(f) > 2 and f[0][:1].isdigit()}
    return v.get("task-clock", 0) * 1000 / n, v.get("context-switches", 0) / n


down = {k: [] for k in paths}
up = {k: [] for k in paths}
lat = {k: [] for k in paths}
load0 = os.getloadavg()[0]
random.seed(1)  # a fresh order each round, the same orders each run
try:
    for r in range(ROUNDS):
        order = list(paths)
        random.shuffle(order)
        for name in order:
            lat[name] += echoes(paths[name])
            down[name].append(download(paths[name]))
            if name != RELAY_PATH:
                up[name].append(upload(paths[name]))
        print("round %d of %d done (load %.1f)" % (r + 1, ROUNDS, os.getloadavg()[0]),
              file=sys.stderr, flush=True)
    trips = {}
    if shutil.which("perf"):
        for name, port in paths.items():
            if port in pids:
                trips[name] = per_trip(pids[port], port)
finally:
    for c in reversed(cleanups):
        try:
            c()
        except Exception:
            pass
load1 = os.getloadavg()[0]


def p99(v):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * 0.99))]


ref = "ssh -L"
rd, ru, rl = (statistics.median(d[ref]) for d in (down, up, lat))
print("%s, load average %.1f to %.1f, %d rounds, %d MiB each way, %d echoes per round"
      % (time.strftime("%Y-%m-%d"), load0, load1, ROUNDS, MIB, ECHOES))
print()
print("| path | download | ratio | upload | ratio | 1-byte echo, median | p99 | ratio |")
print("|---|---|---|---|---|---|---|---|")
for name in paths:
    d, l = statistics.median(down[name]), statistics.median(lat[name])
    u = "%.0f MB/s | %.2f" % (statistics.median(up[name]), statistics.median(up[name]) / ru) \
        if up[name] else "— | —"
    print("| %s | %.0f MB/s | %.2f | %s | %.0f µs | %.0f µs | %.2f |"
          % (name, d, d / rd, u, l, p99(lat[name]), l / rl))
if trips:
    print()
    print("| forwarder process, per round trip | CPU | context switches |")
    print("|---|---|---|")
    for name, (cpu, cs) in trips.items():
        print("| %s | %.0f µs | %.1f |" % (name, cpu, cs))
