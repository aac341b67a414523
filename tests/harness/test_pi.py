#!/usr/bin/python3
"""pi (pinned in package-lock.json) with bindings/pi: after `asp bind pi`, a plain `pi -p`
in the project plays a scripted coding session; every tool call (bash, write, edit, read,
grep, find, ls) acts in the sandbox and none in the project, and the system prompt names
the sandbox's directory.

usage: test_pi.py NODE_WORK ASP ASP_AGENT SCRIPTED_MODEL BINDINGS SDK_WORK [--build-tree]
BINDINGS is the source tree's bindings/, SDK_WORK the built TypeScript SDK (tests/sdk/ts_run.sh):
the binding is staged from them as meson install lays it out. With --build-tree nothing is
staged and ASP_BINDINGS_DIR is unset: `asp bind pi` run from the build tree, as after the
quick start, must pick the build's own copy (BUILD/bindings) and pi must load it.
Runs inside a network namespace holding only loopback."""
import json
import os
import shutil
import sys

from harness_session import SANDBOX_HOST, Session, chat_tool_results, check_result, fail

node_work, asp, agent, scripted_model, bindings, sdk_work = sys.argv[1:7]
build_tree = sys.argv[7:] == ["--build-tree"]
sdk_work = os.path.abspath(sdk_work)
asp, node_work = os.path.abspath(asp), os.path.abspath(node_work)
pi = os.path.join(node_work, "node_modules", ".bin", "pi")
s = Session(asp, agent, scripted_model)
P, S = s.project, s.sandbox

# The binding as installed: its files and the SDK it imports, beside each other.
staged = os.path.join(s.root, "bindings")
if not build_tree:
    shutil.copytree(os.path.join(bindings, "pi"), os.path.join(staged, "pi"))
    os.makedirs(os.path.join(staged, "pi", "node_modules"))
    os.symlink(sdk_work, os.path.join(staged, "pi", "node_modules", "asp-sdk"))


def call(cid, name, **arguments):
    return {"call_id": cid, "name": name, "arguments": arguments}


steps = [
    {"calls": [call("where", "bash", command="hostname; pwd")]},
    {"calls": [call("write", "write", path=P + "/src/greet.py",
                    content="def greet(name):\n    return 'Hi, ' + name\n")]},
    {"calls": [call("edit", "edit", path="src/greet.py",
                    edits=[{"oldText": "'Hi, ' + name", "newText": "'Hello, ' + name + '!'"}])]},
    # calls that only look go out together, as a model sends parallel calls
    {"calls": [call("read", "read", path=P + "/src/greet.py"),
               call("grep", "grep", pattern="def (add|greet)", glob="*.py"),
               call("find", "find", pattern="*.py", path=P),
               call("ls", "ls", path="src"),
               call("test", "bash", command="python3 -m unittest discover -s tests 2>&1")]},
    {"message": "All done."},
]
port = s.start_model(steps)

env = s.env()
agent_dir = os.path.join(s.home, ".pi", "agent")
env.update(PI_CODING_AGENT_DIR=agent_dir, PI_OFFLINE="1", PI_TELEMETRY="0")
if build_tree:
    env.pop("ASP_BINDINGS_DIR", None)
else:
    env["ASP_BINDINGS_DIR"] = staged
# pi's own settings: the scripted model as an OpenAI-compatible provider, by default.
s.put(os.path.join(agent_dir, "models.json"), json.dumps({"providers": {"scripted": {
    "baseUrl": "http://127.0.0.1:%d/v1" % port, "api": "openai-completions", "apiKey": "none",
    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
    "models": [{"id": "scripted"}]}}}))
s.put(os.path.join(agent_dir, "settings.json"),
      json.dumps({"defaultProvider": "scripted", "defaultModel": "scripted"}))

rc, out = s.run([asp, "bind", "pi"], env, timeout=30)
if rc != 0:
    fail("asp bind pi: " + out)
if build_tree:
    with open(os.path.join(P, ".pi", "settings.json")) as f:
        listed = json.load(f)["extensions"]
    want = os.path.join(os.path.dirname(os.path.dirname(asp)), "bindings", "pi", "index.ts")
    if listed != [os.path.realpath(want)]:
        fail("asp bind pi from the build tree listed %s, not the build's copy %s"
             % (listed, want))
before = s.project_files()
rc, out = s.run([pi, "-p", "--no-session", "Add a greet function and run the tests"], env)
if rc != 0:
    sys.stderr.write(out[-4000:])
    fail("pi exited %d" % rc)

reqs = s.requests()
offered = sorted(t["function"]["name"] for t in reqs[0]["body"].get("tools", []))
print("tools offered:", offered)
for name in ("bash", "edit", "find", "grep", "ls", "read", "write"):
    if name not in offered:
        fail("pi did not offer %s: %s" % (name, offered))
system = " ".join(m["content"] for m in reqs[0]["body"]["messages"]
                  if m["role"] in ("system", "developer") and isinstance(m["content"], str))
if "Current working directory: " + S not in system:
    fail("the system prompt does not give the sandbox's directory")
res = chat_tool_results(reqs)
check_result(res, "where", SANDBOX_HOST + "\n" + S)
check_result(res, "write", "Successfully wrote")
check_result(res, "edit", "Successfully replaced")
check_result(res, "read", "Hello, ' + name + '!'")
check_result(res, "grep", "src/greet.py:1: def greet", "src/calc.py:1: def add")
check_result(res, "find", "src/greet.py", "tests/test_calc.py")
check_result(res, "ls", "calc.py", "greet.py")
check_result(res, "test", "Ran 2 tests", "OK")
with open(os.path.join(S, "src", "greet.py")) as f:
    if "Hello, ' + name + '!'" not in f.read():
        fail("the sandbox's src/greet.py is not the edited file")
made = s.project_files() - before
if made:
    fail("files appeared on the harness's side: %s" % sorted(made))
if os.path.exists(os.path.join(P, "src")):
    fail("the project has a src/ directory: a tool acted on the harness's side")
s.close()
print("ok: every pi tool call acted in the sandbox")
