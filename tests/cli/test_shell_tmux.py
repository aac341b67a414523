"""asp shell, asp exec -t and asp attach as a person uses them: in a tmux pane, driven by
send-keys and read by capture-pane, against a real responder over one transport.

usage: test_shell_tmux.py ASP AGENT TRANSPORT [SSHD_HELPER]
TRANSPORT: stdio (asp-agent --stdio), http (asp-agent --listen, WebSocket), ssh (OpenSSH,
native), ssh-agent (OpenSSH, agent mode) or dropbear (Dropbear, native).

Every wait polls capture-pane (or a file) for an expected text within a generous bound;
nothing sleeps to synchronise. Each tmux server has its own socket in a temp folder.
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))

BOUND = 40.0  # seconds for any one expected text on a loaded 2-core machine
PROMPT = "asp-test-prompt$ "
PROMPT_RX = re.escape(PROMPT.rstrip())  # capture-pane drops a line's trailing blanks

asp, agent = (os.path.abspath(a) for a in sys.argv[1:3])
transport = sys.argv[3]
helper = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else None
tmp = tempfile.mkdtemp(prefix="asp-shell-tmux-")
sock = os.path.join(tmp, "tmux.sock")
conf = os.path.join(tmp, "tmux.conf")
with open(conf, "w") as f:
    # No status line: the pane is the window's full size from its start (a later change
    # would be a resize racing asp's start).
    f.write("set -g status off\n")
failures = []
cleanups = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def tmux(*args, check_rc=True):
    p = subprocess.run(["tmux", "-S", sock, "-f", conf] + list(args),
                       capture_output=True, text=True, timeout=60)
    if check_rc and p.returncode != 0:
        raise RuntimeError("tmux %s: %s" % (" ".join(args), p.stderr.strip()))
    return p.stdout


def wait_until(pred, what, bound=BOUND):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)  # the poll's period, not a synchronisation
    return None


# ---- the responder per transport ------------------------------------------------------

home = os.path.join(tmp, "home")
os.makedirs(home)
# The login shell's startup file sets the prompt: asp shell must not override it.
with open(os.path.join(home, ".bash_profile"), "w") as f:
    f.write("PS1=%s\n" % shlex.quote(PROMPT))

cfg = os.path.join(tmp, "asp.json")
listener = None
ssh_proc = None
if transport == "stdio":
    with open(cfg, "w") as f:
        json.dump({"version": 1, "transport": "stdio", "cwd": tmp,
                   "stdio": {"command": [agent, "--stdio"]}}, f)
elif transport == "http":
    from listen_agent import start_agent
    log = open(os.path.join(tmp, "listener.log"), "w")
    env = dict(os.environ, SHELL="/bin/bash", HOME=home)
    listener, (host, port) = start_agent(agent, log, env=env)
    cleanups.append(lambda: (listener.kill(), listener.wait()))
    with open(cfg, "w") as f:
        json.dump({"version": 1, "transport": "http", "cwd": tmp,
                   "http": {"url": "http://%s:%d" % (host, port), "websocket": True}}, f)
elif transport in ("ssh", "ssh-agent", "dropbear"):
    args = [helper, cfg, tmp]
    if transport == "ssh-agent":
        args += ["--agent", agent]
    if transport == "dropbear":
        args += ["--dropbear"]
    ssh_proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = ssh_proc.stdout.readline()  # blocks until the fixture is up or failed
    if line.strip() != "ready":
        sys.exit("the sshd fixture did not start (exit %s)" % ssh_proc.wait())
    cleanups.append(lambda: (ssh_proc.stdin.close(), ssh_proc.wait(timeout=60)))
else:
    sys.exit("unknown transport " + transport)


# ---- a pane running asp ---------------------------------------------------------------

class Pane:
    """A tmux session whose one pane runs `sh -c 'ASP...; echo $? > rc; stty -a > stty'`.
    A plain sh (no job control) never touches the terminal's mode itself, so what stty
    shows afterwards is what asp left."""
    n = 0

    def __init__(self, asp_args, width=100, height=30, env=None):
        Pane.n += 1
        self.name = "t%d" % Pane.n
        self.rc_file = os.path.join(tmp, self.name + ".rc")
        self.stty_file = os.path.join(tmp, self.name + ".stty")
        cmd = " ".join(shlex.quote(a) for a in [asp, "--config", cfg] + asp_args)
        script = ("%s; echo $? > %s; stty -a > %s; echo ASP-EXITED-$(cat %s); exec cat"
                  % (cmd, self.rc_file, self.stty_file, self.rc_file))
        env_args = []
        for k, v in (env or {}).items():
            env_args += ["-e", "%s=%s" % (k, v)]
        tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
             *env_args, "sh", "-c", script)
        cleanups.append(lambda: tmux("kill-session", "-t", self.name, check_rc=False))

    def keys(self, *keys):
        tmux("send-keys", "-t", self.name, *keys)

    def line(self, text):
        tmux("send-keys", "-t", self.name, "-l", text)
        tmux("send-keys", "-t", self.name, "Enter")

    def text(self):
        return tmux("capture-pane", "-p", "-t", self.name, check_rc=False)

    def wait(self, pattern, what, bound=BOUND):
        rx = re.compile(pattern, re.M)
        m = wait_until(lambda: rx.search(self.text()), what, bound)
        if not m:
            fail("%s: no %r in the pane within %.0f s; it shows:\n%s"
                 % (what, pattern, bound, self.text()))
        return m

    def size(self):
        h, w = tmux("display-message", "-p", "-t", self.name,
                    "#{pane_height} #{pane_width}").split()
        return int(h), int(w)

    def pane_pid(self):
        return int(tmux("display-message", "-p", "-t", self.name, "#{pane_pid}").strip())

    def asp_pid(self):
        """asp: the child of the pane's sh."""
        def find():
            pid = self.pane_pid()
            try:
                with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                    kids = f.read().split()
            except OSError:
                return None
            return int(kids[0]) if kids else None
        return wait_until(find, "asp's pid")

    def finished(self, what):
        """(exit code, stty -a) once asp has returned, or (None, '') after a failure."""
        if not self.wait(r"ASP-EXITED-\d+", what + ": asp returns"):
            return None, ""
        with open(self.rc_file) as f:
            rc = int(f.read().strip())
        with open(self.stty_file) as f:
            stty = f.read()
        return rc, stty


