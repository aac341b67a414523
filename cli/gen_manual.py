#!/usr/bin/env python3
"""The manual, written from the words the programs print: asp(1) from `asp --help` and
`asp COMMAND --help`, asp-agent(1) from `asp-agent --help`, asp.json(5) from
spec/asp.schema.json, and docs/cli.md from the same help texts. Nothing here restates an
option or a key; what the programs and the schema say is all there is.

usage: gen_manual.py asp-man ASP OUT VERSION
       gen_manual.py agent-man ASP_AGENT OUT VERSION
       gen_manual.py config-man SCHEMA OUT VERSION
       gen_manual.py markdown ASP ASP_AGENT OUT
"""
import json
import os
import re
import subprocess
import sys

GLOBAL_TRAILER = "\nGlobal options (before or after the command):\n"


def run_help(argv):
    """The help a program prints, with no config or terminal around to change it."""
    env = dict(os.environ)
    env.pop("ASP_CONFIG", None)
    env.pop("ASP_CLI_LIST_OPTIONS", None)
    env["COLUMNS"] = "88"
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, check=False, timeout=60)
    if r.returncode != 0:
        sys.exit(f"gen_manual: {' '.join(argv)} exited {r.returncode}: "
                 f"{r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def command_table(top_help):
    """[(name, summary)] from the Commands: block of `asp --help`."""
    out, inside = [], False
    for line in top_help.splitlines():
        if line == "Commands:":
            inside = True
        elif inside and not line.strip():
            break
        elif inside:
            name, summary = line.strip().split(None, 1)
            out.append((name, summary.strip()))
    return out


def command_help(asp, name):
    """`asp NAME --help` without the global options every command's help ends with."""
    text = run_help([asp, name, "--help"])
    i = text.find(GLOBAL_TRAILER)
    return text[:i + 1] if i >= 0 else text


def gather(asp):
    """The top-level help, and [(name, summary, help)] for every command."""
    top = run_help([asp, "--help"])
    return top, [(n, s, command_help(asp, n)) for n, s in command_table(top)]


# --- the help texts' shape -------------------------------------------------------------------
# A help text is blocks parted by blank lines. A block is a usage (the first line starts
# "usage: ", more lines indented under it), or a run of lines each of which is prose (not
# indented), an option ("  -x, --long ARG  what it does", continued by deeper-indented
# lines) or a list entry ("  name   what it is", in `asp --help`'s Commands: list).

OPTION = re.compile(r"^  (-\S.*?)(?:  +(\S.*))?$")
ENTRY = re.compile(r"^  ([a-z][\w-]*)  +(\S.*)$")


def blocks(text):
    """[(kind, payload)]: ("usage", [lines]), ("prose", [lines]) or ("options", [(term, desc)])."""
    out = []
    for chunk in re.split(r"\n\s*\n", text.strip("\n")):
        lines = chunk.split("\n")
        if lines[0].startswith("usage: "):
            out.append(("usage", [lines[0][len("usage: "):]] + [l.strip() for l in lines[1:]]))
            continue
        for line in lines:
            m = OPTION.match(line)
            e = None if m else ENTRY.match(line)
            if m or e:
                term, desc = (m or e).group(1), (m or e).group(2) or ""
                if not out or out[-1][0] != "options":
                    out.append(("options", []))
                out[-1][1].append([term.strip(), desc])
            elif line.startswith("   ") and out and out[-1][0] == "options":
                item = out[-1][1][-1]
                item[1] = (item[1] + " " + line.strip()).strip()
            elif out and out[-1][0] == "prose" and not line.startswith(" "):
                out[-1][1].append(line)
            else:
                out.append(("prose", [line.strip()]))
        out.append(("break", None))
    return out


def option_terms(text):
    """The flags an option list of `text` defines: {"-x", "--long"}."""
    flags = set()
    for kind, payload in blocks(text):
        if kind == "options":
            for term, _ in payload:
                flags |= set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", term))
    return flags


def option_args(text):
    """{"-x": takes_arg, "--long": takes_arg} as the option lists of `text` show them: an
    option takes a value when its term has a word after the flags ("--cwd DIR")."""
    out = {}
    for kind, payload in blocks(text):
        if kind == "options":
            for term, _ in payload:
                flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", term)
                rest = re.sub(r"(?<![\w-])--?[A-Za-z][\w-]*|[,|]", "", term).strip()
                for f in flags:
                    out[f] = bool(rest)
    return out


# --- roff ------------------------------------------------------------------------------------

def roff_escape(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return s


def roff_line(s):
    """One line of filled text: a leading '.' or "'" would be a request."""
    s = roff_escape(s)
    return "\\&" + s if s[:1] in (".", "'") else s


def roff_term(term):
    """An option's term: flags bold, their arguments italic."""
    parts = []
    for tok in re.split(r"(\s+|,\s*|\|)", term):
        if not tok or tok.isspace() or tok.startswith(",") or tok == "|":
            parts.append(roff_escape(tok))
        elif tok.startswith("-") or tok[0].islower():
            parts.append("\\fB" + roff_escape(tok) + "\\fR")
        else:
            parts.append("\\fI" + roff_escape(tok) + "\\fR")
    return "".join(parts)


def roff_blocks(text, skip_usage=False):
    out = []
    for kind, payload in blocks(text):
        if kind == "usage":
            if skip_usage:
                continue
            out.append(".nf")
            out += [roff_line(l) for l in payload]
            out.append(".fi")
        elif kind == "prose":
            out.append(".PP")
            out += [roff_line(l) for l in payload]
        elif kind == "options":
            for term, desc in payload:
                out.append(".TP")
                out.append(roff_term(term))
                out.append(roff_line(desc) if desc else "")
    return out


def man_header(name, section, version, title):
    # technical text: no hyphenation, ragged right (options stay whole)
    return [f'.TH {name.upper()} {section} "" "asp {version}" "{title}"', ".nh", ".ad l"]


def first_sentence(text):
    for kind, payload in blocks(text):
        if kind == "prose":
            s = " ".join(payload)
            s = s.split(". ")[0].split(": ")[0].rstrip(".")
            verb, rest = s.split(" ", 1)
            # "Runs exec ..." names the program: "asp - run exec ..."
            return verb.lower().removesuffix("s") + " " + rest
    return ""


def asp_man(asp, version):
    top, cmds = gather(asp)
    out = man_header("asp", 1, version, "ASP Manual")
    out += [".SH NAME", "asp \\- " + roff_escape(first_sentence(top))]
    tb = blocks(top)
    usage = next(p for k, p in tb if k == "usage")
    out += [".SH SYNOPSIS", ".nf"] + [roff_line(l) for l in usage] + [".fi"]
    out += [".SH DESCRIPTION"]
    # the top help: prose, the Commands: list, the global options
    for kind, payload in tb:
        if kind == "prose" and payload == ["Commands:"]:
            out += [".SS Commands"]
        elif kind == "prose" and payload and payload[0].startswith("Global options"):
            out += [".SS " + roff_escape(payload[0].rstrip(":"))] + [
                roff_line(l) for l in payload[1:]]
        elif kind == "prose":
            out += [".PP"] + [roff_line(l) for l in payload]
        elif kind == "options" and out[-1] == ".SS Commands":
            out.append(".PD 0")  # one line each, as asp --help shows them
            for term, desc in payload:
                out += [".TP 14", roff_term(term), roff_line(desc)]
            out.append(".PD")
        elif kind == "options":
            for term, desc in payload:
                out += [".TP", roff_term(term), roff_line(desc)]
    out += [".SH COMMANDS"]
    for name, summary, text in cmds:
        out += [f'.SS "asp {roff_escape(name)}"']
        out += roff_blocks(text)
    out += [".SH FILES", ".TP", ".B .asp.json",
            "the sandbox and transport, found by discovery (see \\fB\\-\\-config\\fR); "
            "its keys: \\fBasp.json\\fR(5)",
            ".SH SEE ALSO", "\\fBasp\\-agent\\fR(1), \\fBasp.json\\fR(5); "
            "docs/cli.md and docs/design.md in the source"]
    return "\n".join(out) + "\n"


def agent_man(agent, version):
    text = run_help([agent, "--help"])
    tb = blocks(text)
    out = man_header("asp-agent", 1, version, "ASP Manual")
    out += [".SH NAME", "asp\\-agent \\- " + roff_escape(first_sentence(text))]
    usage = next(p for k, p in tb if k == "usage")
    out += [".SH SYNOPSIS", ".nf"] + [roff_line(l) for l in usage] + [".fi"]
    out += [".SH DESCRIPTION"] + roff_blocks(text, skip_usage=True)
    out += [".SH SEE ALSO", "\\fBasp\\fR(1), \\fBasp.json\\fR(5); "
            "docs/http.md and docs/design.md in the source"]
    return "\n".join(out) + "\n"


# --- asp.json(5) from the schema ----------------------------------------------------------

def schema_type(node):
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    t = node.get("type")
    if isinstance(t, list):
        t = " or ".join(t)
    if t == "array" and isinstance(node.get("items"), dict):
        t = "array of " + plural(node["items"].get("type", "value"))
    if t == "object" and "additionalProperties" in node and isinstance(
            node["additionalProperties"], dict):
        t = "object of " + plural(node["additionalProperties"].get("type", "value"))
    return t or "value"


def plural(t):
    """ "strings", or "strings or objects" for a list of types."""
    return " or ".join(x + "s" for x in (t if isinstance(t, list) else [t]))


def schema_keys(node, prefix, out):
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        facts = [schema_type(sub)]
        if "default" in sub:
            facts.append("default " + json.dumps(sub["default"]))
        if "minimum" in sub and "maximum" in sub:
            facts.append(f"{sub['minimum']} to {sub['maximum']}")
        elif "minimum" in sub:
            facts.append(f"at least {sub['minimum']}")
        out.append((path, ", ".join(facts), sub.get("description", "")))
        if sub.get("type") == "object" and "properties" in sub:
            schema_keys(sub, path, out)


def config_man(schema_path, version):
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    out = man_header("asp.json", 5, version, "ASP Manual")
    out += [".SH NAME", "\\&.asp.json \\- which sandbox runs a harness's tools, over which transport",
            ".SH DESCRIPTION", ".PP", roff_line(schema.get("description", ""))]
    req = schema.get("required", [])
    if req:
        out += [".PP", roff_line("Required: " + ", ".join(req) + ".")]
    out += [".SH KEYS"]
    keys = []
    schema_keys(schema, "", keys)
    for path, facts, desc in keys:
        out += [".TP", "\\fB" + roff_escape(path) + "\\fR (" + roff_escape(facts) + ")",
                roff_line(desc)]
    out += [".SH SEE ALSO", "\\fBasp\\fR(1), \\fBasp\\-agent\\fR(1); spec/asp.schema.json, "
            "examples/ and docs/design.md (\".asp.json\") in the source"]
    return "\n".join(out) + "\n"


# --- docs/cli.md -----------------------------------------------------------------------------

def anchor(name):
    return "asp-" + name if name != "asp" else "asp"


def markdown(asp, agent):
    top, cmds = gather(asp)
    out = ["# The command line: `asp` and `asp-agent`", "",
           "<!-- Generated by cli/gen_manual.py from the programs' --help; do not edit.",
           "     `ninja -C build cli-docs` rewrites it; the test `cli help agreement`",
           "     fails when it is stale. -->", "",
           "Every command's help as `asp COMMAND --help` prints it; the man pages asp(1),",
           "asp-agent(1) and asp.json(5), which `meson install` installs, say the same.",
           "What the command line is for and how its parts fit: [design.md](design.md),",
           "\"The `asp` command line\"; its code: [cli/README.md](../cli/README.md).", "",
           "| command | what it does |", "|---|---|"]
    for name, summary, _ in cmds:
        out.append(f"| [`asp {name}`](#{anchor(name)}) | {summary} |")
    out.append("| [`asp-agent`](#asp-agent) | the responder inside the sandbox |")
    out += ["", "## asp", "", "```text", top.rstrip("\n"), "```"]
    for name, _, text in cmds:
        out += ["", f"## asp {name}", "", "```text", text.rstrip("\n"), "```"]
    out += ["", "## asp-agent", "", "```text", run_help([agent, "--help"]).rstrip("\n"), "```"]
    return "\n".join(out) + "\n"


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) == 5 and argv[1] == "asp-man":
        write(argv[3], asp_man(argv[2], argv[4]))
    elif len(argv) == 5 and argv[1] == "agent-man":
        write(argv[3], agent_man(argv[2], argv[4]))
    elif len(argv) == 5 and argv[1] == "config-man":
        write(argv[3], config_man(argv[2], argv[4]))
    elif len(argv) == 5 and argv[1] == "markdown":
        write(argv[4], markdown(argv[2], argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
