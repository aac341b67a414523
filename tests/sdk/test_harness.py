#!/usr/bin/python3
"""examples/harness runs against the local agent and its tools behave as their policy says.
usage: test_harness.py SDK_DIR HARNESS CONFIG"""
import os
import subprocess
import sys

sdk, harness, config = sys.argv[1:4]
env = dict(os.environ, PYTHONPATH=sdk, PYTHONDONTWRITEBYTECODE="1")
p = subprocess.run(["/usr/bin/python3", harness, "--config", config], env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
out = p.stdout.decode("utf-8", "replace")
want = ["sandbox: asp-agent", "hello, brain", "hello, hands", "1500\tline 1500",
        "[1496 more lines; read again with offset=1505]", "[... line cut at 2000 characters]",
        "lines in all)", "    19999", "[timed out after 1 s; the command was killed]",
        "error: cannot read demo/missing.txt: no such file", "cleaned"]
missing = [w for w in want if w not in out]
print(out)
if p.returncode != 0 or missing:
    print("FAIL: exit %d, missing %r" % (p.returncode, missing))
    sys.exit(1)
print("1 passed, 0 failed")
