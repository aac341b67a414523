#!/usr/bin/env bash
# Regenerates the checked-in golden SDKs (sdk/golden/{python,typescript}) from the spec:
# the generated files only; the hand-written runtime (sdk/runtime/) is copied through.
# Run through meson: `meson compile -C build update-sdk-golden`; review the diff, commit.
set -euo pipefail
sdkgen=$1 src=$2
for lang in python typescript; do
  tmp=$(mktemp -d)
  "$sdkgen" --spec "$src/spec/protocol.json" --config-schema "$src/spec/asp.schema.json" \
    --lang "$lang" --out "$tmp/$lang"
  rm -rf "$src/sdk/golden/$lang"
  mkdir -p "$src/sdk/golden"
  # The runtime files are copied through verbatim: the golden copy keeps only what is
  # generated (tests/sdk/test_golden.sh checks the copies against sdk/runtime).
  (cd "$src/sdk/runtime/$lang" && find . -type f) | while read -r f; do rm -f "$tmp/$lang/$f"; done
  mv "$tmp/$lang" "$src/sdk/golden/$lang"
  rm -rf "$tmp"
  echo "update-sdk-golden: wrote sdk/golden/$lang"
done
