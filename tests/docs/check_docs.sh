#!/bin/bash
# The repository speaks for itself: no file cites a document a reader of the repository
# does not have, or the work log behind a change. Fails, naming FILE:LINE, when a tracked
# file (every file, outside a git checkout) holds:
#  - a reference to an outside design document ("DESIGN" then a section sign or the word
#    section, the upper-case DESIGN.md, ../shared, shared/DESIGN): cite docs/design.md by
#    section title;
#  - a work-log phrase (session or issue numbers, "this session"): say what the code does;
#  - history: what was, what changed, what is to come ("not built yet", "used to" but for
#    the passive "is used to", "before the fix", "Found:", "Fixed:", "now" in the sense of
#    "since a change": "is now", "now takes", "; now the", "as before", "went from", a
#    figure "before: 3 µs"): say what is; history lives in git.
# A measured figure (a number with a unit of speed or ratio) given by two documents needs a
# link from one's paragraph to the other (figures.py). Also checks that docs/design.md
# exists and that README.md links it.
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

# One pattern per line: where (all: every file; md: the documents, where "now" and "as
# before" are not also the present moment of running code), the label, the Perl-compatible
# regular expression (case-sensitive unless it says (?i)); tab-separated.
patterns=$(printf '%s\t%s\t%s\n' \
	all 'an outside design document' 'DESIGN §' \
	all 'an outside design document' 'DESIGN\.md' \
	all 'an outside design document' 'DESIGN section' \
	all 'an outside design document' '\.\./shared' \
	all 'an outside design document' 'shared/DESIGN' \
	all 'a session number' '[Ss]ession [0-9]' \
	all 'an issue number' '[Ii]ssue #?[0-9]' \
	all 'a work-log phrase' '[Tt]his session' \
	all 'history' '(?i)\bnot (built|implemented|supported|available|wired) yet\b' \
	all 'history' '(?i)(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )(?<!\bwas )(?<!\bwere )(?<!\bfile )(?<!\bkey )(?<!\bvalue )(?<!\bpath )\bused to\b' \
	all 'history' '(?i)\b(before|after) the (fix|change)\b' \
	all 'history' '\b(Found|Fixed):' \
	all 'history' '(?i)\bwent from\b' \
	all 'history' '(?i)\b(before:|after:|previously|formerly|was|were) ~?(\d[\d.,]* ?(µs|us|[KMG]i?B/s|×)|\d+\.\d+ ?ms)' \
	md 'history' '\b(is|are|was|were|has|have|had|can|does|do|will|would) now\b' \
	md 'history' '\bnow (?!this\b|its\b|as\b|less\b|thus\b|yes\b|[mnuµ]s\b)[a-z]+s\b' \
	md 'history' '; now\b' \
	md 'history' '(?i)\bas before\b')

found=$(mktemp "${TMPDIR:-/tmp}/asp-docs.XXXXXX")
trap 'rm -f "$found"' EXIT
while IFS=$'\t' read -r where label re; do
	files() { if [ "$where" = md ]; then grep -z '\.md$'; else cat; fi; }
	list_files | grep -z -v -x -F -e "$self" | files | xargs -0 -r grep -I -n -H -P -- "$re" 2>/dev/null |
		sed "s|^|$label: |"
done <<<"$patterns" >"$found"

if [ -s "$found" ]; then
	not_ok "no tracked file cites an outside document, a work log or history"
	sed 's/^/#   /' "$found"
	echo "#   (cite docs/design.md by section title, e.g. docs/design.md, \"Wire format\";"
	echo "#   say what the code does, not which session or issue changed it, nor what it did)"
else
	ok "no tracked file cites an outside document, a work log or history"
fi

mapfile -d '' docs < <(list_files | grep -z '\.md$')
if out=$(python3 "$SRC/tests/docs/figures.py" "$SRC" "${docs[@]}"); then
	ok "a figure two documents give is linked where it is given"
else
	not_ok "a figure two documents give is linked where it is given"
	printf '%s\n' "$out" | sed 's/^/#   /'
	echo "#   (keep the figure in one document, benchmarks.md for a measurement, and link it)"
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
