#!/usr/bin/python3
"""What asp ui refuses (docs/design.md, "The page"), against a real asp-agent over stdio
and the real `asp ui`: a request without the token, with a wrong one, from another Origin,
or for another Host (DNS rebinding), on the page and on its WebSocket; --listen on an
address other than loopback. And an upload of 100 MB cut in the middle by a connection
that just dies: the target never appears and its temporary file is removed.

usage: test_ui_refusals.py ASP AGENT
"""
import asyncio
import base64
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import websockets

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
tmp = os.path.realpath(tempfile.mkdtemp(prefix="asp-ui-refusals-"))
work = os.path.join(tmp, "w")
os.mkdir(work)
cfg = os.path.join(tmp, "asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": work,
               "stdio": {"command": [agent, "--stdio"]}}, f)

failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok - " if ok else "not ok - ") + name + ("" if ok else ": " + str(detail)))
    failed += not ok


def until(what, fn, bound_s=60):
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)  # the poll's interval, not a synchronisation
    raise AssertionError("timed out waiting for " + what)


ui = subprocess.Popen([asp, "--config", cfg, "ui"], stdout=subprocess.PIPE, text=True)
try:
    url = ui.stdout.readline().strip()  # printed once listening
    assert url.startswith("http://127.0.0.1:"), url
    hostport = url.split("/")[2]
    port = int(hostport.split(":")[1])
    token = url.split("token=")[1]
    cookie = "asp_ui_%d=%s" % (port, token)

    def get(path, headers):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.putrequest("GET", path, skip_host=True)
        for k, v in headers.items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        c.close()
        return r.status, dict(r.getheaders()), body

    ok = {"Host": hostport, "Cookie": cookie}
    st, h, _ = get("/", ok)
    check("the cookie opens the page", st == 200 and "script-src 'self'" in
          h.get("content-security-policy", ""), (st, h))
    st, h, _ = get("/?token=" + token, {"Host": hostport})
    check("the token in the URL is traded for a cookie", st == 303 and
          h.get("location") == "/" and cookie in h.get("set-cookie", "") and
          "HttpOnly" in h.get("set-cookie", ""), (st, h))
    st, _, body = get("/", {"Host": hostport})
    check("no token: 401", st == 401 and "token" in body, (st, body))
    st, _, _ = get("/?token=" + "0" * 64, {"Host": hostport})
    check("a wrong token: 403", st == 403, st)
    st, _, _ = get("/", {"Host": hostport, "Cookie": "asp_ui_%d=%s" % (port, "1" * 64)})
    check("a wrong cookie: 403", st == 403, st)
    st, _, _ = get("/", dict(ok, Origin="http://evil.example"))
    check("another Origin: 403", st == 403, st)
    st, _, _ = get("/", {"Host": "evil.example:%d" % port, "Cookie": cookie})
    check("another Host (DNS rebinding): 421", st == 421, st)
    st, _, _ = get("/", {"Host": "localhost:%d" % port, "Cookie": cookie})
    check("a Host other than the address printed: 421", st == 421, st)
    st, _, _ = get("/file?path=" + os.path.join(work, "nope"), {"Host": hostport})
    check("a download without the token: 401", st == 401, st)

    ws_url = "ws://%s/ws" % hostport

    def ws_status(headers):
        """The status of a WebSocket upgrade with these headers (Host ours unless given)."""
        h = {"Host": hostport, "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
             "Sec-WebSocket-Version": "13", "Sec-WebSocket-Protocol": "asp-ui"}
        h.update(headers)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(("GET /ws HTTP/1.1\r\n" + "".join("%s: %s\r\n" % kv for kv in h.items())
                       + "\r\n").encode())
            line = s.makefile("rb").readline().decode()
        return int(line.split()[1])

    got = [ws_status({"Cookie": cookie, "Origin": "http://" + hostport}),
           ws_status({}),
           ws_status({"Cookie": "asp_ui_%d=%s" % (port, "2" * 64)}),
           ws_status({"Cookie": cookie, "Origin": "http://evil.example"}),
           ws_status({"Cookie": cookie, "Host": "evil.example:%d" % port})]
    check("the WebSocket: ours opens; no token, a wrong one, another Origin, another Host "
          "refused", got == [101, 401, 403, 403, 421], got)

    # 100 MB upload, cut in the middle: the connection dies without a close
    target = os.path.join(work, "big.bin")
    total = 100 << 20
    chunk = 1 << 20

    async def cut_upload():
        ws = await websockets.connect(ws_url, subprotocols=["asp-ui"], max_size=None,
                                      extra_headers={"Cookie": cookie}, open_timeout=30)
        await ws.send(json.dumps({"id": 1, "op": "upload_begin", "path": target,
                                  "size": total}))
        begin = json.loads(await ws.recv())
        up = begin["result"]["upload"]
        data = base64.b64encode(os.urandom(chunk)).decode()
        for i in range(total // chunk // 2):
            await ws.send(json.dumps({"id": 2 + i, "op": "upload_chunk", "upload": up,
                                      "offset": i * chunk, "data": data}))
            json.loads(await ws.recv())  # one at a time: the half is in the sandbox
        temp = begin["result"]["temp"]
        size_mid = os.path.getsize(temp)
        ws.transport.abort()  # no close frame: as a browser killed or a cable pulled
        return temp, size_mid
    temp, size_mid = asyncio.run(cut_upload())
    check("half of the upload reached its temporary file, beside the target",
          size_mid == total // 2 and os.path.dirname(temp) == work, (temp, size_mid))
    until("the temporary file to go", lambda: not os.path.exists(temp))
    check("a cut upload leaves nothing: no target, no temporary file",
          os.listdir(work) == [], os.listdir(work))

    p = subprocess.run([asp, "--config", cfg, "ui", "--listen", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=60)
    check("--listen on an address other than loopback is refused",
          p.returncode != 0 and "only a loopback address" in p.stderr, p.stderr)
except Exception as e:  # noqa: BLE001 -- report every failure
    failed += 1
    print("not ok - %r" % e)
finally:
    ui.terminate()
    try:
        ui.wait(30)
    except subprocess.TimeoutExpired:
        ui.kill()
    subprocess.call(["rm", "-rf", tmp])
print("%d failed" % failed)
sys.exit(1 if failed else 0)
