#!/bin/bash
# End-to-end tests of the asp command line against a real asp-agent over stdio.
# usage: cli_test.sh PATH/TO/asp PATH/TO/asp-agent
# Each check runs one asp command and compares its exit code and output; the script
# prints one line per check (TAP) and exits 1 when any failed.
set -u
HERE=$(dirname "$(realpath "$0")")

ASP=$(realpath "$1")
AGENT=$(realpath "$2")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/asp-cli-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1

# The sandbox is this machine: the agent runs here, so its paths are ours too.
BOX="$WORK/box"
mkdir -p "$BOX" "$WORK/local"
cat > "$WORK/.asp.json" <<EOF
{"version": 1, "transport": "stdio", "stdio": {"command": ["$AGENT", "--stdio"]}}
EOF
cat > "$WORK/missing.json" <<EOF
{"version": 1, "transport": "stdio", "stdio": {"command": ["$WORK/no-such-agent", "--stdio"]}}
EOF
unset ASP_CONFIG

. "$HERE/testlib.sh"

# --- basics -----------------------------------------------------------------------------
run 0 "version" -- "$ASP" --version
expect_grep "version text" "$OUT" '^asp [0-9]'
run 0 "help" -- "$ASP" --help
run 0 "exec --help" -- "$ASP" exec --help
expect_grep "exec help text" "$OUT" 'usage: asp exec'
run 1 "unknown command" -- "$ASP" frobnicate
expect_grep "unknown command message" "$ERR" '^asp: .*invalid_argument: unknown command'
run 0 "hello" -- "$ASP" hello
expect_grep "hello shows the protocol" "$OUT" '^protocol: +2$'
expect_grep "hello shows a round trip" "$OUT" '^rtt: +[0-9.]+ ms'
run 0 "hello --json" -- "$ASP" --json hello
expect_grep "hello json" "$OUT" '"protocol":2,.*"rtt_ms":[0-9.]+\}'

# --- exec -------------------------------------------------------------------------------
run 0 "exec argv" -- "$ASP" exec -- echo hi
expect_out "exec stdout" "hi"
run 0 "exec without --" -- "$ASP" exec printf '%s-' a b
expect_out "exec argv passes options through" "a-b-"
run 7 "exec exit code" -- "$ASP" exec -c 'exit 7'
run 0 "exec stderr" -- "$ASP" exec -c 'echo to-err >&2; echo to-out'
expect_out "exec stdout beside stderr" "to-out"
expect_grep "exec stderr text" "$ERR" '^to-err$'
run 124 "exec timeout is 124" -- "$ASP" exec --timeout 0.3 -- sleep 10
run 137 "exec killed by KILL is 128+9" -- "$ASP" exec -c 'kill -9 $$'
run 143 "exec killed by TERM is 128+15" -- "$ASP" exec -c 'kill -TERM $$'
printf 'from-stdin' > "$WORK/in.txt"
run_in "$WORK/in.txt" 0 "exec --stdin" -- "$ASP" exec --stdin -- cat
expect_out "exec --stdin reaches the command" "from-stdin"
run_in "$WORK/in.txt" 0 "exec without --stdin" -- "$ASP" exec -- cat
expect_out "exec without --stdin sends nothing" ""
run 0 "exec --env" -- "$ASP" exec --env FOO=bar --env X=1=2 -c 'echo "$FOO $X"'
expect_out "exec env values" "bar 1=2"
run 0 "exec --cwd" -- "$ASP" exec --cwd "$BOX" -- pwd
expect_out "exec cwd" "$BOX"
run 0 "exec binary stdout" -- "$ASP" exec -c 'printf "a\000b\377"'
if [ "$(od -An -tx1 "$OUT" | tr -d ' \n')" == "610062ff" ]; then ok "exec stdout is binary-safe"
else not_ok "exec stdout is binary-safe" "bytes differ"; fi
run 3 "exec --json" -- "$ASP" --json exec -c 'echo hi; echo er >&2; exit 3'
expect_grep "exec json fields" "$OUT" \
	'^\{"exit_code":3,"signal":null,"stdout":"hi\\n","stderr":"er\\n",.*"timed_out":false,"duration_ms":[0-9]+\}$'
