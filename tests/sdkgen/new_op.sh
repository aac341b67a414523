#!/bin/sh
# Adding an op to the spec needs no other file: a copy of the spec with one more op
# (frobnicate) builds asp-agent, libasp and the SDKs, the agent answers it unsupported over
# stdio and over HTTP (asp-agent --listen), and so does the SSH transport in native mode
# against a real sshd (through the C client, given SSHD_HELPER), hello does not list it,
# and both SDKs and the C client have it. The source tree is used as it is: only the spec
# differs.
# Usage: new_op.sh SOURCE_ROOT [SSHD_HELPER]
set -eu
src=$1
helper=${2:-}
tmp=$(mktemp -d)
trap 'exec 4>&- 2>/dev/null; wait; rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$src/spec/protocol.json" "$tmp/protocol.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["ops"].append({"name": "frobnicate", "since": s["protocol"], "doc": "A test op.",
                 "params": [{"name": "level", "type": "uint", "default": 0, "since": s["protocol"],
                             "doc": "How much."}],
                 "result": [{"name": "done", "type": "bool", "since": s["protocol"], "doc": "Done."}]})
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
# Only what the proof needs: the responder, the generated SDKs and, for SSH, libasp.
ssh=disabled lib=
if [ -n "$helper" ]; then
	ssh=enabled lib=libasp.so.0.1.0
fi
meson setup "$tmp/build" "$src" --werror -Dprotocol_spec="$tmp/protocol.json" \
	-Dtransport_ssh=$ssh -Dtests=disabled \
	-Dstatic_agent=disabled >"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
ninja -C "$tmp/build" sandbox-agent/asp-agent sdkgen/sdk-python.stamp \
	sdkgen/sdk-typescript.stamp $lib >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }
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
if [ -n "$helper" ]; then
	# The C client over SSH, native mode: the transport fills no frobnicate.
	cat >"$tmp/frob.c" <<'C'
#include <asp/asp.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	asp_error err;
	asp_client *c;
	if (argc != 2 || asp_client_open_path(argv[1], &c, &err) != ASP_OK) {
		fprintf(stderr, "FAIL: cannot open %s: %s\n", argc == 2 ? argv[1] : "?", err.message);
		return 1;
	}
	asp_arena *a = asp_arena_new();
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	int rc = 1;
	if (!a || asp_hello(c, &hp, &hr, a, &err) != ASP_OK) {
		fprintf(stderr, "FAIL: hello over ssh: %s\n", a ? err.message : "out of memory");
		goto out;
	}
	for (size_t i = 0; i < hr.ops.count; i++)
		if (strcmp(hr.ops.items[i], "frobnicate") == 0) {
			fprintf(stderr, "FAIL: hello over ssh lists frobnicate\n");
			goto out;
		}
	asp_frobnicate_params fp;
	asp_frobnicate_params_init(&fp);
	fp.level = 3;
	asp_frobnicate_result fr;
	asp_status st = asp_frobnicate(c, &fp, &fr, a, &err);
	if (st != ASP_E_UNSUPPORTED) {
		fprintf(stderr, "FAIL: frobnicate over ssh: status %d, not unsupported\n", (int)st);
		goto out;
	}
	printf("ok: frobnicate is unsupported over ssh (native): %s\n", err.message);
	rc = 0;
out:
	asp_arena_free(a);
	asp_client_free(c);
	return rc;
}
C
	cc -std=c11 -Wall -Werror -I"$src/core/include" -I"$tmp/build/core/include" \
		-o "$tmp/frob" "$tmp/frob.c" "$tmp/build/libasp.so.0.1.0" \
		-Wl,-rpath,"$tmp/build" || { echo "FAIL: the C client has no frobnicate"; exit 1; }
	# sshd runs until the helper's stdin (fd 4 here) closes; it says "ready" once the
	# config is written.
	mkfifo "$tmp/hold"
	"$helper" "$tmp/ssh.json" "$tmp" <"$tmp/hold" >"$tmp/helper.out" &
	exec 4>"$tmp/hold"
	i=0
	until grep -q ready "$tmp/helper.out" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -le 600 ] || { echo "FAIL: the sshd fixture did not start"; exit 1; }
		sleep 0.05 # polling for the helper's word, bounded (30 s)
	done
	"$tmp/frob" "$tmp/ssh.json"
	exec 4>&-
	wait
fi
echo "ok: a new op needs only the spec"
