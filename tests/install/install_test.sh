#!/bin/bash
# `meson install` into a temporary --destdir, then what a user outside the tree does:
# builds tests/install/prog.c and examples/unix-socket/ with nothing but
# `cc ... $(pkg-config --cflags --libs asp)` (the installed headers and asp.pc), and runs
# them against the installed asp-agent: over stdio, and behind a Unix socket through the
# example's own transport.
#   usage: install_test.sh MESON BUILD_DIR SOURCE_DIR HAVE_STATIC_AGENT(0|1) [SANITIZE]
# SANITIZE is the build's b_sanitize: a sanitized libasp.so needs the programs that load
# it built with the same -fsanitize.
set -euo pipefail
meson=$1 build=$2 src=$3 have_static=$4 sanitize=${5:-none}

tmp=$(mktemp -d)
listener=
cleanup() {
	if [ -n "$listener" ]; then
		kill "$listener" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

dest=$tmp/dest
"$meson" install -C "$build" --no-rebuild --destdir "$dest" --quiet >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log" >&2; fail "meson install --destdir"; }

# What must be there, and what must not (core/src stays private).
# No `| head` or `| grep -q` under pipefail: a reader that quits early can SIGPIPE the
# writer, and the pipeline then fails though it matched (seen under load with ldd).
pc=$(find "$dest" -name asp.pc -path '*/pkgconfig/*' -print -quit)
[ -n "$pc" ] || fail "no asp.pc installed"
agent=$(find "$dest" -type f -name asp-agent -path '*/bin/*' -print -quit)
bindir=${agent:+$(dirname "$agent")}
[ -n "$bindir" ] || fail "no asp-agent installed"
for prog in asp asp-agent asp-sdkgen; do
	[ -x "$bindir/$prog" ] || fail "$prog not installed in $bindir"
done
if [ "$have_static" = 1 ]; then
	[ -x "$bindir/asp-agent-static" ] || fail "asp-agent-static not installed in $bindir"
fi
# The manual: asp(1), asp-agent(1), asp.json(5) (cli/gen_manual.py).
for page in man1/asp.1 man1/asp-agent.1 man5/asp.json.5; do
	[ -n "$(find "$dest" -type f -path "*/man/$page" -print -quit)" ] ||
		fail "man page $page not installed"
done
incdir=$(find "$dest" -type d -name asp -path '*/include/asp' -print -quit)
[ -n "$incdir" ] || fail "no include/asp installed"
for h in asp.h arena.h channel.h client.h config.h proc.h proto.h server.h status.h \
	tools.h transport.h types.h; do
	[ -f "$incdir/$h" ] || fail "header asp/$h not installed"
done
for h in wire.h proto_desc.h codec.h local.h local_impl.h rpc.h op_check.h; do
	if [ -n "$(find "$dest" -name "$h" -not -path "*/include/asp/$h")" ]; then
		fail "private header $h installed"
	fi
done
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libasp.so" ] || fail "no libasp.so in $libdir"
[ -e "$libdir/libasp.a" ] || fail "no libasp.a in $libdir"
"$src/tests/install/exports_test.sh" "$libdir/libasp.so"

# The user's side: pkg-config alone, pointed at the destdir.
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs asp) || fail "pkg-config --cflags --libs asp"
echo "pkg-config --cflags --libs asp: $flags"
case " $flags " in
*" -I$dest"*) ;;
*) fail "pkg-config's -I does not point into the destdir: $flags" ;;
esac
cc=${CC:-cc}
san=()
if [ "$sanitize" != none ] && [ -n "$sanitize" ]; then
	san=("-fsanitize=$sanitize")
fi
work=$tmp/outside
mkdir -p "$work"
cp "$src/tests/install/prog.c" "$src/examples/unix-socket/asp_unix.c" \
	"$src/examples/unix-socket/serve_unix.c" "$work/"
cd "$work"
# shellcheck disable=SC2086 # $flags is a list of words
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" -o prog prog.c $flags || fail "building prog.c"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" -o asp_unix asp_unix.c $flags ||
	fail "building examples/unix-socket/asp_unix.c"
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" -o serve_unix serve_unix.c ||
	fail "building examples/unix-socket/serve_unix.c"
export LD_LIBRARY_PATH=$libdir

libs=$(ldd ./prog) || fail "ldd ./prog"
grep -qF "$libdir/libasp.so" <<<"$libs" || fail "prog does not load the installed libasp.so: $libs"
out=$(timeout 60 ./prog "$bindir/asp-agent") || fail "prog against the installed asp-agent"
[ "$out" = "prog: installed" ] || fail "prog printed '$out'"
echo "$out"

sock=$tmp/asp.sock
listener=$(timeout 30 ./serve_unix "$sock" "$bindir/asp-agent") || fail "serve_unix"
out=$(timeout 60 ./asp_unix "$sock") || fail "asp_unix against asp-agent behind $sock"
echo "$out"
grep -qx 'exec: exit 0, stdout: hello over a unix socket' <<<"$out" ||
	fail "asp_unix exec answer: $out"
grep -qx 'read: written and read back through the seam' <<<"$out" ||
	fail "asp_unix read answer: $out"
echo "ok"
