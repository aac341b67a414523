#!/usr/bin/env bash
# asp-sdkgen: deterministic output, the checked-in reference in sync, the compatibility
# promise enforced against the frozen protocol 1, and entries without "since" refused.
set -u
sdkgen=$1 src=$2 built_md=$3
spec=$src/spec/protocol.json frozen=$src/spec/frozen/protocol-1.json
# Debian's python3 (a version manager's shim on PATH costs a shell per call)
py=/usr/bin/python3; [ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }

# 1. Output is deterministic.
for i in 1 2; do
  "$sdkgen" --spec "$spec" --c-header "$tmp/h$i" --c-source "$tmp/c$i" --c-client "$tmp/k$i" \
    --markdown "$tmp/m$i" || bad "generation $i failed"
done
if cmp -s "$tmp/h1" "$tmp/h2" && cmp -s "$tmp/c1" "$tmp/c2" && cmp -s "$tmp/k1" "$tmp/k2" &&
   cmp -s "$tmp/m1" "$tmp/m2"; then ok "deterministic output"; else bad "output differs between runs"; fi

# 2. docs/protocol.md is what the generator makes (update: meson compile update-protocol-doc).
if cmp -s "$built_md" "$src/docs/protocol.md"; then ok "docs/protocol.md in sync"
else bad "docs/protocol.md is stale: run 'meson compile -C build update-protocol-doc'"; fi
for op in $("$py" -c 'import json,sys; print(" ".join(o["name"] for o in json.load(open(sys.argv[1]))["ops"]))' "$spec"); do
  grep -q "^### \`$op\`" "$src/docs/protocol.md" || bad "docs/protocol.md lacks op $op"
done

# 3. The current spec keeps every promise of protocol 1.
if "$sdkgen" --spec "$spec" --check-compat "$frozen" 2>"$tmp/err"; then ok "compatible with frozen protocol 1"
else bad "incompatible with frozen protocol 1: $(cat "$tmp/err")"; fi

# 4. Incompatible changes are refused, each with a message naming it.
mutate() { # name, python expression on s, expected message fragment
  "$py" - "$spec" "$tmp/$1.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(s, open(sys.argv[2], "w"))
PY
  if "$sdkgen" --spec "$tmp/$1.json" --check-compat "$frozen" 2>"$tmp/err"; then
    bad "$1 accepted"
  elif grep -q "$3" "$tmp/err"; then ok "$1 refused"
  else bad "$1 refused without naming it: $(cat "$tmp/err")"; fi
}
mutate removed-op 's["ops"] = [o for o in s["ops"] if o["name"] != "stat"]' "op stat was removed"
mutate removed-field 'o = [o for o in s["ops"] if o["name"] == "read"][0]; o["params"] = [f for f in o["params"] if f["name"] != "offset"]' "read params.offset was removed"
mutate changed-type 'o = [o for o in s["ops"] if o["name"] == "write"][0]; o["result"][0]["type"] = "int"' "changed type from uint to int"
mutate new-required 'o = [o for o in s["ops"] if o["name"] == "list"][0]; o["params"].append({"name": "depth", "type": "uint", "since": 1, "doc": "x"})' "new field list params.depth is required"
mutate changed-default 'o = [o for o in s["ops"] if o["name"] == "exec"][0]; [f for f in o["params"] if f["name"] == "max_output"][0]["default"] = 1' "changed its default"
mutate removed-error 's["errors"] = s["errors"][1:]' "error code not_found was removed"
# Ops, fields, records and error codes added after protocol 1 (glob, grep, edit, ...) must
# say so: since 1 would claim that protocol 1 responders have them.
mutate new-op-since-1 'o = [o for o in s["ops"] if o["name"] == "glob"][0]; o["since"] = 1' "op glob is not in protocol 1 but says since 1"
mutate new-op-field-since-1 'o = [o for o in s["ops"] if o["name"] == "grep"][0]; [f for f in o["params"] if f["name"] == "multiline"][0]["since"] = 1' "field grep.multiline is not in protocol 1"
mutate new-result-since-1 'o = [o for o in s["ops"] if o["name"] == "edit"][0]; o["result"][0]["since"] = 1' "field edit result.replacements is not in protocol 1"
mutate new-record-since-1 'r = [r for r in s["records"] if r["name"] == "grep_match"][0]; r["since"] = 1' "record grep_match is not in protocol 1"
mutate new-field-since-1 'o = [o for o in s["ops"] if o["name"] == "read"][0]; o["params"].append({"name": "hint", "type": "str", "optional": True, "since": 1, "doc": "x"})' "field read params.hint is not in protocol 1"
mutate new-error-since-1 's["errors"].append({"code": "brand_new", "status": 99, "since": 1, "doc": "x"})' "error code brand_new is not in protocol 1"

# 5. Entries without "since" are refused; a compatible addition is accepted.
"$py" - "$spec" "$tmp/nosince.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
del s["ops"][1]["params"][0]["since"]
json.dump(s, open(sys.argv[2], "w"))
PY
if "$sdkgen" --spec "$tmp/nosince.json" --markdown "$tmp/x.md" 2>"$tmp/err"; then bad "field without since accepted"
elif grep -q 'no "since"' "$tmp/err"; then ok "field without since refused"; else bad "no since: $(cat "$tmp/err")"; fi
"$py" - "$spec" "$tmp/added.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["ops"][2]["params"].append({"name": "hint", "type": "str", "optional": True, "since": s["protocol"], "doc": "x"})
json.dump(s, open(sys.argv[2], "w"))
PY
if "$sdkgen" --spec "$tmp/added.json" --check-compat "$frozen" 2>"$tmp/err"; then ok "optional field addition accepted"
else bad "optional addition refused: $(cat "$tmp/err")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
