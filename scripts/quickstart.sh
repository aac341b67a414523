#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a real exec, write and read
# through `asp` against a local asp-agent over stdio, with the config the project ships
# (examples/stdio-local/.asp.json). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build --werror >/dev/null
ninja -C build >/dev/null

asp=$PWD/build/cli/asp
cfg=$PWD/examples/stdio-local/.asp.json
work=$(mktemp -d /tmp/asp-quickstart.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" # the agent starts here: relative sandbox paths resolve against it

step() { printf '\n$ %s\n' "$*"; "$@"; }
step "$asp" --config "$cfg" hello
step "$asp" --config "$cfg" exec -- uname -sm
step "$asp" --config "$cfg" exec -c 'echo "hello from $(hostname) in $PWD"; echo to stderr >&2'
printf 'line one\nline two\n' >"$work/input.txt"
step "$asp" --config "$cfg" write notes/hello.txt --mkdirs <"$work/input.txt"
step "$asp" --config "$cfg" read notes/hello.txt
step "$asp" --config "$cfg" stat notes/hello.txt
step "$asp" --config "$cfg" ls notes
set +e
"$asp" --config "$cfg" exec -c 'exit 3'
code=$?
set -e
printf '\n$ asp exec -c "exit 3"  -> exit code %s (the command'"'"'s own)\n' "$code"
[ "$code" -eq 3 ]
echo
echo "quickstart: exec, write and read work against asp-agent over stdio."
