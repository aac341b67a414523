#!/usr/bin/python3
"""The Python SDK's Workspace against the shared table tests/vectors/workspace/cases.json
(the TypeScript SDK's runs the same table: test_workspace.mjs): normal forms, both
directions of each mapping, refused directories, and the mapping each config asks for.

usage: test_workspace.py SDK_DIR CASES_JSON"""
import json
import sys

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from asp import _config  # noqa: E402

with open(sys.argv[2]) as f:
    cases = json.load(f)
passed = failed = 0


def check(name, got, want):
    global passed, failed
    if got == want:
        passed += 1
        return
    failed += 1
    print("not ok - %s\n  got:  %r\n  want: %r" % (name, got, want))


for path, want in cases["normalize"]:
    check("normalize_path(%r)" % path, asp.normalize_path(path), want)

for m in cases["maps"]:
    w = asp.Workspace(m["local"], m["sandbox"])
    label = "Workspace(%r, %r)" % (m["local"], m["sandbox"])
    check(label + " directories", [w.local, w.sandbox], m["normal"])
    for path, base, want in m["to_sandbox"]:
        check("%s.to_sandbox(%r, %r)" % (label, path, base), w.to_sandbox(path, base), want)
    for path, want in m["to_local"]:
        check("%s.to_local(%r)" % (label, path), w.to_local(path), want)

for b in cases["bad"]:
    try:
        asp.Workspace(b["local"], b["sandbox"])
        check("Workspace(%r, %r) refused" % (b["local"], b["sandbox"]), "no error", "an error")
    except asp.AspError as e:
        check("Workspace(%r, %r) refused" % (b["local"], b["sandbox"]),
              (e.code, b["message"] in e.message), ("invalid_argument", True))

for c in cases["from_config"]:
    cfg = _config.parse(json.dumps(c["config"]).encode(), c["file"])
    try:
        w = asp.Workspace.from_config(cfg, c["start_dir"])
        got = None if w is None else {"local": w.local, "sandbox": w.sandbox}
    except asp.AspError as e:
        got = {"code": e.code, "message": e.message}
    if c.get("none"):
        want = None
    elif "message" in c:
        want = {"code": "invalid_argument", "message": got.get("message") if (
            isinstance(got, dict) and c["message"] in got.get("message", "")) else
            "(a message holding %r)" % c["message"]}
    else:
        want = {"local": c["local"], "sandbox": c["sandbox"]}
    check("from_config: " + c["name"], got, want)

# the config view carries workspace as the C core's does, local made absolute
cfg = _config.parse(b'{"version": 1, "transport": "stdio", "stdio": {"command": ["a"]},'
                    b' "workspace": {"local": "~/p", "sandbox": "/s"}}', "/x/.asp.json")
check("config view: workspace.local ~ expanded", cfg.workspace,
      {"local": _config._home_dir() + "/p", "sandbox": "/s"})
w = asp.Workspace("/home/me/proj", "/workspace")
check("repr", repr(w), "Workspace('/home/me/proj', '/workspace')")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
