#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Installs what norefs needs from Debian 12, only what is missing.  Run as root.
# (tmux: the terminal test of `norefsctl top`, tests/fs/top_test.cc.)
set -euo pipefail
# spin: the model check of the deferral ordering (tests/model).
# clang-format, clang-tidy: tools/test.sh's style checks (tools/tidy.sh).
# liburing-dev: FUSE over io_uring (fs/fuse_uring.h).
# ninja-build: tools/build.sh's generator (make if it is missing).
pkgs=(g++ cmake make ninja-build pkg-config liburcu-dev libjemalloc-dev libfuse3-dev fuse3 libgtest-dev
      liburing-dev fio jq nlohmann-json3-dev libcli11-dev spin tmux clang-format clang-tidy)
# The package and its tests (packaging/, tests/packaging): dpkg-shlibdeps for
# the Depends, rst2man for the man pages, lintian, systemd-analyze.  Without
# their Recommends: 27 MB and about a minute on a fresh Debian 12 machine
# (lintian is most of it), measured 2026-12-01.
# python3-matplotlib: tools/bench/plot.py.
pkg_tools=(dpkg-dev python3-docutils lintian systemd python3-matplotlib)
missing=() missing_tools=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${pkg_tools[@]}"; do installed "$p" || missing_tools+=("$p"); done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_tools[@]} -eq 0 ] && exit 0
missing_all=("${missing[@]}" "${missing_tools[@]}")
if [ "$(id -u)" -ne 0 ]; then
  echo "norefs: missing packages: ${missing_all[*]}; run this as root (or: apt-get install ${missing_all[*]})" >&2
  exit 1
fi
echo "norefs: installing ${missing_all[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_install() {  # apt_install [apt-get options] PACKAGES...
  apt-get install -y -q "$@" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q "$@" >/dev/null
  }
}
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
[ ${#missing_tools[@]} -eq 0 ] || apt_install --no-install-recommends "${missing_tools[@]}"
