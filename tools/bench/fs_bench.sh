#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# fs_bench.sh — fio through every way of serving the same backing data, in
# one run:
#   noref, ref, ref-fetchadd, stackcopy   the norefs daemon with each read path
#   cache=off                             the daemon as a plain passthrough
#   kernel_cache                          the daemon, files in the kernel's page cache
#   direct                                the backing directory itself, no FUSE
#   minimal                               norefs_minimal_fuse: the FUSE round-trip ceiling
# and the jobs of tools/bench/fio: 16-byte pread at offset 0 of a one-page file
# with 1, 2, 4, 8 threads; 4 KiB random reads over 64 MiB; 64 KiB and 1 MiB
# sequential reads over 256 MiB.
#
# Per job, every variant is warmed (one untimed short run), then timed in
# rounds, variants interleaved and their order rotated each round, so that
# machine drift hits all alike.  Reported: mean IOPS and bandwidth over
# rounds, their spread, the ratio to cache=off and to the minimal server,
# and the targets on 16-byte preads with 2 to 8 jobs: noref >= 1.2x the
# reads/s of cache=off, and >= 90% of the minimal server's.
#
# --io-uring adds, beside every FUSE variant V, the same server with
# -o io_uring, named V+uring (docs/fuse-io-uring.md), reported with its
# ratio to V over /dev/fuse and the target: 16-byte preads at 1 and 2 jobs
# >= 1.3x over io_uring.  The kernel offers io_uring only while the module
# parameter fuse.enable_uring is Y: as root the script sets it just while
# those servers mount (a connection keeps io_uring once INIT negotiated it)
# and puts the old value back, on every exit path too.
#
# Every mount is made on a mktemp -d mountpoint and unmounted on every exit
# path (Ctrl-C, a failing fio, a daemon that dies): fusermount3 -u, then
# umount -l; then the daemon is waited for and killed by its pid.
#
# This script mounts, runs fio and keeps the raw results (a row per timed run
# in fs_bench_runs.csv, fio's JSON, norefsctl's counters); the statistics,
# the report, fs_bench.csv/.json and the figures (--plot) are
# fs_bench_report.py's, beside it.
set -euo pipefail

# The job files are beside this script, in the source tree (tools/bench/fio)
# as in the package.  Two levels up is the source tree, or, installed by the
# package as /usr/share/norefs/fs_bench.sh, the prefix (/usr): the daemon
# and norefsctl in /usr/bin, the minimal server in /usr/lib/norefs, results
# under the current directory.
fio_dir="$(cd "$(dirname "$0")" && pwd)/fio"
root=$(cd "$(dirname "$0")/../.." && pwd)
installed=""
[ -f "$root/tools/bench/fs_bench.sh" ] || installed=$root
# The statistics and the report; installed beside this script with plot.py.
report="$(cd "$(dirname "$0")" && pwd)/fs_bench_report.py"

