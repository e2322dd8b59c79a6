#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/plot/fs_bench_report_test.sh — tools/bench/fs_bench_report.py, the
# statistics of tools/bench/fs_bench.sh, on made-up raw results with known answers:
# means, min-max spreads, MiB/s, the ratios to cache=off, to the minimal
# server and over /dev/fuse, targets met (one exactly at its 1.2x), missed and
# not evaluated, failed rounds left out of the means, the daemons' counters;
# the table, fs_bench.csv and fs_bench.json; bad input refused with exit 2 and
# a message; the figures (--plot, tools/bench/plot.py fs).  Then each of a list of
# broken copies of the script (a wrong mean, spread, ratio, comparison, ...)
# must fail the same checks: none of them can pass by accident.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ── The raw results, as fs_bench.sh leaves them ──
# runs.csv rows: TEST VARIANT ROUND WHAT, WHAT = IOPS (fio's JSON, 16-byte
# reads), fail:RC (fio exited RC), err:E:IOPS (fio's own error E), garbage.
raw="$tmp/raw"
mkdir -p "$raw/fio" "$raw/daemon_stats"
echo test,variant,round,fio_exit,fio_json >"$raw/fs_bench_runs.csv"
fio_json() {  # fio_json TAG IOPS ERROR
  printf '{"fio version": "fio-3.33", "jobs": [{"jobname": "j", "error": %s, "job_runtime": 2000,
  "read": {"io_bytes": 1, "bw_bytes": %s, "iops": %s}}]}\n' "$3" "$(($2 * 16))" "$2" \
    >"$raw/fio/$1.json"
}
run() {
  local tag="$1_${2//=/-}_r$3" rc=0
  case $4 in
    fail:*) rc=${4#fail:}; echo "fio: killed" >"$raw/fio/$tag.json" ;;
    err:*) local e=${4#err:}; fio_json "$tag" "${e#*:}" "${e%%:*}" ;;
    garbage) echo "fio: no JSON here" >"$raw/fio/$tag.json" ;;
    *) fio_json "$tag" "$4" 0 ;;
  esac
  echo "$1,$2,$3,$rc,fio/$tag.json" >>"$raw/fs_bench_runs.csv"
}
run pread16-1 noref 1 100000;        run pread16-1 noref 2 110000
run pread16-1 noref+uring 1 140000;  run pread16-1 noref+uring 2 150000
run pread16-1 cache=off 1 84000;     run pread16-1 cache=off 2 fail:1
run pread16-1 minimal 1 90000;       run pread16-1 minimal 2 100000
run pread16-1 minimal+uring 1 110000; run pread16-1 minimal+uring 2 120000
run pread16-2 noref 1 120000;        run pread16-2 noref 2 120000
run pread16-2 cache=off 1 100000;    run pread16-2 cache=off 2 100000
run pread16-2 minimal 1 150000;      run pread16-2 minimal 2 140000
run pread16-2 minimal+uring 1 200000; run pread16-2 minimal+uring 2 err:5:900000
run pread16-4 noref 2 130000;        run pread16-4 noref 1 130000
run randread4k noref 1 50000;        run randread4k noref 2 garbage
run randread4k direct 1 200000;      run randread4k direct 2 200000
cat >"$raw/daemon_stats/noref.json" <<'JSON'
{"cache": {"read_path": "noref", "reads": 1000, "hits": 990, "misses": 10, "hit_ratio": 0.99,
  "fast_share": 0.937, "stops": {"accessed": {"count": 96, "share": 0.96},
  "batch": {"count": 0, "share": 0.0}, "missing": {"count": 1, "share": 0.01},
  "readahead": {"count": 3, "share": 0.03}}}}
JSON
cat >"$raw/daemon_stats/cache=off.json" <<'JSON'
{"cache": {"read_path": "noref", "reads": 0, "hits": 0, "misses": 0, "hit_ratio": 0.0,
  "fast_share": 0.0, "stops": {"accessed": {"count": 0, "share": 0.0}}}}
JSON

