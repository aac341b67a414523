#!/bin/sh
# meson install: the built TypeScript SDK (package.json, dist/ and its dependency
# @msgpack/msgpack, from tests/sdk/ts_run.sh's work folder) into the installed pi
# extension's node_modules, where pi's extension loader resolves `asp-sdk`.
# usage: install-pi-sdk.sh SDK_WORK PI_DIR (PI_DIR relative to the prefix)
set -eu
work=$1
dest="${MESON_INSTALL_DESTDIR_PREFIX}/$2/node_modules"
if [ ! -f "$work/dist/index.js" ]; then
  echo "install-pi-sdk: no built TypeScript SDK in $work; the pi binding needs asp-sdk in $dest" >&2
  exit 0
fi
mkdir -p "$dest/asp-sdk" "$dest/@msgpack"
cp "$work/package.json" "$dest/asp-sdk/"
rm -rf "$dest/asp-sdk/dist" "$dest/@msgpack/msgpack"
cp -r "$work/dist" "$dest/asp-sdk/dist"
cp -r "$work/node_modules/@msgpack/msgpack" "$dest/@msgpack/msgpack"
