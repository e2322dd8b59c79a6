#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/plot/plot_test.sh — tools/bench/plot.py draws PNG and SVG from a CSV in the
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
out=$("$root/tools/bench/plot.py" pread "$tmp/pread.csv" "$tmp/out")
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
msg=$("$root/tools/bench/plot.py" pread "$tmp/bad.csv" "$tmp/out2" 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "missing columns" <<<"$msg" || { echo "FAIL: bad CSV: rc=$rc $msg"; exit 1; }
: >"$tmp/empty.csv"
set +e
"$root/tools/bench/plot.py" pread "$tmp/empty.csv" "$tmp/out3" 2>/dev/null; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: empty CSV: rc=$rc"; exit 1; }

# ── punch: norefs_punch_wait --samples-csv and --csv, in the tool's headers ──
plot="$root/tools/bench/plot.py"
fail() { echo "FAIL: $*"; exit 1; }
# A real figure: a PNG (its magic) of more than 10 KB, an SVG.
figure() {
  local f="$1"
  [ -s "$f.png" ] && [ -s "$f.svg" ] || fail "$f.png/.svg missing or empty"
  [ "$(head -c 4 "$f.png" | od -An -tx1 | tr -d ' \n')" = 89504e47 ] || fail "$f.png: not a PNG"
  [ "$(stat -c %s "$f.png")" -gt 10240 ] || fail "$f.png: $(stat -c %s "$f.png") bytes"
  grep -q "<svg" "$f.svg" || fail "$f.svg: no <svg"
  grep -qF "$f.png" <<<"$out" && grep -qF "$f.svg" <<<"$out" || fail "$f not printed"
}
# Expect exit 2 and a message matching $1 from the rest of the command line.
refused() {
  local want="$1" rc msg
  shift
  set +e
  msg=$("$@" 2>&1); rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -q -- "$want" <<<"$msg" || fail "$*: rc=$rc, wanted '$want': $msg"
}
samples_header=t_ms,variant,mode,N,gp_interval_us,round,phase,pages_waiting,pages_cached,rss_kib
# Two variants, two gp intervals, two rounds, N = 1 and 4, every mode: a
# sawtooth of waiting pages for 0.2 s of load, then 0.1 s of settle in round
# 0 and 0.2 s in round 1 (the title names the end of the samples drawn).
awk -v h="$samples_header" 'BEGIN {
  print h
  split("off defer expedite bound", modes, " ")
  for (r = 0; r < 2; r++) for (v = 0; v < 2; v++) for (g = 0; g < 2; g++)
  for (n = 1; n <= 4; n *= 4) for (m = 1; m <= 4; m++)
    for (t = 2; t <= 300 + 100 * r; t += 2) {
      w = modes[m] == "off" || t > 200 ? 0 : (t % (20 * m)) * 50 * n / m
      printf "%.3f,%s,%s,%d,%d,%d,%s,%d,%d,%d\n", t, (v ? "truncate" : "punch"), modes[m], n,
             (g ? 20000 : 1000), r, (t > 200 ? "settle" : "load"), w, 1000 * n, 8000 + 4 * w
    }
}' >"$tmp/samples.csv"
summary_header=variant,mode,gp_interval_us,N,round,bound_pages,seconds,bytes,gib_per_s,ratio_vs_off,samples,mean_waiting_pages,peak_waiting_pages,mean_cached_pages,peak_cached_pages,peak_total_pages,samples_over_bound,grace_periods,expedites,gp_per_s,expedites_per_s,idle_rss_kib,mean_rss_kib,peak_rss_kib,rss_over_bound_samples,minor_faults,settle_ms,end_rss_kib,end_live_pages,write_alloc,write_skipped,limit_drains
awk -v h="$summary_header" 'BEGIN {
  print h
  split("off defer expedite bound", modes, " ")
  for (r = 0; r < 3; r++) for (g = 0; g < 2; g++) for (n = 1; n <= 16; n *= 2)
  for (m = 1; m <= 4; m++) {
    mean = modes[m] == "off" ? 0 : 400 * n / m + 100 * r
    printf "punch,%s,%d,%d,%d,%d,1,1e9,0.9,%s,500,%g,%d,", modes[m], (g ? 20000 : 1000), n, r,
           (modes[m] == "bound" ? 8192 : 0), (modes[m] == "off" ? 1 : 1.1), mean, 3 * mean
    print "1000,2048,4096,0,100,10,100,10,7000,20000,30000,0,5000,300,8000,0,200000,0,0"
  }
}' >"$tmp/cells.csv"

