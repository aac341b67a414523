#!/usr/bin/env bash
# Packs the built TypeScript SDK (dist/ and src/, from tests/sdk/ts_run.sh's shared work
# folder: npm ci from the checked-in lock, then tsc) into the tarball `npm install` takes.
# usage: pack-typescript.sh TS_RUN PACKAGE_DIR WORK_DIR OUT_TGZ
set -euo pipefail
ts_run=$1 src=$2 work=$3 out=$4
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
"$ts_run" "$src" "$work" -- sh -c 'cd "$1" && npm pack --silent --pack-destination "$2" >/dev/null' \
  sh "$work" "$dest"
tgz=("$dest"/*.tgz)
[ "$(basename "${tgz[0]}")" = "$(basename "$out")" ] ||
  { echo "pack-typescript: made ${tgz[*]}, expected $(basename "$out")" >&2; exit 1; }
mv "${tgz[0]}" "$out"
