"""A refused WebSocket upgrade, as a real client library sees it (python3-websockets).

Runs `asp-agent --listen` with a token on a free loopback port and checks that the
client reads the refusal: 401 with WWW-Authenticate for no or a wrong token, 400
naming the subprotocol when asp.v1 is missing (the old listener answered HTTP/1.0,
which websockets rejects as "unsupported HTTP version" before it sees any status).
Then the right token and subprotocol: a hello answered over the WebSocket.

usage: test_ws_refusal.py ASP_AGENT
"""
import asyncio
import os
import socket
import subprocess
import sys
import tempfile

try:
    import msgpack
    import websockets
    from websockets.client import ClientConnection
    from websockets.exceptions import InvalidStatusCode
    from websockets.http11 import Response
    from websockets.uri import parse_uri
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "common"))
    from listen_agent import start_agent
except ImportError as e:
    print(f"skipped: {e} (python3-websockets and python3-msgpack are needed)")
    sys.exit(77)

TOKEN = "ws-refusal-token"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


async def refused(ws_url, headers, subprotocols):
    """The InvalidStatusCode the library raises, or None if it connected."""
    try:
        async with websockets.connect(ws_url, extra_headers=headers,
                                      subprotocols=subprotocols, open_timeout=20):
            return None
    except InvalidStatusCode as e:
        return e


def raw_response(host, port, headers, subprotocols):
    """The whole refusal, body included, through the library's sans-I/O client."""
    conn = ClientConnection(parse_uri(f"ws://{host}:{port}/v1/ws"),
                            subprotocols=subprotocols)
    req = conn.connect()
    for k, v in headers.items():
        req.headers[k] = v
    conn.send_request(req)
    with socket.create_connection((host, port), timeout=20) as s:
        s.sendall(b"".join(conn.data_to_send()))
        while True:
            for ev in conn.events_received():
                if isinstance(ev, Response):
                    return ev
            data = s.recv(65536)
            if not data:
                conn.receive_eof()
            else:
                conn.receive_data(data)
            if not data and not conn.events:
                return None


async def main(agent):
    with tempfile.NamedTemporaryFile("w+", prefix="asp-ws-refusal-", suffix=".log") as log:
        p, (host, port) = start_agent(agent, log, env=dict(os.environ, ASP_TOKEN=TOKEN))
        try:
            ws_url = f"ws://{host}:{port}/v1/ws"
            good = {"Authorization": "Bearer " + TOKEN}

            for name, hdrs in (("no token", {}),
                               ("a wrong token", {"Authorization": "Bearer nope"})):
                e = await refused(ws_url, hdrs, ["asp.v1"])
                check(e is not None and e.status_code == 401, f"{name}: HTTP 401")
                check(e is not None and
                      e.headers.get("WWW-Authenticate", "").startswith("Bearer"),
                      f"{name}: WWW-Authenticate: Bearer")
                r = raw_response(host, port, hdrs, ["asp.v1"])
                check(r is not None and r.status_code == 401 and
                      b"Authorization: Bearer" in (r.body or b""),
                      f"{name}: the body says to send a token")

            e = await refused(ws_url, good, None)
            check(e is not None and e.status_code == 400, "no subprotocol: HTTP 400")
            r = raw_response(host, port, good, None)
            check(r is not None and r.status_code == 400 and b"asp.v1" in (r.body or b""),
                  "no subprotocol: the body names asp.v1")

            async with websockets.connect(ws_url, extra_headers=good,
                                          subprotocols=["asp.v1"], open_timeout=20) as ws:
                check(ws.subprotocol == "asp.v1", "accepted with subprotocol asp.v1")
                await ws.send(msgpack.packb([0, 7, "hello", {}]))
                ans = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 20))
                check(ans[0] == 1 and ans[1] == 7 and ans[2] is None and
                      "ops" in ans[3], "hello answered over the WebSocket")
        finally:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(os.path.abspath(sys.argv[1]))))
