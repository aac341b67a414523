#!/usr/bin/python3
"""Unmodified Codex CLI (pinned, from the npm registry) with its own tools in the sandbox
through `asp exec-server`: `asp bind codex` writes `$CODEX_HOME/environments.toml` (an
environment running `asp --config CONFIG exec-server`), then a plain `codex exec` runs;
a scripted model (scripted_model.py, OpenAI Responses over SSE) plays the session, and
the harness's project directory and the sandbox directory differ (the workspace mapping).
The sandbox is asp-agent over stdio in its own UTS namespace, with its own hostname.

Checks: exec_command ran in the sandbox (hostname, pwd, a file it wrote); a tty
exec_command read what write_stdin typed; apply_patch added and updated a file in the
sandbox; Codex read the sandbox's AGENTS.md; nothing was written in the harness's
directory. Then once more with CODEX_EXEC_SERVER_URL pointing at `asp exec-server --listen
ws://127.0.0.1:0`. Run inside a network namespace holding only loopback (see meson.build).

usage: test_codex.py ASP AGENT CODEX_BIN
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
asp, agent, codex = (os.path.abspath(a) for a in sys.argv[1:4])
root = os.path.realpath(tempfile.mkdtemp(prefix="asp-harness-codex-"))
proj, box = os.path.join(root, "proj"), os.path.join(root, "box")
home, codex_home = os.path.join(root, "home"), os.path.join(root, "codex-home")
for d in (proj, box, home, codex_home):
    os.makedirs(d)
HOST = "asp-sandbox-box"
MARK = "agents-marker-5e1f"
with open(os.path.join(box, "AGENTS.md"), "w") as f:
    f.write("# Project rules\n%s\n" % MARK)

cfg = os.path.join(root, "asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": box,
               "workspace": {"local": proj, "sandbox": box},
               "stdio": {"command": ["unshare", "--uts", "/bin/sh", "-c",
                                     'hostname "$0" && exec "$1" --stdio', HOST, agent]}}, f)

script = {"steps": [
    {"calls": [{"name": "exec_command",
                "arguments": {"cmd": "hostname; pwd; echo made > made-by-exec.txt"}}]},
    {"calls": [{"name": "exec_command",
                "arguments": {"cmd": "read x; echo got-$x | tee tty.txt; tty >/dev/null && echo on-a-tty",
                              "tty": True, "yield_time_ms": 500}}]},
    {"calls": [{"name": "write_stdin",
                "arguments": {"session_id": {"$match": r"session ID (\d+)", "int": True},
                              "chars": "abc\n", "yield_time_ms": 10000}}]},
    {"calls": [{"name": "apply_patch", "custom": True,
                "input": "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"}]},
    {"calls": [{"name": "apply_patch", "custom": True,
                "input": "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello\n+hello world\n"
                         "*** End Patch\n"}]},
    {"message": "all done"},
]}


def run_codex(name, script, codex_home, extra_env=None):
    """One plain `codex exec` in the project against a scripted model playing `script`:
    (the run, the model requests as JSON bodies)."""
    os.makedirs(codex_home, exist_ok=True)
    with open(os.path.join(root, name + ".json"), "w") as f:
        json.dump(script, f)
    log = os.path.join(root, name + ".jsonl")
    port_file = os.path.join(root, name + ".port")
    model = subprocess.Popen([sys.executable, os.path.join(here, "scripted_model.py"),
                              os.path.join(root, name + ".json"), log, port_file],
                             stdin=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file):
        if time.monotonic() > deadline or model.poll() is not None:
            sys.exit("the scripted model did not start")
        time.sleep(0.02)  # polling for the file, within the bound above
    port = int(open(port_file).read())
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write('''model = "gpt-5.5"
model_provider = "scripted"
check_for_update_on_startup = false

[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:%d/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false
''' % port)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "CODEX_HOME": codex_home,
           "LANG": "C.UTF-8", "NO_COLOR": "1"}
    env.update(extra_env or {})
    run = subprocess.run([codex, "exec", "--skip-git-repo-check",
                          "--dangerously-bypass-approvals-and-sandbox", "-C", proj,
                          "Run the checks and make the edits."],
                         cwd=proj, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=120)
    model.stdin.close()
    model.wait(timeout=30)
    return run, [json.loads(line)["body"] for line in open(log)]


# environments.toml as a user gets it: asp bind codex, run in the project
bound = subprocess.run([asp, "--config", cfg, "bind", "codex"], cwd=proj, capture_output=True,
                       text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
                            "CODEX_HOME": codex_home})
if bound.returncode != 0:
    sys.exit("asp bind codex failed: " + bound.stderr)
run, requests = run_codex("session", script, codex_home)

failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok - " if cond else "not ok - ") + name)
    if not cond:
        failed += 1
        print("  " + str(detail)[-3000:].replace("\n", "\n  "))


outputs = {}
for body in requests:
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("type", "").endswith("_call_output"):
            o = item.get("output")
            outputs[item["call_id"]] = o if isinstance(o, str) else json.dumps(o)
transcript = run.stdout + run.stderr

check("codex exec finished", run.returncode == 0, transcript)
check("the model was asked %d times" % len(script["steps"]), len(requests) == len(script["steps"]),
      len(requests))
first = outputs.get("call_1_0", "")
check("exec_command ran in the sandbox (its hostname and directory)",
      HOST in first and box in first and os.path.exists(os.path.join(box, "made-by-exec.txt")),
      first)
check("a tty exec_command read what write_stdin typed",
      open(os.path.join(box, "tty.txt")).read() == "got-abc\n"
      if os.path.exists(os.path.join(box, "tty.txt")) else False,
      outputs.get("call_3_0", ""))
check("write_stdin saw the tty's output", "got-abc" in outputs.get("call_3_0", "") and
      "on-a-tty" in outputs.get("call_3_0", ""), outputs.get("call_3_0", ""))
hello = os.path.join(box, "hello.txt")
check("apply_patch added and updated a file in the sandbox",
      os.path.exists(hello) and open(hello).read() == "hello world\n", outputs)
check("Codex read the sandbox's AGENTS.md", MARK in json.dumps(requests[0]), "marker missing")
check("nothing was written in the harness's directory", os.listdir(proj) == [], os.listdir(proj))
if failed:
    print("codex transcript:\n" + transcript[-4000:])

# CODEX_EXEC_SERVER_URL: one asp exec-server --listen ws:// for Codex (no environments.toml)
server = subprocess.Popen([asp, "--config", cfg, "exec-server", "--listen", "ws://127.0.0.1:0"],
                          stdout=subprocess.PIPE, text=True)
try:
    url = server.stdout.readline().strip()
    ws_script = {"steps": [{"calls": [{"name": "exec_command",
                                       "arguments": {"cmd": "hostname > over-ws.txt; pwd"}}]},
                           {"message": "done"}]}
    run, reqs = run_codex("ws", ws_script, os.path.join(root, "codex-home-ws"),
                          {"CODEX_EXEC_SERVER_URL": url})
    made = os.path.join(box, "over-ws.txt")
    check("CODEX_EXEC_SERVER_URL=ws://: exec_command ran in the sandbox",
          run.returncode == 0 and os.path.exists(made) and open(made).read().strip() == HOST,
          run.stdout + run.stderr)
finally:
    server.terminate()
    server.wait(timeout=30)
check("still nothing was written in the harness's directory", os.listdir(proj) == [],
      os.listdir(proj))
shutil.rmtree(root, ignore_errors=True)
sys.exit(1 if failed else 0)
