#!/usr/bin/python3
"""A small scripted agent harness on the ASP Python SDK: the policy/mechanism split.

The tools the model sees -- `bash`, `read`, `write` -- are this harness's own code: their
schemas, line numbering, offsets and limits, truncation and error wording are policy and
stay here, unchanged whatever the sandbox is. Only the raw I/O under them (exec, read and
write of bytes) goes through the SDK, to whichever sandbox .asp.json names: the local
asp-agent, a container, a VM over HTTP. Swap the sandbox by editing .asp.json; this file
does not change.

The "model" is a fixed script of tool calls, so the example runs without credentials;
a real harness would put its model loop where `SCRIPT` is walked.

usage: harness.py [--config FILE]   (default: $ASP_CONFIG, or .asp.json here or above)
"""
import argparse
import os
import sys

try:
    import asp
except ImportError:  # run from the source tree: use the SDK the build generated
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "build", "sdkgen", "python"))
    import asp

# ---- policy: what the model is shown ------------------------------------------------

MAX_TOOL_OUTPUT = 30000  # characters of one tool result the model sees
MAX_LINE = 2000  # characters of one line `read` shows
DEFAULT_LIMIT = 2000  # lines `read` shows when the model gives no limit
READ_CHUNK = 1 << 20  # bytes per sandbox read call


def truncate(text, limit=MAX_TOOL_OUTPUT):
    """Keeps the head and tail of a long result and says how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return "%s\n[... %d characters omitted ...]\n%s" % (text[:half], cut, text[-half:])


class Tools:
    """The tools as the model sees them. Each returns the text the model gets back."""

    SCHEMAS = [
        {"name": "bash", "description": "Run a shell command in the sandbox (a fresh shell "
         "each time). Returns stdout, stderr and the exit code.",
         "parameters": {"command": "string", "timeout_s": "integer, default 120"}},
        {"name": "read", "description": "Read a text file: numbered lines, from line "
         "`offset` (1-based), at most `limit` lines.",
         "parameters": {"path": "string", "offset": "integer, default 1",
                        "limit": "integer, default 2000"}},
        {"name": "write", "description": "Create or replace a text file.",
         "parameters": {"path": "string", "content": "string"}},
    ]

    def __init__(self, sandbox):
        self.sandbox = sandbox  # the mechanism: an asp.Client

    def bash(self, command, timeout_s=120):
        try:
            r = self.sandbox.exec(command=command, timeout_ms=int(timeout_s * 1000))
        except asp.AspError as e:
            return "error (%s): %s" % (e.code, e.message)
        out = r.stdout.decode("utf-8", "replace")
        err = r.stderr.decode("utf-8", "replace")
        parts = [out.rstrip("\n")] if out else []
        if err:
            parts.append("[stderr]\n" + err.rstrip("\n"))
        if r.stdout_bytes > len(r.stdout) or r.stderr_bytes > len(r.stderr):
            parts.append("[the sandbox kept %d of %d stdout bytes and %d of %d stderr bytes]"
                         % (len(r.stdout), r.stdout_bytes, len(r.stderr), r.stderr_bytes))
        if r.timed_out:
            parts.append("[timed out after %s s; the command was killed]" % timeout_s)
        elif r.signal:
            parts.append("[killed by SIG%s]" % r.signal)
        else:
            parts.append("[exit code %d]" % r.exit_code)
        return truncate("\n".join(parts))

    def _read_bytes(self, path):
        data = bytearray()
        while True:
            r = self.sandbox.read(path, offset=len(data), length=READ_CHUNK)
            data += r.data
            if r.eof or not r.data:
                return bytes(data)

    def read(self, path, offset=1, limit=DEFAULT_LIMIT):
        try:
            data = self._read_bytes(path)
        except asp.AspError as e:
            hint = {"not_found": "no such file", "is_a_directory": "it is a directory; use "
                    "bash with ls"}.get(e.code, e.message)
            return "error: cannot read %s: %s" % (path, hint)
        if b"\0" in data[:8192]:
            return "%s is a binary file (%d bytes); not shown" % (path, len(data))
        lines = data.decode("utf-8", "replace").splitlines()
        if offset < 1 or (offset > len(lines) and lines):
            return "error: %s has %d lines; offset %d is outside it" % (path, len(lines), offset)
        shown = lines[offset - 1:offset - 1 + limit]
        out = []
        for n, line in enumerate(shown, start=offset):
            if len(line) > MAX_LINE:
                line = line[:MAX_LINE] + " [... line cut at %d characters]" % MAX_LINE
            out.append("%6d\t%s" % (n, line))
        rest = len(lines) - (offset - 1 + len(shown))
        if rest > 0:
            out.append("[%d more lines; read again with offset=%d]" % (rest,
                                                                        offset + len(shown)))
        return truncate("\n".join(out))

    def write(self, path, content):
        try:
            r = self.sandbox.write(path, content.encode("utf-8"), mkdirs=True)
        except asp.AspError as e:
            return "error (%s): %s" % (e.code, e.message)
        return "wrote %d bytes to %s" % (r.written, path)


# ---- the "model": a fixed script of tool calls -------------------------------------

SCRIPT = [
    ("Where am I?", "bash", {"command": "pwd; uname -sm"}),
    ("Make a small project.", "write", {"path": "demo/greet.sh", "content":
                                        "#!/bin/sh\nfor n in \"$@\"; do echo \"hello, $n\"; done\n"}),
    ("Run it.", "bash", {"command": "sh demo/greet.sh brain hands"}),
    ("A long file, to see the read tool page it.", "bash",
     {"command": "seq 1 3000 | sed 's/^/line /' > demo/long.txt; wc -l demo/long.txt"}),
    ("Read a window of it.", "read", {"path": "demo/long.txt", "offset": 1500, "limit": 5}),
    ("A line too long to show whole.", "bash",
     {"command": "head -c 5000 /dev/zero | tr '\\000' x > demo/wide.txt"}),
    ("Read it: the line is cut.", "read", {"path": "demo/wide.txt", "limit": 1}),
    ("Output larger than the model may see.", "bash", {"command": "seq 1 20000"}),
    ("A command that hangs is stopped.", "bash", {"command": "sleep 10", "timeout_s": 1}),
    ("A mistake the model can recover from.", "read", {"path": "demo/missing.txt"}),
    ("Clean up.", "bash", {"command": "rm -r demo && echo cleaned"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help=".asp.json to use (default: discovery)")
    args = ap.parse_args()
    try:
        sandbox = asp.Client.from_config(args.config)
    except asp.AspError as e:
        print("harness: %s" % e, file=sys.stderr)
        return 1
    with sandbox:
        if sandbox.cwd:  # the config's working folder, made on first use
            sandbox.mkdir(sandbox.cwd, parents=True)
        hello = sandbox.hello(client="asp-example-harness")
        print("sandbox: %s on %s/%s via %s (config %s)\n" % (
            hello.agent, hello.os, hello.arch, sandbox.transport, sandbox.config.path))
        tools = Tools(sandbox)
        for thought, name, params in SCRIPT:
            print("model> %s\n  %s(%s)" % (thought, name, ", ".join(
                "%s=%r" % kv for kv in params.items())))
            result = getattr(tools, name)(**params)
            # this transcript shows less than the model gets: 12 lines of 100 characters
            lines = [x if len(x) <= 100 else x[:60] + " ... " + x[-35:]
                     for x in result.splitlines()]
            if len(lines) > 12:
                lines = lines[:6] + ["  ... (%d lines in all)" % len(lines)] + lines[-5:]
            print("tool>\n" + "\n".join("    " + x for x in lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