# The report's lines, worked out by hand: pread16-1 noref (100000 + 110000) / 2
# = 105000, spread 10000 / 105000 = 9.5%, 105000 * 16 B = 1.6 MiB/s, / 84000
# (cache=off: its second round failed) = 1.250, / 95000 = 1.105; noref+uring
# 145000 / 105000 = 1.381 over /dev/fuse; pread16-2 minimal+uring 200000 (the
# round with fio's error 5 left out) / 145000 = 1.379; noref 120000 / 100000
# = 1.200 exactly: met; / 145000 = 0.828: NOT met; minimal+uring at 1 job
# 115000 / 95000 = 1.211 < 1.3: NOT met.
expected_table='
fs_bench: mean of 2 round(s) of 2 s; spread = (max - min) / mean over rounds
test        variant              runs         IOPS  spread      MiB/s /cache=off  /minimal  /dev/fuse
pread16-1   noref                2/2        105000    9.5%        1.6     1.250     1.105          -
pread16-1   noref+uring          2/2        145000    6.9%        2.2     1.726     1.526      1.381
pread16-1   cache=off            1/2         84000    0.0%        1.3     1.000     0.884          -
pread16-1   minimal              2/2         95000   10.5%        1.4     1.131     1.000          -
pread16-1   minimal+uring        2/2        115000    8.7%        1.8     1.369     1.211      1.211

pread16-2   noref                2/2        120000    0.0%        1.8     1.200     0.828          -
pread16-2   cache=off            2/2        100000    0.0%        1.5     1.000     0.690          -
pread16-2   minimal              2/2        145000    6.9%        2.2     1.450     1.000          -
pread16-2   minimal+uring        1/2        200000    0.0%        3.1     2.000     1.379      1.379

pread16-4   noref                2/2        130000    0.0%        2.0         -         -          -

randread4k  noref                1/2         50000    0.0%        0.8         -         -          -
randread4k  direct               2/2        200000    0.0%        3.1         -         -          -

targets (16-byte pread: 2 to 8 jobs; over io_uring: 1 and 2 jobs):
  pread16-2  noref >= 1.2x cache=off            120000 vs     100000 IOPS =  1.200  met
  pread16-2  noref >= 0.9x minimal              120000 vs     145000 IOPS =  0.828  NOT met
  pread16-4  noref >= 1.2x cache=off            130000 vs          - IOPS =      -  not evaluated (missing variant)
  pread16-4  noref >= 0.9x minimal              130000 vs          - IOPS =      -  not evaluated (missing variant)
  pread16-1  minimal+uring >= 1.3x minimal      115000 vs      95000 IOPS =  1.211  NOT met
  pread16-1  noref+uring >= 1.3x noref          145000 vs     105000 IOPS =  1.381  met
  pread16-2  minimal+uring >= 1.3x minimal      200000 vs     145000 IOPS =  1.379  met

daemon counters at the end (norefsctl stats): hits, fast-path share, top stop reasons
  variant             read_path           reads         hits    misses    hit%   fast%  stops
  noref               noref                1000          990        10   99.0%   93.7%  accessed 96%, readahead 3%, missing 1%
  cache=off           noref                   0            0         0    0.0%    0.0%  
'
expected_table=${expected_table%$'\n'}
expected_csv='"test","numjobs","variant","runs_ok","iops","iops_min","iops_max","spread","bw_mib_s","vs_cache_off","vs_minimal","vs_dev_fuse"
"pread16-1",1,"noref",2,105000,100000,110000,0.09523809523809523,1.6021728515625,1.25,1.105263157894737,
"pread16-1",1,"noref+uring",2,145000,140000,150000,0.06896551724137931,2.2125244140625,1.7261904761904763,1.5263157894736843,1.380952380952381
"pread16-1",1,"cache=off",1,84000,84000,84000,0,1.28173828125,1,0.8842105263157894,
"pread16-1",1,"minimal",2,95000,90000,100000,0.10526315789473684,1.4495849609375,1.130952380952381,1,
"pread16-1",1,"minimal+uring",2,115000,110000,120000,0.08695652173913043,1.7547607421875,1.369047619047619,1.2105263157894737,1.2105263157894737
"pread16-2",2,"noref",2,120000,120000,120000,0,1.8310546875,1.2,0.8275862068965517,
"pread16-2",2,"cache=off",2,100000,100000,100000,0,1.52587890625,1,0.6896551724137931,
"pread16-2",2,"minimal",2,145000,140000,150000,0.06896551724137931,2.2125244140625,1.45,1,
"pread16-2",2,"minimal+uring",1,200000,200000,200000,0,3.0517578125,2,1.3793103448275863,1.3793103448275863
"pread16-4",4,"noref",2,130000,130000,130000,0,1.983642578125,,,
"randread4k",1,"noref",1,50000,50000,50000,0,0.762939453125,,,
"randread4k",1,"direct",2,200000,200000,200000,0,3.0517578125,,,'

