#!/usr/bin/python3
"""The README's SDK lines, run exactly as pasted: the install block (sh) from the top of a
checkout, then the use block, against the build's real asp-agent. A fresh folder stands
in for the checkout, its `build` a link to this build tree, so nothing lands in the
source tree. usage: test_readme.py README BUILD_ROOT python|typescript"""
import os
import re
import subprocess
import sys
import tempfile

readme, build_root, lang = sys.argv[1], sys.argv[2], sys.argv[3]
SECTION = "## SDKs for a harness"
SUB = {"python": "### Python", "typescript": "### TypeScript"}[lang]
USE = {"python": "python", "typescript": "js"}[lang]


def blocks(text):
    """The fenced blocks of the README's SDK subsection for this language, by info string."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else len(text)]
    sub = section[section.index(SUB):]
    nxt = sub.find("\n### ", len(SUB))
    sub = sub[:nxt if nxt >= 0 else len(sub)]
    found = {}
    for info, body in re.findall(r"^```(\w+)\n(.*?)^```$", sub, re.S | re.M):
        if info in found:
            sys.exit(f"FAIL - {SUB}: more than one ```{info} block")
        found[info] = body
    for info in ("sh", USE):
        if info not in found:
            sys.exit(f"FAIL - {SUB}: no ```{info} block")
    return found["sh"], found[USE]


def run(argv, cwd, what):
    # npm install fetches the tarball's dependency: a generous bound on a loaded machine
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL - {what}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


sh, use = blocks(open(readme, encoding="utf-8").read())
with tempfile.TemporaryDirectory() as top:
    os.symlink(os.path.abspath(build_root), os.path.join(top, "build"))
    run(["bash", "-euo", "pipefail", "-c", sh], top, f"{SUB} install lines")
    print(f"ok - {SUB}: the install lines ran")
    if lang == "python":
        with open(os.path.join(top, "app.py"), "w", encoding="utf-8") as f:
            f.write(use)
        # the installed package, not one on the way: nothing named asp sits in the folder
        where = run([".venv/bin/python", "-c", "import asp; print(asp.__file__)"], top,
                    "import asp from the venv")
        if not os.path.realpath(where.strip()).startswith(os.path.realpath(top) + "/.venv/"):
            sys.exit(f"FAIL - asp imported from {where.strip()}, not the venv")
        out = run([".venv/bin/python", "app.py"], top, "the README's Python lines")
        want = "hello from the sandbox\nwritten through ASP\n"
    else:
        app = os.path.join(top, "app")
        with open(os.path.join(app, "app.mjs"), "w", encoding="utf-8") as f:
            f.write(use)
        if not os.path.isdir(os.path.join(app, "node_modules", "asp-sdk", "dist")):
            sys.exit("FAIL - app/node_modules/asp-sdk/dist is missing after npm install")
        out = run(["node", "app.mjs"], app, "the README's TypeScript lines")
        want = "hello from the sandbox\nfile\n"
    if out != want:
        sys.exit(f"FAIL - {SUB}: printed {out!r}, expected {want!r}")
    print(f"ok - {SUB}: the use lines printed what they should")
print("2 passed, 0 failed")
