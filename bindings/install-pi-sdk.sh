#!/bin/sh
# meson install: the built TypeScript SDK into the installed pi extension's node_modules
# (put-pi-sdk.sh), where pi's extension loader resolves `asp-sdk`.
# usage: install-pi-sdk.sh SDK_WORK PI_DIR (PI_DIR relative to the prefix)
set -eu
dest="${MESON_INSTALL_DESTDIR_PREFIX}/$2/node_modules"
if ! sh "$(dirname "$0")/put-pi-sdk.sh" "$1" "$dest"; then
  echo "install-pi-sdk: the pi binding needs asp-sdk in $dest" >&2
fi
