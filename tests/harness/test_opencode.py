#!/usr/bin/python3
"""OpenCode (pinned in package-lock.json) with bindings/opencode: a plain `opencode run` in
a project set up by `asp bind opencode` plays a scripted coding session, and every built-in
tool it calls acts in the sandbox, none in the project.

usage: test_opencode.py NODE_WORK ASP ASP_AGENT SCRIPTED_MODEL MODE
MODE edit: a model that gets OpenCode's write and edit; patch: a GPT model, which gets
apply_patch instead. Runs inside tests/common/npm_run.sh (loopback only)."""
import json
import os
import sys

from harness_session import SANDBOX_HOST, Session, chat_tool_results, check_result, fail

node_work, asp, agent, scripted_model, mode = sys.argv[1:6]
asp, node_work = os.path.abspath(asp), os.path.abspath(node_work)
opencode = os.path.join(node_work, "node_modules", "opencode-linux-x64", "bin", "opencode")
if not os.path.exists(opencode):
    print("skipped: the pinned OpenCode is its Linux x64 binary, not installed here")
    sys.exit(77)
s = Session(asp, agent, scripted_model)
P, S = s.project, s.sandbox  # the harness's paths, the sandbox's


def call(cid, name, **arguments):
    return {"call_id": cid, "name": name, "arguments": arguments}


greet_v1 = "def greet(name):\n    return 'Hi, ' + name\n"
steps = [{"calls": [call("where", "bash", command="hostname; pwd", description="where am I")]}]
if mode == "edit":
    steps += [
        {"calls": [call("write", "write", filePath=P + "/src/greet.py", content=greet_v1)]},
        {"calls": [call("edit", "edit", filePath=P + "/src/greet.py",
                        oldString="'Hi, ' + name", newString="'Hello, ' + name + '!'",
                        replaceAll=None)]},
    ]
else:
    patch = ("*** Begin Patch\n*** Add File: src/greet.py\n+def greet(name):\n"
             "+    return 'Hello, ' + name + '!'\n*** Update File: " + P + "/src/calc.py\n"
             "@@\n def add(a, b):\n-    return a + b\n+    return b + a\n*** End Patch")
    steps += [{"calls": [call("patch", "apply_patch", patchText=patch)]}]
# calls that only look go out together, as a model sends parallel calls
steps += [
    {"calls": [call("read", "read", filePath=P + "/src/greet.py", offset=None, limit=None),
               call("grep", "grep", pattern="def (add|greet)", path=P, include="*.py"),
               call("glob", "glob", pattern="**/*.py", path=P),
               call("test", "bash", command="python3 -m unittest discover -s tests 2>&1",
                    workdir=P, timeout=None, description="run the tests")]},
    {"message": "All done."},
]
port = s.start_model(steps)


rc, out = s.run([asp, "bind", "opencode"], s.env(), timeout=30)
if rc != 0:
    fail("asp bind opencode: " + out)
model = "gpt-5-scripted" if mode == "patch" else "scripted"
cfg = {
    "model": "scripted/" + model, "share": "disabled", "autoupdate": False,
    "provider": {"scripted": {
        "npm": "@ai-sdk/openai-compatible", "name": "scripted",
        "options": {"baseURL": "http://127.0.0.1:%d/v1" % port, "apiKey": "none"},
        "models": {model: {"name": model, "tool_call": True}}}}}
with open(os.path.join(P, "opencode.json"), "w") as f:
    json.dump(cfg, f, indent=1)
# OpenCode installs its plugin package into its global config directory in the background
# unless one is there (offline, that stalls a run); the user's is theirs, the test's is this.
gcfg = os.path.join(s.home, ".config", "opencode")
os.makedirs(os.path.join(gcfg, "node_modules"))
s.put(os.path.join(gcfg, "package-lock.json"), json.dumps(
    {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}))
before = s.project_files()

env = s.env()
env.update(OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_SHARE="1",
           OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1",
           OPENCODE_DISABLE_DEFAULT_PLUGINS="1", OPENCODE_DISABLE_CLAUDE_CODE="1",
           OPENCODE_DISABLE_EXTERNAL_SKILLS="1")
rc, out = s.run([opencode, "run", "--print-logs", "--log-level", "WARN",
                 "Add a greet function and run the tests"], env)
if rc != 0:
    sys.stderr.write(out[-4000:])
    fail("opencode run exited %d" % rc)

reqs = [r for r in s.requests() if not r.get("untaken")]
offered = sorted(t["function"]["name"] for t in reqs[0]["body"].get("tools", []))
print("tools offered:", offered)
res = chat_tool_results(reqs)
check_result(res, "where", SANDBOX_HOST + "\n" + S)
if mode == "edit":
    check_result(res, "write", "/src/greet.py")
    check_result(res, "edit", "1 replacement")
else:
    if "apply_patch" not in offered:
        fail("a GPT model was not offered apply_patch: %s" % offered)
    check_result(res, "patch", "Success", "A ", "M ")
check_result(res, "read", "Hello, ' + name + '!'")
check_result(res, "grep", "greet.py:1:def greet", "calc.py:1:def add")
# paths in answers may be shown as the harness's (the workspace maps them back); where the
# files are is checked on the file systems below
check_result(res, "glob", "/src/greet.py", "/tests/test_calc.py")
check_result(res, "test", "Ran 2 tests", "OK")
with open(os.path.join(S, "src", "greet.py")) as f:
    if "Hello, ' + name + '!'" not in f.read():
        fail("the sandbox's src/greet.py is not the edited file")
made = s.project_files() - before - {".opencode/.gitignore"}  # OpenCode's own
if made:
    fail("files appeared on the harness's side: %s" % sorted(made))
if os.path.exists(os.path.join(P, "src")):
    fail("the project has a src/ directory: a tool acted on the harness's side")
s.close() if not os.environ.get("KEEP") else None
print("ok: every OpenCode tool call acted in the sandbox")