run 0 "exec --json base64" -- "$ASP" exec --json -c 'printf "\377"'
expect_grep "exec json non-UTF-8 as base64" "$OUT" '"stdout":"/w==","stdout_encoding":"base64"'
run 124 "exec --json timeout" -- "$ASP" --json exec --timeout 0.2 -- sleep 5
expect_grep "exec json timed_out" "$OUT" '"timed_out":true'
run 255 "exec of a missing program is 255" -- "$ASP" exec -- /no/such/program
expect_grep "exec missing program names not_found" "$ERR" '^asp: exec /no/such/program: not_found: '
run 255 "exec with a missing agent is 255" -- "$ASP" --config "$WORK/missing.json" exec -- true
expect_one_line "exec missing agent: one line"
expect_grep "exec missing agent names a code" "$ERR" '^asp: .*: [a-z_]+: '
run 255 "exec usage error is 255" -- "$ASP" exec
run 255 "exec -c with argv is 255" -- "$ASP" exec -c true extra
run 255 "exec bad --timeout is 255" -- "$ASP" exec --timeout soon -- true
run 255 "exec with a missing config is 255" -- "$ASP" --config "$WORK/none.json" exec -- true
expect_grep "missing config message" "$ERR" '^asp: exec: open .*none.json: not_found: '

# --- write / read -------------------------------------------------------------------------
printf 'hello\n' > "$WORK/hello.txt"
run_in "$WORK/hello.txt" 0 "write" -- "$ASP" write "$BOX/a.txt"
same_file "write content" "$WORK/hello.txt" "$BOX/a.txt"
run 0 "read" -- "$ASP" read "$BOX/a.txt"
expect_out "read content" "hello"
run 0 "read --offset --length" -- "$ASP" read "$BOX/a.txt" --offset 1 --length 3
expect_out "read range" "ell"
run 0 "read --json" -- "$ASP" --json read "$BOX/a.txt"
expect_out "read json" '{"data":"hello\n","size":6,"eof":true}'
run_in "$WORK/hello.txt" 0 "write --append" -- "$ASP" write --append "$BOX/a.txt"
run 0 "read after append" -- "$ASP" read "$BOX/a.txt"
expect_out "append content" "$(printf 'hello\nhello')"
run_in "$WORK/hello.txt" 1 "write without --mkdirs" -- "$ASP" write "$BOX/d1/d2/b.txt"
expect_grep "write missing dir is not_found" "$ERR" '^asp: write .*b.txt: not_found: '
run_in "$WORK/hello.txt" 0 "write --mkdirs" -- "$ASP" write --mkdirs "$BOX/d1/d2/b.txt"
same_file "write --mkdirs content" "$WORK/hello.txt" "$BOX/d1/d2/b.txt"
run 0 "write empty" -- "$ASP" write "$BOX/empty.txt"
[ -f "$BOX/empty.txt" ] && [ ! -s "$BOX/empty.txt" ] && ok "write empty made an empty file" \
	|| not_ok "write empty made an empty file"
run_in "$WORK/hello.txt" 0 "write --atomic" -- "$ASP" --json write --atomic "$BOX/c.txt"
expect_out "write json" '{"written":6,"size":6}'
run 1 "read missing" -- "$ASP" read "$BOX/nope"
expect_grep "read missing: not_found line" "$ERR" "^asp: read $BOX/nope: not_found: "
expect_one_line "read missing: one line"
run 1 "read missing --json" -- "$ASP" --json read "$BOX/nope"
expect_grep "json error object" "$OUT" '^\{"error":\{"code":"not_found",'
run 1 "read usage" -- "$ASP" read
run 1 "read bad --offset" -- "$ASP" read "$BOX/a.txt" --offset x

# Multi-chunk data: parallel chunks into a temporary file, then a rename.
head -c $((20 * 1024 * 1024 + 12345)) /dev/urandom > "$WORK/big.bin"
run_in "$WORK/big.bin" 0 "write big from a file" -- "$ASP" write "$BOX/big1.bin"
same_file "write big content" "$WORK/big.bin" "$BOX/big1.bin"
cat "$WORK/big.bin" | "$ASP" write "$BOX/big2.bin" > "$OUT" 2> "$ERR"
if [ $? -eq 0 ]; then ok "write big from a pipe"; else not_ok "write big from a pipe"; fi
same_file "write big from a pipe content" "$WORK/big.bin" "$BOX/big2.bin"
run 0 "read big to a file" -- "$ASP" read "$BOX/big1.bin"
same_file "read big content" "$WORK/big.bin" "$OUT"
"$ASP" read "$BOX/big1.bin" 2> "$ERR" | cat > "$WORK/big.pipe"
same_file "read big through a pipe" "$WORK/big.bin" "$WORK/big.pipe"
"$ASP" read "$BOX/big1.bin" --offset 5M --length 9M > "$WORK/big.part" 2> "$ERR"
tail -c +$((5 * 1024 * 1024 + 1)) "$WORK/big.bin" | head -c $((9 * 1024 * 1024)) \
	> "$WORK/big.expect"
