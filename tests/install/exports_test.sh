#!/bin/sh
# The shared libasp exports asp_ names only (core/libasp.map): lists its defined dynamic
# symbols and fails on any other.
#   usage: exports_test.sh LIBASP_SO
set -eu
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $NF}')
count=$(printf '%s\n' "$syms" | grep -c . || true)
if [ "$count" -lt 50 ]; then
	echo "FAIL: $lib exports $count symbols; expected the whole asp_ API" >&2
	exit 1
fi
bad=$(printf '%s\n' "$syms" | grep -v '^asp_' || true)
if [ -n "$bad" ]; then
	echo "FAIL: $lib exports symbols without the asp_ prefix:" >&2
	printf '  %s\n' $bad >&2
	exit 1
fi
echo "ok: $count exported symbols, all asp_"
