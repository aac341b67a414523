#!/usr/bin/python3
"""ASP's HTTP listener against Rivet's sandbox-agent from a plain Python client.

What a harness written in Python gets: http.client, one keep-alive connection per
server with TCP_NODELAY (http.client writes headers and body apart, and Nagle would hold
the body back for a delayed ACK; ASP's Python SDK sets it too); msgpack (python3-msgpack) for ASP's POST /v1/rpc, the
peer's own REST calls for the same work (exec `true` without a shell, a 4 KiB read, stat,
a 4 KiB replacing write, 1 MiB and 4 MiB uploads in one request). The servers take turns
each iteration in a fresh random order, so load from elsewhere hits both alike. Prints
per-op medians, ASP/peer time ratios and upload rates, one block per round.

    bench/peer_http/peer_http.py [--own-sessions] [--one-write] ASP_AGENT SANDBOX_AGENT
        [iterations] [rounds] [ops]

ops, comma-separated: exec, read, stat, write, upload1m, upload4m (default all). Files go
in $TMPDIR (default /tmp). The peer refuses bodies over its limit (4 MiB): its row then
says so. The servers run in this script's session, as a harness's subprocess would;
--own-sessions starts each in a session of its own, as a daemon runs. Where the kernel
groups tasks by session for scheduling (autogroup), that moves exec's figures: ASP's
commands get sessions of their own, the peer's stay in its session (docs/benchmarks.md).
--one-write sends each of ASP's requests in one write (http.client writes a POST's headers
and body apart): what a client that joins them saves.
"""
import http.client
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import msgpack

OPS = ["exec", "read", "stat", "write", "upload1m", "upload4m"]
KIB4 = 4096
SIZES = {"upload1m": 1 << 20, "upload4m": 4 << 20}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_health(port, proc, name):
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"peer_http: {name} exited at start ({proc.returncode})")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/health")
            if c.getresponse().status == 200:
                c.close()
                return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"peer_http: {name} did not answer /v1/health within 30 s")


OWN_SESSIONS = False
ONE_WRITE = False


def start_asp(agent, log):
    proc = subprocess.Popen([agent, "--listen", "127.0.0.1:0"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=OWN_SESSIONS)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            port = int(m.group(1))
            wait_health(port, proc, "asp-agent")
            return proc, port
        time.sleep(0.05)
    sys.exit("peer_http: asp-agent did not say where it listens")


def start_peer(binary, log):
    port = free_port()
    proc = subprocess.Popen([binary, "server", "--no-token", "--no-telemetry", "--host",
                             "127.0.0.1", "--port", str(port)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=OWN_SESSIONS)
    wait_health(port, proc, "sandbox-agent")
    return proc, port


class OneWrite(http.client.HTTPConnection):
    """A POST's headers and its bytes body in one send."""

    def _send_output(self, message_body=None, encode_chunked=False):
        if not isinstance(message_body, bytes):
            return super()._send_output(message_body, encode_chunked)
        self._buffer.extend((b"", b""))
        msg = b"\r\n".join(self._buffer) + message_body
        del self._buffer[:]
        self.send(msg)


def connect(port, cls=http.client.HTTPConnection):
    c = cls("127.0.0.1", port)
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


class Asp:
    def __init__(self, port, d):
        self.c = connect(port, OneWrite if ONE_WRITE else http.client.HTTPConnection)
        self.d = d
        self.id = 0

    def rpc(self, method, params):
        self.id += 1
        body = msgpack.packb([0, self.id, method, params])
        self.c.request("POST", "/v1/rpc", body, {"Content-Type": "application/msgpack"})
        r = self.c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"asp-agent {method}: HTTP {r.status}")
        msg = msgpack.unpackb(data, raw=False)
        if msg[2] is not None:
            raise RuntimeError(f"asp-agent {method}: {msg[2]}")
        return msg[3]

    def op(self, name, payload):
        if name == "exec":
            assert self.rpc("exec", {"argv": ["true"]})["exit_code"] == 0
        elif name == "read":
            assert len(self.rpc("read", {"path": self.d + "/r"})["data"]) == KIB4
        elif name == "stat":
            self.rpc("stat", {"path": self.d + "/r"})
        else:
            self.rpc("write", {"path": self.d + "/" + name, "data": payload})


class Peer:
    def __init__(self, port, d):
        self.c = connect(port)
        self.d = d

    def call(self, method, url, body=None, ctype=None):
        self.c.request(method, url, body, {"Content-Type": ctype} if ctype else {})
        r = self.c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"sandbox-agent {method} {url}: HTTP {r.status} {data[:200]}")
        return data

    def op(self, name, payload):
        if name == "exec":
            out = json.loads(self.call("POST", "/v1/processes/run",
                                       b'{"command":"true","args":[]}', "application/json"))
            assert out["exitCode"] == 0
        elif name == "read":
            assert len(self.call("GET", "/v1/fs/file?path=" + self.d + "/r")) == KIB4
        elif name == "stat":
            self.call("GET", "/v1/fs/stat?path=" + self.d + "/r")
        else:
            self.call("PUT", "/v1/fs/file?path=" + self.d + "/" + name, payload,
                      "application/octet-stream")


