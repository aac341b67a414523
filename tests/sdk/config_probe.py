#!/usr/bin/python3
"""What the Python SDK makes of a .asp.json, printed as config_probe.c prints the C core's.
usage: config_probe.py SDK_DIR [FILE]
       config_probe.py SDK_DIR --batch   (stdin: [{"cwd", "env", "args"}...]; stdout: a
                                          list of results, each as one run would print)"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from asp import _config  # noqa: E402

SSH_KEYS = ("host", "port", "user", "identity_file", "identity_env", "password_env",
            "known_hosts", "host_key_sha256", "host_key", "strict_host_key_checking",
            "connect_timeout_ms", "agent")


def probe(args):
    try:
        v = _config.load(args[0] if args else None)
        d = v.as_dict()
        d["ssh"] = {k: v.ssh.get(k) for k in SSH_KEYS}
        d["ssh"]["port"] = d["ssh"]["port"] or 0
        d["ssh"]["connect_timeout_ms"] = d["ssh"]["connect_timeout_ms"] or 0
        d["ssh"]["strict_host_key_checking"] = v.ssh.get("strict_host_key_checking", False)
        d["document"] = v.document
        return {"view": d}
    except asp.AspError as e:
        return {"code": e.code, "message": e.message, "path": e.path}


if sys.argv[2:3] == ["--batch"]:
    out = []
    for job in json.load(sys.stdin):
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        out.append(probe(job["args"]))
else:
    out = probe(sys.argv[2:])
print(json.dumps(out, sort_keys=True, ensure_ascii=True, separators=(",", ":")))
