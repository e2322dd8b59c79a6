#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The whole test suite: install what is missing, check the formatting, then
# build and run every test in a release build, run the curated clang-tidy on
# the product code (alloc/ cache/ fs/) with the release build's compile
# commands, then build and run every test in an AddressSanitizer+UBSan build
# and a ThreadSanitizer build.  Exits non-zero if the formatting, the lint,
# any build or any test fails.  NOREFS_TIDY=0 skips the lint (a developer's
# quicker run; CI never sets it), NOREFS_TIDY=all adds tools/ (minutes more,
# docs/testing.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup-deps.sh"
mkdir -p "$root/build"
status=0
# .clang-format, on the product code and the tests: a file that
# `clang-format -i` would change fails the suite (the builds still run).
echo "== clang-format"
if ! (cd "$root" && find alloc cache fs tools tests -name '*.cc' -o -name '*.h' | sort |
      xargs clang-format --dry-run -Werror); then
  echo "clang-format: the files above differ from .clang-format (clang-format -i FILE)" >&2
  status=1
fi
# The test binaries (the fs tests depend on the daemon and the minimal FUSE
# server, which they run); the benchmark mains are not needed here.
export NOREFS_TARGETS="norefs_alloc_tests norefs_cache_tests norefs_tools_lib_tests norefs_ctl_tests norefs_bench_tests norefs_check_tests norefs_fs_tests"
run() {  # run NAME [cmake args...]
  local name=$1 t0=$SECONDS
  shift
  echo "== $name: build"
  "$root/tools/build.sh" "$root/build/$name" "$@"
  echo "== $name: built in $((SECONDS - t0)) s"
  # The unit tests run two per core in the release and ASan builds: most
  # of them wait (on a mount, a helper process, a grace period) more than
  # they compute; the longest start first (COST, tests/CMakeLists.txt).
  # Three runs of each at -j4 on the shared 2-core machine had no failure.
  # Under TSan they stay one per core (UNIT_JOBS): at -j4 two runs of three
  # failed (a TSan report inside jemalloc in the daemon, and
  # RemoteReadTest's count of grace periods that waited), a run at -j2 did
  # not (docs/testing.md).  The stress tests (timed loads) and the
  # packaging tests run one at a time, alone on the machine.
  echo "== $name: test (unit)"
  (cd "$root/build/$name" &&
    ctest --output-on-failure --timeout 300 -j"${UNIT_JOBS:-$((2 * $(nproc)))}" -L unit) ||
    status=1
  echo "== $name: test (stress, packaging)"
  (cd "$root/build/$name" && ctest --output-on-failure --timeout 300 -LE unit) || status=1
  echo "== $name: built and tested in $((SECONDS - t0)) s"
}
# The release build builds everything: its packaging tests (tests/packaging)
# package, install and run every program, and check the man pages.  Line
# tables only (-g1): a third less compile time than -g, and enough for a
# backtrace of a failing test.  The tools (tools/: benchmarks, checkers,
# norefsctl) at -O1: no test measures their speed (tools/CMakeLists.txt).
NOREFS_TARGETS="" run release -DNOREFS_SYNC_POINTS=ON -DNOREFS_TOOLS_O1=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
case "${NOREFS_TIDY:-1}" in
  0) ;;
  all) tidy_dirs=(alloc cache fs tools) ;;
  *) tidy_dirs=(alloc cache fs) ;;
esac
if [ "${NOREFS_TIDY:-1}" != 0 ]; then
  echo "== clang-tidy (${tidy_dirs[*]}, release build)"
  t0=$SECONDS
  "$root/tools/tidy.sh" "$root/build/release" "${tidy_dirs[@]}" || status=1
  echo "== clang-tidy: $((SECONDS - t0)) s"
fi
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run asan -DNOREFS_ASAN=ON -DNOREFS_SYNC_POINTS=ON
# TSan cannot see liburcu's membarrier ordering: alloc/rcu.h annotates it;
# tests/tsan.supp explains the one suppression (liburcu's own internals).
UNIT_JOBS=$(nproc) \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 atexit_sleep_ms=0 suppressions=$root/tests/tsan.supp" \
  run tsan -DNOREFS_TSAN=ON -DNOREFS_SYNC_POINTS=ON
exit $status