usage() {
  cat <<EOF
usage: $0 [options]
  --quick            smoke run: 1 s per job, 1 round, 300 ms warm-up
  --runtime S        seconds per timed fio run (default 5)
  --rounds N         timed rounds per job and variant (default 2)
  --warm S           seconds of the untimed warm-up run (default 1)
  --build-dir DIR    where fs/norefs and tools/bench/norefs_minimal_fuse are
                     (default $root/build/main; else the newest under $root/build;
                     installed: /usr/bin and /usr/lib/norefs)
  --out DIR          results directory (default $root/build/results;
                     installed: ./norefs-fs-bench)
  --variants LIST    comma-separated subset of: noref,ref,ref-fetchadd,stackcopy,
                     cache=off,kernel_cache,direct,minimal (default all)
  --tests LIST       comma-separated subset of: pread16-1,pread16-2,pread16-4,
                     pread16-8,randread4k,seqread64k,seqread1m (default all)
  --max-threads N    -o max_threads=N for the daemon and the minimal server
                     (default: each program's own default)
  --clone-fd         -o clone_fd for the daemon and the minimal server
  --cache-size SIZE  cache_size= of every norefs variant (default 1G: the 320 MiB
                     of test files fit; "default" = the daemon's own, 256M)
  --daemon-opts OPTS
                     extra -o options for every norefs variant (e.g. batch=15)
  --io-uring         also every FUSE variant with -o io_uring (VARIANT+uring);
                     as root, turns fuse.enable_uring on while they mount
  --plot DIR         also draw the figures into DIR (PNG and SVG; matplotlib)
  -h, --help         this help
EOF
}

# ---- options -------------------------------------------------------------
runtime=5 rounds=2 warm=1 quick=0
build_dir="$root/build/main" out="$root/build/results"
[ -z "$installed" ] || build_dir="" out="$PWD/norefs-fs-bench"
variants_opt="" tests_opt="" max_threads="" clone_fd=0 daemon_opts="" cache_size=1G io_uring=0
plot_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 runtime=1 rounds=1 warm=0.3 ;;
    --runtime) runtime=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --warm) warm=$2; shift ;;
    --build-dir) build_dir=$2; shift ;;
    --out) out=$2; shift ;;
    --variants) variants_opt=$2; shift ;;
    --tests) tests_opt=$2; shift ;;
    --max-threads) max_threads=$2; shift ;;
    --clone-fd) clone_fd=1 ;;
    --cache-size) cache_size=$2; shift ;;
    --daemon-opts) daemon_opts=$2; shift ;;
    --io-uring) io_uring=1 ;;
    --plot) plot_dir=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fs_bench: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
num_re='^[0-9]+([.][0-9]+)?$'
[[ $runtime =~ $num_re && $warm =~ $num_re && $rounds =~ ^[1-9][0-9]*$ ]] ||
  { echo "fs_bench: --runtime/--warm take seconds, --rounds a positive count" >&2; exit 2; }
[ -z "$max_threads" ] || [[ $max_threads =~ ^[1-9][0-9]*$ ]] ||
  { echo "fs_bench: --max-threads takes a positive count" >&2; exit 2; }
ms() { awk -v s="$1" 'BEGIN { printf "%dms", s * 1000 }'; }  # fio time value

