#!/usr/bin/python3
"""asp bind opencode|pi: the files each writes (merged with a user's settings, which are
kept), a second run changing nothing, --print writing nothing, and a tool file of the
user's own never replaced; a copy of pi's binding that cannot load (no asp-sdk beside it)
refused with the fix, and from the build tree the build's copy, which has it. (The harness
suite runs OpenCode and pi after these.)

usage: test_bind_bindings.py ASP SOURCE_BINDINGS BUILD_BINDINGS
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

asp = os.path.abspath(sys.argv[1])
source_bindings, build_bindings = (os.path.realpath(d) for d in sys.argv[2:4])
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok - " if cond else "not ok - ") + name)
    if not cond:
        failed += 1
        print("  " + str(detail)[:3000].replace("\n", "\n  "))


def fresh():
    root = os.path.realpath(tempfile.mkdtemp(prefix="asp-bind-"))
    proj = os.path.join(root, "proj")
    os.makedirs(proj)
    with open(os.path.join(proj, ".asp.json"), "w") as f:
        json.dump({"version": 1, "transport": "stdio", "cwd": "/workspace",
                   "stdio": {"command": ["asp-agent", "--stdio"]}}, f)
    return root, proj


def bind(proj, *args, bindings=None):
    env = dict(os.environ, HOME=os.path.join(os.path.dirname(proj), "home"))
    env.pop("ASP_CONFIG", None)
    env.pop("ASP_BINDINGS_DIR", None)
    if bindings:
        env["ASP_BINDINGS_DIR"] = bindings
    p = subprocess.run([asp, "bind"] + list(args), cwd=proj, env=env, capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def snapshot(d):
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out


# --- opencode -------------------------------------------------------------------------------
root, proj = fresh()
cfg = os.path.join(proj, ".asp.json")
rc, out, err = bind(proj, "opencode", "--print")
check("opencode --print: exit 0, shows the tool files", rc == 0 and "/.opencode/tool/read.js" in out,
      (rc, out, err))
check("opencode --print writes nothing", sorted(snapshot(proj)) == [".asp.json"], snapshot(proj))
rc, out, err = bind(proj, "opencode")
files = snapshot(proj)
tools = ["apply_patch", "bash", "edit", "glob", "grep", "read", "write"]
check("opencode: a tool file per built-in", rc == 0 and all(
    ".opencode/tool/%s.js" % t in files for t in tools), (rc, err, sorted(files)))
read_js = files.get(".opencode/tool/read.js", b"").decode()
check("opencode: the tool file names this asp and this config and the binding",
      json.dumps(asp) in read_js and json.dumps(cfg) in read_js and "/opencode/asp.js" in read_js
      and 'aspTool("read"' in read_js, read_js)
lock = json.loads(files.get(".opencode/package-lock.json", b"{}"))
check("opencode: a lockfile naming OpenCode's plugin package, and node_modules/",
      "@opencode-ai/plugin" in lock.get("packages", {}).get("", {}).get("dependencies", {})
      and os.path.isdir(os.path.join(proj, ".opencode", "node_modules")), lock)
rc, out, err = bind(proj, "opencode")
check("opencode: a second run changes nothing", rc == 0 and snapshot(proj) == files
      and "wrote" not in err, err)
# the user's own lockfile is theirs
with open(os.path.join(proj, ".opencode", "package-lock.json"), "w") as f:
    f.write('{"lockfileVersion": 3, "packages": {"": {"dependencies": {"x": "1"}}}}\n')
rc, out, err = bind(proj, "opencode")
check("opencode: an existing lockfile is kept", rc == 0 and '"x"' in open(
    os.path.join(proj, ".opencode", "package-lock.json")).read(), err)
# a tool file of the user's own is never replaced
mine = "export default { description: 'mine', args: {}, async execute() { return 'x' } }\n"
with open(os.path.join(proj, ".opencode", "tool", "grep.js"), "w") as f:
    f.write(mine)
rc, out, err = bind(proj, "opencode")
check("opencode: a tool file of the user's own is refused, kept", rc != 0 and "grep.js" in err
      and open(os.path.join(proj, ".opencode", "tool", "grep.js")).read() == mine, (rc, err))
shutil.rmtree(root)

# --- pi -------------------------------------------------------------------------------------
root, proj = fresh()
# pi's binding as installed: the extension with the SDK it imports beside it (a stand-in)
staged = os.path.join(root, "bindings")
shutil.copytree(os.path.join(source_bindings, "pi"), os.path.join(staged, "pi"))
sdk = os.path.join(staged, "pi", "node_modules", "asp-sdk")
os.makedirs(os.path.join(sdk, "dist"))
for name, text in (("package.json", '{"name": "asp-sdk", "main": "dist/index.js"}\n'),
                   ("dist/index.js", "export {};\n")):
    with open(os.path.join(sdk, name), "w") as f:
        f.write(text)

rc, out, err = bind(proj, "pi", bindings=source_bindings)
check("pi: a copy without asp-sdk beside it is refused, naming the fix",
      rc == 1 and "cannot load" in err and "asp-sdk" in err and "ninja -C" in err
      and "ASP_BINDINGS_DIR" in err and not os.path.exists(os.path.join(proj, ".pi")),
      (rc, err))
if os.path.isfile(os.path.join(build_bindings, "pi", "node_modules", "asp-sdk", "package.json")):
    rc, out, err = bind(proj, "pi", "--print")
    check("pi from the build tree: the build's copy, which has the SDK",
          rc == 0 and os.path.join(build_bindings, "pi", "index.ts") in out, (rc, out, err))
else:
    print("ok - pi from the build tree # SKIP the build staged no copy (node and npm are "
          "needed; a sanitizer build stages none)")

os.makedirs(os.path.join(proj, ".pi"))
with open(os.path.join(proj, ".pi", "settings.json"), "w") as f:
    json.dump({"theme": "light", "extensions": ["/home/me/mine.ts"]}, f)
rc, out, err = bind(proj, "pi", "--print", bindings=staged)
check("pi --print: exit 0, writes nothing", rc == 0 and "index.ts" in out and json.load(
    open(os.path.join(proj, ".pi", "settings.json")))["extensions"] == ["/home/me/mine.ts"],
      (rc, out, err))
rc, out, err = bind(proj, "pi", bindings=staged)
s = json.load(open(os.path.join(proj, ".pi", "settings.json")))
ext = s.get("extensions", [])
check("pi: the extension listed after the user's, other settings kept",
      rc == 0 and s.get("theme") == "light" and len(ext) == 2 and ext[0] == "/home/me/mine.ts"
      and ext[1].endswith("/pi/index.ts") and os.path.isfile(ext[1]), (rc, err, s))
before = snapshot(proj)
rc, out, err = bind(proj, "pi", bindings=staged)
check("pi: a second run changes nothing", rc == 0 and snapshot(proj) == before, err)
with open(os.path.join(proj, ".pi", "settings.json"), "w") as f:
    f.write("[1, 2]\n")
rc, out, err = bind(proj, "pi", bindings=staged)
check("pi: a settings file that is not a JSON object is an error, left alone",
      rc != 0 and "not a JSON object" in err and open(
          os.path.join(proj, ".pi", "settings.json")).read() == "[1, 2]\n", (rc, err))
shutil.rmtree(root)

sys.exit(1 if failed else 0)
