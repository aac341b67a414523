#!/bin/sh
# Adding an op to the spec needs no other file: a copy of the spec with one more op
# (frobnicate) builds asp-agent and the SDKs, the agent answers it unsupported over stdio
# and over HTTP (asp-agent --listen), hello does not list it, and both SDKs have the
# method. The source tree is used as it is: only the spec differs.
# Usage: new_op.sh SOURCE_ROOT
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$src/spec/protocol.json" "$tmp/protocol.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["ops"].append({"name": "frobnicate", "since": s["protocol"], "doc": "A test op.",
                 "params": [{"name": "level", "type": "uint", "default": 0, "since": s["protocol"],
                             "doc": "How much."}],
                 "result": [{"name": "done", "type": "bool", "since": s["protocol"], "doc": "Done."}]})
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
# Only what the proof needs: the responder and the generated SDKs.
meson setup "$tmp/build" "$src" --werror -Dprotocol_spec="$tmp/protocol.json" \
	-Dtransport_ssh=disabled -Dtests=disabled \
	-Dstatic_agent=disabled >"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
ninja -C "$tmp/build" sandbox-agent/asp-agent sdkgen/sdk-python.stamp \
	sdkgen/sdk-typescript.stamp >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }
grep -q "async frobnicate(params" "$tmp/build/sdkgen/typescript/src/client.ts" ||
	{ echo "FAIL: the TypeScript SDK has no frobnicate"; exit 1; }
cat >"$tmp/check.py" <<'PY'
import sys
import asp
how, where = sys.argv[1], sys.argv[2]
c = asp.Client.stdio([where, "--stdio"]) if how == "stdio" else asp.Client.http(where)
try:
    h = c.hello()
    assert "frobnicate" not in h.ops, h.ops
    assert "exec" in h.ops and "edit" in h.ops, h.ops
    try:
        c.frobnicate(level=3)
        raise SystemExit("FAIL: frobnicate answered over " + how)
    except asp.AspError as e:
        assert e.code == "unsupported", (how, e.code)
        print("ok: frobnicate is unsupported over %s: %s" % (how, e))
finally:
    c.close()
PY
agent="$tmp/build/sandbox-agent/asp-agent"
export PYTHONPATH="$tmp/build/sdkgen/python"
/usr/bin/python3 "$tmp/check.py" stdio "$agent"
/usr/bin/python3 "$src/tests/sdk/with_listener.py" "$agent" -- \
	/usr/bin/python3 "$tmp/check.py" http {url}
echo "ok: a new op needs only the spec"
