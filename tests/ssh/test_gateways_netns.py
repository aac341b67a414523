"""Jump hosts, proxy commands and ~/.ssh/config aliases across network namespaces.

usage: test_gateways_netns.py ASP AGENT SSHD_HELPER

The test re-runs itself in a network namespace of its own (the harness: loopback only),
makes a bastion's namespace joined to it by a veth pair, and a target's namespace joined
only to the bastion's by a second pair; every interface exists before anything connects,
and no namespace has a default route, so the target's address is unreachable from the
harness (checked). The OpenSSH fixture of tests/ssh (SSHD_HELPER) runs as the bastion, and
OpenSSH and Dropbear run as targets. Through ssh.jump: the conformance suite (asp
conformance), native and agent mode, against both targets (the whole table over OpenSSH
native and Dropbear agent mode, the spawn and exec cases over the other two). Through ssh.proxy_command:
`ssh -W %h:%p bastion` (OpenSSH's client) with the conformance suite's write cases, and
`socat - TCP:%h:%p` run inside the bastion's namespace (the shape of a cloud tunnel
command) with an exec and a file round trip. Through a ~/.ssh/config (a temporary HOME) whose
Host alias uses ProxyJump: `asp exec`, `asp hello` saying where each value came from, and
the conformance suite's exec cases. The conformance runs go at once.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

BOUND = 60.0  # seconds for any one condition on a loaded 2-core machine
CONFORMANCE_BOUND = 600.0

asp, agent, helper = (os.path.abspath(a) for a in sys.argv[1:4])

if os.geteuid() != 0:
    print("SKIP: network namespaces need root")
    sys.exit(77)
if os.environ.get("ASP_GATEWAYS_NETNS") != "1":
    env = dict(os.environ, ASP_GATEWAYS_NETNS="1")
    try:
        rc = subprocess.call(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"',
                              "sh", sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                             env=env)
    except FileNotFoundError:
        print("SKIP: unshare not found")
        sys.exit(77)
    sys.exit(rc)

failures = []
cleanups = []


def check(cond, msg, detail=""):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
        if detail:
            print("  " + detail.replace("\n", "\n  "), flush=True)
    return cond


tmp = tempfile.mkdtemp(prefix="asp-gateways-")
cleanups.append(lambda: shutil.rmtree(tmp, ignore_errors=True))


def namespace():
    """A process holding a fresh network namespace (loopback up); its nsenter prefix."""
    p = subprocess.Popen(["unshare", "-n", "sh", "-c",
                          "ip link set lo up && echo up && exec sleep 100000"],
                         stdout=subprocess.PIPE, text=True)
    cleanups.append(lambda: p.kill())
    assert p.stdout.readline().strip() == "up"
    return p.pid, ["nsenter", "-t", str(p.pid), "-n"]


def run(argv):
    subprocess.check_call(argv)


bastion_pid, in_bastion = namespace()
target_pid, in_target = namespace()
BASTION, TARGET = "10.214.0.2", "10.214.1.2"
# harness <-> bastion, then bastion <-> target: made before anything connects
run(["ip", "link", "add", "aspgh0", "type", "veth", "peer", "name", "aspgb0",
     "netns", str(bastion_pid)])
run(["ip", "addr", "add", "10.214.0.1/30", "dev", "aspgh0"])
run(["ip", "link", "set", "aspgh0", "up"])
run(in_bastion + ["ip", "addr", "add", BASTION + "/30", "dev", "aspgb0"])
run(in_bastion + ["ip", "link", "set", "aspgb0", "up"])
run(in_bastion + ["ip", "link", "add", "aspgb1", "type", "veth", "peer", "name", "aspgt0",
                  "netns", str(target_pid)])
run(in_bastion + ["ip", "addr", "add", "10.214.1.1/30", "dev", "aspgb1"])
run(in_bastion + ["ip", "link", "set", "aspgb1", "up"])
run(in_target + ["ip", "addr", "add", TARGET + "/30", "dev", "aspgt0"])
run(in_target + ["ip", "link", "set", "aspgt0", "up"])


def sshd(ns, name, listen, dropbear=False):
    """The fixture's server inside `ns`: (config dict, port, user, key, known_hosts)."""
    cfg = os.path.join(tmp, name + ".json")
    pf = os.path.join(tmp, name + ".port")
    argv = ns + [helper, cfg, "/tmp", "--listen", listen, "--port-file", pf]
    if dropbear:
        argv.append("--dropbear")
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cleanups.append(lambda: (p.stdin.close(), p.wait(BOUND)))
    if p.stdout.readline().strip() != "ready":
        sys.exit("the %s fixture did not start (exit %s)" % (name, p.wait()))
    with open(cfg) as f:
        doc = json.load(f)
    with open(pf) as f:
        port, user, key, kh = f.read().split()
    return doc, int(port), user, key, kh


