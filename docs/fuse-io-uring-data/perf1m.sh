#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# perf1m.sh uring|dev: perf record -g of norefs_minimal_fuse (256 MiB file,
# over io_uring or /dev/fuse) for 4 s while fio reads it in 1 MiB blocks
# (tools/bench/fio/seqread1m.fio, 7 s); writes perf1m-MODE.data.  Run as root from
# the source tree: fuse.enable_uring is Y only while the server mounts, and
# back to its old value on every exit.  MINIMAL= the server.
P=/sys/module/fuse/parameters/enable_uring
B=${MINIMAL:-build/bench/tools/bench/norefs_minimal_fuse}
m=$(mktemp -d); saved=$(cat $P)
trap 'fusermount3 -u $m 2>/dev/null || umount -l $m; wait; rmdir $m; echo $saved > $P' EXIT
o=size=$((256<<20)); [ $1 = uring ] && o=$o,io_uring
echo Y > $P
$B -f -o $o $m 2>/dev/null & pid=$!
for i in $(seq 100); do mountpoint -q $m && break; sleep 0.1; done
stat $m/f >/dev/null; echo $saved > $P
FIO_FILE=$m/f FIO_JOBS=1 FIO_RUNTIME=7000ms fio tools/bench/fio/seqread1m.fio --output-format=json 2>/dev/null | jq '.jobs[0].read.iops' &
sleep 1.5
perf record -g -p $pid -o perf1m-$1.data -- sleep 4 2>&1 | tail -1
wait %2 2>/dev/null