def restored(stty):
    """stty -a shows canonical mode and echo on: the terminal is cooked again."""
    words = stty.replace(";", " ").split()
    return "icanon" in words and "echo" in words and "isig" in words


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


SHELL_ENV = {"SHELL": "/bin/bash", "HOME": home}
shell_args = ["shell", "--env", "HOME=" + home]

# ---- 1. the login shell: prompt, output, size, resize, Ctrl-C, job control, exit --------

p = Pane(shell_args, env=SHELL_ENV)
if p.wait(PROMPT_RX, "the login shell's prompt (PS1 from ~/.bash_profile)"):
    check(True, "the login shell shows the user's prompt")
    p.line("echo out-$((6*7)) TERM=$TERM")
    check(p.wait(r"^out-42 TERM=\S+", "a command's output") is not None,
          "a command's output appears")
    h, w = p.size()
    p.line("stty size")
    check(p.wait(r"^%d %d\s*$" % (h, w), "stty size") is not None,
          "stty size is the pane's %dx%d" % (h, w))
    p.line("awk '{print ($6==$1) ? \"leader-yes\" : \"leader-no\"}' /proc/$$/stat; tty")
    check(p.wait(r"^leader-yes", "session leader") is not None,
          "the shell leads its session on the terminal")
    check(p.wait(r"^/dev/pts/\d+", "tty") is not None, "the shell's stdin is a pty")

    # A new size: tmux resizes the pane, asp gets SIGWINCH and forwards it.
    tmux("resize-window", "-t", p.name, "-x", "120", "-y", "40")
    new = wait_until(lambda: p.size() != (h, w) and p.size(), "the pane resized")
    check(bool(new), "tmux resized the window")
    if new:
        def resized():
            p.line("clear; stty size")
            rx = re.compile(r"^%d %d\s*$" % new, re.M)
            return wait_until(lambda: rx.search(p.text()), "stty size", 3.0)
        got = wait_until(resized, "the new size in the sandbox")  # re-typed until it shows
        check(bool(got), "stty size follows the resize to %dx%d" % new)

    # Ctrl-C ends the foreground job only; the shell answers the next command.
    p.line("sh -c 'echo sleeping-$$; exec sleep 100'")
    if p.wait(r"^sleeping-\d+", "the foreground job started"):
        p.keys("C-c")
        p.line("echo after-$((1+1))")
        check(p.wait(r"^after-2", "the shell after Ctrl-C", bound=BOUND) is not None,
              "Ctrl-C ends sleep 100 and the shell answers")
    # Job control: a background job and jobs.
    p.line("sleep 100 & jobs; kill %1")
    check(p.wait(r"^\[1\]\+?\s+Running\s+sleep 100", "jobs") is not None,
          "job control: jobs lists the background job")

    p.line("exit 3")
    rc, stty = p.finished("exit 3")
    check(rc == 3, "exit 3 ends asp with status 3 (got %s)" % rc)
    check(restored(stty), "the terminal is restored after exit (stty -a: icanon echo isig)")

