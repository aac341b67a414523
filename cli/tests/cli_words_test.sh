#!/bin/bash
# The CLI speaks its own words: hints name flags, not protocol fields; file errors name
# the full path; failures say what failed (config or connection); a timeout says so.
# usage: cli_words_test.sh PATH/TO/asp PATH/TO/asp-agent PATH/TO/terse_responder.py
set -u
HERE=$(dirname "$(realpath "$0")")

ASP=$(realpath "$1")
AGENT=$(realpath "$2")
TERSE=$(realpath "$3")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/asp-cli-words.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
BOX="$WORK/box"
mkdir -p "$BOX"
cat > "$WORK/.asp.json" <<EOF2
{"version": 1, "transport": "stdio", "cwd": "$BOX", "stdio": {"command": ["$AGENT", "--stdio"]}}
EOF2
cat > "$WORK/terse.json" <<EOF2
{"version": 1, "transport": "stdio", "cwd": "/box", "stdio": {"command": ["/usr/bin/python3", "$TERSE"]}}
EOF2
cat > "$WORK/refused.json" <<EOF2
{"version": 1, "transport": "http", "http": {"url": "http://127.0.0.1:1"}}
EOF2
unset ASP_CONFIG
. "$HERE/testlib.sh"

# --- hints use the flags ----------------------------------------------------------------
echo x > "$WORK/x"
run_in "$WORK/x" 1 "write without its directory" -- "$ASP" write nodir/f
expect_grep "write hint names --mkdirs" "$ERR" 'asp write --mkdirs creates it$'
run 1 "mkdir without parents" -- "$ASP" mkdir a/b/c
expect_grep "mkdir hint names -p" "$ERR" 'asp mkdir -p creates it$'
mkdir -p "$BOX/d/e"
run 1 "rm of a non-empty directory" -- "$ASP" rm d
expect_grep "rm hint names -r" "$ERR" 'asp rm -r removes'
touch "$BOX/m1" "$BOX/m2"
run 1 "mv -n onto an existing file" -- "$ASP" mv -n m1 m2
expect_grep "mv hint names -n" "$ERR" '-n forbids replacing it$'
run 1 "kill of an unknown process" -- "$ASP" kill 999
expect_grep "kill hint names asp ps" "$ERR" 'see asp ps$'
expect_grep "kill: no op name, the command's own words" "$ERR" \
	'^asp: kill 999 TERM: not_found: no process 999 '
if grep -Eq "'(mkdirs|parents|recursive|overwrite)'|proc_list" "$WORK/err"; then
	not_ok "no protocol field names left"; else ok "no protocol field names left"; fi

# --- messages say it once and name what failed ------------------------------------------
run 1 "unknown command" -- "$ASP" frobnicate
expect_out "unknown command: nothing on stdout" ""
if [ "$(grep -o 'asp --help' "$ERR" | wc -l)" -eq 1 ]; then ok "unknown command: one pointer to --help"
else not_ok "unknown command: one pointer to --help"; fi
run 1 "attach of something that is not a handle" -- "$ASP" attach abc
if grep -q ') (' "$ERR"; then not_ok "a usage error with its own bracket: one bracket"
else ok "a usage error with its own bracket: one bracket"; fi
expect_grep "it still points at asp ps and --help" "$ERR" 'asp ps lists them; see asp attach --help\)$'
run 1 "refused connection" -- "$ASP" --config "$WORK/refused.json" hello
expect_grep "a connection failure says connect" "$ERR" '^asp: hello: connect: transport_error: '
if grep -q 'open ' "$ERR"; then not_ok "a connection failure is not a config failure"
else ok "a connection failure is not a config failure"; fi
if grep -Eq '\([^)]*\(' "$ERR"; then not_ok "no nested brackets"; else ok "no nested brackets"; fi
run 1 "missing config" -- "$ASP" --config "$WORK/none.json" hello
expect_grep "a config failure says open" "$ERR" '^asp: hello: open .*none.json: not_found: '

# --- file errors name the full path, even when the sandbox's message does not ------------
run 1 "terse permission error" -- "$ASP" --config "$WORK/terse.json" read locked.txt
expect_grep "the error names the full path" "$ERR" \
	'^asp: read locked.txt: permission_denied: /box/locked.txt: Permission denied$'
# without a cwd in the config, a relative path resolves where the sandbox says (hello's cwd)
cat > "$WORK/nocwd.json" <<EOF2
{"version": 1, "transport": "stdio", "stdio": {"command": ["$AGENT", "--stdio"]}}
EOF2
for cmd in "read" "ls" "rm"; do
	run 1 "$cmd of a missing relative path" -- "$ASP" --config "$WORK/nocwd.json" $cmd nosuch
	expect_grep "$cmd: the error names the full path" "$ERR" \
		"^asp: $cmd nosuch: not_found: $(pwd -P)/nosuch: No such file or directory\$"
done
# --- a sandbox without terminals: one line naming the missing feature, 255 ---------------
run 255 "asp shell where hello lacks pty" -- "$ASP" --config "$WORK/terse.json" shell
expect_grep "shell: the line names pty" "$ERR" \
	'^asp: shell: unsupported: the sandbox has no terminals: its hello lacks the feature "pty" \(agent terse\)'
if [ "$(wc -l < "$ERR")" -eq 1 ]; then ok "shell without terminals: one line"
else not_ok "shell without terminals: one line"; fi
run 255 "asp exec -t where hello lacks pty" -- "$ASP" --config "$WORK/terse.json" exec -t -- ls
expect_grep "exec -t: the line names pty" "$ERR" '^asp: exec ls: unsupported: .*"pty"'
run 255 "exec -t with --json" -- "$ASP" exec -t --json -- ls
expect_grep "exec -t refuses --json" "$ERR" 'give one or the other'

