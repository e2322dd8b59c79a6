#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# tools/bench/oom_repro.sh — Kiryl's OOM reproducer from the kernel series' review
# (../shared/seeds/noref-filemap-read-cover-letter.txt, "Numbers"): hole-punch
# loaders next to a process that touches a large anonymous buffer again and
# again, inside a memory-limited cgroup.  Pages waiting for a grace period
# are memory the cgroup is charged for and cannot reclaim; if they pile up,
# the OOM killer fires.  One run per mode (defer=off, deferral without
# expedite, with expedite, with the bound), each in a fresh child memory
# cgroup (cgroup v1) of the group this script runs in, removed afterwards.
#
#   tools/bench/oom_repro.sh [--build-dir DIR] [--limit-mib 2048] [--touch-mib 1400]
#                      [--touch-rounds 20] [--loaders 4] [--seconds S]
#                      [--gp-interval-us 20000] [--modes off,defer,expedite,bound]
#                      [--bound-mib 64] [--json FILE]
#
# The loaders are norefs_punch_wait --target inproc (each fills and punches
# its own file in a loop against cache/ in that process; backing files on
# memfds, also charged to the cgroup).  The toucher is Debian's python3
# writing one byte per page of an anonymous mapping, --touch-rounds times.
# A process killed by the OOM killer exits with status 137 (SIGKILL); the
# cgroup's memory.oom_control counts the kills.  Needs root and the cgroup v1
# memory controller.  Exit 0 when every run finished (whatever it showed),
# 1 on a setup failure, 2 on bad usage.
set -euo pipefail

build_dir=""
limit_mib=2048
touch_mib=1400
touch_rounds=20
loaders=4
seconds=""
gp_us=20000
modes="off,defer,expedite,bound"
bound_mib=64
json=""

usage() { sed -n '13,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --limit-mib) limit_mib=$2; shift 2 ;;
    --touch-mib) touch_mib=$2; shift 2 ;;
    --touch-rounds) touch_rounds=$2; shift 2 ;;
    --loaders) loaders=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --gp-interval-us) gp_us=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --bound-mib) bound_mib=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "oom_repro: unknown argument '$1'" >&2; usage ;;
  esac
done
for v in "$limit_mib" "$touch_mib" "$touch_rounds" "$loaders" "$gp_us" "$bound_mib"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "oom_repro: '$v' is not a whole number" >&2; exit 2; }
done

root=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "$build_dir" ] || build_dir=$root/build/release
tool=$build_dir/tools/bench/norefs_punch_wait
[ -x "$tool" ] || { echo "oom_repro: $tool not built (cmake --build $build_dir --target norefs_punch_wait)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "oom_repro: needs root (it creates a memory cgroup)" >&2; exit 1; }
mem_mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ {print $2; exit}' /proc/mounts)
[ -n "$mem_mnt" ] || { echo "oom_repro: no cgroup v1 memory controller mounted" >&2; exit 1; }
own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3; exit}' /proc/self/cgroup)
parent=$mem_mnt$own
[ -w "$parent" ] || { echo "oom_repro: cannot create groups under $parent" >&2; exit 1; }

# Long enough for the toucher to finish its rounds while the loaders run.
[ -n "$seconds" ] || seconds=$((20 + touch_mib * touch_rounds / 1000))
out=$(mktemp -d /tmp/norefs-oom.XXXXXX)
cg=""
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
  fi
  cg=""
}
trap 'cleanup; rm -rf "$out"' EXIT
trap 'exit 130' INT TERM

echo "oom_repro: cgroup limit ${limit_mib} MiB under $parent; toucher ${touch_mib} MiB x ${touch_rounds};" \
  "${loaders} loaders (norefs_punch_wait --target inproc), ${seconds} s; gp_interval_us ${gp_us};" \
  "bound ${bound_mib} MiB; modes ${modes}"
printf '%-9s %-14s %-14s %9s %14s %15s  %s\n' mode loaders toucher oom_kills "max_usage_MiB" "mean_waiting_MiB" verdict
rows=()
IFS=, read -r -a mode_list <<<"$modes"
for mode in "${mode_list[@]}"; do
  case $mode in off|defer|expedite|bound) ;; *) echo "oom_repro: unknown mode '$mode'" >&2; exit 2 ;; esac
  cg=$parent/norefs-oom-$$-$mode
  mkdir "$cg"
  echo $((limit_mib << 20)) >"$cg/memory.limit_in_bytes"
  # The loaders, then the toucher, each moved into the group before exec.
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
    "$tool" --target inproc --variants punch --modes "$mode" --threads "$loaders" \
    --gp-interval-us "$gp_us" --bound-mib "$bound_mib" -s "$seconds" --settle-seconds 0 \
    --json "$out/$mode.json" >"$out/$mode.log" 2>&1 &
  pids+=($!)
  lpid=$!
  sleep 1  # the loaders' files and first pages before the toucher starts
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
    /usr/bin/python3 -c '
import mmap, sys
n, rounds = int(sys.argv[1]) << 20, int(sys.argv[2])
m = mmap.mmap(-1, n)
for r in range(rounds):
    v = (r + 1) & 0xff
    for off in range(0, n, 4096):
        m[off] = v
' "$touch_mib" "$touch_rounds" >"$out/$mode.touch.log" 2>&1 &
  pids+=($!)
  tpid=$!
  set +e
  wait "$tpid"; tst=$?
  wait "$lpid"; lst=$?
  set -e
  pids=()
  kills=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control" 2>/dev/null)
  max=$(( $(cat "$cg/memory.max_usage_in_bytes") >> 20 ))
  waiting=$(/usr/bin/python3 -c '
import json, sys
try:
    cells = json.load(open(sys.argv[1])).get("cells", [])
    print("%.1f" % (cells[0]["mean_waiting_pages"] * 4096 / 2**20) if cells else "-")
except Exception:
    print("-")
' "$out/$mode.json")
  desc() { case $1 in 0) echo "ok" ;; 137) echo "OOM-killed" ;; *) echo "exit $1" ;; esac; }
  if [ "$tst" -eq 0 ] && [ "$lst" -eq 0 ]; then verdict="survived"; else verdict="FAILED"; fi
  printf '%-9s %-14s %-14s %9s %14s %15s  %s\n' "$mode" "$(desc "$lst")" "$(desc "$tst")" \
    "${kills:--}" "$max" "$waiting" "$verdict"
  rows+=("{\"mode\":\"$mode\",\"loaders_exit\":$lst,\"toucher_exit\":$tst,\"oom_kills\":${kills:-null},\"max_usage_mib\":$max,\"mean_waiting_mib\":\"$waiting\",\"verdict\":\"$verdict\"}")
  cleanup
done
if [ -n "$json" ]; then
  (IFS=,; printf '{"limit_mib":%s,"touch_mib":%s,"touch_rounds":%s,"loaders":%s,"seconds":%s,"gp_interval_us":%s,"bound_mib":%s,"runs":[%s]}\n' \
    "$limit_mib" "$touch_mib" "$touch_rounds" "$loaders" "$seconds" "$gp_us" "$bound_mib" "${rows[*]}") >"$json"
fi
