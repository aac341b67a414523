#!/usr/bin/env bash
# Installs the pinned harness binaries once per lock change (npm ci from the checked-in
# package-lock.json) in a work folder of the build tree, then runs the command after --
# (outside any network namespace: the install needs the registry; the test itself then
# enters one). Concurrent tests share the install (flock). Exits 77 (skipped) without
# node and npm.
# usage: harness_run.sh SRC_DIR WORK_DIR -- COMMAND...
set -euo pipefail
src=$1 work=$2
shift 3
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node and npm are needed to install the harnesses (skipped)" >&2
  exit 77
fi
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
if ! cmp -s "$src/package-lock.json" "$work/.installed-lock" || [ ! -d "$work/node_modules" ]; then
  cp "$src/package.json" "$src/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$src/package-lock.json" "$work/.installed-lock"
fi
flock -u 9
exec "$@"
