"""asp forward against a sandbox in a network namespace of its own, with only loopback.

usage: test_forward.py ASP AGENT TRANSPORT [SSHD_HELPER]
TRANSPORT: stdio (asp-agent --stdio entered into the sandbox's namespace), http
(asp-agent --listen inside it), ssh (native SSH: direct-tcpip channels) or ssh-agent (SSH
agent mode: asp-agent --stdio over one channel). For http and the two SSH ones the
responder, or the OpenSSH fixture of tests/ssh (SSHD_HELPER), listens inside the
sandbox's namespace on a veth pair between two namespaces this test made, created before
anything connects.

The test re-runs itself in a fresh network namespace (the harness side, loopback only),
then makes the sandbox's namespace (loopback only; for http a veth pair joins the two,
created before anything connects). In the sandbox, `python3 -m http.server` and a small
TCP server listen on the sandbox's 127.0.0.1, which the harness cannot reach directly;
`asp forward` makes them reachable. Checked: a GET; 32 concurrent downloads, each
intact; a large download and a large upload intact (sha256); half-close (the upload
ends with shutdown(SHUT_WR), the answer comes after); a refused port (the local
connection closes, the warning names the cause); memory of asp and of the sandbox's side
(asp-agent, or sshd's session process) bounded while the local reader stalls (and the
sandbox's sender is held back); Ctrl-C ends
asp forward with exit 0 and closes every relayed connection. Every wait polls a
condition within a generous bound; nothing sleeps to synchronise.

The large transfers are $ASP_FORWARD_BIG_MIB each way (256 MiB unset; tests/cli/meson.build
sets it per transport and build), the stalled stream as much and at least 64 MiB, of
which about 10 MiB is in flight when the sender is held back.
"""
import hashlib
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
import urllib.request

BOUND = 40.0  # seconds for any one condition on a loaded 2-core machine
# each way: large enough to cross many windows and show a stall or a lost byte
BIG = int(os.environ.get("ASP_FORWARD_BIG_MIB", "256")) << 20
STALL_TOTAL = max(BIG, 64 << 20)  # what the generator would send to a reader that never reads
RSS_LIMIT_KB = 160 * 1024  # asp and asp-agent each, while the reader stalls

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
transport = sys.argv[3]
helper = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else None
if transport in ("ssh", "ssh-agent") and not helper:
    sys.exit("the SSH transports need SSHD_HELPER (tests/ssh's sshd_helper)")

if os.geteuid() != 0:
    print("SKIP: network namespaces need root")
    sys.exit(77)
if os.environ.get("ASP_FORWARD_NETNS") != "1":
    # The harness side gets a namespace of its own too: nothing here can reach a real
    # network, and the veth pair below joins two namespaces this test made.
    env = dict(os.environ, ASP_FORWARD_NETNS="1")
    try:
        rc = subprocess.call(["unshare", "-n", "sh", "-c",
                              'ip link set lo up && exec "$@"', "sh", sys.executable,
                              os.path.abspath(__file__)] + sys.argv[1:], env=env)
    except FileNotFoundError:
        print("SKIP: unshare not found")
        sys.exit(77)
    sys.exit(rc)

failures = []
cleanups = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def wait_for(cond, what, bound=BOUND):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


tmp = tempfile.mkdtemp(prefix="asp-forward-")
cleanups.append(lambda: shutil.rmtree(tmp, ignore_errors=True))  # runs last: 2 x BIG of files

# ---- the sandbox: a network namespace with loopback only ------------------------------

holder = subprocess.Popen(["unshare", "-n", "sh", "-c",
                           "ip link set lo up && echo up && exec sleep 100000"],
                          stdout=subprocess.PIPE, text=True)
cleanups.append(lambda: holder.kill())
assert holder.stdout.readline().strip() == "up"
ns = ["nsenter", "-t", str(holder.pid), "-n"]

agent_url = None
if transport != "stdio":
    # Made before anything connects; addresses from TEST-NET-like private space, on
    # these two interfaces only (no default route in either namespace).
    subprocess.check_call(["ip", "link", "add", "aspfh0", "type", "veth", "peer", "name",
                           "aspfs0", "netns", str(holder.pid)])
    subprocess.check_call(["ip", "addr", "add", "10.213.0.1/30", "dev", "aspfh0"])
    subprocess.check_call(["ip", "link", "set", "aspfh0", "up"])
    subprocess.check_call(ns + ["ip", "addr", "add", "10.213.0.2/30", "dev", "aspfs0"])
    subprocess.check_call(ns + ["ip", "link", "set", "aspfs0", "up"])

