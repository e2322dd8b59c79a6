#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# build.sh DIR [cmake args...]: configure and build norefs into DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
# The test binaries use precompiled headers (CMakeLists.txt:
# norefs_test_code()); ccache caches their files only with these (a no-op
# without ccache).
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# CMake's codemodel, for the layering test's link rules (tests/CMakeLists.txt):
# the query must be there before CMake starts.
mkdir -p "$dir/.cmake/api/v1/query"
: >"$dir/.cmake/api/v1/query/codemodel-v2"
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log" >&2; exit 1; }
# NOREFS_TARGETS: build only these targets (tools/test.sh: the test binaries
# and what they run), else everything.
targets=()
for t in ${NOREFS_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}" >"$dir.build.log" 2>&1 ||
  { tail -50 "$dir.build.log" >&2; exit 1; }
