#!/usr/bin/env bash
# Builds the generated Python package into a wheel, offline, with the interpreter given
# (Debian's /usr/bin/python3 with python3-pip, python3-setuptools and python3-wheel):
# no build isolation, so nothing is fetched. Builds in a copy, so that setuptools' build/
# and *.egg-info never land in the generated folder.
# usage: build-wheel.sh PYTHON PACKAGE_DIR OUT_WHEEL
set -euo pipefail
py=$1 src=$2 out=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/pkg"
# setuptools stamps the wheel's files with the clock unless SOURCE_DATE_EPOCH is set
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}
"$py" -m pip wheel --quiet --no-build-isolation --no-index --no-deps --disable-pip-version-check \
  -w "$tmp/dist" "$tmp/pkg" >&2
whl=("$tmp"/dist/*.whl)
[ "${#whl[@]}" -eq 1 ] || { echo "build-wheel: expected one wheel, got ${whl[*]}" >&2; exit 1; }
[ "$(basename "${whl[0]}")" = "$(basename "$out")" ] ||
  { echo "build-wheel: made $(basename "${whl[0]}"), expected $(basename "$out")" >&2; exit 1; }
mv "${whl[0]}" "$out"
