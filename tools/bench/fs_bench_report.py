#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tools/bench/fs_bench_report.py — the statistics and report of tools/bench/fs_bench.sh,
from the raw results it leaves in its results directory:

  OUTDIR/fs_bench_runs.csv   test,variant,round,fio_exit,fio_json: one row per
                             timed fio run (fio_json relative to OUTDIR)
  OUTDIR/fio/*.json          fio --output-format=json of each run
  OUTDIR/daemon_stats/V.json norefsctl stats --json of daemon variant V (optional)

  tools/bench/fs_bench_report.py OUTDIR --runtime S --rounds N [config options]
                           [--plot DIR]

Per job and variant, over the rounds whose fio succeeded: mean, min and
max IOPS, spread (max - min) / mean, mean MiB/s; the ratio of the mean to
cache=off's, to the minimal server's and, for V+uring, to V's over
/dev/fuse; the targets (16-byte preads: noref >= 1.2x cache=off and >= 0.9x
minimal at 2 to 8 jobs; V+uring >= 1.3x V at 1 and 2 jobs for V = minimal,
noref).  Prints the table, the targets and the daemons' counters on stdout
and writes OUTDIR/fs_bench.json (config, results, targets, daemon_stats,
runs) and OUTDIR/fs_bench.csv (the results).  --plot DIR also draws them
(tools/bench/plot.py fs: matplotlib).

The config options (--warm, --quick, --variants, ...) only go into the
JSON's config as given.  A run whose fio failed (fio_exit != 0, fio's own
error, or no result in its JSON) counts in `runs` but not in the means.
Exits 2 with a message on bad input: a missing or malformed runs CSV, an
unknown test or variant, a round that is not a positive integer, the same
run twice, a daemon_stats file that is not JSON.
"""
import argparse
import csv
import json
import math
import os
import sys

# The orders of the table: fs_bench.sh's, each V+uring right after V.
BASE_VARIANTS = ["noref", "ref", "ref-fetchadd", "stackcopy", "cache=off", "kernel_cache",
                 "direct", "minimal"]
VARIANTS = [x for v in BASE_VARIANTS for x in (v, v + "+uring")]
TESTS = ["pread16-1", "pread16-2", "pread16-4", "pread16-8", "randread4k", "seqread64k",
         "seqread1m"]
RUN_COLUMNS = ["test", "variant", "round", "fio_exit", "fio_json"]
RESULT_COLUMNS = ["test", "numjobs", "variant", "runs_ok", "iops", "iops_min", "iops_max",
                  "spread", "bw_mib_s", "vs_cache_off", "vs_minimal", "vs_dev_fuse"]
# (tests, wanted ratio, numerator, denominator): each test of the list that
# has results gets the target, evaluated or not.
TARGETS = [(["pread16-2", "pread16-4", "pread16-8"], 1.2, "noref", "cache=off"),
           (["pread16-2", "pread16-4", "pread16-8"], 0.9, "noref", "minimal")]
# Over io_uring, only where V+uring ran (fs_bench.sh --io-uring).
URING_TARGETS = (["pread16-1", "pread16-2"], 1.3, ["minimal", "noref"])


def die(msg):
    print(f"fs_bench_report.py: {msg}", file=sys.stderr)
    sys.exit(2)


def note(msg):
    print(f"fs_bench: {msg}", file=sys.stderr)


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    return None if a is None or b is None or b == 0 else a / b


def numjobs(test):
    return int(test.split("-")[1]) if test.startswith("pread16-") else 1


def fio_result(path):
    """(iops, bw_bytes, runtime_ms, error) of fio's first job (group_reporting
    sums the threads into it), or a reason why there is none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        return f"{path}: {e.strerror}"
    # fio may print a warning line before its JSON.
    start = text.find("{")
    try:
        job = json.loads(text[start:] if start >= 0 else text)["jobs"][0]
        read = job["read"]
        iops, bw = read["iops"], read["bw_bytes"]
        if not all(isinstance(x, (int, float)) for x in (iops, bw)):
            raise TypeError
        return iops, bw, job.get("job_runtime"), job.get("error", 0)
    except (ValueError, LookupError, TypeError):
        return f"{path}: no read result in fio's JSON"


def read_runs(outdir):
    """The runs of fs_bench_runs.csv as the JSON's records, in file order."""
    path = os.path.join(outdir, "fs_bench_runs.csv")
    try:
        f = open(path, newline="")
    except OSError as e:
        die(f"{path}: {e.strerror}")
    with f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            die(f"{path}: no rows")
        missing = [c for c in RUN_COLUMNS if c not in reader.fieldnames]
        if missing:
            die(f"{path}: missing columns {', '.join(missing)} (not fs_bench.sh's runs?)")
        rows = list(reader)
    if not rows:
        die(f"{path}: no rows")
    runs, seen = [], set()
    for line, r in enumerate(rows, start=2):
        t, v = r["test"], r["variant"]
        if t not in TESTS:
            die(f"{path}:{line}: unknown test {t!r}")
        if v not in VARIANTS:
            die(f"{path}:{line}: unknown variant {v!r}")
        try:
            rnd, rc = int(r["round"]), int(r["fio_exit"])
        except (TypeError, ValueError):
            die(f"{path}:{line}: round {r['round']!r} or fio_exit {r['fio_exit']!r} "
                "is not an integer")
        if rnd < 1:
            die(f"{path}:{line}: round {rnd}: rounds count from 1")
        if (t, v, rnd) in seen:
            die(f"{path}:{line}: {t} on {v}, round {rnd}, twice")
        seen.add((t, v, rnd))
        rec = {"test": t, "job": t.split("-")[0], "numjobs": numjobs(t), "variant": v,
               "round": rnd}
        res = fio_result(os.path.join(outdir, r["fio_json"])) if rc == 0 else None
        if isinstance(res, tuple):
            iops, bw, runtime_ms, err = res
            rec.update(iops=iops, bw_bytes=bw, runtime_ms=runtime_ms, fio_error=err,
                       ok=err == 0)
            if err != 0:
                note(f"fio {t} on {v} (round {rnd}): fio error {err}; not counted")
        else:
            if res is not None:  # fio exited 0; its failure was not reported yet
                note(f"fio {t} on {v} (round {rnd}): {res}; not counted")
            rec.update(iops=None, bw_bytes=None, ok=False, fio_exit=rc)
        runs.append(rec)
    return runs


def results_of(runs):
    """One row per (test, variant), in the table's order, with its ratios."""
    cells = {}
    for r in runs:
        cells.setdefault((r["test"], r["variant"]), []).append(r)
    rows = []
    for (t, v), rs in sorted(cells.items(),
                             key=lambda kv: (TESTS.index(kv[0][0]), VARIANTS.index(kv[0][1]))):
        ok = [r for r in rs if r["ok"]]
        iops = [r["iops"] for r in ok]
        row = {"test": t, "numjobs": numjobs(t), "variant": v, "runs": len(rs),
               "runs_ok": len(ok), "iops": mean(iops), "iops_min": min(iops, default=None),
               "iops_max": max(iops, default=None),
               "bw_mib_s": mean([r["bw_bytes"] / 1048576 for r in ok])}
        row["spread"] = ((row["iops_max"] - row["iops_min"]) / row["iops"]
                         if row["iops"] else None)
        rows.append(row)
    for row in rows:
        by = iops_by_variant(rows, row["test"])
        v = row["variant"]
        row["vs_cache_off"] = ratio(row["iops"], by.get("cache=off"))
        row["vs_minimal"] = ratio(row["iops"], by.get("minimal"))
        row["vs_dev_fuse"] = (ratio(row["iops"], by.get(v.removesuffix("+uring")))
                              if v.endswith("+uring") else None)
    return rows


def iops_by_variant(rows, test):
    return {r["variant"]: r["iops"] for r in rows if r["test"] == test}


def target(test, num, den, need, by):
    t = {"test": test, "target": f"{num} >= {need}x {den}", "noref": by.get(num),
         "other": by.get(den), "ratio": ratio(by.get(num), by.get(den)), "need": need}
    t["met"] = None if t["ratio"] is None else t["ratio"] >= need
    return t


def targets_of(results):
    tests = [t for t in TESTS if any(r["test"] == t for r in results)]
    out = []
    for t in tests:
        for ts, need, num, den in TARGETS:
            if t in ts:
                out.append(target(t, num, den, need, iops_by_variant(results, t)))
    ts, need, bases = URING_TARGETS
    for t in tests:
        by = iops_by_variant(results, t)
        for v in bases:
            if t in ts and v + "+uring" in by:
                out.append(target(t, v + "+uring", v, need, by))
    return out


def read_daemon_stats(directory):
    """{variant: norefsctl stats --json} from DIR/VARIANT.json, in the table's order."""
    if not directory or not os.path.isdir(directory):
        return {}
    files = {f.removesuffix(".json"): f for f in os.listdir(directory) if f.endswith(".json")}
    stats = {}
    for v in [v for v in VARIANTS if v in files] + sorted(set(files) - set(VARIANTS)):
        path = os.path.join(directory, files[v])
        try:
            with open(path) as f:
                stats[v] = json.load(f)
        except (OSError, ValueError) as e:
            die(f"{path}: not norefsctl's JSON: {e}")
    return stats


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(results, rounds, runtime, uring):
    print()
    print(f"fs_bench: mean of {rounds} round(s) of {runtime} s; "
          "spread = (max - min) / mean over rounds")
    print(f"{'test':<11} {'variant':<19} {'runs':>5} {'IOPS':>12} {'spread':>7} {'MiB/s':>10} "
          f"{'/cache=off':>9} {'/minimal':>9}{'  /dev/fuse' if uring else ''}")
    prev = None
    for r in results:
        if prev is not None and r["test"] != prev:
            print()
        prev = r["test"]
        spread = None if r["spread"] is None else r["spread"] * 100
        last = f" {fmt(r['vs_dev_fuse'], '.3f'):>10}" if uring else ""
        print(f"{r['test']:<11} {r['variant']:<19} {r['runs_ok']:>2}/{r['runs']:<2} "
              f"{fmt(r['iops'], '.0f'):>12} {fmt(spread, '.1f'):>6}% "
              f"{fmt(r['bw_mib_s'], '.1f'):>10} {fmt(r['vs_cache_off'], '.3f'):>9} "
              f"{fmt(r['vs_minimal'], '.3f'):>9}{last}")


def print_targets(targets):
    print()
    print("targets (16-byte pread: 2 to 8 jobs; over io_uring: 1 and 2 jobs):")
    for t in targets:
        verdict = ("not evaluated (missing variant)" if t["met"] is None
                   else "met" if t["met"] else "NOT met")
        print(f"  {t['test']:<10} {t['target']:<30} {fmt(t['noref'], '.0f'):>10} vs "
              f"{fmt(t['other'], '.0f'):>10} IOPS = {fmt(t['ratio'], '.3f'):>6}  {verdict}")


def print_daemon_stats(stats):
    if not stats:
        return
    print()
    print("daemon counters at the end (norefsctl stats): hits, fast-path share, top stop reasons")
    print(f"  {'variant':<19} {'read_path':<12} {'reads':>12} {'hits':>12} {'misses':>9} "
          f"{'hit%':>7} {'fast%':>7}  stops")
    for v, s in stats.items():
        c = s.get("cache") if isinstance(s, dict) else None
        c = c if isinstance(c, dict) else {}
        stops = c.get("stops") if isinstance(c.get("stops"), dict) else {}
        top = sorted(((k, x) for k, x in stops.items() if x.get("count", 0) > 0),
                     key=lambda kx: -kx[1]["count"])[:3]
        named = ", ".join(f"{k} {math.floor(x.get('share', 0) * 100)}%" for k, x in top)

        def pct(key):
            x = c.get(key)
            return "-" if not isinstance(x, (int, float)) else f"{x * 100:.1f}"
        print(f"  {v:<19} {str(c.get('read_path', '-')):<12} {str(c.get('reads', '-')):>12} "
              f"{str(c.get('hits', '-')):>12} {str(c.get('misses', '-')):>9} "
              f"{pct('hit_ratio'):>6}% {pct('fast_share'):>6}%  {named}")


def csv_field(x):
    if x is None:
        return ""
    if isinstance(x, str):
        return '"' + x.replace('"', '""') + '"'
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def write_outputs(outdir, config, results, targets, stats, runs):
    with open(os.path.join(outdir, "fs_bench.json"), "w") as f:
        json.dump({"config": config, "results": results, "targets": targets,
                   "daemon_stats": stats, "runs": runs}, f, indent=2)
        f.write("\n")
    with open(os.path.join(outdir, "fs_bench.csv"), "w") as f:
        f.write(",".join(csv_field(c) for c in RESULT_COLUMNS) + "\n")
        for r in results:
            f.write(",".join(csv_field(r[c]) for c in RESULT_COLUMNS) + "\n")


def positive(kind):
    def parse(s):
        try:
            x = kind(s)
        except ValueError:
            x = 0
        if not x > 0:
            raise argparse.ArgumentTypeError(f"{s!r}: not a positive {kind.__name__}")
        return x
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="fs_bench.sh's results directory")
    ap.add_argument("--runtime", type=positive(float), required=True,
                    help="seconds per timed run")
    ap.add_argument("--rounds", type=positive(int), required=True)
    ap.add_argument("--plot", metavar="DIR", help="also draw the figures (tools/bench/plot.py fs)")
    ap.add_argument("--daemon-stats", metavar="DIR",
                    help="norefsctl stats --json per variant (default OUTDIR/daemon_stats)")
    cfg = ap.add_argument_group("the run's configuration, for the JSON")
    cfg.add_argument("--warm", type=float)
    cfg.add_argument("--quick", action="store_true")
    cfg.add_argument("--io-uring", action="store_true",
                     help="also the /dev/fuse column (V+uring / V)")
    cfg.add_argument("--clone-fd", action="store_true")
    cfg.add_argument("--max-threads", default="")
    for o in ("norefs", "minimal", "cache-size", "daemon-opts", "fio", "kernel", "variants",
              "tests"):
        cfg.add_argument("--" + o, default="")
    cfg.add_argument("--cpus", type=int)
    cfg.add_argument("--skipped", action="append", default=[], metavar="WHY",
                     help="a variant left out and why (repeated)")
    a = ap.parse_args()

    runs = read_runs(a.outdir)
    stats = read_daemon_stats(a.daemon_stats or os.path.join(a.outdir, "daemon_stats"))
    results = results_of(runs)
    targets = targets_of(results)
    runtime = int(a.runtime) if a.runtime.is_integer() else a.runtime
    config = {"runtime_s": runtime, "rounds": a.rounds, "warm_s": a.warm, "quick": a.quick,
              "norefs": a.norefs, "minimal": a.minimal,
              "max_threads": int(a.max_threads) if a.max_threads.isdigit() else "default",
              "clone_fd": a.clone_fd, "io_uring": a.io_uring, "cache_size": a.cache_size,
              "daemon_opts": a.daemon_opts, "fio": a.fio, "kernel": a.kernel, "cpus": a.cpus,
              "variants": a.variants.split(), "skipped": a.skipped, "tests": a.tests.split()}
    write_outputs(a.outdir, config, results, targets, stats, runs)
    print_table(results, a.rounds, runtime, a.io_uring)
    print_targets(targets)
    print_daemon_stats(stats)
    out = a.outdir.rstrip("/") or "/"
    print()
    print(f"fs_bench: results in {out}/fs_bench.csv, {out}/fs_bench.json (config, results, "
          "targets, runs,")
    print(f"          daemon counters), raw fio JSON in {out}/fio/")
    if a.plot:
        sys.dont_write_bytecode = True  # no __pycache__ beside an installed plot.py
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            import plot
        except ImportError as e:  # the statistics are written; only the figures are not
            print(f"fs_bench: --plot: {e} (python3-matplotlib draws the figures)",
                  file=sys.stderr)
            sys.exit(1)
        plot.plot_fs(os.path.join(a.outdir, "fs_bench.csv"), a.plot)


if __name__ == "__main__":
    main()