# check SCRIPT: every check against one copy of the report script; exits
# non-zero (in its subshell) at the first that fails.
check() {
  local report=$1 d="$tmp/run" out rc msg
  rm -rf "$d" && cp -r "$raw" "$d"
  set +e
  out=$("$report" "$d" --runtime 2 --rounds 2 --io-uring --variants "noref minimal" \
    --skipped "ref (no fs/norefs)" 2>"$tmp/err")
  rc=$?
  set -e
  [ "$rc" -eq 0 ] || fail "rc=$rc: $(cat "$tmp/err")"
  # The table, targets and counters exactly, then the closing lines.
  [ "$(head -n "$(wc -l <<<"$expected_table")" <<<"$out")" = "$expected_table" ] ||
    fail "the report differs from the expected one:
$(diff <(echo "$expected_table") <(echo "$out") || true)"
  grep -qFx "fs_bench: results in $d/fs_bench.csv, $d/fs_bench.json (config, results, targets, runs," \
    <<<"$out" || fail "no closing line"
  grep -qF "fio pread16-2 on minimal+uring (round 2): fio error 5; not counted" "$tmp/err" ||
    fail "fio's own error not reported: $(cat "$tmp/err")"
  grep -qF "fio randread4k on noref (round 2): $d/fio/randread4k_noref_r2.json: no read result" \
    "$tmp/err" || fail "an unreadable fio JSON not reported: $(cat "$tmp/err")"
  [ "$(cat "$d/fs_bench.csv")" = "$expected_csv" ] ||
    fail "fs_bench.csv: $(diff <(echo "$expected_csv") "$d/fs_bench.csv" || true)"
  /usr/bin/python3 - "$d/fs_bench.json" <<'PY' || fail "fs_bench.json"
import json, sys
j = json.load(open(sys.argv[1]))
def want(what, got, exp):
    if got != exp:
        sys.exit(f"{what}: {got!r}, want {exp!r}")
want("targets met", [t["met"] for t in j["targets"]], [True, False, None, None, False, True, True])
want("targets need", [t["need"] for t in j["targets"]], [1.2, 0.9, 1.2, 0.9, 1.3, 1.3, 1.3])
r = {(x["test"], x["variant"]): x for x in j["results"]}
want("pread16-1 noref", [r["pread16-1", "noref"][k] for k in ("runs", "runs_ok", "iops", "iops_min",
     "iops_max")], [2, 2, 105000, 100000, 110000])
want("cache=off's failed round", (r["pread16-1", "cache=off"]["runs"],
     r["pread16-1", "cache=off"]["runs_ok"]), (2, 1))
want("runs", len(j["runs"]), 24)
want("failed runs", sorted((x["test"], x["variant"], x["round"]) for x in j["runs"] if not x["ok"]),
     [("pread16-1", "cache=off", 2), ("pread16-2", "minimal+uring", 2), ("randread4k", "noref", 2)])
fail1 = [x for x in j["runs"] if x["variant"] == "cache=off" and x["round"] == 2][0]
want("a failed fio's record", (fail1["iops"], fail1["fio_exit"]), (None, 1))
want("config", (j["config"]["runtime_s"], j["config"]["rounds"], j["config"]["io_uring"],
     j["config"]["variants"], j["config"]["skipped"], j["config"]["max_threads"]),
     (2, 2, True, ["noref", "minimal"], ["ref (no fs/norefs)"], "default"))
want("daemon_stats", list(j["daemon_stats"]), ["noref", "cache=off"])
PY
  # Without --io-uring: no /dev/fuse column.
  out=$("$report" "$d" --runtime 2 --rounds 2 2>/dev/null)
  grep -qFx "test        variant              runs         IOPS  spread      MiB/s /cache=off  /minimal" \
    <<<"$out" || fail "the header without --io-uring"
  grep -qFx "pread16-1   noref+uring          2/2        145000    6.9%        2.2     1.726     1.526" \
    <<<"$out" || fail "a row without --io-uring"
  # Bad input: exit 2 and a message, nothing else.
  refused() {  # refused WANT SETUP: SETUP edits a fresh copy of the raw results in $d
    local want=$1
    rm -rf "$d" && cp -r "$raw" "$d"
    eval "$2"
    set +e
    msg=$("$report" "$d" --runtime 2 --rounds 2 2>&1)
    rc=$?
    set -e
    [ "$rc" -eq 2 ] && grep -qF -- "$want" <<<"$msg" || fail "$2: rc=$rc, wanted '$want': $msg"
  }
  refused "fs_bench_runs.csv: No such file" 'rm "$d/fs_bench_runs.csv"'
  refused "missing columns fio_exit" 'sed -i 1s/fio_exit/rc/ "$d/fs_bench_runs.csv"'
  refused "fs_bench_runs.csv: no rows" 'sed -i 2,\$d "$d/fs_bench_runs.csv"'
  refused "fs_bench_runs.csv: no rows" ': >"$d/fs_bench_runs.csv"'
  refused "fs_bench_runs.csv:3: unknown variant 'nosuch'" 'sed -i 3s/noref/nosuch/ "$d/fs_bench_runs.csv"'
  refused "fs_bench_runs.csv:2: unknown test 'pread17-1'" 'sed -i 2s/pread16/pread17/ "$d/fs_bench_runs.csv"'
  refused "round 0: rounds count from 1" 'sed -i 2s/,1,0,/,0,0,/ "$d/fs_bench_runs.csv"'
  refused "round 'x' or fio_exit '0' is not an integer" 'sed -i 2s/,1,0,/,x,0,/ "$d/fs_bench_runs.csv"'
  refused "fs_bench_runs.csv:3: pread16-1 on noref, round 1, twice" 'sed -i 3s/,2,0,/,1,0,/ "$d/fs_bench_runs.csv"'
  refused "noref.json: not norefsctl's JSON" 'echo "{" >"$d/daemon_stats/noref.json"'
  set +e
  msg=$("$report" "$d" --runtime 2 --rounds 0 2>&1)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -qF -- "--rounds: '0': not a positive int" <<<"$msg" ||
    fail "--rounds 0: rc=$rc: $msg"
}

