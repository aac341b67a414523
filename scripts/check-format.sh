#!/usr/bin/env bash
# The house style (.clang-format) enforced: `clang-format --dry-run --Werror` over every C
# source and header git tracks, less the exclusions below. scripts/test.sh runs it first.
#   usage: scripts/check-format.sh          check; 1 on any finding, naming file:line
#          scripts/check-format.sh --fix    reformat those files in place instead
# The style is clang-format 14's reading of .clang-format (Debian 12's, which
# scripts/install-deps.sh installs): another major version formats a few constructs
# differently, so without clang-format 14 the check is skipped (77), saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=false
case "${1:-}" in
  --fix) fix=true ;;
  '') ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

cf=
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
done
if [ -z "$cf" ]; then
  echo "check-format: skipped: no clang-format (Debian: apt-get install clang-format)" >&2
  exit 77
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | head -1)
if [ "$major" != 14 ]; then
  echo "check-format: skipped: $cf is version ${major:-unknown}; the style is pinned to" \
    "clang-format 14 (Debian 12: apt-get install clang-format)" >&2
  exit 77
fi

# The tracked files (a tree without git: every .c and .h outside the build folders).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t all < <(git ls-files -- '*.c' '*.h')
else
  mapfile -t all < <(find . -name '*.[ch]' -not -path './build*' -not -path './.git/*' |
    sed 's|^\./||' | LC_ALL=C sort)
fi
files=("${all[@]}")

if $fix; then
  "$cf" -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
if out=$("$cf" --dry-run --Werror "${files[@]}" 2>&1); then
  echo "check-format: ${#files[@]} files follow .clang-format"
  exit 0
fi
printf '%s\n' "$out" | grep -E '^[^ ].*: error:' | sed 's/: error: code should be clang-formatted.*//' >&2 || true
n=$(printf '%s\n' "$out" | grep -c ': error:' || true)
echo "check-format: $n findings (file:line above) against .clang-format;" \
  "scripts/check-format.sh --fix reformats them (then review the diff)" >&2
exit 1