same_file "read big range" "$WORK/big.expect" "$WORK/big.part"
printf 'x' > "$BOX/big3.bin"
run_in "$WORK/big.bin" 0 "write big --append" -- "$ASP" write --append "$BOX/big3.bin"
(printf 'x'; cat "$WORK/big.bin") > "$WORK/big3.expect"
same_file "write big --append content" "$WORK/big3.expect" "$BOX/big3.bin"
if ls -A "$BOX" | grep -q '\.asp-'; then not_ok "no temporary files left" "$(ls -A "$BOX")"
else ok "no temporary files left"; fi

# --- stat / ls / mkdir / rm / mv ---------------------------------------------------------------
run 0 "stat" -- "$ASP" stat "$BOX/c.txt"
expect_grep "stat type" "$OUT" '^ +type: file$'
expect_grep "stat size" "$OUT" '^ +size: 6$'
run 0 "stat --json" -- "$ASP" --json stat "$BOX/c.txt"
expect_grep "stat json" "$OUT" '^\{"type":"file","size":6,"mode":[0-9]+,"mtime_ns":[0-9]+,'
ln -s c.txt "$BOX/link"
run 0 "stat --no-follow" -- "$ASP" --json stat --no-follow "$BOX/link"
expect_grep "stat symlink target" "$OUT" '"type":"symlink".*"target":"c.txt"'
run 1 "stat missing" -- "$ASP" stat "$BOX/nope"
expect_grep "stat missing: not_found" "$ERR" 'not_found'
run 0 "ls" -- "$ASP" ls "$BOX"
expect_grep "ls shows a file" "$OUT" '^-rw.* +6 [0-9-]+ [0-9:]+ c\.txt$'
expect_grep "ls shows a directory" "$OUT" '^d.* d1$'
run 0 "ls --json" -- "$ASP" --json ls "$BOX"
expect_grep "ls json" "$OUT" '\{"name":"c.txt","type":"file","size":6,'
run 0 "ls a file" -- "$ASP" ls "$BOX/c.txt"
expect_grep "ls of a file shows it" "$OUT" 'c\.txt$'
run 1 "ls missing" -- "$ASP" ls "$BOX/nope"
run 0 "mkdir" -- "$ASP" mkdir "$BOX/m1"
[ -d "$BOX/m1" ] && ok "mkdir made it" || not_ok "mkdir made it"
run 1 "mkdir existing" -- "$ASP" mkdir "$BOX/m1"
expect_grep "mkdir existing: already_exists" "$ERR" "^asp: mkdir $BOX/m1: already_exists: "
run 0 "mkdir -p existing" -- "$ASP" mkdir -p "$BOX/m1"
run 0 "mkdir -p deep" -- "$ASP" mkdir -p "$BOX/m2/a/b"
[ -d "$BOX/m2/a/b" ] && ok "mkdir -p made it" || not_ok "mkdir -p made it"
run 1 "rm non-empty without -r" -- "$ASP" rm "$BOX/m2"
expect_grep "rm non-empty: not_empty" "$ERR" 'not_empty'
run 0 "rm -r" -- "$ASP" rm -r "$BOX/m2"
[ ! -e "$BOX/m2" ] && ok "rm -r removed it" || not_ok "rm -r removed it"
run 1 "rm missing" -- "$ASP" rm "$BOX/m2"
run 0 "rm -f missing" -- "$ASP" rm -f "$BOX/m2"
run 0 "mv" -- "$ASP" mv "$BOX/c.txt" "$BOX/c2.txt"
[ -f "$BOX/c2.txt" ] && [ ! -e "$BOX/c.txt" ] && ok "mv renamed" || not_ok "mv renamed"
run 0 "mv into a directory" -- "$ASP" mv "$BOX/c2.txt" "$BOX/m1"
[ -f "$BOX/m1/c2.txt" ] && ok "mv moved into it" || not_ok "mv moved into it"
run 1 "mv missing" -- "$ASP" mv "$BOX/nope" "$BOX/x"
expect_grep "mv missing: not_found" "$ERR" 'not_found'

