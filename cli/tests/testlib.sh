# Shared by the CLI's shell tests (sourced): TAP counters and checks of one command's exit
# code and output. The caller sets WORK (a scratch directory) before sourcing.
n=0
failed=0
OUT="$WORK/out"
ERR="$WORK/err"

# Polls `cmd` until it succeeds or SECS have passed: a wait on a condition, with a bound
# a loaded machine meets. usage: wait_for SECS cmd...
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@" > /dev/null 2>&1; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}

ok() {
	n=$((n + 1))
	echo "ok $n - $1"
}

not_ok() {
	n=$((n + 1))
	failed=$((failed + 1))
	echo "not ok $n - $1"
	shift
	for line in "$@"; do echo "#   $line"; done
	echo "#   stdout: $(head -c 400 "$OUT" | tr '\n' '|')"
	echo "#   stderr: $(head -c 400 "$ERR" | tr '\n' '|')"
}

# run RC NAME -- COMMAND...: runs it with stdin from /dev/null unless redirected by the
# caller (use run_in for that), then checks the exit code.
run() {
	local want=$1 name=$2
	shift 3
	"$@" < /dev/null > "$OUT" 2> "$ERR"
	local rc=$?
	if [ "$rc" -eq "$want" ]; then ok "$name"; else not_ok "$name" "exit $rc, wanted $want"; fi
}

# run_in FILE RC NAME -- COMMAND...: as run, with stdin from FILE.
run_in() {
	local in=$1 want=$2 name=$3
	shift 4
	"$@" < "$in" > "$OUT" 2> "$ERR"
	local rc=$?
	if [ "$rc" -eq "$want" ]; then ok "$name"; else not_ok "$name" "exit $rc, wanted $want"; fi
}

# expect_out NAME TEXT: the last command's stdout is exactly TEXT.
expect_out() {
	if [ "$(cat "$OUT")" == "$2" ]; then ok "$1"; else not_ok "$1" "stdout is not '$2'"; fi
}

# expect_grep NAME FILE PATTERN: the last command's FILE (out/err) matches the ERE.
expect_grep() {
	if grep -Eq -- "$3" "$2"; then ok "$1"; else not_ok "$1" "no match for /$3/"; fi
}

# expect_one_line NAME: stderr is exactly one line (the error line).
expect_one_line() {
	if [ "$(wc -l < "$ERR")" -eq 1 ]; then ok "$1"; else not_ok "$1" "stderr is not one line"; fi
}

same_file() {
	if cmp -s "$2" "$3"; then ok "$1"; else not_ok "$1" "$2 and $3 differ"; fi
}

