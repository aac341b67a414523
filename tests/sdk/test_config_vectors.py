#!/usr/bin/python3
"""The table of bad .asp.json files (tests/vectors/config/bad_configs.json) through the C
core, the Python SDK and, with --ts, the TypeScript SDK: each must refuse each file with
exactly the message the table holds ("{file}" standing for the file's absolute path):
the same file, line:column, key path and words about what was expected.

usage: test_config_vectors.py VECTORS C_PROBE PYTHON_SDK_DIR [--ts TS_SDK_DIR]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
vectors, c_probe, py_sdk = (os.path.abspath(a) for a in sys.argv[1:4])
ts_sdk = os.path.abspath(sys.argv[sys.argv.index("--ts") + 1]) if "--ts" in sys.argv else None


def run(argv, stdin=None):
    p = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    if p.returncode != 0:
        return {"crash": p.returncode, "stderr": p.stderr.decode("utf-8", "replace")[-800:]}
    return json.loads(p.stdout)


with open(vectors, encoding="utf-8") as f:
    cases = json.load(f)["cases"]
tmp = tempfile.mkdtemp(prefix="asp-config-vectors-")
try:
    env = {k: v for k, v in os.environ.items() if k != "ASP_CONFIG"}
    files = []
    for case in cases:
        d = os.path.join(tmp, case["name"])
        os.makedirs(d)
        files.append(os.path.join(d, ".asp.json"))
        with open(files[-1], "wb") as f:
            f.write(case["text"].encode("utf-8"))
    jobs = json.dumps([{"cwd": tmp, "env": env, "args": [p]} for p in files]).encode()
    results = {"C": [run([c_probe, p]) for p in files],
               "Python": run(["/usr/bin/python3", os.path.join(here, "config_probe.py"),
                              py_sdk, "--batch"], jobs)}
    if ts_sdk:
        results["TypeScript"] = run(["node", os.path.join(here, "config_probe.mjs"), ts_sdk,
                                     "--batch"], jobs)
    failed = 0
    for i, case in enumerate(cases):
        want = {"code": case.get("code", "invalid_argument"),
                "message": case["message"].replace("{file}", files[i]), "path": files[i]}
        bad = {}
        for lang, res in results.items():
            got = res[i] if isinstance(res, list) else res
            if got != want:
                bad[lang] = got
        if bad:
            failed += 1
            print("FAIL - %s\n   %-10s %s" % (case["name"], "expected", json.dumps(want)))
            for lang, got in bad.items():
                print("   %-10s %s" % (lang, json.dumps(got)))
        else:
            print("ok - %s: %s" % (case["name"], want["message"].replace(files[i], "FILE")))
    print("%d cases, %d failed, languages: %s" % (len(cases), failed, ", ".join(results)))
finally:
    shutil.rmtree(tmp)
sys.exit(1 if failed else 0)
