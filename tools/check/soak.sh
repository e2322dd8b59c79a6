#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# soak.sh — minutes of mixed load through norefs mounts, every byte checked,
# the cache bound watched every 2 ms (docs/soak.md).  A tool, not CI: the
# ctest `soak_quick` runs it for 10 s only so that it cannot rot.
#
# One daemon per read path (noref, ref, ref-fetchadd, stackcopy), all
# mounted at once over one backing directory, each with a small cache_size
# so that eviction never stops.  On each mount, for the whole duration:
#   fio writer   write_verify.fio (random 4 KiB writes, crc32c headers, read
#                back and verified) on the mount's own file, a fresh seed
#                each pass, pass after pass;
#   fio reader   the same job with --verify_only on a file written once at
#                the start (shared by all mounts), pass after pass;
#   read-check   norefs_soak read-check: random reads (1 B .. 256 KiB) of
#                three pattern files (shared), every byte checked;
#   punch        norefs_soak punch: write / check / punch a hole
#                (PUNCH_HOLE|KEEP_SIZE) / check, on the mount's own file;
#   evict        norefsctl evict on every file of the mount, in a loop;
#   monitor      norefs_soak monitor: live pages vs cache_size every 2 ms
#                until the daemon exits, then its final counters.
# Then every mount is unmounted and every daemon waited for.
#
# Exit 0 only if: no fio run failed (exit status 0, job error 0, no "verify
# failed"), every loader and evict call succeeded with 0 bad reads, no 2 ms
# sample saw more live pages than cache_size, the final counters of every
# daemon are consistent, each daemon counted at least the reads its clients
# made, and each daemon exited with status 0 after its clean unmount.
# Every mount is on a mktemp -d mountpoint and is unmounted on every exit
# path (as in fs_bench.sh); nothing is left mounted.
set -euo pipefail
set -m  # job control: every background job is its own process group, ended as one

root=$(cd "$(dirname "$0")/../.." && pwd)
fio_job="$root/tools/check/fio/write_verify.fio"