# ---- 2. asp shell -- ARGV: runs ARGV itself, no shell parsing --------------------------

p = Pane(["shell", "--", "env", "PS1=argv-prompt> ", "bash", "--norc", "--noprofile", "-i"])
if check(p.wait(r"argv-prompt>", "the prompt of ARGV's bash") is not None,
         "asp shell -- ARGV runs ARGV (its PS1 shows)"):
    p.line("echo 'a  b' $0")
    check(p.wait(r"^a  b bash", "ARGV's output") is not None, "ARGV's shell runs commands")
    p.keys("C-d")
    rc, stty = p.finished("Ctrl-D")
    check(rc == 0, "Ctrl-D ends the shell: status 0 (got %s)" % rc)
    check(restored(stty), "the terminal is restored after Ctrl-D")

# ---- 3. SIGTERM to asp from outside: restored, 255, a one-line message ------------------

p = Pane(shell_args, env=SHELL_ENV)
if p.wait(PROMPT_RX, "the prompt before SIGTERM"):
    pid = p.asp_pid()
    if check(pid is not None, "found asp's pid"):
        os.kill(pid, signal.SIGTERM)
        rc, stty = p.finished("SIGTERM")
        check(rc == 255, "SIGTERM: asp exits 255 (got %s)" % rc)
        check(restored(stty), "SIGTERM: the terminal is restored")
        text = p.text()
        said = re.search(r"^asp: shell: got TERM", text, re.M) is not None
        check(said, "SIGTERM: one line on stderr says so" +
              ("" if said else "; the pane shows:\n" + text))

# ---- 4. the responder dies: restored, 255 ----------------------------------------------

victim = None
if transport == "stdio":
    p = Pane(shell_args, env=SHELL_ENV)
    if p.wait(PROMPT_RX, "the prompt before the agent is killed"):
        pid = p.asp_pid()
        kids = wait_until(lambda: pid and children(pid), "asp's agent") or []
        victim = kids[0] if kids else None
elif transport == "http":
    p = Pane(shell_args, env=SHELL_ENV)
    if p.wait(PROMPT_RX, "the prompt before the agent is killed"):
        victim = listener.pid
elif ssh_proc:
    p = Pane(shell_args, env=SHELL_ENV)
    if p.wait(PROMPT_RX, "the prompt before the SSH server's sessions are killed"):
        victim = -1  # the fixture kills its server's connection processes
if victim == -1:
    ssh_proc.stdin.write("kill-sessions\n")
    ssh_proc.stdin.flush()
    answer = ssh_proc.stdout.readline().split()
    check(len(answer) == 2 and int(answer[1]) > 0, "the SSH connection's server was killed")
if victim:
    if victim > 0:
        os.kill(victim, signal.SIGKILL)
    rc, stty = p.finished("agent killed")
    check(rc == 255, "agent killed: asp exits 255 (got %s)" % rc)
    check(restored(stty), "agent killed: the terminal is restored")
    check(re.search(r"^asp: shell: .*(lost the connection|transport_error)",
                    p.text(), re.M) is not None,
          "agent killed: one line on stderr says the connection was lost")
    if transport == "http":  # a new listener for what follows
        log = open(os.path.join(tmp, "listener2.log"), "w")
        from listen_agent import start_agent
        listener, (host, port) = start_agent(
            agent, log, env=dict(os.environ, SHELL="/bin/bash", HOME=home))
        cleanups.append(lambda: (listener.kill(), listener.wait()))
        with open(cfg, "w") as f:
            json.dump({"version": 1, "transport": "http", "cwd": tmp,
                       "http": {"url": "http://%s:%d" % (host, port), "websocket": True}}, f)

# ---- 5. asp exec -t without a terminal: 24x80 or LINES/COLUMNS, exit code ---------------

env = dict(os.environ)
env.pop("LINES", None)
env.pop("COLUMNS", None)
r = subprocess.run([asp, "--config", cfg, "exec", "-t", "--", "sh", "-c",
                    "stty size; test -t 0 && echo on-a-tty; exit 7"],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env)