# --- cp -------------------------------------------------------------------------------------
run 0 "cp up" -- "$ASP" cp "$WORK/big.bin" ":$BOX/up.bin"
same_file "cp up content" "$WORK/big.bin" "$BOX/up.bin"
run 0 "cp down" -- "$ASP" cp ":$BOX/up.bin" "$WORK/local/down.bin"
same_file "cp down content" "$WORK/big.bin" "$WORK/local/down.bin"
if [ "$(sha256sum < "$WORK/big.bin")" == "$(sha256sum < "$WORK/local/down.bin")" ]; then
	ok "cp round trip checksum"; else not_ok "cp round trip checksum"; fi
run 0 "cp into a remote directory" -- "$ASP" cp "$WORK/hello.txt" ":$BOX/m1"
same_file "cp into a remote directory content" "$WORK/hello.txt" "$BOX/m1/hello.txt"
run 0 "cp into a local directory" -- "$ASP" cp ":$BOX/m1/hello.txt" "$WORK/local"
same_file "cp into a local directory content" "$WORK/hello.txt" "$WORK/local/hello.txt"
run 0 "cp small onto an existing file" -- "$ASP" cp "$WORK/in.txt" ":$BOX/m1/hello.txt"
same_file "cp replaced the file" "$WORK/in.txt" "$BOX/m1/hello.txt"
run 0 "cp --json" -- "$ASP" --json cp "$WORK/hello.txt" ":$BOX/j.txt"
expect_out "cp json" '{"files":1,"bytes":6}'
run 1 "cp a directory without -r" -- "$ASP" cp "$WORK/local" ":$BOX/tree"
expect_grep "cp dir without -r: is_a_directory" "$ERR" 'is_a_directory'
run 1 "cp local to local" -- "$ASP" cp "$WORK/hello.txt" "$WORK/x.txt"
run 1 "cp missing" -- "$ASP" cp ":$BOX/nope" "$WORK/x.txt"
expect_grep "cp missing: not_found" "$ERR" 'not_found'
# Killed transfers (SIGKILL of asp mid-copy) leave at most nothing that grows: the next
# good copy to the same target leaves only the target beside it (docs/decisions.md).
head -c $((40 << 20)) /dev/urandom > "$WORK/kill.bin"
mkdir -p "$BOX/kill" "$WORK/kill"
# rchar of a process (bytes it read so far), 0 once it is gone.
rchar() { sed -n 's/^rchar: //p' "/proc/$1/io" 2> /dev/null || echo 0; }
kill_cp() { # kill_cp SRC DST: starts asp cp, SIGKILLs it once it has read 8 MiB
	"$ASP" cp "$1" "$2" < /dev/null > /dev/null 2>&1 &
	local pid=$! i=0
	while [ "$(rchar $pid)" -lt $((8 << 20)) ] && [ $i -lt 2000 ] && kill -0 $pid 2> /dev/null
	do i=$((i + 1)); done
	kill -9 $pid 2> /dev/null
	wait $pid 2> /dev/null
}
for i in 1 2 3 4 5 6; do kill_cp "$WORK/kill.bin" ":$BOX/kill/up.bin"; done
left_up=$(ls -A "$BOX/kill" | grep -vc '^up.bin$')
run 0 "cp up after killed ones" -- "$ASP" cp "$WORK/kill.bin" ":$BOX/kill/up.bin"
same_file "cp up after killed ones content" "$WORK/kill.bin" "$BOX/kill/up.bin"
for i in 1 2 3 4 5 6; do kill_cp ":$BOX/kill/up.bin" "$WORK/kill/down.bin"; done
left_down=$(ls -A "$WORK/kill" | grep -vc '^down.bin$')
run 0 "cp down after killed ones" -- "$ASP" cp ":$BOX/kill/up.bin" "$WORK/kill/down.bin"
same_file "cp down after killed ones content" "$WORK/kill.bin" "$WORK/kill/down.bin"
echo "# 6 killed cps each way: $left_up temporaries left in the sandbox, $left_down locally" \
	"(at most one each: the reused name)"
[ "$left_up" -le 1 ] && [ "$left_down" -le 1 ] && ok "killed cps: no temporaries pile up" \
	|| not_ok "killed cps: no temporaries pile up" "up $left_up, down $left_down"
