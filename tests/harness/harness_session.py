"""What the harness tests share: a sandbox that is not the harness's machine (an asp-agent
in its own UTS namespace, named asp-sandbox, with its own directory), a harness project
directory that differs from it, the scripted model server, and the checks of where each
tool call acted. Runs inside tests/common/npm_run.sh's network namespace (loopback only)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SANDBOX_HOST = "asp-sandbox"
# Files the sandbox starts with: a module and its tests, so "run the tests" has work to do.
SEED = {
    "src/calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": (
        "import sys, unittest\nsys.path.insert(0, 'src')\nimport calc, greet\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n"
        "    def test_greet(self):\n        self.assertEqual(greet.greet('ada'), 'Hello, ada!')\n"
    ),
}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class Session:
    """A temporary world: root/project (the harness's), root/sandbox/work (the sandbox's),
    root/home (the harness's HOME)."""

    def __init__(self, asp, agent, scripted_model):
        self.asp, self.agent, self.scripted_model = (os.path.abspath(p) for p in
                                                     (asp, agent, scripted_model))
        self.root = tempfile.mkdtemp(prefix="asp-harness-")
        self.project = os.path.join(self.root, "project")
        self.sandbox = os.path.join(self.root, "sandbox", "work")
        self.home = os.path.join(self.root, "home")
        for d in (self.project, self.sandbox, self.home):
            os.makedirs(d)
        for rel, text in SEED.items():
            self.put(os.path.join(self.sandbox, rel), text)
        # the sandbox: its own host name; the workspace maps project onto sandbox/work
        agent_cmd = "hostname %s && exec %s --stdio" % (SANDBOX_HOST, self.agent)
        self.put(os.path.join(self.project, ".asp.json"), json.dumps({
            "version": 1, "transport": "stdio", "cwd": self.sandbox,
            "stdio": {"command": ["unshare", "-u", "sh", "-c", agent_cmd]}}, indent=1))
        self.model = None
        self.log = os.path.join(self.root, "model.jsonl")

    @staticmethod
    def put(path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def project_files(self):
        """Every file under the project (the harness's side), relative."""
        out = set()
        for d, _, files in os.walk(self.project):
            for f in files:
                out.add(os.path.relpath(os.path.join(d, f), self.project))
        return out

    def start_model(self, steps):
        script = os.path.join(self.root, "script.json")
        with open(script, "w") as f:
            json.dump({"steps": steps}, f)
        port_file = os.path.join(self.root, "port")
        self.model = subprocess.Popen(
            [sys.executable, self.scripted_model, script, self.log, port_file],
            stdin=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if self.model.poll() is not None or time.monotonic() > deadline:
                fail("the scripted model server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            return int(f.read())

    def env(self):
        """A harness environment that reaches nothing but loopback and writes only here."""
        e = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
        e.update(HOME=self.home, XDG_CONFIG_HOME=os.path.join(self.home, ".config"),
                 XDG_DATA_HOME=os.path.join(self.home, ".local", "share"),
                 XDG_CACHE_HOME=os.path.join(self.home, ".cache"),
                 XDG_STATE_HOME=os.path.join(self.home, ".local", "state"),
                 ASP_BIN=self.asp, NO_COLOR="1", CI="1")
        e.pop("ASP_CONFIG", None)
        return e

    def run(self, argv, env, timeout=int(os.environ.get("HARNESS_TIMEOUT", "150"))):
        """Runs the harness in the project; its output, or a failure naming the time out."""
        t0 = time.monotonic()
        env = dict(env, PWD=self.project)  # harnesses take their directory from PWD
        p = subprocess.Popen(argv, cwd=self.project, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            sys.stderr.write(out.decode("utf-8", "replace")[-4000:])
            fail("%s did not finish within %d s" % (argv[0], timeout))
        text = out.decode("utf-8", "replace")
        print("%s ran %.1f s, exit %d" % (os.path.basename(argv[0]), time.monotonic() - t0,
                                         p.returncode))
        return p.returncode, text

    def requests(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def close(self):
        if os.environ.get("KEEP"):
            print("kept", self.root)
            return
        if self.model:
            self.model.stdin.close()
            self.model.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def chat_tool_results(requests):
    """Every tool result a chat-completions harness sent back: {call_id: text}."""
    out = {}
    for r in requests:
        for m in r["body"].get("messages", []):
            if m.get("role") == "tool":
                c = m.get("content")
                if isinstance(c, list):
                    c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
                out[m.get("tool_call_id")] = c
    return out


def check_result(results, call_id, *needles, absent=()):
    text = results.get(call_id)
    if text is None:
        fail("no result for %s came back to the model (results: %s)" % (call_id, results))
    for n in needles:
        if n not in text:
            fail("the result of %s lacks %r: %r" % (call_id, n, text))
    for n in absent:
        if n in text:
            fail("the result of %s has %r: %r" % (call_id, n, text))
    print("ok %s: %s" % (call_id, text.strip().replace("\n", " | ")[:160]))


def anthropic_tool_results(requests):
    """Every tool result a Messages harness (Claude Code) sent back: {tool_use_id: text};
    a result marked is_error gets "ERROR: " before its text."""
    out = {}
    for r in requests:
        for m in r["body"].get("messages", []):
            if m.get("role") != "user" or not isinstance(m.get("content"), list):
                continue
            for b in m["content"]:
                if not isinstance(b, dict) or b.get("type") != "tool_result":
                    continue
                c = b.get("content")
                if isinstance(c, list):
                    c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
                out[b.get("tool_use_id")] = ("ERROR: " if b.get("is_error") else "") + (c or "")
    return out