out = r.stdout.decode(errors="replace")
check(r.returncode == 7, "exec -t: the command's exit code (7, got %d; stderr %r)"
      % (r.returncode, r.stderr))
check("24 80\r\n" in out and "on-a-tty\r\n" in out,
      "exec -t without a terminal: 24x80, on a tty, CRLF output (got %r)" % out)
env.update(LINES="33", COLUMNS="111")
r = subprocess.run([asp, "--config", cfg, "exec", "-t", "-c", "stty size; printf '%s\\n' $TERM"],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                   env=dict(env, TERM="vt100"))
out = r.stdout.decode(errors="replace")
check(r.returncode == 0 and "33 111\r\n" in out and "vt100\r\n" in out,
      "exec -t -c: $LINES x $COLUMNS and $TERM (got %d %r)" % (r.returncode, out))
r = subprocess.run([asp, "--config", cfg, "exec", "-t", "--", "sh", "-c", "kill -TERM $$"],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env)
check(r.returncode == 128 + 15, "exec -t: a signal's death is 128+N (got %d)" % r.returncode)
# stdin that is not a terminal is typed in, then Ctrl-D: cat ends.
r = subprocess.run([asp, "--config", cfg, "exec", "-t", "--", "cat"], input=b"typed-line\n",
                   capture_output=True, timeout=120, env=env)
check(r.returncode == 0 and r.stdout.count(b"typed-line") >= 1,
      "exec -t: a non-terminal stdin is typed in and ends with Ctrl-D (got %d %r)"
      % (r.returncode, r.stdout))

# ---- 6. exec -t in a pane: raw mode, Ctrl-C is a key for the remote -----------------------

p = Pane(["exec", "-t", "--", "sh", "-c",
          "trap 'echo got-int; exit 9' INT; echo ready-for-int; while :; do sleep 1; done"])
if p.wait(r"^ready-for-int", "exec -t's command started"):
    p.keys("C-c")
    rc, stty = p.finished("exec -t Ctrl-C")
    check(rc == 9, "exec -t: Ctrl-C reaches the remote job (trap ran; status 9, got %s)" % rc)
    check(re.search(r"got-int", p.text()) is not None, "exec -t: the trap's output")
    check(restored(stty), "exec -t: the terminal is restored")

# ---- 7. attach to a terminal process (a responder whose processes outlive connections) --

if transport == "http":
    p = Pane(shell_args, env=SHELL_ENV)
    if p.wait(PROMPT_RX, "the prompt of the shell to attach to"):
        p.line("echo before-attach-$((2*3))")
        p.wait(r"^before-attach-6", "output before the attach")
        r = subprocess.run([asp, "--config", cfg, "ps"], capture_output=True, text=True,
                           timeout=60)
        rows = [ln.split() for ln in r.stdout.splitlines()[1:]]
        shells = [row[0] for row in rows if len(row) > 2 and row[1] == "running"
                  and row[2] == "shell"]
        check(bool(shells), "asp ps shows the running shell with the tag shell:\n" + r.stdout)
        if shells:
            q = Pane(["attach", shells[-1]], width=90, height=25)
            check(q.wait(r"^before-attach-6", "the attach replays") is not None,
                  "asp attach replays the terminal's output")
            q.line("echo typed-in-attach-$((3*3))")
            check(q.wait(r"^typed-in-attach-9", "keys typed in the attach") is not None,
                  "asp attach types into the terminal")
            check(p.wait(r"^typed-in-attach-9", "the shell's own pane") is not None,
                  "the first asp shell shows what the attach typed")
            q.keys("C-]")
            rc, stty = q.finished("Ctrl-] detaches")
            check(rc == 0, "Ctrl-] detaches with status 0 (got %s)" % rc)
            check(restored(stty), "attach: the terminal is restored")
            p.line("echo still-there")
            check(p.wait(r"^still-there", "the shell after the detach") is not None,
                  "the shell keeps running after the detach")
        p.line("exit")
        p.finished("exit after attach")

for c in reversed(cleanups):
    try:
        c()
    except Exception as e:  # noqa: BLE001 -- cleanup must go on
        print("cleanup: %s" % e)
tmux("kill-server", check_rc=False)
if failures:
    print("%d check(s) failed over %s" % (len(failures), transport))
    sys.exit(1)
print("all checks passed over " + transport)
