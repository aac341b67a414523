"""http.headers through a gateway: Debian's nginx in front of asp-agent --listen.

usage: test_gateway_nginx.py ASP AGENT SDK_PYTHON_DIR [--ts TS_SDK_DIR]

nginx runs from a configuration of this test's own (foreground, one process, its files in
a temporary folder, 127.0.0.1 and a free port) and answers 403 to every request without
the right X-Gateway-Token; it proxies the rest, WebSocket upgrades included, to
asp-agent --listen (bearer token too) on another free port. Checked: the conformance suite
through it with http.headers (POST, and the WebSocket for spawned processes), and its
spawn cases with every call over the WebSocket; without the header, and with a wrong one, a clear error
(unauthorized, naming the 403 and http.headers) and nothing run; the Python SDK through
the same gateway, by .asp.json and by Client.http(headers=...), and the names it refuses.
With --ts, only the same SDK checks, through the built TypeScript SDK.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BOUND = 30.0

asp, agent, sdk_dir = (os.path.abspath(a) for a in sys.argv[1:4])
ts_sdk = os.path.abspath(sys.argv[sys.argv.index("--ts") + 1]) if "--ts" in sys.argv else None
nginx = shutil.which("nginx") or "/usr/sbin/nginx"
if not os.path.exists(nginx):
    sys.exit("nginx is not installed: run scripts/install-deps.sh")

failures = []
procs = []


def check(cond, msg, detail=""):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
        if detail:
            print("  " + detail.replace("\n", "\n  "), flush=True)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, what, proc):
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit("%s exited (%s) before listening" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit("%s did not listen on %d within %d s" % (what, port, BOUND))


tmp = tempfile.mkdtemp(prefix="asp-nginx-")
try:
    agent_port, gw_port = free_port(), free_port()
    env = dict(os.environ, ASP_TOKEN="agent-token", GW_TOKEN="s3cret", GW_WRONG="nope")
    a = subprocess.Popen([agent, "--listen", "127.0.0.1:%d" % agent_port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    procs.append(a)
    wait_listening(agent_port, "asp-agent --listen", a)

    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"):
        os.mkdir(os.path.join(tmp, d))
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""
daemon off;
master_process off;
worker_processes 1;
pid %(tmp)s/nginx.pid;
error_log %(tmp)s/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %(tmp)s/body;
  proxy_temp_path %(tmp)s/proxy;
  fastcgi_temp_path %(tmp)s/fastcgi;
  uwsgi_temp_path %(tmp)s/uwsgi;
  scgi_temp_path %(tmp)s/scgi;
  client_max_body_size 0;
  proxy_request_buffering off;
  proxy_buffering off;
  map $http_upgrade $connection_upgrade { default upgrade; '' close; }
  server {
    listen 127.0.0.1:%(gw)d;
    location / {
      if ($http_x_gateway_token != "s3cret") {
        return 403 "this gateway wants X-Gateway-Token\\n";
      }
      proxy_pass http://127.0.0.1:%(agent)d;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
    }
  }
}
""" % {"tmp": tmp, "gw": gw_port, "agent": agent_port})
    n = subprocess.Popen([nginx, "-p", tmp, "-c", conf, "-e", os.path.join(tmp, "logs",
                                                                          "stderr.log")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(n)
    wait_listening(gw_port, "nginx", n)

    url = "http://127.0.0.1:%d" % gw_port

    def config(name, http_extra):
        doc = {"version": 1, "transport": "http",
               "http": dict({"url": url, "token_env": "ASP_TOKEN"}, **http_extra)}
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    good = config("good", {"headers": {"X-Gateway-Token": {"env": "GW_TOKEN"},
                                       "X-Request-Source": "asp-test"}})
    good_ws = config("good-ws", {"headers": {"X-Gateway-Token": "s3cret"}, "websocket": True})
    bare = config("bare", {})
    wrong = config("wrong", {"headers": {"X-Gateway-Token": {"env": "GW_WRONG"}}})
    bare_ws = config("bare-ws", {"websocket": True})

    def asp_run(cfg, args, timeout=BOUND):
        return subprocess.run([asp, "--config", cfg] + args, capture_output=True, text=True,
                              env=env, timeout=timeout)

    if ts_sdk:
        ts_code = r"""
import { pathToFileURL } from "node:url";
const [sdk, good, bare, url] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const dec = new TextDecoder();
const must = (c, m) => { if (!c) throw new Error(m); };
let c = await asp.Client.fromConfig(good);
must(dec.decode((await c.exec({ argv: ["echo", "sdk"] })).stdout) === "sdk\n", "exec");
await c.close();
c = asp.Client.http(url, "agent-token", { headers: { "X-Gateway-Token": "s3cret" } });
must((await c.exec({ argv: ["true"] })).exit_code === 0, "headers option");
await c.close();
let code = "ok", msg = "";
try { const b = await asp.Client.fromConfig(bare); await b.exec({ argv: ["true"] }); }
catch (e) { code = e.code; msg = e.message; }
must(code === "unauthorized" && msg.includes("http.headers"), `without: ${code} ${msg}`);
for (const bad of [{ Authorization: "x" }, { "sec-websocket-key": "x" }, { "X-A": "a\r\nb" }]) {
  let got = "ok";
  try { asp.Client.http(url, undefined, { headers: bad }); } catch (e) { got = e.code; }
  must(got === "invalid_argument", `accepted ${JSON.stringify(bad)}`);
}
console.log("sdk ok");
"""
        js = os.path.join(tmp, "ts_gateway.mjs")
        with open(js, "w") as f:
            f.write(ts_code)
        r = subprocess.run(["node", js, ts_sdk, good, bare, url], capture_output=True,
                           text=True, env=env, timeout=120)
        check(r.returncode == 0 and "sdk ok" in r.stdout,
              "the TypeScript SDK through nginx (http.headers, headers option, refusals)",
              r.stdout + r.stderr)
        raise SystemExit(0 if not failures else 1)

    r = asp_run(good, ["exec", "--", "echo", "through the gateway"])
    check(r.returncode == 0 and r.stdout == "through the gateway\n",
          "asp exec through nginx with http.headers", r.stdout + r.stderr)

    for cfg, what in ((bare, "without http.headers"), (wrong, "with a wrong X-Gateway-Token"),
                      (bare_ws, "without http.headers, WebSocket only")):
        r = asp_run(cfg, ["exec", "--", "touch", os.path.join(tmp, "ran")])
        err = r.stderr
        check(r.returncode != 0 and "unauthorized" in err and "403 Forbidden" in err and
              "http.headers" in err and not os.path.exists(os.path.join(tmp, "ran")),
              "a clear error %s: %s" % (what, err.strip()[:200]), err)

    # the whole table as the transport runs by default; its spawn cases over the
    # WebSocket alone (the other ops take the same way there)
    for cfg, what, only in ((good, "POST and a WebSocket for streams", []),
                            (good_ws, "every call over the WebSocket", ["--only", "spawn"])):
        r = asp_run(cfg, ["conformance"] + only, timeout=600)
        tail = (r.stdout.strip().splitlines() or [""])[-1]
        check(r.returncode == 0 and " 0 failed" in tail,
              "conformance through nginx (%s): %s" % (what, tail),
              r.stdout[-3000:] + r.stderr[-2000:])

    # The Python SDK through the same gateway.
    code = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import asp
good, bare, url = sys.argv[2:5]
c = asp.Client.from_config(good)
r = c.exec(argv=["echo", "sdk"])
assert r.stdout == b"sdk\n", r
p = c.spawn(argv=["sh", "-c", "echo streamed"])
out, _, ex = p.collect()
assert out == b"streamed\n" and ex.exit_code == 0, (out, ex)
c.close()
c = asp.Client.http(url, "agent-token", headers={"X-Gateway-Token": "s3cret"})
assert c.exec(argv=["true"]).exit_code == 0
c.close()
try:
    asp.Client.from_config(bare).exec(argv=["true"])
    raise SystemExit("no error without the header")
except asp.AspError as e:
    assert e.code == "unauthorized" and "http.headers" in e.message, e
for bad in ({"Authorization": "x"}, {"sec-websocket-key": "x"}, {"X-A": "a\r\nb"}):
    try:
        asp.Client.http(url, headers=bad)
        raise SystemExit("accepted %r" % bad)
    except asp.AspError as e:
        assert e.code == "invalid_argument", e
print("sdk ok")
"""
    r = subprocess.run(["/usr/bin/python3", "-c", code, sdk_dir, good, bare, url],
                       capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 0 and "sdk ok" in r.stdout,
          "the Python SDK through nginx (http.headers, headers=..., refusals)",
          r.stdout + r.stderr)
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(BOUND)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d failed: %s" % (len(failures), "; ".join(failures)))
    sys.exit(1)
print("all passed")
