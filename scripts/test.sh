#!/usr/bin/env bash
# Installs what is missing, checks the C sources' formatting (scripts/check-format.sh),
# then builds and tests in three builds, each test where it catches what only it catches
# (HACKING.md, "CI"):
#  - build/: a plain build with warnings as errors; every test.
#  - build-san/: ASan+UBSan; the tests of C code (unit, RPC, agent, transports, CLI,
#    tools, faults, soak, one of each repeated run), not the SDKs', the harnesses' or the
#    documents' (the suites in san_skip below), built while the plain tests run.
#  - build-fuzz/: clang's libFuzzer targets, each run briefly (suite 'fuzz'), built while
#    the sanitizer tests run.
# The README's test command and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

jobs=$(nproc)
# Suites the sanitizer build leaves to the plain one: their code is Python, TypeScript, the
# harness binaries or shell, over C paths other suites run under the sanitizers; and
# 'plain-only', single tests that repeat such a run (meson.build says why at each).
san_skip=(sdk sdkgen harness install docs plain-only)
fuzz_dir=build-fuzz

setup() { # builddir, meson options...: configure, or reconfigure one left by hand
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" --werror "$@" >/dev/null
  else
    # a folder left by the quick start (or by hand) still builds with warnings as errors
    meson configure "$dir" -Dwerror=true "$@" >/dev/null
  fi
}

build() { # builddir, ninja targets...: quiet when it builds, the compiler's words when not
  local dir=$1
  shift
  ninja -C "$dir" "$@" >"$dir/ninja.log" 2>&1 || { cat "$dir/ninja.log"; return 1; }
}

# The targets the sanitizer build's tests need (what `meson test` would build for them).
san_targets() {
  python3 - build-san "${san_skip[@]}" <<'PY'
import json, os, subprocess, sys
d, skip = sys.argv[1], set(sys.argv[2:])
def intro(what):
    return json.loads(subprocess.check_output(["meson", "introspect", what, d]))
files = {t["id"]: t["filename"] for t in intro("--targets")}
want = set()
for t in intro("--tests"):
    if {s.split(":", 1)[-1] for s in t["suite"]} & skip:
        continue
    for dep in t["depends"]:
        want.update(os.path.relpath(f, d) for f in files.get(dep, []))
print("\n".join(sorted(want)))
PY
}

run_tests() { # builddir, meson test options...
  local dir=$1
  shift
  rm -f "$dir/meson-logs/testlog.json" # a build that fails must not count old results
  # ssh-root (the conformance as the real root, one to two minutes) is left out for
  # time: run by hand, `meson test -C build --suite ssh-root`
  meson test -C "$dir" --no-rebuild --num-processes "$jobs" --print-errorlogs \
    --no-suite ssh-root "$@"
}

status=0
# .clang-format, enforced (77: skipped without clang-format 14, which it says)
fmt=0
bash scripts/check-format.sh || fmt=$?
[ "$fmt" -eq 0 ] || [ "$fmt" -eq 77 ] || status=1

# Each step returns on failure itself (called as `step || status=1`, a function runs
# without set -e), and a failed build must not pass because no test needed its target.
setup build || status=1
setup build-san -Db_sanitize=address,undefined -Db_lundef=false || status=1
if [ ! -f "$fuzz_dir/build.ninja" ]; then
  CC=clang meson setup "$fuzz_dir" --werror -Dfuzz=enabled -Db_sanitize=address,undefined \
    -Db_lundef=false >/dev/null || status=1
else
  meson configure "$fuzz_dir" -Dwerror=true >/dev/null || status=1
fi

# The plain build, whole; then its tests, while the other two builds compile at the
# lowest priority on what the tests leave idle (they wait on processes and sockets).
plain_built=0
build build && plain_built=1 || status=1
bg_log=$(mktemp "${TMPDIR:-/tmp}/asp-ci-bg.XXXXXX")
(
  rc=0
  if [ -f build-san/build.ninja ]; then
    mapfile -t targets < <(san_targets)
    nice -n 19 ninja -C build-san "${targets[@]}" >build-san/ninja.log 2>&1 || rc=1
  fi
  if [ -f "$fuzz_dir/build.ninja" ]; then
    nice -n 19 ninja -C "$fuzz_dir" fuzz >"$fuzz_dir/ninja.log" 2>&1 || rc=$((rc | 2))
  fi
  echo "$rc" >"$bg_log"
) &
bg=$!
if [ "$plain_built" = 1 ]; then
  run_tests build || status=1
fi
wait "$bg" || true
bg_rc=$(cat "$bg_log" 2>/dev/null || echo 3)
rm -f "$bg_log"

# A small quarantine: the default 256 MB of freed-but-held memory swamps the tests that
# bound the client's RSS behind a slow follower (the build's test setup sets the same).
if [ $((bg_rc & 1)) -ne 0 ]; then
  cat build-san/ninja.log
  status=1
elif [ -f build-san/build.ninja ]; then
  skip_args=()
  for s in "${san_skip[@]}"; do skip_args+=(--no-suite "$s"); done
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:quarantine_size_mb=8 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 run_tests build-san "${skip_args[@]}" ||
    status=1
fi

# The fuzz targets (tests/fuzz, docs/fuzzing.md), each run a short, fixed number of times
# from its corpus.
if [ $((bg_rc & 2)) -ne 0 ]; then
  cat "$fuzz_dir/ninja.log"
  status=1
elif [ -f "$fuzz_dir/build.ninja" ]; then
  run_tests "$fuzz_dir" --suite fuzz || status=1
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
