#!/usr/bin/python3
"""asp bind claude|codex: the files each writes, merged with a user's settings (kept), a
second run changing nothing, --print writing nothing, and clear errors for an unknown
harness, a settings file that is not JSON, and a file that cannot be written.

usage: test_bind.py ASP
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

asp = os.path.abspath(sys.argv[1])
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


def bind(proj, *args, codex_home=None):
    env = dict(os.environ, HOME=os.path.join(os.path.dirname(proj), "home"))
    env.pop("ASP_CONFIG", None)
    if codex_home:
        env["CODEX_HOME"] = codex_home
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


# --- claude ---------------------------------------------------------------------------------
root, proj = fresh()
cfg = os.path.join(proj, ".asp.json")
os.makedirs(os.path.join(proj, ".claude"))
with open(os.path.join(proj, ".mcp.json"), "w") as f:
    json.dump({"mcpServers": {"mine": {"command": "my-server"}}}, f)
with open(os.path.join(proj, ".claude", "settings.json"), "w") as f:
    json.dump({"model": "opus", "permissions": {"deny": ["WebFetch"], "allow": ["Bash(ls)"]}}, f)
before = snapshot(proj)
rc, out, err = bind(proj, "claude", "--print")
check("claude --print exits 0 and shows the three files", rc == 0 and out.count("# " + proj) == 3,
      out + err)
check("claude --print writes nothing", snapshot(proj) == before)
rc, out, err = bind(proj, "claude")
check("claude: exits 0", rc == 0, err)
mcp = json.load(open(os.path.join(proj, ".mcp.json")))
check(".mcp.json: the server asp runs asp mcp --config CONFIG",
      mcp["mcpServers"]["asp"]["command"] == asp and
      mcp["mcpServers"]["asp"]["args"] == ["mcp", "--config", cfg], mcp)
check(".mcp.json: the server's tools always loaded, not deferred behind tool search",
      mcp["mcpServers"]["asp"].get("alwaysLoad") is True, mcp)
check(".mcp.json: the user's server is kept", mcp["mcpServers"]["mine"] == {"command": "my-server"}, mcp)
st = json.load(open(os.path.join(proj, ".claude", "settings.json")))
deny = st["permissions"]["deny"]
check("settings.json: the built-in tools denied",
      all(t in deny for t in ["Bash", "Read", "Edit", "Write", "Glob", "Grep", "NotebookEdit"]), st)
check("settings.json: the server enabled without a prompt", "asp" in st["enabledMcpjsonServers"], st)
check("settings.json: the user's settings kept", st["model"] == "opus" and "WebFetch" in deny and
      st["permissions"]["allow"] == ["Bash(ls)"], st)
loc = json.load(open(os.path.join(proj, ".claude", "settings.local.json")))
check("settings.local.json: the server's tools allowed", "mcp__asp" in loc["permissions"]["allow"], loc)
after = snapshot(proj)
rc, out, err = bind(proj, "claude")
check("claude: a second run changes nothing", rc == 0 and snapshot(proj) == after and
      err.count("unchanged") == 3, err)
rc, out, err = bind(proj, "claude", "--print")
check("claude --print after binding: every file unchanged", rc == 0 and out.count("(unchanged)") == 3, out)
with open(os.path.join(proj, ".claude", "settings.local.json"), "w") as f:
    f.write("{not json")
rc, out, err = bind(proj, "claude")
check("claude: a settings file that is not JSON is an error naming it, and left alone",
      rc != 0 and "settings.local.json" in err and
      open(os.path.join(proj, ".claude", "settings.local.json")).read() == "{not json", err)
shutil.rmtree(root)

root, proj = fresh()
with open(os.path.join(proj, ".claude"), "w") as f:  # a file where the directory goes
    f.write("x")
rc, out, err = bind(proj, "claude")
check("claude: an unwritable file is an error naming it, and nothing is written",
      rc != 0 and ".claude" in err and sorted(os.listdir(proj)) == [".asp.json", ".claude"], err)
rc, out, err = bind(proj, "nope")
check("an unknown harness is an error naming it", rc != 0 and "nope" in err, err)
rc, out, err = bind(proj, "claude", "--config", os.path.join(root, "missing.json"))
check("a missing --config is an error naming it", rc != 0 and "missing.json" in err, err)
shutil.rmtree(root)

# --- codex ----------------------------------------------------------------------------------
root, proj = fresh()
cfg = os.path.join(proj, ".asp.json")
home = os.path.join(root, "codex-home")
rc, out, err = bind(proj, "codex", "--print", codex_home=home)
check("codex --print writes nothing", rc == 0 and "exec-server" in out and not os.path.exists(home),
      out + err)
rc, out, err = bind(proj, "codex", codex_home=home)
toml = open(os.path.join(home, "environments.toml")).read()
block = ('[[environments]]\nid = "asp"\nprogram = %s\nargs = ["--config", %s, "exec-server"]\n'
         % (json.dumps(asp), json.dumps(cfg)))
check("codex: environments.toml with the environment asp as the default",
      rc == 0 and 'default = "asp"\ninclude_local = false\n' in toml and toml.endswith(block), toml)
rc, out, err = bind(proj, "codex", codex_home=home)
check("codex: a second run changes nothing", rc == 0 and "unchanged" in err and
      open(os.path.join(home, "environments.toml")).read() == toml, err)
mine = ('# my environments\nfoo = 1  # keep me\n\n[[environments]]\nid = "gpu"\nurl = "ws://10.0.0.1:9"\n\n'
        '[[environments]]\nid = "asp"\nprogram = "old"\n\n[extra]\nk = 2\n')
with open(os.path.join(home, "environments.toml"), "w") as f:
    f.write(mine)
rc, out, err = bind(proj, "codex", codex_home=home)
want = ('# my environments\nfoo = 1  # keep me\ndefault = "asp"\ninclude_local = false\n\n'
        '[[environments]]\nid = "gpu"\nurl = "ws://10.0.0.1:9"\n\n' + block + '\n[extra]\nk = 2\n')
got = open(os.path.join(home, "environments.toml")).read()
check("codex: only the asp entry (and default, include_local) change; the rest byte for byte",
      rc == 0 and got == want, got)
with open(os.path.join(root, "codex-file"), "w") as f:
    f.write("x")
rc, out, err = bind(proj, "codex", codex_home=os.path.join(root, "codex-file"))
check("codex: an unwritable CODEX_HOME is an error naming it", rc != 0 and "codex-file" in err, err)
check("codex: nothing written in the project", os.listdir(proj) == [".asp.json"], os.listdir(proj))
shutil.rmtree(root)
sys.exit(1 if failed else 0)
