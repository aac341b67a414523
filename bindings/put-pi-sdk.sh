#!/bin/sh
# Puts the built TypeScript SDK (package.json, dist/ and its one dependency
# @msgpack/msgpack, from tests/sdk/ts_run.sh's work folder) into NODE_MODULES, where pi's
# extension loader resolves `asp-sdk` from bindings/pi. Exits 1 when the SDK is not built.
# usage: put-pi-sdk.sh SDK_WORK NODE_MODULES
set -eu
work=$1 dest=$2
if [ ! -f "$work/dist/index.js" ]; then
  echo "put-pi-sdk: no built TypeScript SDK in $work (node and npm build it)" >&2
  exit 1
fi
mkdir -p "$dest/asp-sdk" "$dest/@msgpack"
rm -rf "$dest/asp-sdk/dist" "$dest/@msgpack/msgpack"
cp "$work/package.json" "$dest/asp-sdk/"
cp -r "$work/dist" "$dest/asp-sdk/dist"
cp -r "$work/node_modules/@msgpack/msgpack" "$dest/@msgpack/msgpack"