def write_config(name, doc):
    path = os.path.join(tmp, name + ".asp.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def asp_run(config, args, env=None, timeout=BOUND):
    return subprocess.run([asp, "--config", config] + args, capture_output=True, text=True,
                          timeout=timeout, env=env)


try:
    b_doc, b_port, b_user, b_key, b_kh = sshd(in_bastion, "bastion", BASTION)
    t_doc, t_port, t_user, t_key, t_kh = sshd(in_target, "openssh", TARGET)
    d_doc, d_port, d_user, d_key, d_kh = sshd(in_target, "dropbear", TARGET, dropbear=True)

    # The target is out of the harness's reach: no route to its network.
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((TARGET, t_port))
        reached = True
    except OSError:
        reached = False
    s.close()
    check(not reached, "the target's address is not reachable from the harness's namespace")

    hop = {"host": BASTION, "port": b_port, "user": b_user, "identity_file": b_key,
           "known_hosts": b_kh}

    def through_jump(doc, agent_mode):
        d = json.loads(json.dumps(doc))
        d["ssh"]["jump"] = [hop]
        if agent_mode:
            d["ssh"]["agent"] = agent
        return d

    # The whole table through the jump to each server, native mode to OpenSSH (SFTP, exec
    # and direct-tcpip channels on the tunnelled session) and agent mode to Dropbear; the
    # other two pairs with the cases of one op: past the connection, each pair runs the
    # same transport code as its direct run in test_ssh and test_ssh_dropbear.
    runs = {}  # name -> (config path, --only WORD or None), for the conformance runs
    for name, doc, only in (("jump-openssh-native", through_jump(t_doc, False), None),
                            ("jump-openssh-agent", through_jump(t_doc, True), "spawn"),
                            ("jump-dropbear-native", through_jump(d_doc, False), "exec"),
                            ("jump-dropbear-agent", through_jump(d_doc, True), None)):
        runs[name] = (write_config(name, doc), only)

    # ssh -W %h:%p bastion as the proxy command: OpenSSH's client reaches the target
    w_doc = json.loads(json.dumps(t_doc))
    w_doc["ssh"]["proxy_command"] = [
        "ssh", "-W", "%h:%p", "-p", str(b_port), "-i", b_key, "-o", "BatchMode=yes",
        "-o", "UserKnownHostsFile=" + b_kh, "-o", "StrictHostKeyChecking=yes",
        "-o", "ProxyCommand=none", "-F", "/dev/null", b_user + "@" + BASTION]
    w_doc["ssh"]["agent"] = agent
    runs["proxy-ssh-W-agent"] = (write_config("proxy-ssh-W-agent", w_doc), "write")

    # ~/.ssh/config under a temporary HOME: the alias "sandbox" via ProxyJump bastion
    home = os.path.join(tmp, "home")
    os.makedirs(os.path.join(home, ".ssh"), mode=0o700)
    ssh_config = os.path.join(home, ".ssh", "config")
    with open(ssh_config, "w") as f:
        f.write("# a user's config, as ssh(1) reads it\n"
                "Host bastion\n"
                "  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n"
                "  UserKnownHostsFile %s\n"
                "Host sandbox\n"
                "  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n"
                "  UserKnownHostsFile %s\n  ProxyJump bastion\n"
                % (BASTION, b_port, b_user, b_key, b_kh, TARGET, t_port, t_user, t_key,
                   t_kh))
    alias = {"version": 1, "transport": "ssh", "cwd": "/tmp",
             "ssh": {"config_host": "sandbox", "connect_timeout_ms": 10000}}
    alias_native = write_config("alias-native", alias)
    runs["alias-native"] = (alias_native, "exec")
    home_env = dict(os.environ, HOME=home)

    # socat inside the bastion's namespace as the proxy command: a cloud tunnel's shape
    s_doc = json.loads(json.dumps(t_doc))
    s_doc["ssh"]["proxy_command"] = in_bastion + ["socat", "-", "TCP:%h:%p"]
    socat_cfg = write_config("proxy-socat", s_doc)

    r = asp_run(socat_cfg, ["exec", "--", "sh", "-c", "echo via socat; echo $SSH_CONNECTION"])
    check(r.returncode == 0 and r.stdout.startswith("via socat\n") and
          r.stdout.split()[-2] == TARGET,
          "asp exec through socat in the bastion's namespace (proxy_command)",
          r.stdout + r.stderr)
    blob = os.path.join(tmp, "blob")
    with open(blob, "wb") as f:
        f.write(os.urandom(8 << 20))
    r1 = asp_run(socat_cfg, ["cp", blob, ":/tmp/asp-gateways-blob"])
    r2 = asp_run(socat_cfg, ["cp", ":/tmp/asp-gateways-blob", blob + ".back"])
    same = r1.returncode == 0 and r2.returncode == 0 and \
        open(blob, "rb").read() == open(blob + ".back", "rb").read()
    check(same, "8 MiB up and down through the socat proxy, intact", r1.stderr + r2.stderr)
    asp_run(socat_cfg, ["exec", "--", "rm", "-f", "/tmp/asp-gateways-blob"])

    r = asp_run(alias_native, ["exec", "--", "sh", "-c", "echo via alias; echo $SSH_CONNECTION"],
                env=home_env)
    check(r.returncode == 0 and r.stdout.startswith("via alias\n") and
          r.stdout.split()[-2] == TARGET,
          "asp exec through the ~/.ssh/config alias (ProxyJump)", r.stdout + r.stderr)
    r = asp_run(alias_native, ["--json", "hello"], env=home_env)
    ok = r.returncode == 0
    if ok:
        route = json.loads(r.stdout).get("route", {})
        hops = route.get("hops", [])
        ok = len(hops) == 2 and hops[0]["name"] == "bastion" and \
            hops[1]["host"]["value"] == TARGET and \
            hops[1]["host"]["from"] == "HostName at %s:9" % ssh_config and \
            hops[1]["port"]["from"] == "Port at %s:10" % ssh_config and \
            route.get("jump_from") == "ProxyJump at %s:14" % ssh_config
    check(ok, "asp --json hello says where each value came from (the file and line)",
          r.stdout + r.stderr)
    r = asp_run(alias_native, ["hello"], env=home_env)
    check(r.returncode == 0 and ("HostName at %s:9" % ssh_config) in r.stdout,
          "asp hello says it too", r.stdout + r.stderr)

    # The conformance suite: through the jumps as above, the cases of one op through
    # ssh -W and the alias (the other paths of those are the jump's), all at once.
    results = {}

    def conformance(name):
        config, only = runs[name]
        env = home_env if name.startswith("alias") else None
        try:
            results[name] = asp_run(config, ["conformance"] + (["--only", only] if only else []),
                                    env=env, timeout=CONFORMANCE_BOUND)
        except subprocess.TimeoutExpired as e:
            results[name] = e

    names = list(runs)
    threads = [threading.Thread(target=conformance, args=(n,)) for n in names]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("  (the conformance runs: %.0f s)" % (time.monotonic() - t0), flush=True)
    for name in names:
        r = results[name]
        if isinstance(r, subprocess.TimeoutExpired):
            check(False, "conformance over %s" % name, "timed out")
            continue
        tail = (r.stdout.strip().splitlines() or [""])[-1]
        check(r.returncode == 0 and " 0 failed" in tail, "conformance over %s: %s" % (name, tail),
              r.stdout[-3000:] + r.stderr[-2000:])
finally:
    for fn in reversed(cleanups):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            print("cleanup: %s" % e)

if failures:
    print("%d failed: %s" % (len(failures), "; ".join(failures)))
    sys.exit(1)
print("all passed")