[ "$(ls -A "$BOX/kill")" = "up.bin" ] && ok "a good cp up leaves only the target" \
	|| not_ok "a good cp up leaves only the target" "$(ls -A "$BOX/kill")"
[ "$(ls -A "$WORK/kill")" = "down.bin" ] && ok "a good cp down leaves only the target" \
	|| not_ok "a good cp down leaves only the target" "$(ls -A "$WORK/kill")"
rm -rf "$BOX/kill" "$WORK/kill" "$WORK/kill.bin"

mkdir -p "$WORK/tree/sub/deeper" "$WORK/tree/empty"
printf 'one' > "$WORK/tree/one.txt"
printf 'two' > "$WORK/tree/sub/two.txt"
cp "$WORK/big.bin" "$WORK/tree/sub/deeper/big.bin"
run 0 "cp -r up" -- "$ASP" cp -r "$WORK/tree" ":$BOX/tree"
if diff -r "$WORK/tree" "$BOX/tree" > /dev/null; then ok "cp -r up content"
else not_ok "cp -r up content"; fi
run 0 "cp -r down" -- "$ASP" cp -r ":$BOX/tree" "$WORK/tree2"
if diff -r "$WORK/tree" "$WORK/tree2" > /dev/null; then ok "cp -r down content"
else not_ok "cp -r down content"; fi
if ls -A "$BOX" "$WORK" | grep -q 'asp-tree'; then not_ok "cp -r leaves no temporary" "$(ls -A "$BOX")"
else ok "cp -r leaves no temporary"; fi
# a second copy onto the first merges into it: a changed file replaced, the rest kept
printf 'changed' > "$WORK/tree/changed.txt"
printf 'mine' > "$BOX/tree/mine.txt"
run 0 "cp -r up onto a copy" -- "$ASP" cp -r "$WORK/tree/." ":$BOX/tree"
if [ "$(cat "$BOX/tree/changed.txt")" = changed ] && [ -f "$BOX/tree/mine.txt" ]
then ok "cp -r up merges"; else not_ok "cp -r up merges"; fi
rm -f "$WORK/tree/changed.txt" "$BOX/tree/mine.txt" "$BOX/tree/changed.txt"
run 0 "cp -r into an existing directory" -- "$ASP" cp -r "$WORK/tree" ":$BOX/m1"
if diff -r "$WORK/tree" "$BOX/m1/tree" > /dev/null; then ok "cp -r into it content"
else not_ok "cp -r into it content"; fi
# symlinks are recreated both ways (as cp -a does), never followed
mkdir -p "$WORK/ltree/d"
printf 'f' > "$WORK/ltree/d/f.txt"
ln -s d/f.txt "$WORK/ltree/to-file"
ln -s d "$WORK/ltree/to-dir"
ln -s /nowhere "$WORK/ltree/dangling"
run 0 "cp -r up with symlinks" -- "$ASP" cp -r "$WORK/ltree" ":$BOX/ltree"
for l in to-file to-dir dangling; do
	if [ -L "$BOX/ltree/$l" ] && [ "$(readlink "$BOX/ltree/$l")" = "$(readlink "$WORK/ltree/$l")" ]
	then ok "cp -r up recreates symlink $l"; else not_ok "cp -r up recreates symlink $l"; fi
done
run 0 "cp -r down with symlinks" -- "$ASP" cp -r ":$BOX/ltree" "$WORK/ltree2"
for l in to-file to-dir dangling; do
	if [ -L "$WORK/ltree2/$l" ] && [ "$(readlink "$WORK/ltree2/$l")" = "$(readlink "$WORK/ltree/$l")" ]
	then ok "cp -r down recreates symlink $l"; else not_ok "cp -r down recreates symlink $l"; fi
done
rm -rf "$WORK/ltree" "$WORK/ltree2" "$BOX/ltree"
run 0 "cp remote to remote" -- "$ASP" cp ":$BOX/up.bin" ":$BOX/up2.bin"
same_file "cp remote to remote content" "$WORK/big.bin" "$BOX/up2.bin"

# --- streaming exec, ps, attach, kill ------------------------------------------------------
# Live output: each line is stamped when asp writes it; 1 s apart, not all at the end (the
# margin absorbs a loaded machine's delay of the first line).
"$ASP" exec -c 'for i in 1 2 3; do echo $i; sleep 1; done' < /dev/null 2> "$ERR" |
	while IFS= read -r l; do echo "$(date +%s%N) $l"; done > "$OUT"
