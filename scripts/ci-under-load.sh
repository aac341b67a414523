#!/usr/bin/env bash
# CI as it runs, N times over (default 5), on a machine kept busy: each run is a fresh
# clone of the committed HEAD, running `CI=true bash .ci/run` while two busy loops take
# CPU. Prints each run's closing summary line and wall time; exits non-zero if any run
# failed. A flake shows up here.
#
# usage: scripts/ci-under-load.sh [N]
set -euo pipefail
n=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
head=$(git -C "$repo" rev-parse HEAD)
case $n in '' | *[!0-9]*) echo "usage: $0 [N]" >&2; exit 2 ;; esac

tmp=$(mktemp -d /tmp/asp-ci-load-XXXXXX)
busy=()
ci=
cleanup() {
	[ -n "$ci" ] && kill -- "-$ci" 2>/dev/null # the run in flight, its whole group
	for pid in "${busy[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in 1 2; do
	sh -c 'while :; do :; done' &
	busy+=($!)
done

failed=0
for i in $(seq "$n"); do
	dir=$tmp/run$i
	mkdir -p "$dir"
	git clone -q "$repo" "$dir/repo"
	git -C "$dir/repo" checkout -q --detach "$head"
	start=$(date +%s)
	rc=0
	# In its own process group, so that an interrupted script stops it too; every signal at
	# its default, as for a job CI starts (a script run in the background or under nohup
	# would pass on SIGINT, SIGQUIT or SIGHUP ignored).
	(cd "$dir/repo" && CI=true exec env --default-signal setsid bash .ci/run) >"$dir/log" 2>&1 &
	ci=$!
	wait "$ci" || rc=$?
	ci=
	took=$(($(date +%s) - start))
	summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$dir/log" | tail -1 || true)
	echo "run $i: ${summary:-no summary line} (exit $rc, ${took} s)"
	if [ "$rc" -ne 0 ]; then
		failed=$((failed + 1))
		cp "$dir/log" "/tmp/asp-ci-load-run$i.log"
		grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT)' "$dir/log" | sed 's/^/    /' || true
		echo "    log: /tmp/asp-ci-load-run$i.log"
	fi
	rm -rf "$dir"
done
echo "$((n - failed)) of $n runs passed under two busy loops"
[ "$failed" -eq 0 ]
