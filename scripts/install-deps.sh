#!/usr/bin/env bash
# Installs the Debian 12 packages ASP needs to build and test, and nothing when all are
# present. The one place dependencies are listed: the quick start and CI both call it.
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config
  libmsgpack-dev libjansson-dev libcunit1-dev libpcre2-dev
  libssh-dev libcurl4-openssl-dev libwebsockets-dev
  musl-tools
  clang libclang-rt-14-dev clang-format
  openssh-server openssh-client dropbear-bin openssl curl tmux rsync
  chromium fonts-dejavu-core
  iproute2 util-linux socat nginx man-db groff-base busybox-static
  python3 python3-msgpack python3-paramiko python3-websockets
  python3-pip python3-setuptools python3-wheel python3-venv
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (or install them) and retry" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
