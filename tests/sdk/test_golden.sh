#!/usr/bin/env bash
# The generated SDKs equal the checked-in golden copies (sdk/golden/), and generating
# is deterministic. After an intended change: meson compile -C build update-sdk-golden
set -u
sdkgen=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for lang in python typescript; do
  for i in 1 2; do
    "$sdkgen" --spec "$src/spec/protocol.json" --config-schema "$src/spec/asp.schema.json" \
      --lang "$lang" --out "$tmp/$lang$i" --stamp "$tmp/$lang$i.stamp" || { echo "FAIL - generate $lang"; fail=$((fail + 1)); }
  done
  if diff -r "$tmp/${lang}1" "$tmp/${lang}2" >/dev/null; then
    pass=$((pass + 1)); echo "ok - $lang output is deterministic"
  else
    fail=$((fail + 1)); echo "FAIL - $lang output differs between two runs"
  fi
  # the stamp lists exactly the files written
  if [ "$(LC_ALL=C sort "$tmp/${lang}1.stamp")" = "$(cd "$tmp/${lang}1" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)" ]; then
    pass=$((pass + 1)); echo "ok - $lang stamp lists every file"
  else
    fail=$((fail + 1)); echo "FAIL - $lang stamp and files differ"
  fi
  # runtime files are copied through verbatim; the golden copy holds the generated rest
  copied=0
  while read -r f; do
    if cmp -s "$src/sdk/runtime/$lang/$f" "$tmp/${lang}1/$f"; then copied=$((copied + 1)); else
      fail=$((fail + 1)); echo "FAIL - $lang: $f is not a verbatim copy of sdk/runtime/$lang/$f"; fi
    rm -f "$tmp/${lang}1/$f"
  done < <(cd "$src/sdk/runtime/$lang" && find . -type f)
  pass=$((pass + 1)); echo "ok - $lang carries $copied runtime files verbatim"
  if diff -ru "$src/sdk/golden/$lang" "$tmp/${lang}1" >"$tmp/$lang.diff"; then
    pass=$((pass + 1)); echo "ok - $lang matches sdk/golden/$lang"
  else
    fail=$((fail + 1))
    echo "FAIL - $lang differs from sdk/golden/$lang (intended? meson compile -C build update-sdk-golden):"
    head -60 "$tmp/$lang.diff"
  fi
done
# without --spec, asp-sdkgen uses the spec it was built from: the same packages
for lang in python typescript; do
  "$sdkgen" --spec "$src/spec/protocol.json" --lang "$lang" --out "$tmp/given-$lang" &&
    "$sdkgen" --lang "$lang" --out "$tmp/builtin-$lang" 2>"$tmp/err"
  if diff -r "$tmp/given-$lang" "$tmp/builtin-$lang" >/dev/null 2>&1; then
    pass=$((pass + 1)); echo "ok - $lang from the built-in spec equals --spec's"
  else
    fail=$((fail + 1)); echo "FAIL - $lang without --spec: $(cat "$tmp/err")"
  fi
done
# a clash between an op and a client member is refused, naming it
python3 - "$src/spec/protocol.json" "$tmp/clash.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["ops"].append({"name": "close", "since": 1, "doc": "x", "params": [], "result": []})
json.dump(s, open(sys.argv[2], "w"))
PY
for lang in python typescript; do
  if "$sdkgen" --spec "$tmp/clash.json" --config-schema "$src/spec/asp.schema.json" --lang "$lang" \
      --out "$tmp/clash-$lang" 2>"$tmp/err"; then
    fail=$((fail + 1)); echo "FAIL - $lang accepted an op named close"
  elif grep -q "op close would clash" "$tmp/err"; then
    pass=$((pass + 1)); echo "ok - $lang refuses an op that clashes with a client member"
  else
    fail=$((fail + 1)); echo "FAIL - $lang clash: $(cat "$tmp/err")"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
