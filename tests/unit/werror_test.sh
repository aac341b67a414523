#!/bin/bash
# Builds the docs and scripts give are warnings-as-errors builds:
#  - scripts/test.sh's setup and build, given a build folder configured without --werror
#    (as the quick start or a hand-made `meson setup build` leaves it), still fail on a
#    warning: they are run on a tiny project whose one source warns;
#  - every `meson setup DIR` in the README, docs, examples, scripts and CI carries
#    --werror, and every `meson configure` in scripts/test.sh sets -Dwerror=true.
# usage: werror_test.sh SOURCE_ROOT
set -u
SRC=$(realpath "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/asp-werror.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }

# --- setup and build on a folder configured without --werror -----------------------------
mkdir -p "$WORK/proj"
cat > "$WORK/proj/meson.build" <<'EOF'
project('warns', 'c', default_options : ['warning_level=2'])
executable('w', 'w.c')
EOF
printf 'int main(void)\n{\n\tint unused;\n\treturn 0;\n}\n' > "$WORK/proj/w.c"
fn=$(sed -n '/^setup() {/,/^}/p; /^build() {/,/^}/p' "$SRC/scripts/test.sh")
if [ "$(printf '%s\n' "$fn" | grep -c '^[a-z]*() {')" -ne 2 ]; then
	not_ok "scripts/test.sh defines setup and build"
else
	ok "scripts/test.sh defines setup and build"
	(cd "$WORK/proj" && meson setup build > "$WORK/setup.log" 2>&1) ||
		{ cat "$WORK/setup.log"; exit 1; }
	if (cd "$WORK/proj" && eval "$fn" && setup build && build build) > "$WORK/run.log" 2>&1; then
		not_ok "setup and build on a build/ set up without --werror fail on a warning"
		cat "$WORK/run.log"
	else
		if grep -q 'unused' "$WORK/run.log"; then
			ok "setup and build on a build/ set up without --werror fail on a warning"
		else
			not_ok "setup and build failed, but not on the warning"
			cat "$WORK/run.log"
		fi
	fi
fi

# --- the commands written down -----------------------------------------------------------
files=$(cd "$SRC" && ls README.md HACKING.md */README.md docs/*.md examples/*/README.md examples/README.md \
	scripts/*.sh .ci/run tests/*/meson.build 2>/dev/null)
bad=""
for f in $files; do
	while IFS= read -r line; do
		bad="$bad$f: $line"$'\n'
	done < <(grep -E 'meson setup +[^ +]' "$SRC/$f" | grep -v -- '--werror')
done
if [ -z "$bad" ]; then ok "every meson setup written down has --werror"
else not_ok "every meson setup written down has --werror"; printf '%s' "$bad"; fi
if grep -E 'meson configure' "$SRC/scripts/test.sh" | grep -qv -- '-Dwerror=true'; then
	not_ok "every meson configure in scripts/test.sh sets -Dwerror=true"
else ok "every meson configure in scripts/test.sh sets -Dwerror=true"; fi

echo "1..$n"
[ "$failed" -eq 0 ]
