#!/usr/bin/env python3
"""The command line's words agree wherever they are written. For every command, the
options its getopt table really has (ASP_CLI_LIST_OPTIONS, cli/opts.c) are exactly the
ones its --help defines, its section of asp(1) defines, and docs/cli.md shows (which must
be what cli/gen_manual.py writes today); asp-agent's options (the literals its parser
compares) are exactly its --help's and asp-agent(1)'s; `man -l` renders the three pages
without a warning; and every `asp COMMAND ...` written in a document or a help text names
a command that exists and flags that command has (a `claude|codex|...` list: all of them).

usage: help_agreement_test.py ASP ASP_AGENT ASP.1 ASP-AGENT.1 ASP.JSON.5 SOURCE_ROOT
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

ASP, AGENT, MAN_ASP, MAN_AGENT, MAN_CONFIG, SRC = sys.argv[1:7]
sys.path.insert(0, os.path.join(SRC, "cli"))
import gen_manual  # noqa: E402

n = failed = 0


def check(ok, what, detail=""):
    global n, failed
    n += 1
    if ok:
        print(f"ok {n} - {what}")
    else:
        failed += 1
        print(f"not ok {n} - {what}")
        for line in str(detail).splitlines():
            print("#   " + line)


def real_options(argv):
    """{"-x": takes_arg, "--long": takes_arg} from the program's own table."""
    env = dict(os.environ, ASP_CLI_LIST_OPTIONS="1")
    env.pop("ASP_CONFIG", None)
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=60, check=False)
    if r.returncode != 0:
        sys.exit(f"{argv}: exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    opts = {}
    for line in r.stdout.decode().splitlines():
        short, long_, arg = line.split()
        for f in (short, long_):
            if f != "-":
                opts[f] = arg == "1"
    return opts


def diff(want, got, want_name, got_name):
    lines = []
    if want - got:
        lines.append(f"in {want_name}, not in {got_name}: {' '.join(sorted(want - got))}")
    if got - want:
        lines.append(f"in {got_name}, not in {want_name}: {' '.join(sorted(got - want))}")
    return "\n".join(lines)


top, cmds = gen_manual.gather(ASP)
names = [c[0] for c in cmds]
global_real = real_options([ASP])
top_blocks = gen_manual.blocks(top)
global_help = gen_manual.option_terms(top)
check(set(global_real) == global_help, "asp: the global options are the ones asp --help lists",
      diff(set(global_real), global_help, "main.c's table", "asp --help"))
common = set(global_real) - {"--version"}

real = {}
for name, _, text in cmds:
    real[name] = real_options([ASP, name])
    helps = gen_manual.option_terms(text)
    check(set(real[name]) == helps, f"asp {name}: --help defines exactly its options",
          diff(set(real[name]), helps, "its getopt table", "its --help"))
    shown = gen_manual.option_args(text)
    wrong = [f for f in shown if f in real[name] and shown[f] != real[name][f]]
    check(not wrong, f"asp {name}: --help shows a value for exactly the options that take one",
          " ".join(f"{f} ({'takes' if real[name][f] else 'takes no'} value)" for f in wrong))
    usage = next((p for k, p in gen_manual.blocks(text) if k == "usage"), [])
    in_usage = set()
    for line in usage:
        in_usage |= set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line))
    check(in_usage <= set(real[name]) | common, f"asp {name}: its usage names only its options",
          " ".join(sorted(in_usage - set(real[name]) - common)))
    long_lines = [l for l in text.splitlines() if len(l) > 88]
    check(not long_lines, f"asp {name}: --help fits 88 columns", "\n".join(long_lines))

# asp-agent parses by hand: the flags its sources compare against are its table.
agent_src = ""
for f in sorted(os.listdir(os.path.join(SRC, "sandbox-agent"))):
    if f.endswith(".c"):
        with open(os.path.join(SRC, "sandbox-agent", f), encoding="utf-8") as fh:
            agent_src += fh.read()
