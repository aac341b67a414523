#!/usr/bin/env bash
# The .asp.json rules are derived from the schema: a key added to a copy of
# spec/asp.schema.json, with no other file touched, is accepted with the right type and
# refused with the wrong one by the C core, the Python SDK and the TypeScript SDK, each
# built from what asp-sdkgen generates from the copy (the C tables compiled with the
# core's unchanged config sources into a probe). The same files against the build's own
# probe show the key is new: it is unknown there.
# usage: config_derived.sh SDKGEN SRC_ROOT C_PROBE TS_WORK CC...
#   TS_WORK: the build's prepared TypeScript work folder (its node_modules holds tsc)
#   CC...: the build's C compiler command, all its words (e.g. ccache cc)
set -euo pipefail
sdkgen=$1 src=$2 build_probe=$3 ts_work=$(cd "$4" && pwd)
shift 4
cc=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

# 1. the copy: spec/ with one optional key more
mkdir "$tmp/spec"
cp "$src/spec/protocol.json" "$src/spec/asp.schema.json" "$src/spec/asp.v0.schema.json" "$tmp/spec/"
python3 - "$tmp/spec/asp.schema.json" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    schema = json.load(f)
schema["properties"]["tty_default_rows"] = {"description": "Rows of a new terminal.",
                                            "type": "integer", "minimum": 1}
with open(sys.argv[1], "w") as f:
    json.dump(schema, f, indent=2)
PY

# 2. everything generated from the copy
"$sdkgen" --config-schema "$tmp/spec/asp.schema.json" --config-c "$tmp/config_tables.c"
"${cc[@]}" -std=c11 -D_GNU_SOURCE -I"$src/core/include" -I"$src/core/src" -o "$tmp/c_probe" \
  "$src/tests/sdk/config_probe.c" "$src/core/src/config.c" "$src/core/src/config_schema.c" \
  "$src/core/src/config_locate.c" "$src/core/src/ssh_config_file.c" "$src/core/src/error.c" \
  "$src/core/src/arena.c" "$src/core/src/config_copy.c" \
  "$tmp/config_tables.c" -x c - $(pkg-config --cflags --libs jansson 2>/dev/null || echo -ljansson) \
  <<<'const char asp_config_schema_json[] = "{}";'
for lang in python typescript; do
  "$sdkgen" --spec "$tmp/spec/protocol.json" --config-schema "$tmp/spec/asp.schema.json" \
    --lang $lang --out "$tmp/$lang"
done
mkdir "$tmp/ts"
cp -r "$tmp/typescript/src" "$tmp/typescript/package.json" "$tmp/typescript/tsconfig.json" "$tmp/ts/"
ln -s "$ts_work/node_modules" "$tmp/ts/node_modules"
(cd "$tmp/ts" && node node_modules/typescript/bin/tsc -p tsconfig.json)

# 3. the files, and what each language makes of them
base='"version": 1, "transport": "stdio", "stdio": {"command": ["a"]}'
mkdir "$tmp/good" "$tmp/string" "$tmp/zero"
echo "{$base, \"tty_default_rows\": 24}" >"$tmp/good/.asp.json"
echo "{$base, \"tty_default_rows\": \"24\"}" >"$tmp/string/.asp.json"
echo "{$base, \"tty_default_rows\": 0}" >"$tmp/zero/.asp.json"
probe() { # LANG FILE: the probe's JSON answer
  case $1 in
    C) "$tmp/c_probe" "$2" ;;
    Python) /usr/bin/python3 "$src/tests/sdk/config_probe.py" "$tmp/python" "$2" ;;
    TypeScript) node "$src/tests/sdk/config_probe.mjs" "$tmp/ts" "$2" ;;
    built) "$build_probe" "$2" ;;
  esac
}
field() { # JSON FIELD
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}
col=$(($(head -c -1 "$tmp/good/.asp.json" | grep -bo '"tty_default_rows"' | cut -d: -f1) + 21))
for lang in C Python TypeScript; do
  out=$(probe $lang "$tmp/good/.asp.json")
  got=$(field "$out" 'd.get("view", {}).get("document", {}).get("tty_default_rows")')
  [ "$got" = 24 ] && ok "$lang accepts tty_default_rows: 24 and keeps it" ||
    bad "$lang on tty_default_rows: 24: $out"
  for case in string:'"24"' zero:0; do
    name=${case%%:*} value=${case#*:}
    want="$tmp/$name/.asp.json:1:$col: tty_default_rows: expected an integer >= 1, got $value"
    got=$(field "$(probe $lang "$tmp/$name/.asp.json")" 'd.get("message")')
    [ "$got" = "$want" ] && ok "$lang refuses tty_default_rows: $value: $got" ||
      bad "$lang on tty_default_rows: $value: got '$got', expected '$want'"
  done
done
# the build's own probe (from spec/asp.schema.json as it is) does not know the key
got=$(field "$(probe built "$tmp/good/.asp.json")" 'd.get("message")')
case $got in
  *"tty_default_rows: unknown key"*) ok "the build from spec/ as it is refuses it: $got" ;;
  *) bad "the build from spec/ as it is: $got" ;;
esac
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
