#!/usr/bin/python3
"""The workspace mapping through `asp tool` and `asp mcp` (docs/design.md, ".asp.json"): the
harness's project directory and the sandbox directory differ; the harness's absolute paths,
relative paths and working directory act in the sandbox directory, nothing is written in
the harness's, and a sibling whose name only starts like the project is left unmapped.

usage: test_tools_workspace.py ASP AGENT
"""
import json
import os
import subprocess
import sys
import tempfile

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
root = os.path.realpath(tempfile.mkdtemp(prefix="asp-workspace-"))
proj = os.path.join(root, "proj")       # the harness's project
box = os.path.join(root, "box")         # the sandbox's directory
sibling = os.path.join(root, "proj2")   # shares proj's prefix, not under it
for d in (proj, box, sibling, os.path.join(proj, "src"), os.path.join(box, "src")):
    os.makedirs(d)
cfg = os.path.join(proj, ".asp.json")
with open(cfg, "w") as f:
    json.dump({"version": 1, "transport": "stdio", "cwd": box,
               "stdio": {"command": [agent, "--stdio"]}}, f)

failed = 0


def check(name, cond, detail=""):
    global failed
    if cond:
        print("ok - " + name)
    else:
        failed += 1
        print("not ok - %s\n  %s" % (name, detail))


def tool(name, args, cwd=proj):
    """One `asp tool` call from the harness's directory: (exit code, text)."""
    p = subprocess.run([asp, "tool", name, json.dumps(args)], cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def harness_files():
    out = []
    for dirpath, _, names in os.walk(proj):
        out += [os.path.relpath(os.path.join(dirpath, n), proj) for n in names]
    return sorted(out)


rc, out = tool("write", {"file_path": os.path.join(proj, "a.txt"), "content": "one\n"})
check("write to the project's absolute path lands in the sandbox directory",
      rc == 0 and os.path.exists(os.path.join(box, "a.txt")), out)
rc, out = tool("read", {"file_path": os.path.join(proj, "a.txt")})
check("read of the project's path reads the sandbox's file", rc == 0 and "one" in out, out)
rc, out = tool("edit", {"file_path": os.path.join(proj, "a.txt"), "old_string": "one",
                        "new_string": "two"})
check("edit acts in the sandbox", open(os.path.join(box, "a.txt")).read() == "two\n", out)
rc, out = tool("write", {"file_path": "rel.txt", "content": "r\n"},
               cwd=os.path.join(proj, "src"))
check("a relative path joins the harness's directory, mapped",
      os.path.exists(os.path.join(box, "src", "rel.txt")), out)
rc, out = tool("bash", {"command": "pwd"}, cwd=os.path.join(proj, "src"))
check("bash runs in the mapped working directory",
      out.strip().splitlines()[0] == os.path.join(box, "src"), out)
rc, out = tool("exec_command", {"cmd": "pwd; touch made-here", "workdir": proj})
check("exec_command's workdir is mapped",
      box in out and os.path.exists(os.path.join(box, "made-here")), out)
patch = "*** Begin Patch\n*** Add File: %s\n+patched\n*** End Patch\n" % os.path.join(
    proj, "src", "p.txt")
rc, out = tool("apply_patch", {"input": patch})
check("apply_patch with the project's path acts in the sandbox",
      os.path.exists(os.path.join(box, "src", "p.txt")), out)
rc, out = tool("glob", {"pattern": "**/*.txt", "path": proj})
check("glob of the project lists the sandbox's files, by the sandbox's paths",
      os.path.join(box, "a.txt") in out, out)
rc, out = tool("grep", {"pattern": "two", "path": proj, "output_mode": "content"})
check("grep of the project searches the sandbox's files",
      (os.path.join(box, "a.txt") + ":") in out, out)
rc, out = tool("write", {"file_path": os.path.join(sibling, "s.txt"), "content": "s\n"})
check("a sibling with the same prefix is sent unchanged",
      os.path.exists(os.path.join(sibling, "s.txt")) and
      not os.path.exists(os.path.join(box + "2", "s.txt")), out)
rc, out = tool("write", {"file_path": os.path.join(box, "direct.txt"), "content": "d\n"})
check("a sandbox path is sent unchanged", os.path.exists(os.path.join(box, "direct.txt")), out)
rc, out = tool("read", {"file_path": os.path.join(proj, "src", "..", "..", "proj2", "s.txt")})
check("'..' out of the project is resolved before mapping", rc == 0 and "s" in out, out)

# asp mcp: the same mapping over MCP (newline-delimited JSON-RPC on stdin/stdout)
mcp = subprocess.Popen([asp, "mcp"], cwd=proj, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True)


def rpc(i, method, params):
    mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                "params": params}) + "\n")
    mcp.stdin.flush()
    while True:
        line = mcp.stdout.readline()
        if not line:
            raise AssertionError("asp mcp closed its output")
        msg = json.loads(line)
        if msg.get("id") == i:
            return msg


try:
    rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "t", "version": "0"}})
    mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    r = rpc(2, "tools/call", {"name": "write", "arguments": {
        "file_path": os.path.join(proj, "mcp.txt"), "content": "m\n"}})
    check("asp mcp: write with the project's path lands in the sandbox",
          os.path.exists(os.path.join(box, "mcp.txt")), json.dumps(r))
    r = rpc(3, "tools/call", {"name": "bash", "arguments": {"command": "pwd"}})
    check("asp mcp: bash runs in the sandbox directory", box in json.dumps(r), json.dumps(r))
finally:
    mcp.stdin.close()
    mcp.wait(timeout=30)

check("nothing was written in the harness's directory", harness_files() == [".asp.json"],
      harness_files())
subprocess.run(["rm", "-rf", root])
sys.exit(1 if failed else 0)
