#!/usr/bin/python3
"""Claude Code (pinned in package-lock.json): after `asp bind claude`, a plain `claude -p` in
the project plays a scripted coding session through the asp MCP server; every tool call
(bash, write, edit, read, grep, glob, the tests, a sub-agent's bash) acts in the sandbox,
none in the project; Claude Code's own built-ins that act on its machine are not offered,
and a call to one is refused.

usage: test_claude.py NODE_WORK ASP ASP_AGENT SCRIPTED_MODEL
Runs inside tests/common/npm_run.sh's network namespace (loopback only)."""
import json
import os
import sys

from harness_session import (SANDBOX_HOST, Session, anthropic_tool_results,
                             check_result, fail)

node_work, asp, agent, scripted_model = sys.argv[1:5]
asp, node_work = os.path.abspath(asp), os.path.abspath(node_work)
# the package @anthropic-ai/claude-code installs this platform package's binary as claude
claude = os.path.join(node_work, "node_modules", "@anthropic-ai", "claude-code-linux-x64",
                      "claude")
if not os.path.exists(claude):
    print("skipped: the pinned Claude Code is its Linux x64 (glibc) binary, not installed here")
    sys.exit(77)
s = Session(asp, agent, scripted_model)
P, S = s.project, s.sandbox  # the harness's paths, the sandbox's
MCP = "mcp__asp__"


def call(cid, name, **arguments):
    return {"call_id": "toolu_" + cid, "name": MCP + name, "arguments": arguments}


greet_v1 = "def greet(name):\n    return 'Hi, ' + name\n"
steps = [
    {"calls": [call("where", "bash", command="hostname; pwd", description="where am I")]},
    # a model that reaches for the built-ins anyway: denied, they are no tools at all
    {"calls": [{"call_id": "toolu_builtin_bash", "name": "Bash",
                "arguments": {"command": "touch " + P + "/leaked", "description": "x"}},
               {"call_id": "toolu_builtin_write", "name": "Write",
                "arguments": {"file_path": P + "/leaked.txt", "content": "x"}}]},
    {"calls": [call("write", "write", file_path=P + "/src/greet.py", content=greet_v1)]},
    {"calls": [call("edit", "edit", file_path=P + "/src/greet.py",
                    old_string="'Hi, ' + name", new_string="'Hello, ' + name + '!'")]},
    # calls that only look go out together, as a model sends parallel calls
    {"calls": [call("read", "read", file_path=P + "/src/greet.py"),
               call("grep", "grep", pattern="def (add|greet)", path=P, glob="*.py",
                    output_mode="content"),
               call("glob", "glob", pattern="**/*.py", path=P),
               call("test", "bash", command="python3 -m unittest discover -s tests 2>&1",
                    description="run the tests")]},
    # a sub-agent: its own model turns come next (it gets the same tools), then the main
    # agent's last
    {"calls": [{"call_id": "toolu_agent", "name": "Agent", "arguments": {
        "description": "check the host", "prompt": "Run hostname; pwd and leave a mark",
        "subagent_type": "claude", "run_in_background": False}}]},
    {"calls": [call("sub_where", "bash", command="hostname; pwd; touch sub_was_here")]},
    {"message": "The sandbox."},
    {"message": "All done."},
]
port = s.start_model(steps)

rc, out = s.run([asp, "bind", "claude"], s.env(), timeout=30)
if rc != 0:
    fail("asp bind claude: " + out)
before = s.project_files()

env = s.env()
env.update(ANTHROPIC_BASE_URL="http://127.0.0.1:%d" % port, ANTHROPIC_API_KEY="sk-ant-none",
           DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1",
           CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
rc, out = s.run([claude, "-p", "Add a greet function and run the tests",
                 "--output-format", "json"], env)
if rc != 0:
    sys.stderr.write(out[-4000:])
    fail("claude -p exited %d" % rc)
try:
    final = json.loads(out.strip().splitlines()[-1])
except (ValueError, IndexError):
    fail("claude -p printed no JSON result: %r" % out[-2000:])

reqs = s.requests()
taken = [r for r in reqs if not r.get("untaken")]
side = sorted({"%s (%s)" % (r["path"], r["body"].get("model")) for r in reqs if r.get("untaken")})
print("requests: %d scripted turns, side requests: %s" % (len(taken), side or "none"))
tools = {t["name"]: t for t in taken[0]["body"].get("tools", [])}
print("tools offered:", sorted(tools))
# the built-ins that act on Claude Code's machine are gone; ours are offered up front
# (asp bind writes alwaysLoad: not deferred behind ToolSearch), with their schemas
builtins = {"Bash", "Read", "Edit", "MultiEdit", "Write", "Glob", "Grep", "LS", "NotebookEdit"}
if builtins & set(tools):
    fail("built-in tools that act on the harness's machine are offered: %s"
         % sorted(builtins & set(tools)))
for name in ("bash", "read", "write", "edit", "glob", "grep"):
    t = tools.get(MCP + name)
    if not t or t.get("defer_loading") or "properties" not in t.get("input_schema", {}):
        fail("%s is not offered with its schema up front: %s" % (MCP + name, t))

res = {k[len("toolu_"):]: v for k, v in anthropic_tool_results(taken).items()}
check_result(res, "where", SANDBOX_HOST + "\n" + S, absent=("ERROR",))
check_result(res, "builtin_bash", "ERROR", "Bash")
check_result(res, "builtin_write", "ERROR", "Write")
check_result(res, "write", "/src/greet.py", absent=("ERROR",))
check_result(res, "edit", "1 replacement", absent=("ERROR",))
check_result(res, "read", "Hello, ' + name + '!'", absent=("ERROR",))
check_result(res, "grep", "greet.py:1:def greet", "calc.py:1:def add", absent=("ERROR",))
check_result(res, "glob", "/src/greet.py", "/tests/test_calc.py", absent=("ERROR",))
check_result(res, "test", "Ran 2 tests", "OK", absent=("ERROR",))
check_result(res, "sub_where", SANDBOX_HOST + "\n" + S, absent=("ERROR",))
check_result(res, "agent", "The sandbox.", absent=("ERROR",))
if not os.path.exists(os.path.join(S, "sub_was_here")):
    fail("the sub-agent's command left no mark in the sandbox")
if final.get("result") != "All done." or final.get("is_error"):
    fail("the session did not end with the scripted answer: %s" % out[-2000:])

with open(os.path.join(S, "src", "greet.py")) as f:
    if f.read() != "def greet(name):\n    return 'Hello, ' + name + '!'\n":
        fail("the sandbox's src/greet.py is not the edited file")
made = s.project_files() - before
if made:
    fail("files appeared on the harness's side: %s" % sorted(made))
if os.path.exists(os.path.join(P, "src")):
    fail("the project has a src/ directory: a tool acted on the harness's side")
s.close()
print("ok: every Claude Code tool call acted in the sandbox")
