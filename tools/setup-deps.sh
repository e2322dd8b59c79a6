#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Installs what norefs needs from Debian 12, only what is missing.  Run as root.
set -euo pipefail
pkgs=(g++ cmake make pkg-config liburcu-dev libjemalloc-dev libfuse3-dev fuse3 libgtest-dev
      fio jq nlohmann-json3-dev libcli11-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "norefs: missing packages: ${missing[*]}; run this as root (or: apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "norefs: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q "${missing[@]}" >/dev/null
}