# ── The real script passes every check, and draws the figures ──
( check "$root/tools/bench/fs_bench_report.py" ) || fail "tools/bench/fs_bench_report.py"
d="$tmp/plotted"
cp -r "$raw" "$d"
out=$("$root/tools/bench/fs_bench_report.py" "$d" --runtime 2 --rounds 2 --io-uring --plot "$d/fig" \
  2>/dev/null)
for f in fs_bench_pread16 fs_bench_throughput; do
  [ "$(head -c 4 "$d/fig/$f.png" | od -An -tx1 | tr -d ' \n')" = 89504e47 ] || fail "$f.png: not a PNG"
  [ "$(stat -c %s "$d/fig/$f.png")" -gt 10240 ] || fail "$f.png: $(stat -c %s "$d/fig/$f.png") bytes"
  grep -q "<svg" "$d/fig/$f.svg" || fail "$f.svg: no <svg"
  grep -qFx "$d/fig/$f.png" <<<"$out" && grep -qFx "$d/fig/$f.svg" <<<"$out" || fail "$f not printed"
done
grep -q "minimal+uring" "$d/fig/fs_bench_pread16.svg" || fail "no legend in fs_bench_pread16.svg"
grep -q "4 KiB random reads" "$d/fig/fs_bench_throughput.svg" || fail "no panel title in the bars"
# Only the 16-byte preads: no throughput figure.
grep -v randread "$d/fs_bench.csv" >"$tmp/pread-only.csv"
"$root/tools/bench/plot.py" fs "$tmp/pread-only.csv" "$tmp/po" >/dev/null
[ -s "$tmp/po/fs_bench_pread16.png" ] && [ ! -e "$tmp/po/fs_bench_throughput.png" ] ||
  fail "plot.py fs: figures of jobs that did not run"
