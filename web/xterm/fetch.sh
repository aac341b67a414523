#!/usr/bin/env bash
# Takes xterm.js, its stylesheet and its fit addon from npm at the versions
# package-lock.json pins (npm ci into a work folder of the build tree) and copies them to
# OUT_DIR for asp to embed (cli/meson.build). Where npm is missing or the install fails,
# writes a stub whose first line says why, and the page shows the terminal unavailable:
# the build goes on either way.
# usage: fetch.sh SRC_DIR WORK_DIR OUT_JS OUT_CSS OUT_FIT_JS
set -uo pipefail
src=$1 work=$2 js=$3 css=$4 fit=$5

stub() {
  printf '/* asp: xterm.js unavailable: %s */\n' "$1" > "$js"
  printf '/* %s */\n' "$1" > "$css"
  printf '/* %s */\n' "$1" > "$fit"
  echo "web/xterm: $1; the page's terminal is unavailable" >&2
  exit 0
}

command -v npm >/dev/null || stub "npm was not found when asp was built"
mkdir -p "$work"
if ! cmp -s "$src/package-lock.json" "$work/.installed-lock" || [ ! -d "$work/node_modules" ]; then
  cp "$src/package.json" "$src/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error --fetch-retries=1 \
     --fetch-timeout=30000 >&2) ||
    stub "npm could not install @xterm/xterm when asp was built"
  cp "$src/package-lock.json" "$work/.installed-lock"
fi
x=$work/node_modules/@xterm
[ -f "$x/xterm/lib/xterm.js" ] && [ -f "$x/addon-fit/lib/addon-fit.js" ] ||
  stub "the @xterm/xterm package has no lib/xterm.js"
cp "$x/xterm/lib/xterm.js" "$js"
cp "$x/xterm/css/xterm.css" "$css"
cp "$x/addon-fit/lib/addon-fit.js" "$fit"
# their source maps are not shipped: no request for them
sed -i '/sourceMappingURL=/d' "$js" "$fit"
