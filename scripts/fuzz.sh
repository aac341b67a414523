#!/usr/bin/env bash
# Long fuzzing runs (docs/fuzzing.md).
#   scripts/fuzz.sh TARGET SECONDS   fuzz TARGET (frame, client, sftp, config, http) for
#                                    SECONDS, niced, from its checked-in corpus and
#                                    tests/vectors plus what earlier runs found
#   scripts/fuzz.sh --minimize TARGET  merge what runs found into tests/fuzz/corpus/TARGET,
#                                    keeping only inputs that add coverage
#   scripts/fuzz.sh --list           the targets
# Builds build-fuzz (clang, ASan+UBSan, -Dfuzz=enabled) first. A crash stops the run,
# leaves its input in build-fuzz/fuzz-artifacts/ and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD # absolute paths: the responder targets chdir into a scratch directory
dir=$root/build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang meson setup "$dir" --werror -Dfuzz=enabled -Db_sanitize=address,undefined \
    -Db_lundef=false >/dev/null
fi
ninja -C "$dir" fuzz >/dev/null
targets=$(cd "$dir/tests/fuzz" && ls fuzz_* 2>/dev/null | sed -n 's/^fuzz_\([a-z]*\)$/\1/p')

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
exe_of() {
  local t=$1
  [ -x "$dir/tests/fuzz/fuzz_$t" ] || { echo "fuzz.sh: no target '$t' (have: $targets)" >&2; exit 2; }
  echo "$dir/tests/fuzz/fuzz_$t"
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

case "${1:-}" in
--list) echo "$targets" ;;
--minimize)
  [ $# -eq 2 ] || usage
  exe=$(exe_of "$2")
  found="$dir/fuzz-corpus/$2" keep="$root/tests/fuzz/corpus/$2"
  mkdir -p "$found" "$keep"
  old=$(mktemp -d)
  trap 'rm -rf "$old"' EXIT
  mv "$keep"/* "$old"/ 2>/dev/null || true
  nice "$exe" -merge=1 "$keep" "$old" "$found" "$root/tests/vectors" 2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files' || true
  echo "$keep: $(ls "$keep" | wc -l) files, $(du -sh "$keep" | cut -f1)"
  ;;
''|-*) usage ;;
*)
  [ $# -eq 2 ] || usage
  exe=$(exe_of "$1")
  found="$dir/fuzz-corpus/$1" art="$dir/fuzz-artifacts"
  mkdir -p "$found" "$art"
  nice "$exe" -max_total_time="$2" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/$1-" "$found" "$root/tests/fuzz/corpus/$1" "$root/tests/vectors"
  ;;
esac
