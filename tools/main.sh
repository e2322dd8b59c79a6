#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The main job: install what is missing, build, run a short comparison and
# print its results.  Until the FUSE daemon exists (fs/), the comparison is
# the deferred-free benchmark: immediate vs deferred vs deferred without
# expedite, N = 1, 2, 4 threads.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup-deps.sh"
mkdir -p "$root/build"
"$root/tools/build.sh" "$root/build/main" -DBUILD_TESTING=OFF
out="$root/build/results"
mkdir -p "$out"
"$root/build/main/tools/fill_free_bench" --threads 1,2,4 --seconds 1 --rounds 2 \
  --csv "$out/fill_free.csv" --json "$out/fill_free.json"
echo "results also in $out/fill_free.csv and $out/fill_free.json"