def main():
    global OWN_SESSIONS, ONE_WRITE
    while len(sys.argv) > 1 and sys.argv[1] in ("--own-sessions", "--one-write"):
        if sys.argv[1] == "--own-sessions":
            OWN_SESSIONS = True
        else:
            ONE_WRITE = True
        del sys.argv[1]
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    agent, peer_bin = sys.argv[1], sys.argv[2]
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    ops = sys.argv[5].split(",") if len(sys.argv) > 5 else OPS
    tmp = tempfile.mkdtemp(prefix="asp-peer-py-", dir=os.environ.get("TMPDIR", "/tmp"))
    logs = [open(os.path.join(tmp, n + ".log"), "w") for n in ("asp-agent", "sandbox-agent")]
    servers = []
    try:
        aproc, aport = start_asp(agent, logs[0])
        servers.append(aproc)
        pproc, pport = start_peer(peer_bin, logs[1])
        servers.append(pproc)
        dirs = []
        for n in ("asp", "peer"):
            d = os.path.join(tmp, n)
            os.mkdir(d)
            with open(d + "/r", "wb") as f:
                f.write(os.urandom(KIB4))
            dirs.append(d)
        clients = [Asp(aport, dirs[0]), Peer(pport, dirs[1])]
        rng = random.Random(1)
        for rnd in range(rounds):
            print(f"round {rnd + 1}, load {os.getloadavg()[0]:.1f}"
                  + (", servers in sessions of their own" if OWN_SESSIONS else "")
                  + (", ASP's requests in one write" if ONE_WRITE else ""))
            print(f"{'op':10} {'asp-agent':>12} {'sandbox-agent':>14} {'ASP/peer':>9}")
            for name in ops:
                payload = os.urandom(SIZES.get(name, KIB4)) if name.startswith(
                    ("write", "upload")) else None
                n = iters if name not in SIZES else max(iters // 8, 20)
                times = [[], []]
                refused = [None, None]
                for i in range(n + n // 10):
                    order = [0, 1]
                    rng.shuffle(order)
                    for k in order:
                        if refused[k]:
                            continue
                        t0 = time.perf_counter()
                        try:
                            clients[k].op(name, payload)
                        except (RuntimeError, http.client.HTTPException, OSError) as e:
                            refused[k] = str(e)[:100]
                            clients[k].c.close()
                            continue
                        if i >= n // 10:  # the first tenth warms up
                            times[k].append(time.perf_counter() - t0)
                med = [statistics.median(t) * 1e6 if t else float("nan") for t in times]
                cells = []
                for k in range(2):
                    if refused[k]:
                        cells.append("refused")
                    elif name in SIZES:
                        cells.append(f"{SIZES[name] / (1 << 20) / (med[k] / 1e6):.0f} MiB/s")
                    else:
                        cells.append(f"{med[k]:.0f} us")
                ratio = med[0] / med[1] if not any(refused) else float("nan")
                print(f"{name:10} {cells[0]:>12} {cells[1]:>14} {ratio:>8.2f}x")
            print()
    finally:
        for p in servers:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
