#!/bin/sh
# POST /v1/rpc with the curl command, as docs/http.md shows a user: a msgpack request
# built with printf (hello) and with python3-msgpack (exec), the answer decoded back.
# Runs a real `asp-agent --listen` with a token on a free loopback port.
#
# usage: test_curl.sh ASP_AGENT PYTHON3
set -eu
agent=$1
py=$2
case $agent in /*) ;; *) agent=$PWD/$agent ;; esac
command -v curl >/dev/null || { echo "no curl command: skipped"; exit 77; }
"$py" -c 'import msgpack' 2>/dev/null || { echo "no python3-msgpack: skipped"; exit 77; }

dir=$(mktemp -d /tmp/asp-curl-test-XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"

export ASP_TOKEN=curl-test-token
# The log exists before the agent starts: the shell opens a background command's
# redirection in the child, which may not have run yet when the loop first reads it.
: >agent.log
"$agent" --listen 127.0.0.1:0 2>agent.log &
pid=$!
# Wait for the "listening on" line, for as long as a loaded machine may need, and not
# past the agent's death.
url=
deadline=$(($(date +%s) + 60))
while [ "$(date +%s)" -lt "$deadline" ]; do
	url=$(sed -n 's/^asp-agent: listening on \([^ ]*\).*/\1/p' agent.log)
	[ -n "$url" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.05
done
[ -n "$url" ] || { echo "the agent did not start:"; cat agent.log; exit 1; }
# the line exactly as docs/http.md gives it, with a token checked
grep -qxF "asp-agent: listening on $url (token required)" agent.log ||
	{ echo "the listening line is not the documented one:"; cat agent.log; exit 1; }

# 1. hello, the request written byte by byte: [0, 1, "hello", {}]
printf '\224\000\001\245hello\200' > hello.bin
code=$(curl -sS -o hello.out -w '%{http_code}' -H "Authorization: Bearer $ASP_TOKEN" \
	-H 'Content-Type: application/msgpack' --data-binary @hello.bin "$url/v1/rpc")
[ "$code" = 200 ] || { echo "hello: HTTP $code"; exit 1; }

# 2. exec, as in docs/http.md
"$py" -c 'import msgpack, sys
sys.stdout.buffer.write(msgpack.packb([0, 1, "exec", {"command": "echo hello from $(uname -s)"}]))' \
	> req.bin
curl -sS --fail-with-body -H "Authorization: Bearer $ASP_TOKEN" \
	-H 'Content-Type: application/msgpack' --data-binary @req.bin "$url/v1/rpc" -o resp.bin
"$py" -c 'import msgpack
kind, msgid, error, result = msgpack.unpackb(open("resp.bin", "rb").read())
assert (kind, msgid, error) == (1, 1, None), (kind, msgid, error)
assert result["exit_code"] == 0 and result["stdout"] == b"hello from Linux\n", result
print("exec:", result["stdout"])'

# 3. hello answers the agent, and no token is 401
"$py" -c 'import msgpack
r = msgpack.unpackb(open("hello.out", "rb").read())
assert r[0] == 1 and r[2] is None and r[3]["protocol"] >= 1, r
print("hello:", r[3]["agent"], r[3]["os"], r[3]["arch"])'
code=$(curl -sS -o /dev/null -w '%{http_code}' --data-binary @hello.bin "$url/v1/rpc")
[ "$code" = 401 ] || { echo "without a token: HTTP $code, not 401"; exit 1; }
code=$(curl -sS -o /dev/null -w '%{http_code}' "$url/v1/health")
[ "$code" = 200 ] || { echo "health: HTTP $code"; exit 1; }
echo "ok"