set +e
out=$("$plot" punch "$tmp/samples.csv" "$tmp/p" --summary "$tmp/cells.csv" 2>"$tmp/err")
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "punch: rc=$rc $(cat "$tmp/err")"
for f in punch_wait_time punch_wait_rss punch_wait_bars; do figure "$tmp/p/$f"; done
grep -q "drawn: punch, 1000 us" "$tmp/err" || fail "no note of what was drawn: $(cat "$tmp/err")"
grep -q "drawn: round 0" "$tmp/err" || fail "no note of the round drawn: $(cat "$tmp/err")"
grep -q "expedite" "$tmp/p/punch_wait_time.svg" || fail "no legend in the SVG"
grep -q "round 0 (rounds 0-1 in the CSV)" "$tmp/p/punch_wait_time.svg" ||
  fail "the round drawn is not in the title"
# Round 0's samples end at 0.3 s, every one 0 after the load (0.2 s).
grep -q "every sample after 0.20 s (up to 0.30 s) is 0" "$tmp/p/punch_wait_time.svg" ||
  fail "not round 0's samples, or the time axis not cut after the last sample above 0"
# The real per-cell table of docs/punch-wait.md section 5 (four rounds).
out=$("$plot" punch "$tmp/samples.csv" "$tmp/r" \
  --summary "$root/docs/punch-wait-data/ratios.csv" 2>/dev/null)
figure "$tmp/r/punch_wait_bars"
grep -q "median of 4 rounds" "$tmp/r/punch_wait_bars.svg" || fail "rounds not said in the bars"
# --variant and --gp choose; without --summary, no bars.
out=$("$plot" punch "$tmp/samples.csv" "$tmp/q" --variant truncate --gp 20000 \
  --title "T" 2>"$tmp/err")
grep -q "drawn: truncate, 20000 us" "$tmp/err" || fail "--variant/--gp: $(cat "$tmp/err")"
for f in punch_wait_time punch_wait_rss; do figure "$tmp/q/$f"; done
[ ! -e "$tmp/q/punch_wait_bars.png" ] || fail "bars drawn without --summary"
# Bad input.
refused "variant nosuch: not in" "$plot" punch "$tmp/samples.csv" "$tmp/b" --variant nosuch
refused "gp 5: not in" "$plot" punch "$tmp/samples.csv" "$tmp/b" --gp 5
refused "missing columns" "$plot" punch "$tmp/pread.csv" "$tmp/b"
refused "missing columns" "$plot" punch "$tmp/samples.csv" "$tmp/b" \
  --summary "$tmp/samples.csv"
[ ! -e "$tmp/b" ] || fail "bad --summary: figures written before it was checked"
echo "$samples_header" >"$tmp/header-only.csv"
refused "no rows" "$plot" punch "$tmp/header-only.csv" "$tmp/b"
refused "no rows" "$plot" punch "$tmp/samples.csv" "$tmp/b" --summary "$tmp/empty.csv"
sed '3s/^\([^,]*\),\([^,]*\),\([^,]*\),[^,]*,/\1,\2,\3,four,/' "$tmp/samples.csv" >"$tmp/nan.csv"
refused "column N: 'four' is not an integer" "$plot" punch "$tmp/nan.csv" "$tmp/b"
sed '3s/,load,/,loading,/' "$tmp/samples.csv" >"$tmp/phase.csv"
refused "neither load nor settle" "$plot" punch "$tmp/phase.csv" "$tmp/b"
echo "plot: ok"
