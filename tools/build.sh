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
# Ninja for a new build directory, if it is installed (tools/setup-deps.sh
# installs it); a directory configured before keeps its generator.  Ninja
# compiles a target's files while the libraries it links are still being
# built (make starts them only once those are done), so the last and
# largest translation units (a test binary's unity file) do not run alone
# at the end: on the per-file CPU times of 2026-12-02 a 2-core ASan build
# of the test binaries takes 137 s with make against 122 s with Ninja
# (the bound, work / 2, is 122 s), the release build 102 s against 97 s.
gen=()
if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S "$root" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log" >&2; exit 1; }
# NOREFS_TARGETS: build only these targets (tools/test.sh: the test binaries
# and what they run), else everything.
targets=()
for t in ${NOREFS_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}" >"$dir.build.log" 2>&1 ||
  { tail -50 "$dir.build.log" >&2; exit 1; }
