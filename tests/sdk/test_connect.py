"""The Python SDK's connections (connect as a socket-like object, sync and asyncio)
against a real asp-agent over stdio, to an echo server on loopback.

usage: test_connect.py SDK_DIR AGENT
"""
import asyncio
import hashlib
import os
import socket
import subprocess
import sys

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
import asp.aio  # noqa: E402

AGENT = [os.path.abspath(sys.argv[2]), "--stdio"]
failures = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)


ECHO = r'''
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
r = socket.socket(); r.bind(("127.0.0.1", 0))
print(s.getsockname()[1], r.getsockname()[1], flush=True)
def echo(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
'''
srv = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
port, refused = (int(x) for x in srv.stdout.readline().split())
data = os.urandom(3 << 20)
digest = hashlib.sha256(data).hexdigest()


def read_all(conn):
    h, n = hashlib.sha256(), 0
    while True:
        d = conn.recv(1 << 16)
        if not d:
            return h.hexdigest(), n
        h.update(d)
        n += len(d)


try:
    with asp.Client.stdio(AGENT) as c:
        with c.open_connection(port) as conn:
            conn.settimeout(30)
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            check(read_all(conn) == (digest, len(data)),
                  "sync: 3 MiB echoed intact, recv b'' after the half-close")
            check(conn.exit is None or conn.exit.exit_code == 0, "sync: a clean end")
        try:
            c.open_connection(refused)
            check(False, "sync: a refused port raises")
        except asp.AspError as e:
            check(e.code == "io_error" and "refused" in e.message,
                  "sync: a refused port is io_error naming it: " + e.message)
        conn = c.open_connection(port)
        conn.sendall(b"ping")
        check(conn.recv(4) == b"ping", "sync: recv returns what came")
        conn.close()
        check(c.proc_wait(conn.proc, timeout_ms=15000).signal == "KILL",
              "sync: close resets the connection (exit by KILL)")

    async def aio():
        c = await asp.aio.Client.stdio(AGENT)
        try:
            conn = await c.open_connection(port)
            await conn.sendall(data)
            await conn.shutdown()
            h, n = hashlib.sha256(), 0
            while True:
                d = await conn.recv(1 << 16, timeout=30)
                if not d:
                    break
                h.update(d)
                n += len(d)
            check((h.hexdigest(), n) == (digest, len(data)), "asyncio: 3 MiB echoed intact")
            await conn.close()
        finally:
            await c.close()

    asyncio.run(aio())
finally:
    srv.kill()

if failures:
    sys.exit(1)
print("all passed")
