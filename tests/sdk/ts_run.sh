#!/usr/bin/env bash
# Builds the generated TypeScript package once per change (npm ci from its checked-in
# package-lock.json, then npm run build) in a work folder of the build tree, then runs
# the command given after --. Concurrent tests share the build (flock).
# usage: ts_run.sh PACKAGE_DIR WORK_DIR -- node script.mjs ARGS...
# Exits 77 (meson: skipped) when node or npm is missing.
set -euo pipefail
src=$1 work=$2
shift 3
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node and npm are needed for the TypeScript SDK tests" >&2
  exit 77
fi
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
sum=$(cd "$src" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64)
if [ "$(cat "$work/.prepared" 2>/dev/null)" != "$sum" ]; then
  rm -rf "$work/src" "$work/dist"
  rm -f "$work/README.md"
  cp -r "$src/src" "$src/package.json" "$src/package-lock.json" "$src/tsconfig.json" "$src/README.md" "$work/"
  if ! cmp -s "$src/package-lock.json" "$work/.installed-lock" || [ ! -d "$work/node_modules" ]; then
    (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp "$src/package-lock.json" "$work/.installed-lock"
  fi
  (cd "$work" && npm run --silent build >&2)
  echo "$sum" >"$work/.prepared"
fi
flock -u 9
exec "$@"
