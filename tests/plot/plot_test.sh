#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/plot/plot_test.sh — tools/plot.py draws PNG and SVG from a CSV in the
# tools' format, and refuses bad input with exit 2 and a message.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pread.csv" <<'CSV'
size,variant,threads,path,rounds,reads_per_sec,reads_per_sec_min,reads_per_sec_max
16,shared,1,noref,3,3.2e7,3.0e7,3.4e7
16,shared,2,noref,3,6.4e7,6.0e7,6.6e7
16,shared,1,ref,3,2.4e7,2.3e7,2.5e7
16,shared,2,ref,3,8.0e6,7.5e6,8.4e6
4096,private,1,noref,3,4.0e6,3.9e6,4.1e6
4096,private,2,noref,3,7.9e6,7.5e6,8.0e6
CSV
out=$("$root/tools/plot.py" pread "$tmp/pread.csv" "$tmp/out")
for ext in png svg; do
  f="$tmp/out/pread_scaling.$ext"
  [ -s "$f" ] || { echo "FAIL: $f missing or empty"; exit 1; }
  grep -q "$f" <<<"$out" || { echo "FAIL: $f not printed"; exit 1; }
done
head -c 8 "$tmp/out/pread_scaling.png" | grep -q PNG || { echo "FAIL: not a PNG"; exit 1; }
grep -q "noref" "$tmp/out/pread_scaling.svg" || { echo "FAIL: no legend in the SVG"; exit 1; }
# Bad input: a CSV of another tool, and an empty one.
printf "a,b\n1,2\n" >"$tmp/bad.csv"
set +e
msg=$("$root/tools/plot.py" pread "$tmp/bad.csv" "$tmp/out2" 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "missing columns" <<<"$msg" || { echo "FAIL: bad CSV: rc=$rc $msg"; exit 1; }
: >"$tmp/empty.csv"
set +e
"$root/tools/plot.py" pread "$tmp/empty.csv" "$tmp/out3" 2>/dev/null; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: empty CSV: rc=$rc"; exit 1; }
echo "plot: ok"
