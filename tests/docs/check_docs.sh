#!/bin/bash
# The repository speaks for itself: no file cites a document a reader of the repository
# does not have, or the work log behind a change. Fails, naming FILE:LINE, when a tracked
# file (every file, outside a git checkout) holds:
#  - a reference to an outside design document ("DESIGN" then a section sign or the word
#    section, the upper-case DESIGN.md, ../shared, shared/DESIGN): cite docs/design.md by
#    section title;
#  - a work-log phrase (session or issue numbers, "this session"): say what the code does.
# Also checks that docs/design.md exists and that README.md links it.
# usage: check_docs.sh SOURCE_ROOT
set -u
SRC=$(cd "$1" && pwd -P)
self=tests/docs/check_docs.sh
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }

cd "$SRC" || exit 1
list_files() {
	if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$SRC" ]; then
		git ls-files -z
	else
		find . -type d \( -name .git -o -name 'build*' -o -name node_modules \) -prune -o \
			-type f -print0 | sed -z 's|^\./||'
	fi
}

# One pattern per line: the label, a tab, the extended regular expression (case-sensitive).
patterns=$(printf '%s\t%s\n' \
	'an outside design document' 'DESIGN §' \
	'an outside design document' 'DESIGN\.md' \
	'an outside design document' 'DESIGN section' \
	'an outside design document' '\.\./shared' \
	'an outside design document' 'shared/DESIGN' \
	'a session number' '[Ss]ession [0-9]' \
	'an issue number' '[Ii]ssue #?[0-9]' \
	'a work-log phrase' '[Tt]his session')

found=$(mktemp "${TMPDIR:-/tmp}/asp-docs.XXXXXX")
trap 'rm -f "$found"' EXIT
while IFS=$'\t' read -r label re; do
	list_files | grep -z -v -x -F -e "$self" | xargs -0 -r grep -I -n -H -E -- "$re" 2>/dev/null |
		sed "s|^|$label: |"
done <<<"$patterns" >"$found"

if [ -s "$found" ]; then
	not_ok "no tracked file cites an outside document or a work log"
	sed 's/^/#   /' "$found"
	echo "#   (cite docs/design.md by section title, e.g. docs/design.md, \"Wire format\";"
	echo "#   say what the code does, not which session or issue changed it)"
else
	ok "no tracked file cites an outside document or a work log"
fi

if [ -f docs/design.md ]; then
	ok "docs/design.md exists"
else
	not_ok "docs/design.md exists"
fi
if grep -q '](docs/design\.md' README.md 2>/dev/null; then
	ok "README.md links docs/design.md"
else
	not_ok "README.md links docs/design.md"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
