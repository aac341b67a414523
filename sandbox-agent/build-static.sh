#!/bin/sh
# Builds asp-agent-static: the agent and asp_proto sources with musl-gcc -static -Os.
# musl-gcc must not see glibc's /usr/include, so the msgpack headers are copied into a
# private folder first.
# usage: build-static.sh MUSL_GCC OUTPUT PRIVATE_DIR MSGPACK_INCDIR LIBMSGPACKC_A DEFINE
#                        INCDIR... -- SOURCES...
set -eu
cc=$1 out=$2 priv=$3 mpinc=$4 mplib=$5 define=$6
shift 6
incs=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	incs="$incs -I$1"
	shift
done
shift
mkdir -p "$priv/include"
cp "$mpinc/msgpack.h" "$priv/include/"
rm -rf "$priv/include/msgpack"
cp -R "$mpinc/msgpack" "$priv/include/msgpack"
# shellcheck disable=SC2086 # $incs is a list of words on purpose
exec "$cc" -std=c11 -Os -static -s -D_GNU_SOURCE -fno-strict-aliasing "$define" \
	-ffunction-sections -fdata-sections -Wl,--gc-sections \
	-I"$priv/include" $incs -o "$out" "$@" "$mplib" -lpthread