# The sandbox's files and servers, bound to its 127.0.0.1.
www = os.path.join(tmp, "www")
os.mkdir(www)
with open(os.path.join(www, "index.html"), "w") as f:
    f.write("<p>inside the sandbox</p>\n")
small = os.urandom(1 << 20)
with open(os.path.join(www, "small.bin"), "wb") as f:
    f.write(small)
small_sha = hashlib.sha256(small).hexdigest()
big = os.urandom(BIG)
with open(os.path.join(www, "big.bin"), "wb") as f:
    f.write(big)
big_sha = hashlib.sha256(big).hexdigest()


def free_port_in_sandbox():
    out = subprocess.check_output(ns + [sys.executable, "-c",
                                        "import socket; s=socket.socket(); "
                                        "s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"],
                                  text=True)
    return int(out)


HTTP_PORT = free_port_in_sandbox()
http_srv = subprocess.Popen(ns + [sys.executable, "-m", "http.server", str(HTTP_PORT),
                                  "--bind", "127.0.0.1", "--directory", www],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
cleanups.append(lambda: http_srv.kill())

# SHA: reads to EOF, answers "HEX COUNT\n" (the half-close test: the answer needs the
# EOF). GEN N: sends N bytes of a known pattern, writing how many went out to a file.
TCP_SERVER = r'''
import hashlib, socket, sys, threading
progress = sys.argv[2]
def block(i):
    return hashlib.sha256(str(i).encode()).digest() * 2048
def serve(c):
    try:
        serve1(c)
    except OSError:
        pass  # a connection the test (or asp forward's Ctrl-C) cut
    c.close()
def serve1(c):
    f = c.makefile("rb")
    line = f.readline().split()
    if line[:1] == [b"SHA"]:
        h, n = hashlib.sha256(), 0
        while True:
            d = f.read1(1 << 16)
            if not d:
                break
            h.update(d); n += len(d)
        c.sendall(b"%s %d\n" % (h.hexdigest().encode(), n))
    elif line[:1] == [b"GEN"]:
        total, sent, i = int(line[1]), 0, 0
        while sent < total:
            b = block(i)[: total - sent]
            c.sendall(b); sent += len(b); i += 1
            with open(progress, "w") as p:
                p.write(str(sent))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''
TCP_PORT = free_port_in_sandbox()
progress_file = os.path.join(tmp, "gen-progress")
tcp_srv = subprocess.Popen(ns + [sys.executable, "-c", TCP_SERVER, str(TCP_PORT), progress_file],
                           stdout=subprocess.PIPE, text=True)
cleanups.append(lambda: tcp_srv.kill())
assert tcp_srv.stdout.readline().strip() == "ready"


def gen_sha(n):
    h, sent, i = hashlib.sha256(), 0, 0
    while sent < n:
        b = (hashlib.sha256(str(i).encode()).digest() * 2048)[: n - sent]
        h.update(b)
        sent += len(b)
        i += 1
    return h.hexdigest()


def port_open(host, port):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def sandbox_established(port):
    """Established TCP connections to `port` in the sandbox (its /proc/net/tcp)."""
    out = subprocess.check_output(ns + ["cat", "/proc/net/tcp", "/proc/net/tcp6"], text=True)
    n = 0
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) > 3 and ":" in f[1] and f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
            n += 1
    return n


def sandbox_listening(port):
    out = subprocess.check_output(ns + ["cat", "/proc/net/tcp"], text=True)
    return any(len(f) > 3 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port
               for f in (line.split() for line in out.splitlines()[1:]))


wait_for(lambda: sandbox_listening(HTTP_PORT), "http.server in the sandbox")

# ---- the responder and the config -----------------------------------------------------

config = os.path.join(tmp, "asp.json")
if transport == "stdio":
    cfg = {"version": 1, "transport": "stdio",
           "stdio": {"command": ns + [agent, "--stdio"]}}
elif transport in ("ssh", "ssh-agent"):
    # The OpenSSH fixture inside the sandbox's namespace, on its end of the veth; its
    # sessions (and agent mode's asp-agent) run there too.
    extra = ["--agent", agent] if transport == "ssh-agent" else []
    sshd = subprocess.Popen(ns + [helper, config, tmp, "--listen", "10.213.0.2"] + extra,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cleanups.append(lambda: (sshd.stdin.close(), sshd.wait(BOUND)))
    if sshd.stdout.readline().strip() != "ready":
        sys.exit("the sshd fixture did not start (exit %s)" % sshd.wait())
elif transport == "http":
    agent_port = free_port_in_sandbox()
    agent_proc = subprocess.Popen(ns + [agent, "--listen", "10.213.0.2:%d" % agent_port],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=dict(os.environ, ASP_TOKEN="forward-test-token"))
    cleanups.append(lambda: agent_proc.kill())
    wait_for(lambda: port_open("10.213.0.2", agent_port), "asp-agent --listen")
    cfg = {"version": 1, "transport": "http",
           "http": {"url": "http://10.213.0.2:%d" % agent_port, "token_env": "ASP_TOKEN"}}
    os.environ["ASP_TOKEN"] = "forward-test-token"
else:
    sys.exit("unknown transport " + transport)
if transport not in ("ssh", "ssh-agent"):  # (the helper wrote the SSH config)
    with open(config, "w") as f:
        json.dump(cfg, f)


def start_forward(spec, extra=()):
    err = open(os.path.join(tmp, "forward-%s.err" % spec.replace(":", "_")), "w+")
    p = subprocess.Popen([asp, "--config", config, "--json", "forward", spec] + list(extra),
                         stdout=subprocess.PIPE, stderr=err, text=True)
    line = p.stdout.readline()
    if not line:
        err.seek(0)
        raise RuntimeError("asp forward did not start: " + err.read())
    info = json.loads(line)
    host, port = info["listen"].rsplit(":", 1)
    cleanups.append(lambda: p.kill())
    return p, int(port), err


def get(port, path, timeout=BOUND):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.status, r.read()


try:
    # The harness cannot reach the sandbox's servers itself.
    check(not port_open("127.0.0.1", HTTP_PORT),
          "the sandbox's http.server is not reachable from the harness directly")
    if transport == "http":
        check(not port_open("10.213.0.2", HTTP_PORT),
              "nor through the veth (it listens on the sandbox's 127.0.0.1)")

    fwd, port, fwd_err = start_forward("0:%d" % HTTP_PORT)
    st, body = get(port, "/index.html")
    check(st == 200 and b"inside the sandbox" in body, "GET / through asp forward")

    # 32 at once, each a 1 MiB file checked whole.
    results = [None] * 32

    def one(i):
        try:
            st, body = get(port, "/small.bin")
            results[i] = st == 200 and hashlib.sha256(body).hexdigest() == small_sha
        except Exception as e:  # reported below
            results[i] = repr(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND * 2)
    check(all(r is True for r in results),
          "32 concurrent downloads intact (%s)" % [r for r in results if r is not True][:3])

    t0 = time.monotonic()
    st, body = get(port, "/big.bin")
    dt = time.monotonic() - t0
    check(st == 200 and hashlib.sha256(body).hexdigest() == big_sha,
          "%d MiB download intact (%.1f MB/s)" % (BIG >> 20, BIG / dt / 1e6))
    del body

    # Upload, then half-close: the sandbox's server answers only after our EOF.
    fwd2, port2, fwd2_err = start_forward("0:%d" % TCP_PORT)
    s = socket.create_connection(("127.0.0.1", port2), timeout=BOUND)
    t0 = time.monotonic()
    s.sendall(b"SHA\n")
    s.sendall(big)
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while not answer.endswith(b"\n"):
        d = s.recv(4096)
        if not d:
            break
        answer += d
    dt = time.monotonic() - t0
    check(s.recv(1) == b"", "the connection ends after the answer")
    s.close()
    check(answer.decode().split() == [big_sha, str(BIG)],
          "%d MiB upload intact, answered after the half-close (%.1f MB/s)"
          % (BIG >> 20, BIG / dt / 1e6))

    # A reader that stalls: the sandbox's sender is held back, memory stays bounded.
    def rss_kb(pid):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def children(pid):
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            out.append(int(d))
                except OSError:
                    pass
        return out

    def sandbox_side():
        """sshd's processes and asp-agent in the sandbox's network namespace."""
        out, sandbox_net = [], os.readlink("/proc/%d/ns/net" % holder.pid)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if os.readlink("/proc/%s/ns/net" % d) != sandbox_net:
                    continue
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[0].startswith(b"sshd:"):
                out.append(("sshd", int(d)))
            elif os.path.basename(argv[0]) == b"asp-agent" and b"--stdio" in argv:
                out.append(("asp-agent", int(d)))
        return out

    s = socket.create_connection(("127.0.0.1", port2), timeout=BOUND)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    s.sendall(b"GEN %d\n" % STALL_TOTAL)

    def sent():
        try:
            with open(progress_file) as f:
                return int(f.read() or 0)
        except (OSError, ValueError):
            return 0

    # Held back: the count stops growing well short of the total.
    last = [-1, time.monotonic()]

    def settled():
        v = sent()
        now = time.monotonic()
        if v != last[0]:
            last[0], last[1] = v, now
            return False
        return v > 0 and now - last[1] > 1.0

    wait_for(settled, "the sandbox's sender to be held back")
    held = sent()
    check(held < STALL_TOTAL // 2,
          "a stalled reader holds the sandbox's sender back (%d MiB of %d sent)"
          % (held >> 20, STALL_TOTAL >> 20))
    pids = [("asp", fwd2.pid)]
    if transport == "stdio":
        pids += [("asp-agent", c) for c in children(fwd2.pid)]
    elif transport == "http":
        pids.append(("asp-agent", agent_proc.pid))
    else:  # the sandbox's side: sshd's processes and agent mode's asp-agent
        pids += [(n, p) for n, p in sandbox_side()]
    for name, pid in pids:
        kb = rss_kb(pid)
        check(kb < RSS_LIMIT_KB, "%s's memory stays bounded while the reader stalls "
              "(%d MiB resident)" % (name, kb >> 10))
    # Then everything arrives, in order.
    h, n = hashlib.sha256(), 0
    s.settimeout(BOUND)
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    s.close()
    check(n == STALL_TOTAL and h.hexdigest() == gen_sha(STALL_TOTAL),
          "after the stall every byte arrives intact (%d MiB)" % (n >> 20))

    # A refused port: the local connection closes; the warning says why.
    dead_port = free_port_in_sandbox()
    fwd3, port3, fwd3_err = start_forward("0:%d" % dead_port)
    s = socket.create_connection(("127.0.0.1", port3), timeout=BOUND)
    s.settimeout(BOUND)
    try:
        got = s.recv(1)
    except ConnectionResetError:
        got = b""
    s.close()
    check(got == b"", "a refused port closes the local connection")

    def warned():
        fwd3_err.seek(0)
        return "connection refused" in fwd3_err.read()

    try:
        wait_for(warned, "the warning")
    except RuntimeError:
        pass
    fwd3_err.seek(0)
    text = fwd3_err.read().strip()
    check("connection refused" in text, "the warning names the cause: %r" % text)

    # Ctrl-C with connections open: every one closes, asp exits 0.
    open_socks = []
    for i in range(4):
        c = socket.create_connection(("127.0.0.1", port2), timeout=BOUND)
        c.sendall(b"SHA\npartial")
        open_socks.append(c)
    # Relayed: the sandbox's server holds all four.
    wait_for(lambda: sandbox_established(TCP_PORT) >= 4, "four relayed connections")
    fwd2.send_signal(signal.SIGINT)
    try:
        rc = fwd2.wait(BOUND)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "Ctrl-C ends asp forward with exit 0 (rc %r)" % rc)
    closed = 0
    for c in open_socks:
        c.settimeout(BOUND)
        try:
            closed += c.recv(1) == b""
        except OSError:
            closed += 1
        c.close()
    check(closed == len(open_socks), "Ctrl-C closed every relayed connection (%d of %d)"
          % (closed, len(open_socks)))
    for p in (fwd, fwd3):
        p.send_signal(signal.SIGINT)
        p.wait(BOUND)
finally:
    for c in reversed(cleanups):
        try:
            c()
        except Exception:
            pass

if failures:
    print("%d failed" % len(failures))
    sys.exit(1)
print("all passed")