first=$(head -1 "$OUT" | cut -d' ' -f1)
last=$(tail -1 "$OUT" | cut -d' ' -f1)
if [ "$(cut -d' ' -f2 "$OUT" | tr -d '\n')" == "123" ] &&
	[ $(((last - first) / 1000000)) -ge 1000 ]; then ok "exec streams output live"
else not_ok "exec streams output live" "lines: $(tr '\n' '|' < "$OUT")"; fi
# --stdin forwards as it comes: cat answers the first line while stdin is still open, and
# only then is the second typed (a condition, not a pause: a slow start cannot fake it).
rm -f "$WORK/stdin.fifo"
mkfifo "$WORK/stdin.fifo"
"$ASP" exec --stdin -- cat < "$WORK/stdin.fifo" > "$OUT" 2> "$ERR" &
apid=$!
exec 7> "$WORK/stdin.fifo"
echo first >&7
if wait_for 60 grep -qx first "$OUT"; then live=1; else live=0; fi
echo second >&7
exec 7>&-
wait $apid
if [ "$live" = 1 ] && [ "$(tr '\n' ' ' < "$OUT")" == "first second " ]; then
	ok "exec --stdin forwards live"
else not_ok "exec --stdin forwards live" "lines: $(tr '\n' '|' < "$OUT")"; fi
head -c 300000 /dev/urandom > "$WORK/rand.bin"
run_in "$WORK/rand.bin" 0 "exec --stdin binary" -- "$ASP" exec --stdin -- cat
same_file "exec --stdin binary round trip" "$WORK/rand.bin" "$OUT"
# Ctrl-C reaches the remote process as INT.
"$ASP" exec -c 'trap "echo got-int; exit 3" INT; echo ready; sleep 10 & wait' \
	< /dev/null > "$OUT" 2> "$ERR" &
pid=$!
wait_for 30 grep -q ready "$OUT"
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 3 ] && grep -q got-int "$OUT"; then ok "exec forwards Ctrl-C as INT"
else not_ok "exec forwards Ctrl-C as INT" "exit $rc"; fi
# A reader that goes away ends the process (as a pipe would) instead of hanging.
timeout 10 "$ASP" exec -- yes < /dev/null 2> "$ERR" | head -1 > "$OUT"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 141 ]; then ok "exec with a closed stdout ends"
else not_ok "exec with a closed stdout ends" "exit $rc"; fi

# Processes outlive a dropped connection when the sandbox runs a daemon (docs/design.md,
# "Concurrency and lifetime"): asp-agent --listen unix:PATH, and a stdio.command that
# relays to it.
"$AGENT" --listen "unix:$WORK/d.sock" > "$WORK/d.log" 2>&1 &
dpid=$!
wait_for 30 sh -c '[ -S "$1" ] || ! kill -0 "$2" 2> /dev/null' - "$WORK/d.sock" $dpid
if kill -0 $dpid 2> /dev/null && [ -S "$WORK/d.sock" ]; then
	printf '{"version": 1, "transport": "stdio", "stdio": {"command": ["%s", "--relay", "unix:%s"]}}\n' \
		"$AGENT" "$WORK/d.sock" > "$WORK/relay.json"
	R=(--config "$WORK/relay.json")
	# 5 s of output, so that it still runs when ps looks on a loaded machine.
	"$ASP" "${R[@]}" exec -c 'for i in $(seq 1 20); do echo n$i; sleep 0.25; done' \
		< /dev/null > "$WORK/bg.out" 2>&1 &
	bg=$!
	wait_for 30 grep -q n1 "$WORK/bg.out" # the daemon runs it: the client may go
	kill -9 $bg
	wait $bg 2> /dev/null
	run 0 "ps" -- "$ASP" "${R[@]}" ps
	expect_grep "ps lists the running process" "$OUT" \
		'^[0-9]+ +running +- +for i in \$\(seq 1 20\)'
	proc=$(sed -n 's/^\([0-9]*\) *running .*seq 1 20.*/\1/p' "$OUT")
	run 0 "ps --json" -- "$ASP" "${R[@]}" --json ps
	expect_grep "ps json" "$OUT" "\"proc\":$proc,\"tag\":null,\"command\":\"for i"
	run 0 "attach after the connection dropped" -- "$ASP" "${R[@]}" attach "$proc"
	expect_out "attach replays then follows" "$(seq -f 'n%g' 1 20)"
	run 0 "attach from an offset" -- "$ASP" "${R[@]}" attach --stdout-offset 3 "$proc"
	expect_out "attach offset" "$(seq -f 'n%g' 2 20)"
	"$ASP" "${R[@]}" exec -- sleep 30 < /dev/null > /dev/null 2>&1 &
	bg=$!
	wait_for 30 sh -c '"$@" | grep -q "running .*sleep 30$"' - "$ASP" "${R[@]}" ps
	run 0 "ps while sleeping" -- "$ASP" "${R[@]}" ps
	sp=$(sed -n 's/^\([0-9]*\) *running .*sleep 30$/\1/p' "$OUT")
	run 0 "kill PROC usr1" -- "$ASP" "${R[@]}" kill "$sp" usr1
	wait $bg
	rc=$?
	if [ $rc -eq 138 ]; then ok "kill reaches the process (exec exits 128+USR1)"
	else not_ok "kill reaches the process (exec exits 128+USR1)" "exit $rc"; fi
	run 0 "kill a finished process is a no-op" -- "$ASP" "${R[@]}" kill "$sp"
	run 1 "kill an unknown process" -- "$ASP" "${R[@]}" kill 999999
	expect_grep "kill unknown: not_found" "$ERR" '^asp: kill 999999 TERM: not_found: '
	run 1 "kill a bad signal" -- "$ASP" "${R[@]}" kill "$sp" STOP
	run 1 "attach an unknown process" -- "$ASP" "${R[@]}" attach 999999
	kill $dpid
	wait $dpid 2> /dev/null
