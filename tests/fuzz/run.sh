#!/usr/bin/env bash
# One short fuzz run for `meson test --suite fuzz`: TARGET CORPUS VECTORS RUNS.
# New inputs go to a temporary directory (libFuzzer writes into the first corpus
# directory it is given), never into the source tree; a crash leaves its input there
# and the test fails with libFuzzer's report.
set -euo pipefail
exe=$1 corpus=$2 vectors=$3 runs=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/asp-fuzz-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/new"
status=0
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  "$exe" -runs="$runs" -seed=1 -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/new" "$corpus" "$vectors" >"$work/log" 2>&1 || status=$?
if [ $status -ne 0 ]; then
  cat "$work/log"
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] && { echo "input $f:"; od -A d -t x1 "$f" | head -40; }
  done
  exit $status
fi
grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|#[0-9]+ *DONE)' "$work/log" || true
