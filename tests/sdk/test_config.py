#!/usr/bin/python3
"""The SDKs read .asp.json as the C core does: the same files found, the same view, and
for a bad file the same error code and the same message, "FILE:LINE:COL: KEY.PATH: ...",
word for word. Each case runs through config_probe (the C core), config_probe.py (the
Python SDK) and, with --ts, config_probe.mjs (the TypeScript SDK), and the outputs must
be equal.

usage: test_config.py C_PROBE PYTHON_SDK_DIR [--ts TS_SDK_DIR]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
c_probe, py_sdk = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ts_sdk = os.path.abspath(sys.argv[sys.argv.index("--ts") + 1]) if "--ts" in sys.argv else None
# --asp ASP: also the files `asp init` writes for SSH gateways (--proxy-command, --jump,
# --from-ssh-config), read by the three the same way
asp = os.path.abspath(sys.argv[sys.argv.index("--asp") + 1]) if "--asp" in sys.argv else None
INIT_CASES = (
    ("init-proxy-command", ["--ssh", "ops@box:2222", "--proxy-command",
                            "ssh -W '%h:%p' -i \"my key\" bastion"]),
    ("init-jump", ["--ssh", "box", "--identity", "~/.ssh/id", "--jump",
                   "bastion,ops@[fd00::7]:2200", "--jump", "third"]),
    ("init-from-ssh-config", ["--from-ssh-config", "sandbox", "--cwd", "/work"]),
    ("init-from-ssh-config-and-host", ["--ssh", "me@10.0.0.5", "--from-ssh-config",
                                       "sandbox", "--proxy-command", "websocat -b - %h"]),
)

GOOD_STDIO = b'{"version": 1, "transport": "stdio", "stdio": {"command": ["asp-agent", "--stdio"]}}'
KEY = "SHA256:" + "A" * 43

# (name, file content) -- each written to its own folder as .asp.json
CASES = [
    ("stdio-minimal", GOOD_STDIO),
    ("stdio-full", b'{\n  "version": 1,\n  "transport": "stdio",\n  "cwd": "/workspace",\n'
     b'  "env": {"LANG": "C.UTF-8", "Z": "1", "10": "ten", "A": ""},\n  "timeout_ms": 120000,\n'
     b'  "stdio": {"command": ["./bin/asp-agent", "--stdio", "x y"]}\n}\n'),
    ("stdio-home-program", b'{"version":1,"transport":"stdio","stdio":{"command":["~/asp-agent"]}}'),
    ("stdio-home-user", b'{"version":1,"transport":"stdio","stdio":{"command":["~bob/asp-agent"]}}'),
    ("http-full", b'{"version":1,"transport":"http","http":{"url":"https://box:8722/base",'
     b'"token_env":"ASP_TOKEN","token_file":"secrets/token","ca_file":"/etc/ca.pem",'
     b'"websocket":true}}'),
    # http.websocket is three-way: absent (POST and a WebSocket for streams), false, true
    ("http-websocket-absent", b'{"version":1,"transport":"http","http":{"url":"http://a"}}'),
    ("http-websocket-false", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"websocket":false}}'),
    ("ssh-full", ('{"version":1,"transport":"ssh","ssh":{"host":"box","port":2222,'
                  '"user":"me","identity_file":"~/.ssh/id_ed25519","password_env":"PW",'
                  '"host_key_sha256":"%s","strict_host_key_checking":"accept-new",'
                  '"connect_timeout_ms":5,"agent":"/usr/local/bin/asp-agent"}}' % KEY).encode()),
    ("ssh-agent-null", b'{"version":1,"transport":"ssh","ssh":{"host":"h","agent":null,'
     b'"strict_host_key_checking":false,"known_hosts":"kh"}}'),
    ("ssh-key-env-and-line", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"identity_env":"KEY","host_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@box"}}'),
    ("ssh-identity-user", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"identity_file":"~root/id"}}'),
    # gateways (docs/design.md, ".asp.json")
    ("http-headers", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"headers":{"X-Gateway-Token":{"env":"GW"},"Proxy-Authorization":"Bearer x"}}}'),
    ("http-header-refused", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"headers":{"Sec-WebSocket-Key":"x"}}}'),
    ("http-header-crlf", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"headers":{"X-A":"a\\r\\nB: c"}}}'),
    ("http-header-env-missing", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"headers":{"X-A":{}}}}'),
    ("ssh-gateways", b'{"version":1,"transport":"ssh","ssh":{"config_host":"box",'
     b'"proxy_command":["ssh","-W","%h:%p","gw"],"jump":["ops@b:2200",{"host":"c"}]}}'),
    ("ssh-proxy-escape", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"proxy_command":["nc","%h","%P"]}}'),
    ("ssh-jump-object-key", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"jump":[{"host":"b","jump":[]}]}}'),
    ("ssh-no-host", b'{"version":1,"transport":"ssh","ssh":{"user":"u"}}'),
    # JSON syntax, as jansson words it
    ("syntax-empty", b""),
    ("syntax-whitespace", b"  \n \n"),
    ("syntax-unclosed-array", b"[1,"),
    ("syntax-unclosed-object", b"{"),
    ("syntax-missing-colon", b'{"a" 1}'),
    ("syntax-trailing-comma", b'{"version": 1,}'),
    ("syntax-after-end", b"{} x"),
    ("syntax-duplicate", b'{"version": 1, "version": 1}'),
    ("syntax-nul-escape", b'{"cwd": "a\\u0000b"}'),
    ("syntax-nul-key", b'{"a\\u0000": 1}'),
    ("syntax-bad-utf8", b'{"cwd": "\xff"}'),
    ("syntax-bad-utf8-outside", b'{"cwd": 1}\n\xc3'),
    ("syntax-lone-surrogate", b'{"cwd": "\\ud800"}'),
    ("syntax-bad-pair", b'{"cwd": "\\ud800\\u0041"}'),
    ("syntax-low-surrogate", b'{"cwd": "\\udc00"}'),
    ("syntax-bad-escape", b'{"cwd": "\\x"}'),
    ("syntax-newline-in-string", b'{"cwd": "a\nb"}'),
    ("syntax-control-char", b'{"cwd": "a\tb"}'),
    ("syntax-real-overflow", b'{"timeout_ms": 1e400}'),
    ("syntax-int-overflow", b'{"timeout_ms": 99999999999999999999}'),
    ("syntax-neg-overflow", b'{"timeout_ms": -99999999999999999999}'),
    ("syntax-bad-word", b'{"version": tru}'),
    ("syntax-long-token", b'{"version": abcdefghijklmnopqrstuvwxyz}'),
    ("syntax-top-scalar", b"1"),
    ("syntax-leading-zero", b'{"version": 01}'),
    ("syntax-dot", b'{"version": 1.}'),
    ("syntax-deep", b"[" * 2100 + b"]" * 2100),
    ("syntax-raw-nul", b'{"version": 1}\x00'),
    ("syntax-unicode-cols", '{"cwd": "ééé", "x": }'.encode()),
    # the schema, as config.c words it
    ("version-2", b'{"version": 2, "transport": "stdio"}'),
    ("version-string", b'{"version": "1", "transport": "stdio"}'),
    ("version-real", b'{"version": 1.0, "transport": "stdio"}'),
    ("version-missing", b'{"transport": "stdio", "stdio": {"command": ["a"]}}'),
    ("transport-missing", b'{"version": 1}'),
    ("transport-bad", b'{"version": 1, "transport": "ftp"}'),
    ("unknown-key", b'{"version": 1,\n "transport": "stdio", "stdo": {}}'),
    ("unknown-nested", b'{"version":1,"transport":"ssh","ssh":{"host":"h","hots":"x"}}'),
    ("stdio-missing", b'{"version": 1, "transport": "stdio"}'),
    ("stdio-command-missing", b'{"version": 1, "transport": "stdio", "stdio": {}}'),
    ("stdio-command-empty", b'{"version":1,"transport":"stdio","stdio":{"command":[]}}'),
    ("stdio-command-int", b'{"version":1,"transport":"stdio","stdio":{"command":[1]}}'),
    ("stdio-command-empty-program", b'{"version":1,"transport":"stdio","stdio":{"command":[""]}}'),
    ("stdio-command-arg-int", b'{"version":1,"transport":"stdio","stdio":{"command":["a", 2]}}'),
    ("stdio-command-object", b'{"version":1,"transport":"stdio","stdio":{"command":{}}}'),
    ("http-url-bad", b'{"version":1,"transport":"http","http":{"url":"ftp://x"}}'),
    ("http-url-space", b'{"version":1,"transport":"http","http":{"url":"http://a b"}}'),
    ("http-url-missing", b'{"version":1,"transport":"http","http":{}}'),
    ("http-websocket-string", b'{"version":1,"transport":"http","http":{"url":"http://a",'
     b'"websocket":"yes"}}'),
    ("ssh-host-missing", b'{"version":1,"transport":"ssh","ssh":{}}'),
    ("ssh-port-0", b'{"version":1,"transport":"ssh","ssh":{"host":"h","port":0}}'),
    ("ssh-port-big", b'{"version":1,"transport":"ssh","ssh":{"host":"h","port":70000}}'),
    ("ssh-port-real", b'{"version":1,"transport":"ssh","ssh":{"host":"h","port":22.0}}'),
    ("ssh-port-exp", b'{"version":1,"transport":"ssh","ssh":{"host":"h","port":2.5e-7}}'),
    ("ssh-port-string", b'{"version":1,"transport":"ssh","ssh":{"host":"h","port":"22"}}'),
    ("ssh-strict-yes", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"strict_host_key_checking":"yes"}}'),
    ("ssh-hostkey-bad", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"host_key_sha256":"SHA256:abc"}}'),
    ("ssh-hostkey-newline", ('{"version":1,"transport":"ssh","ssh":{"host":"h",'
                             '"host_key_sha256":"%s\\n"}}' % KEY).encode()),
    ("ssh-agent-empty", b'{"version":1,"transport":"ssh","ssh":{"host":"h","agent":""}}'),
    ("ssh-agent-int", b'{"version":1,"transport":"ssh","ssh":{"host":"h","agent":5}}'),
    ("ssh-connect-timeout-0", b'{"version":1,"transport":"ssh","ssh":{"host":"h",'
     b'"connect_timeout_ms":0}}'),
    ("env-value-int", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     b'"env":{"A":1}}'),
    ("env-key-equals", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     b'"env":{"A=B":"x"}}'),
    ("env-key-empty", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     b'"env":{"":"x"}}'),
    ("env-key-spaces", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     b'"env":{"a b":1}}'),
    ("env-key-unicode", '{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     '"env":{"é":[]}}'.encode()),
    ("env-not-object", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"env":[]}'),
    ("timeout-negative", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},'
     b'"timeout_ms":-1}'),
    ("cwd-empty", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"cwd":""}'),
    ("cwd-int", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"cwd":5}'),
    ("cwd-null", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"cwd":null}'),
    ("cwd-bool", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"cwd":true}'),
    ("long-value", ('{"version":1,"transport":"stdio","stdio":{"command":["a"]},"cwd":%s}'
                    % json.dumps("x" * 100)).encode()),
    ("long-unicode-value", ('{"version":1,"transport":"ftp%s"}' % ("é" * 40)).encode()),
    ("escaped-value", b'{"version":1,"transport":"st\\"d\\\\io\\n\\u0001"}'),
    ("long-key", ('{"version":1,"transport":"stdio","stdio":{"command":["a"]},"%s":1}'
                  % ("k" * 60)).encode()),
    ("escaped-key", b'{"version":1,"transport":"stdio","stdio":{"command":["a"]},"\\u00e9\\n":1}'),
    ("deep-unknown", b'{"version":1,"transport":"stdio","stdio":{"command":["a"],'
     b'"extra":{"deeper":[1,2,{"x":1}]}}}'),
    ("array-top", b'[1, 2]'),
    ("object-value-for-string", b'{"version":1,"transport":{"a":1}}'),
    # files of the v0 draft (spec/asp.v0.schema.json), mapped onto ssh as config.c maps them
    ("v0-minimal", b'{"version": "0", "transport": "ssh", "connection": {"host": "box"}}'),
    ("v0-full-file-fingerprint", ('{\n  "version": "0",\n  "transport": "ssh",\n'
                                  '  "connection": {"host": "box", "port": 2222, "user": "me",\n'
                                  '    "identity": {"file": "keys/id_ed25519"},\n'
                                  '    "host_key": "%s"},\n  "workspace": "/work"\n}\n'
                                  % KEY).encode()),
    ("v0-env-and-key-line", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"env":"SANDBOX_KEY"},"host_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@box"}}'),
    ("v0-identity-home", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"file":"~/.ssh/id"}}}'),
    ("v0-identity-empty", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{}}}'),
    ("v0-identity-both", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"env":"K",\n "file":"id"}}}'),
    ("v0-identity-user", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"file":"~bob/id"}}}'),
    ("v0-identity-unknown", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"path":"id"}}}'),
    ("v0-identity-string", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":"id"}}'),
    ("v0-identity-env-empty", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"identity":{"env":""}}}'),
    ("v0-version-int-0", b'{"version": 0, "transport": "ssh", "connection": {"host": "h"}}'),
    ("v1-body-version-int-0", b'{"version": 0, "transport": "ssh", "ssh": {"host": "h"}}'),
    ("v0-transport-stdio", b'{"version": "0", "transport": "stdio", "connection": {"host": "h"}}'),
    ("v0-transport-missing", b'{"version": "0", "connection": {"host": "h"}}'),
    ("v0-connection-missing", b'{"version": "0", "transport": "ssh"}'),
    ("v0-connection-array", b'{"version": "0", "transport": "ssh", "connection": []}'),
    ("v0-host-missing", b'{"version": "0", "transport": "ssh", "connection": {"port": 22}}'),
    ("v0-host-empty", b'{"version": "0", "transport": "ssh", "connection": {"host": ""}}'),
    ("v0-port-0", b'{"version":"0","transport":"ssh","connection":{"host":"h","port":0}}'),
    ("v0-port-string", b'{"version":"0","transport":"ssh","connection":{"host":"h","port":"22"}}'),
    ("v0-user-empty", b'{"version":"0","transport":"ssh","connection":{"host":"h","user":""}}'),
    ("v0-host-key-empty", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"host_key":""}}'),
    # a host_key that is neither form: refused where it stands, under its v0 name
    ("v0-host-key-short-fingerprint", b'{"version":"0","transport":"ssh","connection":{'
     b'"host":"h","host_key":"SHA256:abc"}}'),
    ("v0-host-key-garbage", b'{"version":"0","transport":"ssh","connection":{'
     b'"host":"h",\n"host_key":"not a key"}}'),
    ("v0-host-key-line", b'{"version":"0","transport":"ssh","connection":{'
     b'"host":"h","host_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 box"}}'),
    ("v0-workspace-relative", b'{"version":"0","transport":"ssh","connection":{"host":"h"},'
     b'"workspace":"work"}'),
    ("v0-workspace-int", b'{"version":"0","transport":"ssh","connection":{"host":"h"},'
     b'"workspace":1}'),
    ("v0-env-beyond-v0", b'{"version":"0","transport":"ssh","connection":{"host":"h"},'
     b'"env":{"A":"1"}}'),
    ("v0-connection-unknown", b'{"version":"0","transport":"ssh","connection":{"host":"h",'
     b'"password_env":"PW"}}'),
]


def run(argv, cwd, env):
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if p.returncode != 0:
        return {"crash": p.returncode, "stderr": p.stderr.decode("utf-8", "replace")[-500:]}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"garbage": p.stdout.decode("utf-8", "replace")[-500:]}


JOBS = []  # (name, args, cwd, env): the C probe runs each; the SDK probes run them all
           # in one process each (--batch), since starting node 100 times is slow


def probes(file_arg, cwd, env):
    return (file_arg, cwd, dict(env))


def run_batch(argv):
    jobs = [{"cwd": cwd, "env": env, "args": args} for _n, args, cwd, env in JOBS]
    p = subprocess.run(argv + ["--batch"], input=json.dumps(jobs).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        crash = {"crash": p.returncode, "stderr": p.stderr.decode("utf-8", "replace")[-800:]}
        return [crash] * len(JOBS)
    return json.loads(p.stdout)


passed = failed = 0


def compare(name, job):
    args, cwd, env = job
    JOBS.append((name, args, cwd, env))


def check_all():
    global passed, failed
    results = {"Python": run_batch(["/usr/bin/python3", os.path.join(here, "config_probe.py"),
                                    py_sdk])}
    if ts_sdk:
        results["TypeScript"] = run_batch(["node", os.path.join(here, "config_probe.mjs"),
                                           ts_sdk])
    for i, (name, args, cwd, env) in enumerate(JOBS):
        res = {"C": run([c_probe] + args, cwd, env)}
        for k, v in results.items():
            res[k] = v[i]
        compare_one(name, res)


def compare_one(name, res):
    global passed, failed
    c = res["C"]
    bad = [k for k, v in res.items() if v != c]
    if not bad:
        passed += 1
        summary = c.get("message") or "view of %s" % c.get("view", {}).get("transport")
        print("ok - %s: %s" % (name, summary))
        return
    failed += 1
    print("FAIL - %s" % name)
    for k, v in res.items():
        print("   %-10s %s" % (k, json.dumps(v, sort_keys=True)))


tmp = tempfile.mkdtemp(prefix="asp-sdk-config-")
try:
    env = dict(os.environ)
    env.pop("ASP_CONFIG", None)
    env["HOME"] = "/home/asp-test"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for name, args in INIT_CASES if asp else ():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        r = subprocess.run([asp, "--config", os.path.join(d, ".asp.json"), "init"] + args,
                           env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            failed += 1
            print("FAIL - %s: asp init %s: %s" % (name, " ".join(args), r.stderr.strip()))
            continue
        compare(name, probes([os.path.join(d, ".asp.json")], tmp, env))
    for name, text in CASES:
        d = os.path.join(tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, ".asp.json"), "wb") as f:
            f.write(text)
        compare(name, probes([os.path.join(d, ".asp.json")], tmp, env))
    # a relative FILE, resolved against the working directory
    compare("relative-file", probes(["stdio-full/.asp.json"], tmp, env))
    compare("relative-dot-file", probes(["./stdio-full/.asp.json"], tmp, env))
    # HOME unset: ~ comes from the password database
    env2 = dict(env)
    env2.pop("HOME")
    compare("home-unset", probes([os.path.join(tmp, "stdio-home-program", ".asp.json")], tmp,
                                 env2))
    # files that cannot be read as a config
    compare("file-missing", probes([os.path.join(tmp, "nope.json")], tmp, env))
    compare("file-is-directory", probes([os.path.join(tmp, "stdio-full")], tmp, env))
    big = os.path.join(tmp, "big.json")
    with open(big, "wb") as f:
        f.write(b" " * (1024 * 1024 + 1))
    compare("file-too-large", probes([big], tmp, env))
    # discovery: the working directory, then each parent; $ASP_CONFIG first
    deep = os.path.join(tmp, "stdio-full", "a", "b", "c")
    os.makedirs(deep)
    compare("discover-in-parent", probes([], deep, env))
    compare("discover-here", probes([], os.path.join(tmp, "stdio-full"), env))
    os.makedirs(os.path.join(tmp, "dir-in-the-way", ".asp.json"))
    compare("discover-skips-directory", probes([], os.path.join(tmp, "dir-in-the-way"), env))
    for label, value in (("file", os.path.join(tmp, "http-full", ".asp.json")),
                         ("relative", "http-full/.asp.json"),
                         ("missing", os.path.join(tmp, "none", ".asp.json")),
                         ("directory", os.path.join(tmp, "http-full")),
                         ("empty", "")):
        e = dict(env)
        e["ASP_CONFIG"] = value
        compare("asp-config-%s" % label, probes([], os.path.join(tmp, "stdio-full"), e))
    lonely = tempfile.mkdtemp(prefix="asp-sdk-noconfig-")
    compare("discover-none", probes([], lonely, env))
    check_all()
    shutil.rmtree(lonely)
finally:
    shutil.rmtree(tmp)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
