#!/usr/bin/env python3
"""Per-call time of ASP's Python SDK over HTTP (POST /v1/rpc): stat and a 4 KiB read.

usage: bench/peer_http/sdk_calls.py SDK_DIR ASP_AGENT [rounds]

SDK_DIR holds the generated package (build/sdkgen/python); ASP_AGENT is started with
--listen on a free loopback port. Prints the median per op per round, in µs. To compare
two SDK builds, run this with each in turn, interleaved.
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

if len(sys.argv) < 3:
    sys.exit(__doc__)
sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402

agent = sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
server = subprocess.Popen([agent, "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 30
while True:
    try:
        socket.create_connection(("127.0.0.1", port)).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("asp-agent did not listen within 30 s")
        time.sleep(0.05)
fd, path = tempfile.mkstemp(prefix="asp-sdk-calls-")
os.write(fd, b"x" * 4096)
os.close(fd)
client = asp.Client.http(f"http://127.0.0.1:{port}")
try:
    for r in range(rounds):
        line = []
        for op, call in (("stat", client.stat), ("read", client.read)):
            times = []
            for _ in range(300):
                t = time.perf_counter()
                call(path)
                times.append(time.perf_counter() - t)
            line.append(f"{op} {statistics.median(times) * 1e6:.0f} µs")
        print(f"round {r + 1}: " + ", ".join(line))
finally:
    client.close()
    server.terminate()
    server.wait()
    os.unlink(path)
