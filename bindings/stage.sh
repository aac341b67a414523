#!/bin/sh
# The build's copy of the bindings (BUILD/bindings): what asp bind points at when run from
# the build tree, as meson install lays it out, with the built TypeScript SDK in
# pi/node_modules so pi's extension loads (put-pi-sdk.sh). Touches STAMP when done.
# usage: stage.sh SRC_BINDINGS SDK_WORK OUT_DIR STAMP
set -eu
src=$1 work=$2 out=$3 stamp=$4
rm -rf "$out/opencode" "$out/pi"
mkdir -p "$out/pi"
cp -r "$src/opencode" "$out/opencode"
for f in "$src"/pi/*; do
  [ -f "$f" ] && cp "$f" "$out/pi/"
done
sh "$(dirname "$0")/put-pi-sdk.sh" "$work" "$out/pi/node_modules"
touch "$stamp"