# plot.py fs refuses a CSV of another tool and one with no result.
set +e
msg=$("$root/tools/bench/plot.py" fs "$root/docs/punch-wait-data/ratios.csv" "$tmp/b" 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "missing columns" <<<"$msg" || fail "plot.py fs, another CSV: rc=$rc $msg"
{ head -1 "$d/fs_bench.csv"; echo '"pread16-1",1,"noref",0,,,,,,,,'; } >"$tmp/none.csv"
set +e
msg=$("$root/tools/bench/plot.py" fs "$tmp/none.csv" "$tmp/b" 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "no row with a result" <<<"$msg" || fail "plot.py fs, no result: rc=$rc $msg"
[ ! -e "$tmp/b" ] || fail "plot.py fs: figures written from bad input"

# ── Each broken copy fails: the checks above can fail ──
# Each entry: a sed expression that breaks one thing the checks must catch.
broken=(
  's|return sum(xs) / len(xs) if xs else None|return max(xs) if xs else None|'        # mean
  's|(row\["iops_max"\] - row\["iops_min"\])|(row["iops_max"] - row["iops"])|'       # spread
  's|ratio(row\["iops"\], by.get("cache=off"))|ratio(by.get("cache=off"), row["iops"])|'  # baseline ratio
  's|by.get(v.removesuffix("+uring"))|by.get("minimal")|'                            # /dev/fuse ratio
  's|t\["ratio"\] >= need|t["ratio"] > need|'                                        # met at exactly 1.2x
  's|(\["pread16-1", "pread16-2"\], 1.3,|(["pread16-1", "pread16-2"], 1.2,|'          # a target's need
  's|ok=err == 0)|ok=True)|'                                                         # fio error counted
  's|if res is not None:|if False:|'                                              # bad JSON unreported
  's|key=lambda kx: -kx\[1\]\["count"\]|key=lambda kx: kx[1]["count"]|'               # top stops order
  's|if (t, v, rnd) in seen:|if False:|'                                             # duplicate accepted
  's|if v not in VARIANTS:|if False:|'                                               # unknown variant accepted
  's|1048576 for r in ok|1000000 for r in ok|'                                       # MiB/s
  's|return repr(x)|return f"{x:.6g}"|'                                              # CSV only
  's|"daemon_stats": stats, "runs": runs}|"daemon_stats": stats, "runs": runs[1:]}|'  # JSON only
  "s|{'  /dev/fuse' if uring else ''}|{'  /dev/fuse' if True else ''}|"              # without --io-uring
)
for i in "${!broken[@]}"; do
  copy="$tmp/broken$i.py"
  sed "${broken[$i]}" "$root/tools/bench/fs_bench_report.py" >"$copy"
  chmod +x "$copy"
  ! cmp -s "$copy" "$root/tools/bench/fs_bench_report.py" || fail "broken copy $i: '${broken[$i]}' changed nothing"
  if (check "$copy") >"$tmp/broken.log" 2>&1; then
    fail "broken copy $i ('${broken[$i]}') passes the checks"
  fi
  echo "broken copy $i (${broken[$i]}) fails as it should:"
  { grep -m1 FAIL "$tmp/broken.log"; grep -m1 '^> ' "$tmp/broken.log" || true; } |
    cut -c1-120 | sed 's/^/    /' 
done
echo "fs_bench_report: ok"
