#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The main job: install what is missing, build, mount a demo overlay, run a
# short comparison and print the results.
#   1. demo: a norefs mount over a temporary backing directory; files are
#      written and read through it, a file is changed behind its back, and
#      the live counters of the mount are printed (norefsctl stats);
#   2. in-process pread scaling, all four read paths side by side (short);
#   3. fio through FUSE: every read path, cache=off, kernel_cache, the
#      backing directory and the minimal FUSE server (tools/bench/fs_bench.sh --quick);
#   4. the evict-race checker: deferral on (must be 0 bad reads) and the
#      unsafe control (noref without deferral).
# Every result also goes to build/results as CSV/JSON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup-deps.sh"
mkdir -p "$root/build"
build="$root/build/main"
"$root/tools/build.sh" "$build" -DBUILD_TESTING=OFF
out="$root/build/results"
mkdir -p "$out"

echo
echo "== 1. demo overlay"
demo=$(mktemp -d /tmp/norefs-demo.XXXXXX)
mkdir -p "$demo/backing" "$demo/mnt" "$demo/stats"
pid=""
cleanup() {
  if grep -q " $demo/mnt " /proc/self/mounts 2>/dev/null; then
    fusermount3 -u "$demo/mnt" 2>/dev/null || umount -l "$demo/mnt" 2>/dev/null || true
  fi
  if [ -n "$pid" ]; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$demo"
}
trap cleanup EXIT INT TERM
head -c 8M /dev/urandom >"$demo/backing/data.bin"
"$build/fs/norefs" -f -o "stats_dir=$demo/stats,cache_size=64M" "$demo/backing" "$demo/mnt" \
  2>"$demo/daemon.log" &
pid=$!
for _ in $(seq 100); do grep -q " $demo/mnt " /proc/self/mounts && break; sleep 0.1; done
grep -q " $demo/mnt " /proc/self/mounts || { cat "$demo/daemon.log" >&2; exit 1; }
echo "mounted: $(grep " $demo/mnt " /proc/self/mounts)"
cmp "$demo/backing/data.bin" "$demo/mnt/data.bin" && echo "8 MiB read through the mount: identical to the backing file"
printf 'hello through norefs\n' >"$demo/mnt/hello.txt"
echo "written through the mount, on the backing dir: $(cat "$demo/backing/hello.txt")"
for _ in $(seq 2000); do head -c 16 "$demo/mnt/data.bin" >/dev/null; done
printf 'changed behind its back\n' >"$demo/backing/hello.txt"
sleep 1.1  # coherence_timeout (1 s): close-to-open sees the change
echo "after a change in the backing dir, through the mount: $(cat "$demo/mnt/hello.txt")"
"$build/tools/ctl/norefsctl" stats "$demo/mnt"
fusermount3 -u "$demo/mnt"
wait "$pid" && echo "unmounted; daemon exit status 0 (every page drained, arena destroyed)"
pid=""

echo
echo "== 2. in-process pread scaling (short; tools/README numbers use longer runs)"
"$build/tools/bench/norefs_pread_scaling" --sizes 16,4096,65536 --threads 1,2 --variants shared \
  --seconds 0.5 --rounds 2 --csv "$out/pread_scaling.csv" --json "$out/pread_scaling.json"

echo
echo "== 3. fio through FUSE (quick)"
"$root/tools/bench/fs_bench.sh" --quick --build-dir "$build" --out "$out"

echo
echo "== 4. evict-race checker"
"$build/tools/check/norefs_evict_race" --seconds 3 --json "$out/evict_race.json"
"$build/tools/check/norefs_evict_race" --seconds 3 --defer off --json "$out/evict_race_control.json" || true
echo
echo "results in $out"
