#!/bin/sh
# The shared libasp exports the public API and nothing else: lists its defined dynamic
# symbols (nm -D --defined-only) and fails on any without the asp_ prefix and, given
# the version script the build wrote from the public headers, on any difference from
# what those headers declare (an internal name exported, or a declared one missing).
#   usage: exports_test.sh LIBASP_SO [LIBASP_MAP]
set -eu
lib=$1
map=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$tmp/exported"
count=$(grep -c . "$tmp/exported" || true)
if [ "$count" -lt 50 ]; then
	echo "FAIL: $lib exports $count symbols; expected the whole asp_ API" >&2
	exit 1
fi
bad=$(grep -v '^asp_' "$tmp/exported" || true)
if [ -n "$bad" ]; then
	echo "FAIL: $lib exports symbols without the asp_ prefix:" >&2
	printf '  %s\n' $bad >&2
	exit 1
fi
if [ -n "$map" ]; then
	sed -n 's/^[[:space:]]*\(asp_[A-Za-z0-9_]*\);$/\1/p' "$map" | sort -u >"$tmp/declared"
	extra=$(comm -23 "$tmp/exported" "$tmp/declared")
	missing=$(comm -13 "$tmp/exported" "$tmp/declared")
	if [ -n "$extra" ] || [ -n "$missing" ]; then
		[ -z "$extra" ] || { echo "FAIL: exported but not in asp/*.h:" >&2; printf '  %s\n' $extra >&2; }
		[ -z "$missing" ] || { echo "FAIL: declared in asp/*.h but not exported (no definition?):" >&2; printf '  %s\n' $missing >&2; }
		exit 1
	fi
fi
echo "ok: $count exported symbols, all asp_${map:+, exactly those the public headers declare}"