code_only = re.sub(r"static const char usage\[\] =.*?;\n|/\*.*?\*/", "", agent_src, flags=re.S)
agent_real = set(re.findall(r'"(--[a-z][a-z0-9-]*)', code_only)) | {"-h"}
agent_text = gen_manual.run_help([AGENT, "--help"])
agent_help = gen_manual.option_terms(agent_text)
check(agent_real <= agent_help | {"-h"} and agent_help <= agent_real,
      "asp-agent: --help defines exactly the flags its parser compares",
      diff(agent_real, agent_help, "sandbox-agent/*.c", "asp-agent --help"))


# --- the man pages --------------------------------------------------------------------------
def man_text(s):
    s = re.sub(r"\\f[BIRP]", "", s)
    return s.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")


def man_sections(path):
    """{section title: flags its .TP terms define}."""
    out, cur, lines = {}, None, open(path, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith((".SS ", ".SH ")):
            cur = man_text(line[4:]).strip('"')
            out.setdefault(cur, set())
        elif line == ".TP" and cur is not None and i + 1 < len(lines):
            out[cur] |= set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", man_text(lines[i + 1])))
    return out


secs = man_sections(MAN_ASP)
for name in names:
    got = secs.get(f"asp {name}")
    check(got == set(real[name]), f"asp(1): the section asp {name} defines exactly its options",
          "no such section" if got is None else diff(set(real[name]), got, "getopt", "asp(1)"))
got = secs.get("Global options (before or after the command)", set())
check(got == set(global_real), "asp(1): the global options",
      diff(set(global_real), got, "main.c's table", "asp(1)"))
got = man_sections(MAN_AGENT).get("DESCRIPTION", set())
check(got == agent_help, "asp-agent(1) defines exactly asp-agent's options",
      diff(agent_help, got, "asp-agent --help", "asp-agent(1)"))

man = shutil.which("man")
for page in (MAN_ASP, MAN_AGENT, MAN_CONFIG):
    what = f"man -l renders {os.path.basename(page)} without a warning"
    if not man:
        n += 1
        print(f"ok {n} - {what} # SKIP man-db is not installed (scripts/install-deps.sh)")
        continue
    r = subprocess.run([man, "--warnings", "-l", page], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=dict(os.environ, MANWIDTH="80", MANPAGER="cat",
                                                        PAGER="cat", LC_ALL="C.UTF-8"),
                       timeout=60, check=False)
    body = r.stdout.decode(errors="replace")
    check(r.returncode == 0 and not r.stderr and "NAME" in body and "SEE ALSO" in body, what,
          f"exit {r.returncode}\n{r.stderr.decode(errors='replace')}")

# --- docs/cli.md ---------------------------------------------------------------------------
cli_md = os.path.join(SRC, "docs", "cli.md")
want = gen_manual.markdown(ASP, AGENT)
have = open(cli_md, encoding="utf-8").read() if os.path.exists(cli_md) else ""
check(have == want, "docs/cli.md is what the programs' --help says today",
      "stale: run `ninja -C build cli-docs` and commit docs/cli.md")


# --- every `asp COMMAND ...` in the documents and the help texts -----------------------------
WORD = re.compile(r"^[a-z][a-z-]*$")
SEPARATORS = {";", "&&", "||", "|", "(", ")", "&", ";;", "|&", "$("}


def segments(code, loose):
    """The simple commands of one line of code, as token lists. Prose (`loose`): split at
    words ending a clause instead."""
    if loose:
        seg = []
        for t in code.split():
            seg.append(t.rstrip(",.;:)"))
            if t[-1] in ",.;:)":
                yield seg
                seg = []
        yield seg
        return
    try:
        lex = shlex.shlex(code, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        toks = list(lex)
    except ValueError:
        toks = code.split()
    seg = []
    for t in toks:
        if t in SEPARATORS:
            yield seg
            seg = []
        else:
            seg.append(t)
    yield seg


def check_args(cmd, opts, toks, loose, out):
    positional = 0
    i = 0
    while i < len(toks):
        t = toks[i]
        i += 1
        if t == "--":
            break
        if t.startswith("--") and len(t) > 2:
            f = t.split("=")[0]
            if f not in opts:
                out.append(f"{cmd} has no {f}")
            elif opts[f] and "=" not in t:
                i += 1
        elif re.match(r"^-[A-Za-z]+$", t):
            for ch in t[1:]:
                f = "-" + ch
                if f not in opts:
                    out.append(f"{cmd} has no {f}")
                elif opts[f]:
                    i += 1
                    break
        else:
            positional += 1
            name = cmd.split()[-1]
            if positional == 1 and name in alternatives and not loose and WORD.match(t) \
                    and t not in alternatives[name]:
                out.append(f"{cmd} {t}: it takes {'|'.join(sorted(alternatives[name]))}")
            if name in ("exec", "shell", "tool", "init"):
                break  # the command's own argv or argument follows


def mention_problems(code, loose):
    """What is wrong with each `asp ...` in one line of code. `loose`: prose, where a word
    after asp need not be a command ("asp itself failed")."""
    out = []
    # a list of alternatives stands for all of them
    for m in re.finditer(r"(?<![\w-])asp ([a-z-]+) ((?:[a-z]+\|)+[a-z]+)(?![\w|])", code):
        if m.group(1) in alternatives and set(m.group(2).split("|")) != alternatives[m.group(1)]:
            out.append(f"asp {m.group(1)} {m.group(2)}: it takes "
                       f"{'|'.join(sorted(alternatives[m.group(1)]))}")
    for seg in segments(code, loose):
        for j, t in enumerate(seg):
            prog = t.rsplit("/", 1)[-1]
            if prog in ("asp", "asp-agent") and (t == prog or t.startswith((".", "/", "build"))):
                break
        else:
            continue
        toks = seg[j + 1:]
        if prog == "asp-agent":
            check_args("asp-agent", gen_manual.option_args(agent_text), toks, loose, out)
            continue
        i = 0
        while i < len(toks) and toks[i] in global_real:
            i += 2 if global_real[toks[i]] else 1
        if i >= len(toks):
            continue
        cmd = toks[i]
        if cmd not in real:
            if WORD.match(cmd) and not loose:
                out.append(f"no command asp {cmd}")
            continue
        check_args(f"asp {cmd}", dict(real[cmd], **global_real), toks[i + 1:], loose, out)
    return out


# asp bind claude|codex|...: the first positional is one of a list the usage spells out
alternatives = {}
for name, _, text in cmds:
    usage = next((p for k, p in gen_manual.blocks(text) if k == "usage"), [])
    for line in usage:
        m = re.match(rf"asp {re.escape(name)} ((?:[a-z]+\|)+[a-z]+)(?![\w|])", line)
        if m:
            alternatives[name] = set(m.group(1).split("|"))


def tracked_docs():
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "*.md"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for root, dirs, fs in os.walk(SRC):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "node_modules"]
        found += [os.path.relpath(os.path.join(root, f), SRC) for f in fs if f.endswith(".md")]
    return found


problems = []
for rel in sorted(tracked_docs()):
    if rel == "docs/cli.md":
        continue  # the help texts, checked as such below
    with open(os.path.join(SRC, rel), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    fenced = False
    for lineno, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        for code in [line] if fenced else re.findall(r"`([^`]+)`", line):
            for p in mention_problems(code, False):
                problems.append(f"{rel}:{lineno}: {p}")
for name, _, text in cmds:
    for line in text.splitlines():
        for p in mention_problems(line, True):
            problems.append(f"asp {name} --help: {p}")
check(not problems, "every asp COMMAND written in a document or a help exists, with its flags",
      "\n".join(sorted(set(problems))))

print(f"1..{n}")
sys.exit(1 if failed else 0)
