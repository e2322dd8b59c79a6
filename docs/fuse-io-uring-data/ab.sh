#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# ab.sh ROUNDS SECONDS VARIANTS...: the A/B runs of docs/fuse-io-uring.md
# ("Variants tried").  One norefs_minimal_fuse per variant: "devfuse" is the
# server over /dev/fuse; any other name V is the server with -o io_uring and
# NOREFS_URING_EXPERIMENT=V, which only a build with experiment.patch (beside
# this file) reads: pin (the committed behaviour), nopin, coop, defer, per2.
# fio's pread16 job at 1 and 2 jobs, variants rotated each round.  Run as
# root from the source tree; fuse.enable_uring is Y only while the servers
# mount, and back to its old value on every exit.  MINIMAL= the server (default the release build).
set -u
P=/sys/module/fuse/parameters/enable_uring
B=${MINIMAL:-build/release/tools/bench/norefs_minimal_fuse}
rounds=$1 secs=$2; shift 2
vars=("$@")
declare -A mnt
pids=()
saved=$(cat $P)
cleanup() {
  for v in "${vars[@]}"; do m=${mnt[$v]:-}; [ -n "$m" ] && { fusermount3 -u $m 2>/dev/null || umount -l $m 2>/dev/null; }; done
  for p in "${pids[@]}"; do timeout 5 tail --pid=$p -f /dev/null; kill -9 $p 2>/dev/null; done
  for v in "${vars[@]}"; do rmdir ${mnt[$v]:-/nonexistent} 2>/dev/null; done
  echo $saved > $P
}
trap cleanup EXIT INT TERM
echo Y > $P
for v in "${vars[@]}"; do
  m=$(mktemp -d); mnt[$v]=$m
  if [ $v = devfuse ]; then $B -f $m 2>/dev/null & pids+=($!)
  else NOREFS_URING_EXPERIMENT=$v $B -f -o io_uring $m 2>/dev/null & pids+=($!); fi
done
sleep 0.5
for v in "${vars[@]}"; do stat ${mnt[$v]}/f >/dev/null || exit 1; done
echo $saved > $P
run() { FIO_FILE=$1 FIO_JOBS=$2 FIO_RUNTIME=$3 fio tools/bench/fio/pread16.fio --output-format=json 2>/dev/null | jq '[.jobs[].read.iops]|add|floor'; }
for j in 1 2; do for v in "${vars[@]}"; do run ${mnt[$v]}/f $j 1 >/dev/null; done; done
n=${#vars[@]}
for r in $(seq $rounds); do
  for j in 1 2; do
    line="round $r jobs $j:"
    declare -A res=()
    for k in $(seq 0 $((n-1))); do v=${vars[$(( (k + r) % n ))]}; res[$v]=$(run ${mnt[$v]}/f $j $secs); done
    for v in "${vars[@]}"; do line+=" $v ${res[$v]}"; done
    echo "$line"
  done
done