run 1 "terse stat" -- "$ASP" --config "$WORK/terse.json" stat /box/s
expect_grep "a path already named is not repeated" "$ERR" \
	'^asp: stat /box/s: permission_denied: Permission denied$'

# --- a filter that selects nothing is a mistake, not a pass -------------------------------
run 1 "conformance --only matching no case" -- "$ASP" conformance --only no-such-case
expect_grep "--only names the word and where the names are" "$ERR" \
	"--only 'no-such-case' matches no case \\(asp conformance --list shows them"
expect_out "--only matching no case: nothing on stdout" ""

# --- a timeout says what happened --------------------------------------------------------
run 124 "exec --timeout" -- "$ASP" exec --timeout 1 -- sleep 30
expect_grep "exec timeout says so" "$ERR" '^asp: exec: the command timed out and was killed'
expect_one_line "exec timeout: one line"

# --- asp init writes what the first call needs ---------------------------------------------
run 0 "init --ssh with a pinned key" -- "$ASP" --config "$WORK/i1.json" init \
	--ssh u@h:2200 --host-key-sha256 SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU \
	--known-hosts /k/known
expect_grep "init pins the key" "$WORK/i1.json" '"host_key_sha256": "SHA256:47DEQ'
expect_grep "init sets known_hosts" "$WORK/i1.json" '"known_hosts": "/k/known"'
run 0 "init --ssh --accept-new" -- "$ASP" --config "$WORK/i2.json" init --ssh h --accept-new
expect_grep "init accept-new" "$WORK/i2.json" '"strict_host_key_checking": "accept-new"'
run 0 "init --http --websocket" -- "$ASP" --config "$WORK/i3.json" init \
	--http http://127.0.0.1:8722 --websocket
expect_grep "init websocket" "$WORK/i3.json" '"websocket": true'
run 0 "init --http --no-websocket" -- "$ASP" --config "$WORK/i4.json" init \
	--http http://127.0.0.1:8722 --no-websocket
expect_grep "init no websocket" "$WORK/i4.json" '"websocket": false'
run 1 "init --accept-new without --ssh" -- "$ASP" --config "$WORK/i5.json" init \
	--http http://127.0.0.1:1 --accept-new
run 1 "init with a bad fingerprint" -- "$ASP" --config "$WORK/i6.json" init --ssh h \
	--host-key-sha256 nope
[ ! -e "$WORK/i6.json" ] && ok "a bad fingerprint leaves no file" || not_ok "a bad fingerprint leaves no file"

# --- asp ps names the signal that ended a process ----------------------------------------
# One long-lived responder, so ps sees what an earlier asp started (the --relay setup).
"$AGENT" --listen "unix:$WORK/agent.sock" 2> "$WORK/agent.log" &
agent_pid=$!
for _ in $(seq 1 600); do
	grep -q 'listening on' "$WORK/agent.log" 2>/dev/null && break
	kill -0 "$agent_pid" 2>/dev/null || break
	sleep 0.1 # polling a condition (the listening line), bounded at 60 s
done
cat > "$WORK/relay.json" <<EOF2
{"version": 1, "transport": "stdio", "stdio": {"command": ["$AGENT", "--relay", "unix:$WORK/agent.sock"]}}
EOF2
run 143 "exec of a command killed by TERM" -- "$ASP" --config "$WORK/relay.json" exec -- \
	sh -c 'kill -TERM $$'
run 0 "ps" -- "$ASP" --config "$WORK/relay.json" ps
expect_grep "ps shows the signal" "$OUT" '^[0-9]+ +TERM '
if awk 'NR == 1 { col = index($0, "STATE") }
	NR > 1 { match($0, /^[0-9]+ +/); if (RLENGTH + 1 != col) bad = 1 }
	END { exit bad }' "$OUT"; then ok "ps: the STATE column lines up under its header"
else not_ok "ps: the STATE column lines up under its header"; fi
run 0 "ps --help" -- "$ASP" ps --help
expect_grep "ps --help says --json has the signal" "$OUT" '"signal"'
run 0 "ps --json" -- "$ASP" --config "$WORK/relay.json" --json ps
expect_grep "ps --json has the signal" "$OUT" '"exit_code":-1,"signal":"TERM"'
kill "$agent_pid" 2>/dev/null
wait "$agent_pid" 2>/dev/null

# --- a listener that wants a token the config does not give: the message says what to set,
# once, without a generic hint after it
ASP_TOKEN=words-test-token "$AGENT" --listen 127.0.0.1:0 2> "$WORK/tok.log" &
tok_pid=$!
url=
for _ in $(seq 1 600); do
	url=$(sed -n 's/^asp-agent: listening on \([^ ]*\).*/\1/p' "$WORK/tok.log" 2>/dev/null)
	[ -n "$url" ] && break
	kill -0 "$tok_pid" 2>/dev/null || break
	sleep 0.1 # polling a condition (the listening line), bounded at 60 s
done
cat > "$WORK/notoken.json" <<EOF2
{"version": 1, "transport": "http", "http": {"url": "$url"}}
EOF2
run 1 "http without the token it wants" -- "$ASP" --config "$WORK/notoken.json" hello
expect_grep "unauthorized names what to set" "$ERR" \
	'^asp: hello: connect: unauthorized: .*set http.token_env or http.token_file in '
if grep -q '(check the credentials' "$ERR"; then not_ok "no second hint after it"
else ok "no second hint after it"; fi
kill "$tok_pid" 2>/dev/null
wait "$tok_pid" 2>/dev/null

echo "1..$n"
[ "$failed" -eq 0 ]