all_variants=(noref ref ref-fetchadd stackcopy cache=off kernel_cache direct minimal)
all_tests=(pread16-1 pread16-2 pread16-4 pread16-8 randread4k seqread64k seqread1m)
pick() {  # pick LIST ALLOWED...: the allowed items named in LIST, in allowed order
  local list=",$1," item
  shift
  for item in "$@"; do [[ $list != *",$item,"* ]] || echo "$item"; done
}
if [ -n "$variants_opt" ]; then
  for v in ${variants_opt//,/ }; do
    [[ " ${all_variants[*]} " == *" $v "* ]] || { echo "fs_bench: unknown variant $v" >&2; exit 2; }
  done
  mapfile -t variants < <(pick "$variants_opt" "${all_variants[@]}")
else
  variants=("${all_variants[@]}")
fi
if [ -n "$tests_opt" ]; then
  for t in ${tests_opt//,/ }; do
    [[ " ${all_tests[*]} " == *" $t "* ]] || { echo "fs_bench: unknown test $t" >&2; exit 2; }
  done
  mapfile -t tests < <(pick "$tests_opt" "${all_tests[@]}")
else
  tests=("${all_tests[@]}")
fi

# ---- tools ---------------------------------------------------------------
need=()
command -v fio >/dev/null || need+=(fio)
[ -x /usr/bin/python3 ] || need+=(python3)  # fs_bench_report.py's #!
command -v fusermount3 >/dev/null || need+=(fuse3)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "fs_bench: missing ${need[*]}; run as root or apt-get install them" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
fi
[ -x "$report" ] || { echo "fs_bench: $report is missing" >&2; exit 1; }

# find_bin REL: $build_dir/REL, else the installed program, else the newest
# $root/build/*/REL.
find_bin() {
  if [ -n "$build_dir" ] && [ -x "$build_dir/$1" ]; then echo "$build_dir/$1"; return; fi
  if [ -n "$installed" ]; then
    case $1 in
      tools/bench/norefs_minimal_fuse) echo "$installed/lib/norefs/norefs_minimal_fuse" ;;
      *) echo "$installed/bin/${1##*/}" ;;
    esac
    return
  fi
  local f
  f=$(ls -t "$root"/build/*/"$1" 2>/dev/null | head -1 || true)
  [ -n "$f" ] && [ -x "$f" ] && echo "$f"
  return 0
}
norefs=$(find_bin fs/norefs)
minimal=$(find_bin tools/bench/norefs_minimal_fuse)
norefsctl=$(find_bin tools/ctl/norefsctl)
daemon_variants=(noref ref ref-fetchadd stackcopy cache=off kernel_cache)
is_daemon() { [[ " ${daemon_variants[*]} " == *" ${1%+uring} "* ]]; }
is_uring() { [[ $1 == *+uring ]]; }
skipped=()
keep=()
for v in "${variants[@]}"; do
  if is_daemon "$v" && [ -z "$norefs" ]; then skipped+=("$v (no fs/norefs)")
  elif [ "$v" = minimal ] && [ -z "$minimal" ]; then skipped+=("$v (no norefs_minimal_fuse)")
  else keep+=("$v"); fi
done
variants=("${keep[@]}")
[ ${#variants[@]} -gt 0 ] || { echo "fs_bench: no variant left to run" >&2; exit 1; }

# --io-uring: V+uring right after each FUSE variant V.
uring_param=/sys/module/fuse/parameters/enable_uring
uring_saved=""  # the parameter's value before we changed it ("": unchanged)
if [ "$io_uring" = 1 ]; then
  [ -e "$uring_param" ] || { echo "fs_bench: --io-uring: this kernel has no FUSE over io_uring ($uring_param is missing)" >&2; exit 1; }
  if [ "$(cat "$uring_param")" != Y ] && [ "$(id -u)" -ne 0 ]; then
    echo "fs_bench: --io-uring: $uring_param is $(cat "$uring_param"); run as root (the script turns it on while mounting) or set it to Y" >&2
    exit 1
  fi
  with_uring=()
  for v in "${variants[@]}"; do
    with_uring+=("$v")
    [ "$v" = direct ] || with_uring+=("$v+uring")
  done
  variants=("${with_uring[@]}")
fi

# ---- scratch space, mounts and their cleanup -----------------------------
base=$(mktemp -d "${TMPDIR:-/tmp}/norefs-bench.XXXXXX")
backing="$base/backing"
mkdir -p "$backing" "$base/stats" "$base/logs" "$out" "$out/fio" "$out/daemon_stats"
declare -A mnt_of=()   # variant (or minimal-small/minimal-big) -> mountpoint
mounts=() pids=()      # parallel arrays, in mount order

is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

unmount_one() {  # unmount_one MNT PID
  local mnt=$1 pid=$2 i
  if is_mounted "$mnt"; then
    fusermount3 -u "$mnt" 2>/dev/null || { sleep 0.5; fusermount3 -u "$mnt" 2>/dev/null; } ||
      umount -l "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null ||
      echo "fs_bench: could not unmount $mnt" >&2
  fi
  # An unmounted daemon leaves its loop and exits by itself.
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# Puts fuse.enable_uring back to what it was, if we changed it.
uring_restore() {
  if [ -n "$uring_saved" ]; then
    echo "$uring_saved" >"$uring_param" 2>/dev/null ||
      echo "fs_bench: could not set $uring_param back to $uring_saved" >&2
    uring_saved=""
  fi
}

cleanup() {
  local rc=$? i
  trap - EXIT INT TERM HUP
  uring_restore
  for i in "${!mounts[@]}"; do unmount_one "${mounts[$i]}" "${pids[$i]}"; done
  # Anything still mounted under $base (a server interrupted between its
  # start and its registration above): its server exits once unmounted.
  awk -v b="$base/" 'index($5, b) == 1 { print $5 }' /proc/self/mountinfo | while read -r m; do
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  # --one-file-system: never descend into a mount that would not go away.
  rm -rf --one-file-system "$base" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'printf "\nfs_bench: interrupted\n" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# mount_fuse NAME MNT CMD...: starts CMD (a FUSE server in the foreground,
# -f, mounting on MNT) in the background and waits for the mount.  Returns
# non-zero, with nothing left mounted, if it does not come up in 10 s.
mount_fuse() {
  local name=$1 mnt=$2; shift 2
  local log="$base/logs/$name.log" i
  "$@" >"$log" 2>&1 &
  local pid=$!
  mounts+=("$mnt"); pids+=("$pid")
  for i in $(seq 100); do
    if is_mounted "$mnt"; then mnt_of[$name]=$mnt; return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "fs_bench: $name did not mount: $*" >&2
  sed 's/^/  | /' "$log" >&2
  unmount_one "$mnt" "$pid"
  return 1
}

fuse_common_opts=()
[ -z "$max_threads" ] || fuse_common_opts+=("max_threads=$max_threads")
[ "$clone_fd" = 0 ] || fuse_common_opts+=(clone_fd)
join_opts() { local IFS=,; echo "$*"; }

daemon_o() {  # the -o list of a daemon variant
  local o=("stats_dir=$base/stats")
  case ${1%+uring} in
    noref|ref|ref-fetchadd|stackcopy) o+=("read_path=${1%+uring}") ;;
    cache=off) o+=(cache=off) ;;
    kernel_cache) o+=(kernel_cache) ;;
  esac
  [ "$cache_size" = default ] || o+=("cache_size=$cache_size")
  o+=("${fuse_common_opts[@]}")
  [ -z "$daemon_opts" ] || o+=("$daemon_opts")
  ! is_uring "$1" || o+=(io_uring)
  join_opts "${o[@]}"
}

# ---- effective configuration ---------------------------------------------
bin_desc() { [ -n "$1" ] && echo "$1 ($(date -r "$1" '+%F %T'))" || echo "not found"; }
echo "fs_bench: effective configuration"
echo "  runtime ${runtime} s per timed run, ${rounds} round(s), warm-up ${warm} s per job and variant$([ $quick = 1 ] && echo ' (--quick)')"
echo "  variants: ${variants[*]}"
[ ${#skipped[@]} -eq 0 ] || echo "  SKIPPED:  ${skipped[*]}"
echo "  tests:    ${tests[*]}"
echo "  norefs:   $(bin_desc "$norefs")"
for v in "${variants[@]}"; do is_daemon "$v" && echo "    $v: -o $(daemon_o "$v")"; done
echo "  minimal:  $(bin_desc "$minimal")${fuse_common_opts:+ -o $(join_opts "${fuse_common_opts[@]}")}"
[ "$io_uring" = 0 ] || echo "  io_uring: V+uring = V with -o io_uring; $uring_param is $(cat "$uring_param")$([ "$(cat "$uring_param")" = Y ] || echo ', set to Y while they mount')"
echo "  norefsctl: $(bin_desc "$norefsctl")"
echo "  fio $(fio --version | sed 's/^fio-//'), $(nproc) CPUs, kernel $(uname -r), scratch $base"
echo "  results:  $out"
[ -z "$plot_dir" ] || echo "  figures:  $plot_dir"

# ---- backing data --------------------------------------------------------
head -c 4096 /dev/urandom >"$backing/onepage"
head -c $((64 << 20)) /dev/urandom >"$backing/rand64m"
head -c $((256 << 20)) /dev/urandom >"$backing/seq256m"

mkdir_mnt() { mktemp -d "$base/mnt-${1//=/-}.XXXXXX"; }
# mount_variant V: mounts V; for V+uring also waits for a first answer
# (INIT and the rings' registration happen before it).
mount_variant() {
  local v=$1 sfx="" uo=()
  if is_uring "$v"; then sfx=+uring uo=(io_uring); fi
  case ${v%+uring} in
    direct) return 0 ;;
    minimal)
      # Two instances: f of one page for the 16-byte preads, f of 256 MiB
      # for the rest (random reads use its first 64 MiB).
      local msmall mbig
      msmall=$(mkdir_mnt minimal-small$sfx) mbig=$(mkdir_mnt minimal-big$sfx)
      mount_fuse minimal-small$sfx "$msmall" "$minimal" -f \
        -o "$(join_opts size=4096 "${fuse_common_opts[@]}" "${uo[@]}")" "$msmall" &&
        mount_fuse minimal-big$sfx "$mbig" "$minimal" -f \
          -o "$(join_opts size=$((256 << 20)) "${fuse_common_opts[@]}" "${uo[@]}")" "$mbig" &&
        { [ -z "$sfx" ] || { timeout 10 stat "$msmall/f" "$mbig/f" >/dev/null; }; }
      ;;
    *)
      local m_
      m_=$(mkdir_mnt "$v")
      mount_fuse "$v" "$m_" "$norefs" -f -o "$(daemon_o "$v")" "$backing" "$m_" &&
        { [ -z "$sfx" ] || timeout 10 stat "$m_" >/dev/null; }
      ;;
  esac
}
up=()
for v in "${variants[@]}"; do
  is_uring "$v" && continue
  if mount_variant "$v"; then up+=("$v"); else skipped+=("$v (did not mount)"); fi
done
if [ "$io_uring" = 1 ]; then
  if [ "$(cat "$uring_param")" != Y ]; then
    uring_saved=$(cat "$uring_param")
    echo Y >"$uring_param"
  fi
  for v in "${variants[@]}"; do
    is_uring "$v" || continue
    if mount_variant "$v"; then up+=("$v"); else skipped+=("$v (did not mount)"); fi
  done
  # Every io_uring connection has negotiated it: the parameter goes back.
  uring_restore
fi
# In the order of $variants (each V+uring after its V).
up_ordered=()
for v in "${variants[@]}"; do [[ " ${up[*]} " != *" $v "* ]] || up_ordered+=("$v"); done
variants=("${up_ordered[@]}")
[ ${#variants[@]} -gt 0 ] || { echo "fs_bench: nothing mounted" >&2; exit 1; }

# file_for VARIANT TEST: the file the test reads in that variant.
file_for() {
  local f
  case $2 in
    pread16-*) f=onepage ;;
    randread4k) f=rand64m ;;
    *) f=seq256m ;;
  esac
  case $1 in
    direct) echo "$backing/$f" ;;
    minimal|minimal+uring)
      local sfx=""
      is_uring "$1" && sfx=+uring
      [ "$f" = onepage ] && echo "${mnt_of[minimal-small$sfx]}/f" || echo "${mnt_of[minimal-big$sfx]}/f" ;;
    *) echo "${mnt_of[$1]}/$f" ;;
  esac
}

# Read every file once through each daemon, so that timed runs start from a
# full cache rather than from the first misses.
t0=$(date +%s%N)
for v in "${variants[@]}"; do
  is_daemon "$v" || continue
  cat "${mnt_of[$v]}/onepage" "${mnt_of[$v]}/rand64m" "${mnt_of[$v]}/seq256m" >/dev/null ||
    echo "fs_bench: reading the files through $v failed" >&2
done
echo "fs_bench: mounted ${variants[*]}; files read once through each daemon in" \
  "$((($(date +%s%N) - t0) / 1000000)) ms"

# ---- the runs --------------------------------------------------------------
# A row per timed run; fs_bench_report.py reads fio's JSON it names.
runs="$out/fs_bench_runs.csv"
echo "test,variant,round,fio_exit,fio_json" >"$runs"
rm -f "$out"/fio/*.json "$out"/daemon_stats/*.json "$out/fs_bench_runs.jsonl" 2>/dev/null || true

# run_fio VARIANT TEST ROUND SECONDS: one fio run; ROUND 0 is the warm-up,
# not recorded.  A failing or hanging fio is recorded with its exit status
# (the report counts it as a failed round), never fatal.
run_fio() {
  local v=$1 t=$2 round=$3 secs=$4
  local job=${t%%-*} jobs=1
  [[ $t == pread16-* ]] && jobs=${t#pread16-}
  local tag="${t}_${v//=/-}_r$round" rc=0
  local json="$out/fio/$tag.json" err="$base/logs/fio_$tag.err"
  local limit
  limit=$(awk -v s="$secs" 'BEGIN { printf "%d", s * 3 + 60 }')
  FIO_FILE=$(file_for "$v" "$t") FIO_JOBS=$jobs FIO_RUNTIME=$(ms "$secs") \
    timeout -k 10 "$limit" fio "$fio_dir/$job.fio" --output-format=json >"$json" 2>"$err" || rc=$?
  [ "$round" = 0 ] && { rm -f "$json"; return 0; }
  echo "$t,$v,$round,$rc,fio/$tag.json" >>"$runs"
  if [ $rc -ne 0 ]; then
    printf '\nfs_bench: fio %s on %s (round %s) failed (exit %s):\n' "$t" "$v" "$round" "$rc" >&2
    sed 's/^/  | /' "$err" | tail -5 >&2
  fi
  return 0
}

# Progress goes to stderr (the report is stdout): a line per job, growing
# as its warm-up and rounds finish, with the time so far.
nv=${#variants[@]} nt=${#tests[@]} ti=0 bench_t0=$(date +%s)
for t in "${tests[@]}"; do
  ti=$((ti + 1))
  printf 'fs_bench: [%d/%d] %-11s %d variants: warm' "$ti" "$nt" "$t" "$nv" >&2
  for v in "${variants[@]}"; do run_fio "$v" "$t" 0 "$warm"; done
  for r in $(seq "$rounds"); do
    printf ', round %d/%d' "$r" "$rounds" >&2
    # Rotate the order each round: no variant always runs right after another.
    for k in $(seq 0 $((nv - 1))); do
      v=${variants[$(((k + r - 1) % nv))]}
      run_fio "$v" "$t" "$r" "$runtime"
    done
  done
  printf ' (%d s so far)\n' "$(($(date +%s) - bench_t0))" >&2
done

# ---- the daemons' own counters -------------------------------------------
if [ -n "$norefsctl" ]; then
  for v in "${variants[@]}"; do
    is_daemon "$v" || continue
    if "$norefsctl" stats --json "${mnt_of[$v]}" >"$base/ctl.json" 2>"$base/logs/ctl_$v.err"; then
      mv "$base/ctl.json" "$out/daemon_stats/$v.json"
    else
      echo "fs_bench: norefsctl stats on $v: $(cat "$base/logs/ctl_$v.err")" >&2
    fi
  done
fi

# ---- report: the statistics, fs_bench.csv/.json, the figures -------------
report_args=(--runtime="$runtime" --rounds="$rounds" --warm="$warm" --norefs="$norefs"
  --minimal="$minimal" --max-threads="$max_threads" --cache-size="$cache_size"
  --daemon-opts="$daemon_opts" --fio="$(fio --version)" --kernel="$(uname -r)" --cpus="$(nproc)"
  --variants="${variants[*]}" --tests="${tests[*]}")
[ "$quick" = 0 ] || report_args+=(--quick)
[ "$clone_fd" = 0 ] || report_args+=(--clone-fd)
[ "$io_uring" = 0 ] || report_args+=(--io-uring)
for s_ in "${skipped[@]}"; do report_args+=(--skipped="$s_"); done
[ -z "$plot_dir" ] || report_args+=(--plot="$plot_dir")
"$report" "$out" "${report_args[@]}"