else
	echo "# skipped: ps/attach/kill across connections need asp-agent --listen unix:"
fi
run 1 "attach needs a PROC" -- "$ASP" attach
run 1 "kill needs a PROC" -- "$ASP" kill x

# --- init -------------------------------------------------------------------------------------
mkdir -p "$WORK/init"
run 0 "init --stdio" -- "$ASP" --config "$WORK/init/a.json" init --cwd "$BOX" --stdio -- \
	"$AGENT" --stdio
run 0 "init config works" -- "$ASP" --config "$WORK/init/a.json" exec -- pwd
expect_out "init cwd applies" "$BOX"
run 1 "init refuses to overwrite" -- "$ASP" --config "$WORK/init/a.json" init --stdio -- x
expect_grep "init overwrite: already_exists" "$ERR" 'already_exists: .*--force'
run 0 "init --force" -- "$ASP" --config "$WORK/init/a.json" init --force \
	--ssh alice@example.com:2222 --identity /k
expect_grep "init ssh host" "$WORK/init/a.json" '"host": "example.com"'
expect_grep "init ssh port" "$WORK/init/a.json" '"port": 2222'
run 0 "init --http" -- "$ASP" --config "$WORK/init/h.json" init \
	--http http://127.0.0.1:8722 --token-env TOK
expect_grep "init http url" "$WORK/init/h.json" '"url": "http://127.0.0.1:8722"'
run 1 "init bad url" -- "$ASP" --config "$WORK/init/bad.json" init --http ftp://x
[ ! -e "$WORK/init/bad.json" ] && ok "init leaves no invalid file" \
	|| not_ok "init leaves no invalid file"
(cd "$WORK/init" && "$ASP" init --stdio -- "$AGENT" --stdio > "$OUT" 2> "$ERR")
[ -f "$WORK/init/.asp.json" ] && ok "init writes .asp.json here" \
	|| not_ok "init writes .asp.json here"

# --- conformance ----------------------------------------------------------------------------
run 0 "conformance" -- "$ASP" conformance
scratch=$(sed -n 's/^conformance: .*, scratch \(.*\)$/\1/p' "$OUT")
expect_grep "conformance names the config discovery found" "$OUT" \
	"^conformance: $(realpath "$WORK")/\\.asp\\.json, scratch "
if [ -n "$scratch" ] && [ ! -e "$scratch" ]; then ok "conformance removed its scratch directory"
else not_ok "conformance removed its scratch directory" "scratch '$scratch'"; fi
run 0 "conformance --json" -- "$ASP" --json conformance --only read_
expect_grep "conformance json" "$OUT" '"failed":0,'

echo "1..$n"
[ "$failed" -eq 0 ]
