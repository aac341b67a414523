#!/usr/bin/env bash
# Installs what is missing, checks the C sources' formatting (scripts/check-format.sh),
# then builds and runs every test twice: a normal build with warnings as errors, and an
# ASan+UBSan build; then builds the fuzz targets with clang and runs each briefly (suite
# 'fuzz'). The README's test command and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

jobs=$(nproc)
run_suite() { # builddir, meson options...
  local dir=$1
  shift
  # Each step returns on failure itself: called as `run_suite ... || status=1`, the
  # function runs without set -e, and a failed build would otherwise pass whenever no
  # test depends on the target that failed.
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" --werror "$@" >/dev/null || return 1
  else
    # a folder left by the quick start (or by hand) still builds with warnings as errors
    meson configure "$dir" -Dwerror=true "$@" >/dev/null || return 1
  fi
  rm -f "$dir/meson-logs/testlog.json" # a build that fails must not count old results
  # quiet when it builds; the compiler's words when it does not
  ninja -C "$dir" >"$dir/ninja.log" 2>&1 || { cat "$dir/ninja.log"; return 1; }
  # ssh-root (the conformance as the real root, one to two minutes) is left out for
  # time: run by hand, `meson test -C build --suite ssh-root`
  meson test -C "$dir" --num-processes "$jobs" --print-errorlogs --no-suite ssh-root
}

status=0
# .clang-format, enforced (77: skipped without clang-format 14, which it says)
fmt=0
bash scripts/check-format.sh || fmt=$?
[ "$fmt" -eq 0 ] || [ "$fmt" -eq 77 ] || status=1
run_suite build || status=1
# A small quarantine: the default 256 MB of freed-but-held memory swamps the tests that
# bound the client's RSS behind a slow follower.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:quarantine_size_mb=8 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_suite build-san -Db_sanitize=address,undefined -Db_lundef=false || status=1

# The fuzz targets (tests/fuzz, docs/fuzzing.md): built with clang, each run a short, fixed
# number of times from its corpus. Only those targets are built in this tree.
fuzz_dir=build-fuzz
if [ ! -f "$fuzz_dir/build.ninja" ]; then
  CC=clang meson setup "$fuzz_dir" --werror -Dfuzz=enabled -Db_sanitize=address,undefined \
    -Db_lundef=false >/dev/null || status=1
else
  meson configure "$fuzz_dir" -Dwerror=true >/dev/null || status=1
fi
if [ -f "$fuzz_dir/build.ninja" ]; then
  rm -f "$fuzz_dir/meson-logs/testlog.json"
  { ninja -C "$fuzz_dir" fuzz >/dev/null &&
    meson test -C "$fuzz_dir" --no-rebuild --suite fuzz --print-errorlogs; } || status=1
fi

# One closing line over the three builds, for people and for CI's log reader.
python3 - build/meson-logs/testlog.json build-san/meson-logs/testlog.json \
  "$fuzz_dir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
