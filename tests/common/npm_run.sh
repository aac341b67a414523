#!/usr/bin/env bash
# Installs a test folder's pinned npm packages once per lock change (npm ci from its
# checked-in package-lock.json) into a work folder of the build tree, copies its ES module
# scripts (*.mjs) beside them (modules resolve packages from their own folder), then runs
# the command after -- (outside any network namespace: the install needs the registry; a
# harness test then enters one). Concurrent tests share the install (flock). Exits 77
# (skipped) without node and npm, or when the install fails with the registry out of reach.
# usage: npm_run.sh SRC_DIR WORK_DIR -- COMMAND...
set -euo pipefail
src=$1 work=$2
shift 3
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node and npm are needed for these tests (skipped)" >&2
  exit 77
fi
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
if ! cmp -s "$src/package-lock.json" "$work/.installed-lock" || [ ! -d "$work/node_modules" ]; then
  cp "$src/package.json" "$src/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >&2); then
    # a registry out of reach is a skip; any other install failure is a failure
    if ! timeout 60 npm ping >/dev/null 2>&1; then
      echo "the npm registry is unreachable: the pinned packages cannot be installed (skipped)" >&2
      exit 77
    fi
    exit 1
  fi
  cp "$src/package-lock.json" "$work/.installed-lock"
fi
for m in "$src"/*.mjs; do
  [ -e "$m" ] && cp "$m" "$work/"
done
flock -u 9
exec "$@"
