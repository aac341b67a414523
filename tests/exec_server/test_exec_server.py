#!/usr/bin/python3
"""asp exec-server against a real asp-agent (stdio), driven as Codex drives it: the wire
learnt from Codex 0.171's own exec-server (docs/harnesses.md, "Codex"). Over stdin/stdout
and over --listen ws://127.0.0.1:0; the harness's directory and the sandbox's differ, so
every path goes through the workspace mapping.

usage: test_exec_server.py ASP AGENT
"""
import base64
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
root = os.path.realpath(tempfile.mkdtemp(prefix="asp-exec-server-"))
proj, box = os.path.join(root, "proj"), os.path.join(root, "box")
os.makedirs(proj)
os.makedirs(box)
cfg = os.path.join(root, "asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": box,
               "workspace": {"local": proj, "sandbox": box},
               "stdio": {"command": [agent, "--stdio"]}}, f)
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok - " if cond else "not ok - ") + name)
    if not cond:
        failed += 1
        print("  " + str(detail)[:2000])


def uri(p):
    return "file://" + p


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


class Stdio:
    def __init__(self):
        self.p = subprocess.Popen([asp, "--config", cfg, "exec-server"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self.buf = b""

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def recv(self, deadline):
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise AssertionError("no message within the bound")
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError("asp exec-server closed its output")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        return self.p.wait(timeout=30)


class WebSocket:
    """A minimal RFC 6455 client (text frames, masked), enough for the test."""

    def __init__(self, url):
        host, port = url[len("ws://"):].rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET / HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n" % (host, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise AssertionError("no WebSocket upgrade: %r" % head)
        self.buf = b""

    def send(self, msg):
        data = json.dumps(msg).encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else
                                bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _need(self, n, deadline):
        while len(self.buf) < n:
            self.s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.s.recv(65536)
            if not chunk:
                raise AssertionError("the WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, deadline):
        b0, b1 = self._need(2, deadline)
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(self._need(2, deadline), "big")
        elif n == 127:
            n = int.from_bytes(self._need(8, deadline), "big")
        return json.loads(self._need(n, deadline))

    def close(self):
        self.s.close()
        return 0


class Session:
    def __init__(self, conn):
        self.c = conn
        self.n = 0
        self.notes = []

    def call(self, method, params):
        self.n += 1
        self.c.send({"id": self.n, "method": method, "params": params})
        deadline = time.monotonic() + 30
        while True:
            m = self.c.recv(deadline)
            if m.get("id") == self.n:
                return m
            self.notes.append(m)

    def until_closed(self, pid):
        deadline = time.monotonic() + 30
        while not any(n["method"] == "process/closed" and n["params"]["processId"] == pid
                      for n in self.notes):
            self.notes.append(self.c.recv(deadline))
        return [n["params"] for n in self.notes if n["params"].get("processId") == pid]


def exercise(s, tag):
    r = s.call("initialize", {"clientName": "codex-environment", "resumeSessionId": None})
    info = r.get("result", {}).get("environmentInfo", {})
    check(tag + "initialize: sessionId and environmentInfo, cwd shown as the harness's",
          r.get("result", {}).get("sessionId") and info.get("cwd") == uri(proj), r)
    s.c.send({"method": "initialized", "params": {}})
    r = s.call("environment/info", {})
    check(tag + "environment/info", r.get("result", {}).get("shell", {}).get("path"), r)

    # fs: the harness's paths land in the sandbox directory
    r = s.call("fs/writeFile", {"path": uri(proj + "/a.txt"), "dataBase64": b64("hi\n"),
                                "sandbox": None})
    check(tag + "fs/writeFile acts in the sandbox", r.get("result") == {} and
          open(box + "/a.txt").read() == "hi\n", r)
    r = s.call("fs/readFile", {"path": proj + "/a.txt"})
    check(tag + "fs/readFile takes a plain absolute path too",
          r.get("result", {}).get("dataBase64") == b64("hi\n"), r)
    r = s.call("fs/getMetadata", {"path": uri(proj + "/a.txt")})
    res = r.get("result", {})
    check(tag + "fs/getMetadata", res.get("isFile") is True and res.get("size") == 3 and
          res.get("isDirectory") is False and "modifiedAtMs" in res, r)
    r = s.call("fs/getMetadata", {"path": uri(proj + "/missing")})
    check(tag + "not found is -32004", r.get("error", {}).get("code") == -32004, r)
    r = s.call("fs/createDirectory", {"path": uri(proj + "/d/e"), "recursive": True})
    check(tag + "fs/createDirectory", os.path.isdir(box + "/d/e"), r)
    r = s.call("fs/readDirectory", {"path": uri(proj)})
    names = {e["fileName"]: e for e in r.get("result", {}).get("entries", [])}
    check(tag + "fs/readDirectory", names.get("a.txt", {}).get("isFile") is True and
          names.get("d", {}).get("isDirectory") is True, r)
    r = s.call("fs/copy", {"sourcePath": uri(proj + "/a.txt"),
                           "destinationPath": uri(proj + "/d/b.txt"), "recursive": False})
    check(tag + "fs/copy", open(box + "/d/b.txt").read() == "hi\n", r)
    r = s.call("fs/canonicalize", {"path": uri(proj + "/d/../a.txt")})
    check(tag + "fs/canonicalize maps back", r.get("result", {}).get("path") == uri(proj + "/a.txt"), r)
    r = s.call("fs/readFile", {"path": uri(proj + "/d")})
    check(tag + "fs/readFile of a directory is -32600", r.get("error", {}).get("code") == -32600, r)
    r = s.call("fs/remove", {"path": uri(proj + "/d"), "recursive": True, "force": True})
    check(tag + "fs/remove", not os.path.exists(box + "/d"), r)
    r = s.call("fs/readFile", {"path": "relative/x"})
    check(tag + "a relative path is -32602", r.get("error", {}).get("code") == -32602, r)
    r = s.call("fs/walk", {"path": uri(proj)})
    check(tag + "an unknown method is -32601 naming it", r.get("error", {}).get("code") == -32601
          and "fs/walk" in r["error"]["message"], r)

    # processes: cwd mapped, one seq per process across output, exited, closed
    base = {"env": {"FOO": "bar"}, "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": True,
            "exclude": [], "set": {}, "includeOnly": []}, "arg0": None, "sandbox": None}
    r = s.call("process/start", dict(base, processId="p1", argv=["/bin/sh", "-c",
               "pwd; echo $FOO >&2; exit 3"], cwd=uri(proj), tty=False, pipeStdin=False))
    check(tag + "process/start answers its processId", r.get("result", {}).get("processId") == "p1", r)
    ev = s.until_closed("p1")
    out = b"".join(base64.b64decode(e["chunk"]) for e in ev if "chunk" in e and e["stream"] == "stdout")
    err = b"".join(base64.b64decode(e["chunk"]) for e in ev if "chunk" in e and e["stream"] == "stderr")
    seqs = [e["seq"] for e in ev]
    exited = [e for e in ev if "exitCode" in e]
    check(tag + "the command ran in the sandbox directory", out == (box + "\n").encode() and
          err == b"bar\n", ev)
    check(tag + "seq counts 1.. across output, exited and closed",
          seqs == list(range(1, len(seqs) + 1)) and exited and exited[0]["exitCode"] == 3, ev)
    r = s.call("process/read", {"processId": "p1", "afterSeq": 0})
    res = r.get("result", {})
    check(tag + "process/read replays and reports the exit", res.get("exited") is True and
          res.get("exitCode") == 3 and res.get("closed") is True and len(res.get("chunks", [])) >= 1, r)
    r = s.call("process/start", dict(base, processId="p1", argv=["true"], cwd=uri(proj),
                                      tty=False, pipeStdin=False))
    check(tag + "a processId in use is -32600", r.get("error", {}).get("code") == -32600, r)
    r = s.call("process/start", dict(base, processId="p2", argv=["cat"], cwd=uri(proj), tty=False,
                                      pipeStdin=True))
    r = s.call("process/write", {"processId": "p2", "chunk": b64("x\n"), "writeId": "1"})
    check(tag + "process/write accepted", r.get("result", {}).get("status") == "accepted", r)
    deadline = time.monotonic() + 30
    while not any(n["params"].get("processId") == "p2" and "chunk" in n["params"] for n in s.notes):
        s.notes.append(s.c.recv(deadline))
    r = s.call("process/terminate", {"processId": "p2"})
    check(tag + "process/terminate of a running process", r.get("result") == {"running": True}, r)
    ev = s.until_closed("p2")
    check(tag + "terminate kills it (137)", [e["exitCode"] for e in ev if "exitCode" in e] == [137], ev)
    r = s.call("process/write", {"processId": "nope", "chunk": b64("x"), "writeId": "2"})
    check(tag + "write to an unknown process", r.get("result", {}).get("status") == "unknownProcess", r)
    r = s.call("process/start", dict(base, processId="p3", argv=["sleep", "30"], cwd=uri(proj),
                                      tty=False, pipeStdin=False))
    r = s.call("process/signal", {"processId": "p3", "signal": "interrupt"})
    ev = s.until_closed("p3")
    check(tag + "process/signal interrupt (130)", [e["exitCode"] for e in ev if "exitCode" in e] == [130], ev)
    r = s.call("process/start", dict(base, processId="p4", argv=["/bin/sh", "-c",
               "read x; echo got $x; tty >/dev/null && echo on-a-tty"], cwd=uri(proj), tty=True,
               pipeStdin=False))
    check(tag + "tty start", "result" in r, r)
    r = s.call("process/write", {"processId": "p4", "chunk": b64("abc\n"), "writeId": "3"})
    ev = s.until_closed("p4")
    out = b"".join(base64.b64decode(e["chunk"]) for e in ev if "chunk" in e)
    check(tag + "a tty process: stream pty, stdin typed", b"got abc" in out and b"on-a-tty" in out
          and all(e["stream"] == "pty" for e in ev if "chunk" in e), ev)
    r = s.call("process/start", dict(base, processId="p5", argv=["/no/such/program"],
                                      cwd=uri(proj), tty=False, pipeStdin=False))
    check(tag + "a missing program is an error", "error" in r, r)
    r = s.call("process/start", dict(base, processId="p6", argv=[], cwd=uri(proj), tty=False,
                                      pipeStdin=False))
    check(tag + "empty argv is -32602", r.get("error", {}).get("code") == -32602, r)
    r = s.call("process/start", dict(base, processId="p7", argv=["/bin/sh", "-c", "echo ${FOO-unset} ${HOME-nohome}"],
               cwd=uri(proj), tty=False, pipeStdin=False,
               envPolicy={"inherit": "none", "set": {}, "exclude": [], "includeOnly": []}, env={}))
    ev = s.until_closed("p7")
    out = b"".join(base64.b64decode(e["chunk"]) for e in ev if "chunk" in e)
    check(tag + "envPolicy inherit none", out == b"unset nohome\n", ev)


s = Session(Stdio())
exercise(s, "stdio: ")
# bad input: an answer each, naming the problem; the session goes on
for bad in (b"garbage", b"[1, 2]", b'{"id": 90}', b'{"id": 91, "method": "fs/readFile", "params": 5}',
            b'{"id": 92, "method": "process/start", "params": {"processId": "z", "argv": [1]}}',
            b'{"id": 93, "method": "fs/writeFile", "params": {"path": "/x", "dataBase64": "@@"}}'):
    s.c.p.stdin.write(bad + b"\n")
    s.c.p.stdin.flush()
    m = s.c.recv(time.monotonic() + 30)
    check("stdio: bad input %r is answered with an error" % bad[:40],
          "error" in m and m["error"].get("message"), m)
r = s.call("environment/info", {})
check("stdio: the session goes on after bad input", "result" in r, r)
r = s.call("process/start", {"processId": "left", "argv": ["/bin/sh", "-c", "echo $$ > %s/pid; exec sleep 60" % box],
                              "cwd": uri(proj), "env": {}, "tty": False, "pipeStdin": False, "arg0": None})
deadline = time.monotonic() + 30
while not os.path.exists(box + "/pid") or not open(box + "/pid").read().strip():
    if time.monotonic() > deadline:
        raise AssertionError("the process never started")
    time.sleep(0.05)
pid = int(open(box + "/pid").read())
check("stdio: exits 0 when stdin closes", s.c.close() == 0)


def alive(pid):
    try:
        os.kill(pid, 0)
        return open("/proc/%d/stat" % pid).read().split()[2] != "Z"
    except (OSError, IOError):
        return False


deadline = time.monotonic() + 30
while alive(pid) and time.monotonic() < deadline:
    time.sleep(0.05)
check("stdio: what still ran is killed when the connection ends", not alive(pid))

srv = subprocess.Popen([asp, "--config", cfg, "exec-server", "--listen", "ws://127.0.0.1:0"],
                       stdout=subprocess.PIPE, text=True)
try:
    url = srv.stdout.readline().strip()
    check("ws: prints the URL it listens on", url.startswith("ws://127.0.0.1:"), url)
    s = Session(WebSocket(url))
    exercise(s, "ws: ")
    s.c.close()
    bad = subprocess.run([asp, "--config", cfg, "exec-server", "--listen", "ws://0.0.0.0:0"],
                         capture_output=True, text=True, timeout=30)
    check("ws: a non-loopback address is refused", bad.returncode != 0 and "loopback" in bad.stderr,
          bad.stderr)
finally:
    srv.terminate()
    check("ws: SIGTERM stops it", srv.wait(timeout=30) == 0)
check("nothing was written in the harness's directory", os.listdir(proj) == [], os.listdir(proj))
subprocess.run(["rm", "-rf", root])
sys.exit(1 if failed else 0)