usage() {
  cat <<EOF
usage: $0 [options]
  --minutes M        duration of the load (default 10; fractions allowed)
  --seconds S        the same in seconds (overrides --minutes)
  --quick            10 s, small files (the ctest)
  --cache-size SIZE  cache_size of every daemon (default 32M; quick 16M)
  --read-paths LIST  comma-separated subset of noref,ref,ref-fetchadd,stackcopy (default all)
  --build-dir DIR    where fs/norefs, tools/ctl/norefsctl, tools/check/norefs_soak are
                     (default: build/release, else the newest build/*)
  --progress S       seconds between progress lines (default 5; quick 2)
  --json FILE        write the summary as JSON
  --keep             keep the scratch directory (logs, fio JSON) for a look
EOF
}

# ---- options -------------------------------------------------------------
minutes=10 seconds="" quick=0 cache_size="" read_paths_opt="" build_dir="" progress=""
json_out="" keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --quick) quick=1 ;;
    --cache-size) cache_size=${2:?}; shift ;;
    --read-paths) read_paths_opt=${2:?}; shift ;;
    --build-dir) build_dir=${2:?}; shift ;;
    --progress) progress=${2:?}; shift ;;
    --json) json_out=${2:?}; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "soak: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
num_re='^[0-9]+([.][0-9]+)?$'
[[ $minutes =~ $num_re ]] || { echo "soak: --minutes takes a number" >&2; exit 2; }
[ -z "$seconds" ] || [[ $seconds =~ $num_re ]] || { echo "soak: --seconds takes a number" >&2; exit 2; }
[ -z "$progress" ] || [[ $progress =~ ^[1-9][0-9]*$ ]] ||
  { echo "soak: --progress takes whole seconds" >&2; exit 2; }
if [ $quick = 1 ]; then
  : "${seconds:=10}" "${cache_size:=16M}" "${progress:=2}"
  pattern_size=$((4 << 20)) stable_size=4m writer_size=2m
else
  pattern_size=$((24 << 20)) stable_size=32m writer_size=16m
fi
: "${seconds:=$(awk -v m="$minutes" 'BEGIN { printf "%g", m * 60 }')}" "${cache_size:=32M}" "${progress:=5}"
duration_ms=$(awk -v s="$seconds" 'BEGIN { printf "%d", s * 1000 }')
[ "$duration_ms" -gt 0 ] || { echo "soak: the duration must be positive" >&2; exit 2; }
[[ $cache_size =~ ^[1-9][0-9]*[kKmMgG]?$ ]] ||
  { echo "soak: --cache-size takes a size like 32M (0, unbounded, is not a soak)" >&2; exit 2; }
all_paths=(noref ref ref-fetchadd stackcopy)
if [ -n "$read_paths_opt" ]; then
  IFS=, read -r -a read_paths <<<"$read_paths_opt"
  for p in "${read_paths[@]}"; do
    [[ " ${all_paths[*]} " == *" $p "* ]] || { echo "soak: unknown read path $p" >&2; exit 2; }
  done
else
  read_paths=("${all_paths[@]}")
fi

if [ -z "$build_dir" ]; then
  if [ -x "$root/build/release/fs/norefs" ]; then
    build_dir="$root/build/release"
  else
    build_dir=$(ls -dt "$root"/build/*/ 2>/dev/null | while read -r d; do
      [ -x "$d/fs/norefs" ] && { echo "${d%/}"; break; }; done || true)
  fi
fi
norefs="$build_dir/fs/norefs" norefsctl="$build_dir/tools/ctl/norefsctl" soak="$build_dir/tools/check/norefs_soak"
for b in "$norefs" "$norefsctl" "$soak"; do
  [ -x "$b" ] || { echo "soak: $b not built (targets norefs norefsctl norefs_soak; --build-dir)" >&2; exit 2; }
done
for c in fio jq fusermount3 timeout awk; do
  command -v "$c" >/dev/null || { echo "soak: $c not found (tools/setup-deps.sh)" >&2; exit 2; }
done

# ---- scratch, mounts, cleanup -------------------------------------------
base=$(mktemp -d /tmp/norefs-soak.XXXXXX)
backing="$base/backing"
mkdir -p "$backing" "$base/stats" "$base/logs" "$base/fio" "$base/tally" "$base/out"
declare -A mnt_of=() daemon_of=() monitor_of=() daemon_rc=() monitor_rc=()
jobs_pids=()

is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

unmount() {  # unmount MNT: fusermount3 -u, retried, then lazily
  local mnt=$1
  is_mounted "$mnt" || return 0
  fusermount3 -u "$mnt" 2>/dev/null || { sleep 0.5; fusermount3 -u "$mnt" 2>/dev/null; } ||
    umount -l "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null ||
    echo "soak: could not unmount $mnt" >&2
}

stop_pid() {  # stop_pid PID [group]: TERM, then KILL after 3 s; reaps it
  local pid=$1 grp=${2:-} i
  local target=$pid
  [ -z "$grp" ] || target="-$pid"
  kill -TERM -- "$target" 2>/dev/null || true
  for i in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "$target" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM HUP
  set +m  # no job-control notices for the jobs ended here
  for p in "${jobs_pids[@]}"; do kill -0 "$p" 2>/dev/null && stop_pid "$p" group; done
  for p in "${read_paths[@]}"; do
    [ -n "${mnt_of[$p]:-}" ] && unmount "${mnt_of[$p]}"
    # An unmounted daemon leaves its loop and exits by itself.
    if [ -n "${daemon_of[$p]:-}" ] && kill -0 "${daemon_of[$p]}" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "${daemon_of[$p]}" 2>/dev/null || break; sleep 0.1; done
      kill -0 "${daemon_of[$p]}" 2>/dev/null && stop_pid "${daemon_of[$p]}"
    fi
    [ -n "${monitor_of[$p]:-}" ] && kill -0 "${monitor_of[$p]}" 2>/dev/null && stop_pid "${monitor_of[$p]}"
  done
  # Anything still mounted under $base (a daemon interrupted between its
  # start and its registration above).
  awk -v b="$base/" 'index($5, b) == 1 { print $5 }' /proc/self/mountinfo | while read -r m; do
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  if [ $keep = 1 ]; then
    echo "soak: scratch kept in $base" >&2
  else
    rm -rf --one-file-system "$base" 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'printf "\nsoak: interrupted\n" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

daemon_opts() { echo "read_path=$1,cache_size=$cache_size,stats_dir=$base/stats"; }

# ---- effective configuration ---------------------------------------------
bin_desc() { echo "$1 ($(date -r "$1" '+%F %T'))"; }
echo "soak: effective configuration"
echo "  duration   ${seconds} s$([ $quick = 1 ] && echo ' (--quick)'), progress every ${progress} s"
echo "  mounts     one per read path, at once: ${read_paths[*]}"
for p in "${read_paths[@]}"; do echo "    $p: norefs -f -o $(daemon_opts "$p") <backing> <mnt>"; done
echo "  per mount  fio writer (write_verify.fio, $writer_size, new seed each pass),"
echo "             fio reader (--verify_only of a $stable_size file written at the start),"
echo "             read-check (2 threads, 3 pattern files of $((pattern_size >> 20)) MiB),"
echo "             punch (2 threads x 4 regions of 60000 bytes), evict loop (every 0.2 s),"
echo "             monitor (live pages vs cache_size every 2 ms, final counters)$(chrt -f 1 true 2>/dev/null && echo ', SCHED_FIFO 1')"
echo "  norefs     $(bin_desc "$norefs")"
echo "  norefsctl  $(bin_desc "$norefsctl")"
echo "  norefs_soak $(bin_desc "$soak")"
echo "  fio $(fio --version | sed 's/^fio-//'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "kernel $(uname -r), scratch $base"

# ---- data ------------------------------------------------------------------
t0=$(date +%s%N)
patterns=(pattern-1 pattern-2 pattern-3)
"$soak" pattern --size "$pattern_size" "${patterns[@]/#/$backing/}" >"$base/logs/pattern.log" 2>&1 ||
  { cat "$base/logs/pattern.log" >&2; exit 1; }
FIO_FILE="$backing/stable" FIO_SIZE=$stable_size fio "$fio_job" --verify_state_save=0 --output-format=json \
  --output="$base/fio/stable-write.json" >"$base/logs/stable-write.err" 2>&1 ||
  { echo "soak: writing the stable verify file failed" >&2; cat "$base/logs/stable-write.err" >&2; exit 1; }

# ---- mounts and monitors -------------------------------------------------
# The monitors sleep 2 ms at a time and run for microseconds: SCHED_FIFO
# keeps a loaded machine from delaying their samples by hundreds of ms.
rt=()
if command -v chrt >/dev/null && chrt -f 1 true 2>/dev/null; then rt=(chrt -f 1); fi
for p in "${read_paths[@]}"; do
  m=$(mktemp -d "$base/mnt-$p.XXXXXX")
  "$norefs" -f -o "$(daemon_opts "$p")" "$backing" "$m" >"$base/logs/daemon-$p.log" 2>&1 &
  daemon_of[$p]=$!
  mnt_of[$p]=$m
  for _ in $(seq 100); do
    is_mounted "$m" && break
    kill -0 "${daemon_of[$p]}" 2>/dev/null || break
    sleep 0.1
  done
  is_mounted "$m" || { echo "soak: the $p daemon did not mount" >&2; sed 's/^/  | /' "$base/logs/daemon-$p.log" >&2; exit 1; }
  "${rt[@]}" "$soak" monitor "$m" --status "$base/out/status-$p.json" --json "$base/out/monitor-$p.json" \
    >"$base/logs/monitor-$p.log" 2>&1 &
  monitor_of[$p]=$!
done
for p in "${read_paths[@]}"; do
  for _ in $(seq 100); do [ -s "$base/out/status-$p.json" ] && break; sleep 0.05; done
  [ -s "$base/out/status-$p.json" ] ||
    { echo "soak: the $p monitor did not start" >&2; cat "$base/logs/monitor-$p.log" >&2; exit 1; }
done
echo "soak: data written and ${#read_paths[@]} mount(s) up in $((($(date +%s%N) - t0) / 1000000)) ms"

# ---- the load --------------------------------------------------------------
start_ns=$(date +%s%N)
end_ns=$((start_ns + duration_ms * 1000000))
before_end() { [ "$(date +%s%N)" -lt "$end_ns" ]; }
# A fio pass that hangs is killed and counted as failed: four times the
# time a pass takes on a quiet machine, and at least 2 minutes.
fio_limit=120

# fio_pass KIND PATH N FILE SIZE [fio args]: one fio run; one tally line
# "rc job_error verify_failures reads" in $base/tally/KIND-PATH.
fio_pass() {
  local kind=$1 p=$2 n=$3 file=$4 size=$5; shift 5
  local tag="$kind-$p-$n" rc=0
  # No verify state file (fio writes one into the working directory).
  FIO_FILE=$file FIO_SIZE=$size timeout -k 5 "$fio_limit" fio "$fio_job" "$@" \
    --verify_state_save=0 --output-format=json --output="$base/fio/$tag.json" >"$base/logs/fio-$tag.err" 2>&1 || rc=$?
  local err reads vf
  err=$(jq '[.jobs[].error] | max' "$base/fio/$tag.json" 2>/dev/null || echo null)
  reads=$(jq '[.jobs[].read.total_ios] | add' "$base/fio/$tag.json" 2>/dev/null || echo 0)
  # Verify failures: fio's messages ("crc32c: verify failed at ...", "verify:
  # bad magic header ..."), at least one if the job ended in EILSEQ (84),
  # fio's verify error (verify_fatal stops a pass at its first bad block).
  vf=$(grep -ci 'verify' "$base/logs/fio-$tag.err" 2>/dev/null || true)
  vf=${vf:-0}
  [ "$err" != 84 ] || [ "$vf" -gt 0 ] || vf=1
  echo "$rc ${err:-null} $vf ${reads:-0}" >>"$base/tally/$kind-$p"
  # Keep the logs of failed passes only: a 10-minute run makes thousands.
  if [ "$rc" = 0 ] && [ "$err" = 0 ] && [ "$vf" = 0 ]; then
    rm -f "$base/logs/fio-$tag.err" "$base/fio/$tag.json"
  fi
}

fio_writer_loop() {
  local p=$1 n=0
  while before_end; do
    n=$((n + 1))
    fio_pass writer "$p" "$n" "${mnt_of[$p]}/writer-$p" "$writer_size" --randseed="$n"
  done
}

fio_reader_loop() {
  local p=$1 n=0
  while before_end; do
    n=$((n + 1))
    fio_pass reader "$p" "$n" "${mnt_of[$p]}/stable" "$stable_size" --verify_only
  done
}

evict_loop() {
  local p=$1 m=${mnt_of[$1]} f ok=0 failed=0
  while before_end; do
    for f in "${patterns[@]}" stable "writer-$p" "punch-$p"; do
      [ -f "$m/$f" ] || continue  # the writer's and the loader's files appear after a while
      if "$norefsctl" evict "$m/$f" >/dev/null 2>>"$base/logs/evict-$p.err"; then
        ok=$((ok + 1))
      else
        failed=$((failed + 1))
      fi
    done
    echo "$ok $failed" >"$base/tally/evict-$p"
    sleep 0.2
  done
}

secs_left() { awk -v e="$end_ns" -v n="$(date +%s%N)" 'BEGIN { s = (e - n) / 1e9; printf "%.3f", (s > 0.001 ? s : 0.001) }'; }
for p in "${read_paths[@]}"; do
  m=${mnt_of[$p]}
  fio_writer_loop "$p" & jobs_pids+=($!)
  fio_reader_loop "$p" & jobs_pids+=($!)
  evict_loop "$p" & jobs_pids+=($!)
  "$soak" read-check --threads 2 -s "$(secs_left)" --seed "$RANDOM" \
    --json "$base/out/read-check-$p.json" "${patterns[@]/#/$m/}" >"$base/logs/read-check-$p.log" 2>&1 &
  jobs_pids+=($!)
  "$soak" punch --threads 2 --regions 4 --region-bytes 60000 -s "$(secs_left)" --seed "$RANDOM" \
    --json "$base/out/punch-$p.json" "$m/punch-$p" >"$base/logs/punch-$p.log" 2>&1 &
  jobs_pids+=($!)
done

# ---- progress --------------------------------------------------------------
tally_fio() {  # tally_fio KIND: "passes failed"
  { cat "$base"/tally/"$1"-* 2>/dev/null || true; } |
    awk '{ n++; if ($1 != 0 || $2 != "0" || $3 != 0) f++ } END { printf "%d %d", n, f }'
}
prev_reads=0 prev_t=$start_ns
# reads/s, cached and waiting: all mounts together; max live/limit: the
# largest 2 ms sample of any mount so far, in pages; over: samples above it.
echo "soak: reads/s, cached, waiting: all mounts; max live/limit: pages, largest 2 ms sample of any mount"
printf 'soak: %9s %10s %9s %9s %14s %5s  %s\n' "elapsed" "reads/s" "cached" "waiting" \
  "max live/limit" "over" "verify (fio passes failed/run), evicts"
while before_end; do
  left_ms=$(((end_ns - $(date +%s%N)) / 1000000))
  nap=$((progress * 1000 < left_ms ? progress * 1000 : left_ms))
  [ "$nap" -gt 0 ] && sleep "$(awk -v n="$nap" 'BEGIN { printf "%.3f", n / 1000 }')"
  # One level of command substitution per line: a trap (Ctrl-C, TERM) that
  # runs while bash 5.2 is inside nested ones fails to parse ("unexpected
  # EOF while looking for matching `)'") and skips the cleanup.
  now=$(date +%s%N)
  wline=$(tally_fio writer)
  rline=$(tally_fio reader)
  read -r wn wf <<<"$wline"
  read -r rn rf <<<"$rline"
  ev=$({ cat "$base"/tally/evict-* 2>/dev/null || true; } | awk '{ s += $1; f += $2 } END { printf "%d%s", s, f ? " (" f " FAILED)" : "" }')
  line=$({ cat "$base"/out/status-*.json 2>/dev/null || true; } | jq -s -r --argjson now "$now" \
    --argjson start "$start_ns" --argjson pt "$prev_t" --argjson pr "$prev_reads" '
    def mib: . * 4096 / 1048576 * 10 | floor / 10 | tostring + "M";
    (map(.reads) | add // 0) as $r
    | [$r, (($now - $start) / 1e9 | floor), (($r - $pr) / (($now - $pt) / 1e9) | floor),
       (map(.pages_cached) | add // 0 | mib), (map(.waiting) | add // 0 | mib),
       "\(map(.max_live) | max // "-")/\(map(.limit_pages) | max // "-")",
       (map(.over_limit) | add // 0)] | @tsv' 2>/dev/null || true)
  IFS=$'\t' read -r reads elapsed rate cached waiting live_limit over <<<"$line" || true
  [ -n "${reads:-}" ] || { reads=$prev_reads elapsed=- rate=- cached=- waiting=- live_limit=- over=-; }
  prev_reads=$reads prev_t=$now
  vstat="ok"; [ $((wf + rf)) -eq 0 ] || vstat="FAILED"
  printf 'soak: %8ss %10s %9s %9s %14s %5s  %s (writer %d/%d, reader %d/%d), evicts %s\n' \
    "$elapsed" "$rate" "$cached" "$waiting" "$live_limit" "$over" "$vstat" "$wf" "$wn" "$rf" "$rn" "$ev"
done

# ---- the end: loads, unmounts, daemons, monitors ---------------------------
echo "soak: load time over; waiting for the last fio passes and the loaders"
loads_rc=0
for pid in "${jobs_pids[@]}"; do wait "$pid" || loads_rc=1; done
jobs_pids=()
# exited_within PID S: true once PID has exited (not reaped yet), within S s.
exited_within() {
  local i
  for i in $(seq $(($2 * 10))); do
    [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ] || ! kill -0 "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
for p in "${read_paths[@]}"; do
  unmount "${mnt_of[$p]}"
  # The daemon drains its cache and exits; one that does not in 60 s is
  # stopped and its status recorded as a failure (the TERM's).
  exited_within "${daemon_of[$p]}" 60 || { echo "soak: the $p daemon did not exit after its unmount" >&2; kill -TERM "${daemon_of[$p]}" 2>/dev/null || true; }
  rc=0; wait "${daemon_of[$p]}" || rc=$?
  daemon_rc[$p]=$rc
  # The monitor ends when it sees the daemon gone.
  exited_within "${monitor_of[$p]}" 10 || { echo "soak: the $p monitor did not end" >&2; kill -TERM "${monitor_of[$p]}" 2>/dev/null || true; }
  rc=0; wait "${monitor_of[$p]}" || rc=$?
  monitor_rc[$p]=$rc
  if is_mounted "${mnt_of[$p]}"; then echo "soak: ${mnt_of[$p]} still mounted" >&2; fi
done
stale=$(awk -v b="$base/" 'index($5, b) == 1' /proc/self/mountinfo | wc -l)

# ---- summary ---------------------------------------------------------------
summ="$base/out/summary.jsonl"
: >"$summ"
for p in "${read_paths[@]}"; do
  fio_w=$({ cat "$base/tally/writer-$p" 2>/dev/null || true; } | jq -R -s -c 'split("\n") | map(select(. != "") | split(" "))
    | {passes: length, failed: map(select(.[0] != "0" or .[1] != "0" or .[2] != "0")) | length,
       verify_failures: (map(.[2] | tonumber) | add // 0), reads: (map(.[3] | tonumber? // 0) | add // 0)}')
  fio_r=$({ cat "$base/tally/reader-$p" 2>/dev/null || true; } | jq -R -s -c 'split("\n") | map(select(. != "") | split(" "))
    | {passes: length, failed: map(select(.[0] != "0" or .[1] != "0" or .[2] != "0")) | length,
       verify_failures: (map(.[2] | tonumber) | add // 0), reads: (map(.[3] | tonumber? // 0) | add // 0)}')
  read -r ev_ok ev_failed <"$base/tally/evict-$p" 2>/dev/null || { ev_ok=0 ev_failed=0; }
  mon="$base/out/monitor-$p.json"; [ -s "$mon" ] || echo 'null' >"$mon"
  rcj="$base/out/read-check-$p.json"; [ -s "$rcj" ] || echo 'null' >"$rcj"
  pj="$base/out/punch-$p.json"; [ -s "$pj" ] || echo 'null' >"$pj"
  jq -n -c --arg p "$p" --argjson fw "$fio_w" --argjson fr "$fio_r" \
    --argjson ev_ok "$ev_ok" --argjson ev_failed "$ev_failed" \
    --argjson drc "${daemon_rc[$p]}" --argjson mrc "${monitor_rc[$p]}" \
    --slurpfile mon "$mon" --slurpfile rc "$rcj" --slurpfile pu "$pj" '
    ($mon[0]) as $m | ($rc[0]) as $r | ($pu[0]) as $u
    | ($m.final.cache.reads // 0) as $dreads
    | ($fw.reads + $fr.reads + ($r.result.reads // 0)) as $creads
    | { read_path: $p, daemon_exit: $drc, monitor_exit: $mrc,
        fio_writer: $fw, fio_reader: $fr,
        read_check: ($r.result // null), punch: ($u.result // null),
        seeds: {read_check: ($r.params.seed // null), punch: ($u.params.seed // null)},
        evict: {calls: $ev_ok, failed: $ev_failed},
        sampling: ($m.sampling // null), final_checks: ($m.final_checks // []),
        daemon_reads: $dreads, client_reads: $creads,
        final_counters: ($m.final // null) }
    | .checks = [
        {name: "fio writer: every pass exit 0, job error 0, no verify failure",
         ok: ($fw.passes > 0 and $fw.failed == 0)},
        {name: "fio reader (verify_only): every pass exit 0, job error 0, no verify failure",
         ok: ($fr.passes > 0 and $fr.failed == 0)},
        {name: "read-check: reads made, 0 bad, 0 I/O errors", ok: ($r.result.ok // false)},
        {name: "punch: cycles made, 0 bad, 0 I/O errors", ok: ($u.result.ok // false)},
        {name: "evict: calls made, none failed", ok: ($ev_ok > 0 and $ev_failed == 0)},
        {name: "2 ms samples: live pages never above cache_size",
         ok: (($m.sampling.samples // 0) > 0 and $m.sampling.over_limit == 0)},
        {name: "final counters consistent", ok: (($m.final_checks // []) | length > 0 and all(.ok))},
        {name: "the daemon counted at least the reads its clients made", ok: ($dreads >= $creads and $creads > 0)},
        {name: "the daemon exited with status 0 after its unmount", ok: ($drc == 0 and ($m.daemon_exited // false))},
        {name: "the monitor exited with status 0", ok: ($mrc == 0)} ]
    | .ok = (.checks | all(.ok))' >>"$summ"
done

config=$(jq -n -c --argjson seconds "$seconds" --argjson quick "$quick" --arg cache_size "$cache_size" \
  --arg paths "${read_paths[*]}" --arg norefs "$norefs" --arg fio "$(fio --version)" \
  --arg kernel "$(uname -r)" --argjson cpus "$(nproc)" --arg writer_size "$writer_size" \
  --arg stable_size "$stable_size" --argjson pattern_bytes "$pattern_size" \
  --arg started "$(date -u -d @$((start_ns / 1000000000)) '+%FT%TZ')" \
  '{seconds: $seconds, quick: ($quick == 1), cache_size: $cache_size, read_paths: ($paths | split(" ")),
    norefs: $norefs, fio: $fio, kernel: $kernel, cpus: $cpus, writer_size: $writer_size,
    stable_size: $stable_size, pattern_bytes: $pattern_bytes, started: $started}')
summary=$(jq -s -c --argjson config "$config" --argjson stale "$stale" --argjson loads_rc "$loads_rc" \
  '{config: $config, mounts: ., stale_mounts: $stale, loads_exit: $loads_rc,
    ok: ((. | length > 0) and all(.ok) and $stale == 0 and $loads_rc == 0)}' "$summ")
[ -z "$json_out" ] || jq . <<<"$summary" >"$json_out"

echo
echo "soak: summary after $(awk -v n="$(date +%s%N)" -v s="$start_ns" 'BEGIN { printf "%.0f", (n - s) / 1e9 }') s"
jq -r '.mounts[] |
  "  \(.read_path):",
  "    fio writer \(.fio_writer.passes) passes, \(.fio_writer.failed) failed, \(.fio_writer.verify_failures) verify failures;" +
    " fio reader \(.fio_reader.passes) passes, \(.fio_reader.failed) failed, \(.fio_reader.verify_failures) verify failures",
  "    read-check \(.read_check.reads // 0) reads (\(.read_check.small_reads // 0) small), \(.read_check.bad_reads // "-") bad, \(.read_check.io_errors // "-") I/O errors;" +
    " punch \(.punch.cycles // 0) cycles, \(.punch.bad_reads // "-") bad, \(.punch.io_errors // "-") I/O errors; evict \(.evict.calls) calls, \(.evict.failed) failed",
  "    2 ms samples \(.sampling.samples // 0) (\(.sampling.late_samples // 0) late, longest gap \(.sampling.max_gap_ms // 0 | floor) ms):" +
    " live pages max \(.sampling.max_live // "-") of \(.final_counters.cache.limit_pages // "-"), over the limit \(.sampling.over_limit // "-");" +
    " cached max \(.sampling.max_cached // "-"), waiting max \(.sampling.max_waiting // "-")",
  "    daemon: \(.daemon_reads) reads (clients made \(.client_reads)), evicted \(.final_counters.cache.evicted // "-"), limit drains \(.final_counters.cache.limit_drains // "-"),",
  "            uncached \(.final_counters.cache.uncached_reads // "-"), deferred \(.final_counters.alloc.deferred // "-"), exit status \(.daemon_exit)",
  (.checks[] | "    \(if .ok then "ok    " else "FAILED" end) \(.name)"),
  (.final_checks[] | select(.ok | not) | "    FAILED final: \(.name): \(.detail)")' <<<"$summary"
echo "  stale mounts: $stale; loaders' exit: $loads_rc"
if [ "$(jq .ok <<<"$summary")" = true ]; then
  echo "soak: PASSED"
  status=0
else
  echo "soak: FAILED (logs: rerun with --keep)"
  status=1
fi
[ -z "$json_out" ] || echo "soak: summary JSON in $json_out"
exit $status
