#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tools/bench/plot.py — the project's one plotting path: PNG and SVG from the
tools' CSV output (Debian's python3-matplotlib, installed by
tools/setup-deps.sh).

  tools/bench/plot.py pread CSV OUTDIR [--title T]
      norefs_pread_scaling --csv: reads/s against threads, one line per read
      path (min-max of the rounds as error bars), one panel per read size
      and variant (shared page / private pages).

  tools/bench/plot.py punch SAMPLES_CSV OUTDIR [--summary CSV] [--variant V] [--gp US]
                [--title T]
      norefs_punch_wait --samples-csv: punch_wait_time, MiB waiting for a
      grace period against time since the cell's start, one panel per N
      (loaders), one line per mode, the end of the load dotted; and
      punch_wait_rss, the RSS of the cache's process the same way.  One
      variant and gp interval (the first in the file unless --variant/--gp
      choose; a note on stderr says which when there are several) and one
      round (the lowest present, named in the title).
      --summary: norefs_punch_wait --csv; punch_wait_bars, mean MiB waiting
      (solid bar; median over the rounds) and peak (light bar behind it; max
      over the rounds) per N and mode, one panel per variant and gp interval.
      --title replaces the first title line of every figure.

  tools/bench/plot.py fs FS_BENCH_CSV OUTDIR [--title T]
      tools/bench/fs_bench.sh's fs_bench.csv (tools/bench/fs_bench_report.py writes it;
      fs_bench.sh --plot DIR draws these): fs_bench_pread16, reads/s of the
      16-byte preads against jobs, one line per variant (V+uring dashed in
      V's colour; min-max of the rounds as error bars; a log scale when the
      variants differ by more than 20x); fs_bench_throughput, one panel per
      other job (4 KiB random reads in reads/s, sequential reads in MiB/s),
      a bar per variant with the min-max of the rounds.  Each figure only
      when its jobs ran.

Writes OUTDIR/<name>.png and OUTDIR/<name>.svg for each figure and prints
their paths.  Exits 2 with a message on bad input (missing columns, no rows,
a --variant or --gp not in the CSV, a field that is not a number).
"""
import argparse
import csv
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# "floor" (a copy with no cache: the limit of every path) is drawn grey and dashed.
PATH_ORDER = ["floor", "noref", "stackcopy", "ref-fetchadd", "ref"]
# punch: modes in the tool's order, one colour each in every panel and figure.
MODE_ORDER = ["off", "defer", "expedite", "bound", "given"]
MODE_COLOR = {"off": "tab:gray", "defer": "tab:red", "expedite": "tab:blue",
              "bound": "tab:green", "given": "tab:purple"}
EXTRA_COLORS = ["tab:orange", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
VARIANT_ORDER = ["punch", "truncate", "evict"]
PAGE_MIB = 4096 / (1 << 20)  # the tools count 4 KiB pages


def die(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def csv_rows(path, needed):
    """The rows of `path` as dicts, one at a time, after checking its header."""
    try:
        f = open(path, newline="")
    except OSError as e:
        die(f"{path}: {e.strerror}")
    with f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            die(f"{path}: no rows")
        missing = [c for c in needed if c not in reader.fieldnames]
        if missing:
            die(f"{path}: missing columns {', '.join(missing)} (not a CSV of this tool?)")
        yield from reader


def read_rows(path, needed):
    rows = list(csv_rows(path, needed))
    if not rows:
        die(f"{path}: no rows")
    return rows


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return float("nan")


def whole(path, row, col):
    """row[col] as an int; a field that is not one is bad input."""
    try:
        return int(row[col])
    except (TypeError, ValueError):
        die(f"{path}: column {col}: {row[col]!r} is not an integer")


def real(path, row, col):
    try:
        return float(row[col])
    except (TypeError, ValueError):
        die(f"{path}: column {col}: {row[col]!r} is not a number")


def ordered(names, order):
    """names in `order` first, then the others sorted."""
    return [n for n in order if n in names] + sorted(set(names) - set(order))


def mode_colors(modes):
    extra = iter(EXTRA_COLORS)
    return {m: MODE_COLOR.get(m) or next(extra, "black") for m in modes}


def gp_label(gp):
    # 0: mode given, an existing mount's own configuration (punch_wait.cc run()).
    return "the mount's own gp interval" if gp == 0 else f"gp interval {gp} µs"


def grid(n, cols=None):
    cols = cols or (2 if n in (2, 4) else min(3, n))
    return cols, (n + cols - 1) // cols


def human_size(n):
    n = int(n)
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}iB"
    return f"{n} B"


def save(fig, outdir, kind):
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = os.path.join(outdir, f"{kind}.{ext}")
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    print("\n".join(paths))


def plot_pread(args):
    rows = read_rows(args.csv, ["size", "variant", "threads", "path", "reads_per_sec",
                                "reads_per_sec_min", "reads_per_sec_max"])
    panels = sorted({(int(r["size"]), r["variant"]) for r in rows},
                    key=lambda k: (k[1] != "shared", k[0]))
    cols, nrows = grid(len(panels))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows), squeeze=False)
    for ax, (size, variant) in zip(axes.flat, panels):
        sel = [r for r in rows if int(r["size"]) == size and r["variant"] == variant]
        paths = [p for p in PATH_ORDER if any(r["path"] == p for r in sel)]
        paths += sorted({r["path"] for r in sel} - set(paths))
        for path in paths:
            pts = sorted((int(r["threads"]), num(r["reads_per_sec"]), num(r["reads_per_sec_min"]),
                          num(r["reads_per_sec_max"])) for r in sel if r["path"] == path)
            t = [p[0] for p in pts]
            y = [p[1] / 1e6 for p in pts]
            lo = [max(0.0, (p[1] - p[2]) / 1e6) for p in pts]
            hi = [max(0.0, (p[3] - p[1]) / 1e6) for p in pts]
            style = dict(color="grey", linestyle="--") if path == "floor" else {}
            ax.errorbar(t, y, yerr=[lo, hi], marker="o", capsize=3, label=path, **style)
        ax.set_title(f"{human_size(size)} reads, {variant} "
                     f"{'page' if variant == 'shared' else 'pages'}")
        ax.set_xlabel("threads")
        ax.set_ylabel("M reads/s")
        ax.set_xticks(sorted({int(r["threads"]) for r in sel}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(args.title or "in-process pread scaling (median of rounds, bars: min-max)")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, args.outdir, "pread_scaling")


SAMPLE_COLUMNS = ["t_ms", "variant", "mode", "N", "gp_interval_us", "round", "phase",
                  "pages_waiting", "pages_cached", "rss_kib"]
SUMMARY_COLUMNS = ["variant", "mode", "gp_interval_us", "N", "round", "mean_waiting_pages",
                   "peak_waiting_pages"]


def read_samples(args):
    """The samples of one variant, gp interval and round, as
    {(N, mode): [(t_ms, phase, pages_waiting, rss_kib), ...]}, and the
    selection (variant, gp, round, every round present)."""
    path = args.samples
    variants, gps = [], {}  # in file order; gps per variant
    sel_v, sel_gp = args.variant, args.gp
    kept = {}  # round -> {(N, mode): samples}
    n = 0
    for r in csv_rows(path, SAMPLE_COLUMNS):
        n += 1
        v, gp = r["variant"], whole(path, r, "gp_interval_us")
        if v not in gps:
            variants.append(v)
            gps[v] = []
        if gp not in gps[v]:
            gps[v].append(gp)
        if sel_v is None:
            sel_v = v
        if v != sel_v:
            continue
        if sel_gp is None:
            sel_gp = gp
        if gp != sel_gp:
            continue
        phase = r["phase"]
        if phase not in ("load", "settle"):
            die(f"{path}: column phase: {phase!r} is neither load nor settle")
        cell = kept.setdefault(whole(path, r, "round"), {}).setdefault(
            (whole(path, r, "N"), r["mode"]), [])
        cell.append((real(path, r, "t_ms"), phase, real(path, r, "pages_waiting"),
                     real(path, r, "rss_kib")))
    if n == 0:
        die(f"{path}: no rows")
    if sel_v not in gps:
        die(f"--variant {sel_v}: not in {path} (variants: {', '.join(variants)})")
    if sel_gp not in gps[sel_v]:
        die(f"--gp {sel_gp}: not in {path} for variant {sel_v} "
            f"(gp intervals: {', '.join(map(str, gps[sel_v]))})")
    all_gps = sorted({g for v in variants for g in gps[v]})
    if len(variants) > 1 or len(all_gps) > 1:
        print(f"plot.py: note: {path} holds variants {', '.join(variants)} and gp intervals "
              f"{', '.join(map(str, all_gps))} us; drawn: {sel_v}, {sel_gp} us "
              "(--variant and --gp choose)", file=sys.stderr)
    rounds = sorted(kept)
    if len(rounds) > 1:
        print(f"plot.py: note: {path} holds rounds {', '.join(map(str, rounds))} of {sel_v}, "
              f"{sel_gp} us; drawn: round {rounds[0]}", file=sys.stderr)
    return kept[rounds[0]], (sel_v, sel_gp, rounds[0], rounds)


def plot_series(cells, sel, args, value, ylabel, what, name):
    """One panel per N, one line per mode: value(sample) against time.  When
    every sample is 0 from some time after the load on, the x axis stops a
    little after that and the title says so."""
    variant, gp, rnd, rounds = sel
    ns = sorted({n for n, _ in cells})
    modes = ordered({m for _, m in cells}, MODE_ORDER)
    color = mode_colors(modes)
    cols, nrows = grid(len(ns))
    height = 3.2 * nrows + 0.6
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, height), squeeze=False)
    samples = [s for c in cells.values() for s in c]
    t_end = max(s[0] for s in samples) / 1000
    busy = max(s[0] for s in samples if s[1] == "load" or value(s) != 0) / 1000
    x_end = min(t_end, busy * 1.15)
    gaps = [b[0] - a[0] for c in cells.values() for a, b in zip(sorted(c), sorted(c)[1:])]
    step = statistics.median(gaps) if gaps else 0
    for ax, n in zip(axes.flat, ns):
        for m in modes:
            cell = sorted(cells.get((n, m), []))
            if not cell:
                continue
            ax.plot([s[0] / 1000 for s in cell], [value(s) for s in cell],
                    color=color[m], lw=1.0, label=m)
            settle = [s[0] / 1000 for s in cell if s[1] == "settle"]
            if settle:  # the end of this cell's load
                ax.axvline(settle[0], color=color[m], ls=":", lw=1.2, alpha=0.8)
        ax.set_title(f"N = {n} loader{'s' if n != 1 else ''}")
        ax.set_xlabel("time since the cell's start (s)")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, x_end)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(ns):]:
        ax.axis("off")
    handles = [Line2D([], [], color=color[m], lw=2, label=m) for m in modes]
    handles.append(Line2D([], [], color="black", ls=":", lw=1.2,
                          label="load ends (first settle sample)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9,
               frameon=False)
    if len(rounds) > 1:
        held = (f"{rounds[0]}-{rounds[-1]}" if rounds == list(range(rounds[0], rounds[-1] + 1))
                else ", ".join(map(str, rounds)))
        of = f" (rounds {held} in the CSV)"
    else:
        of = ""
    cut = f"\nevery sample after {busy:.2f} s (up to {t_end:.2f} s) is 0" if x_end < t_end else ""
    every = f", a sample every {step:.3g} ms" if step else ""
    fig.suptitle(f"{args.title or what}\nvariant {variant}, {gp_label(gp)}, "
                 f"round {rnd}{of}{every}{cut}", fontsize=11)
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))  # room for the legend
    save(fig, args.outdir, name)


def plot_bars(args):
    path = args.summary
    cells = {}  # (variant, gp) -> {(N, mode): [(mean pages, peak pages), ...]}
    for r in read_rows(path, SUMMARY_COLUMNS):
        key = (whole(path, r, "N"), r["mode"])
        cells.setdefault((r["variant"], whole(path, r, "gp_interval_us")), {}) \
            .setdefault(key, []).append((real(path, r, "mean_waiting_pages"),
                                         real(path, r, "peak_waiting_pages")))
    variants = ordered({v for v, _ in cells}, VARIANT_ORDER)
    gps = sorted({g for _, g in cells})
    panels = [(v, g) for v in variants for g in gps if (v, g) in cells]
    modes = ordered({m for c in cells.values() for _, m in c}, MODE_ORDER)
    color = mode_colors(modes)
    if 1 < len(gps) <= 3 and len(panels) == len(variants) * len(gps):
        cols, nrows = len(gps), len(variants)  # a row per variant, a column per gp
    else:
        cols, nrows = grid(len(panels))
    height = 3.2 * nrows + 0.7
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, height), squeeze=False,
                             sharey=True)
    counts = {len(rs) for c in cells.values() for rs in c.values()}
    width = 0.8 / len(modes)
    for ax, (v, g) in zip(axes.flat, panels):
        sel = cells[(v, g)]
        ns = sorted({n for n, _ in sel})
        for j, m in enumerate(modes):
            xs, mean, peak = [], [], []
            for i, n in enumerate(ns):
                rs = sel.get((n, m))
                if rs:
                    xs.append(i - 0.4 + width * (j + 0.5))
                    mean.append(statistics.median(x[0] for x in rs) * PAGE_MIB)
                    peak.append(max(x[1] for x in rs) * PAGE_MIB)
            ax.bar(xs, peak, width, color=color[m], alpha=0.3, lw=0)
            ax.bar(xs, mean, width, color=color[m], lw=0)
            for x, y in zip(xs, peak):
                if y == 0:  # a bar of height 0 would look like a missing cell
                    ax.annotate("0", (x, 0), xytext=(0, 2), textcoords="offset points",
                                ha="center", va="bottom", fontsize=8, color=color[m])
        ax.set_xticks(range(len(ns)))
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_title(f"{v}, {gp_label(g)}")
        ax.set_xlabel("N (loaders)")
        ax.set_ylabel("MiB waiting")
        ax.yaxis.set_tick_params(labelleft=True)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if counts == {1}:
        how_mean, how_peak, rounds = "mean", "peak", "one round"
    else:
        k = (f"{min(counts)}-{max(counts)}" if len(counts) > 1 else str(min(counts)))
        how_mean, how_peak = f"mean (median of {k} rounds)", f"peak (max of {k} rounds)"
        rounds = f"{k} rounds"
    handles = [Patch(color=color[m], label=m) for m in modes]
    handles += [Patch(color="0.35", label=how_mean), Patch(color="0.35", alpha=0.3, label=how_peak)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.suptitle(f"{args.title or 'MiB waiting for a grace period during the load'}\n"
                 f"solid: mean of the samples, light: peak; {rounds}")
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))  # room for the legend
    save(fig, args.outdir, "punch_wait_bars")


def plot_punch(args):
    cells, sel = read_samples(args)
    if args.summary:  # checked before drawing, so bad input writes nothing
        read_rows(args.summary, SUMMARY_COLUMNS)
    plot_series(cells, sel, args, lambda s: s[2] * PAGE_MIB, "MiB waiting",
                "MiB waiting for a grace period", "punch_wait_time")
    plot_series(cells, sel, args, lambda s: s[3] / 1024, "RSS (MiB)",
                "RSS of the cache's process", "punch_wait_rss")
    if args.summary:
        plot_bars(args)


FS_COLUMNS = ["test", "numjobs", "variant", "runs_ok", "iops", "iops_min", "iops_max",
              "bw_mib_s"]
# fs_bench.sh's variants in its order, a colour each; V+uring takes V's.
FS_VARIANT_COLOR = {"noref": "tab:red", "ref": "tab:blue", "ref-fetchadd": "tab:cyan",
                    "stackcopy": "tab:orange", "cache=off": "tab:gray",
                    "kernel_cache": "tab:green", "direct": "tab:olive", "minimal": "tab:purple"}
FS_THROUGHPUT = {"randread4k": ("4 KiB random reads", "k reads/s", 1e-3, False),
                 "seqread64k": ("64 KiB sequential reads", "MiB/s", 1, True),
                 "seqread1m": ("1 MiB sequential reads", "MiB/s", 1, True)}


def fs_cells(path):
    """fs_bench.csv's rows that have a mean, as (test, numjobs, variant, mean,
    min, max, MiB/s per reads/s), in the file's order."""
    cells = []
    for r in read_rows(path, FS_COLUMNS):
        if r["iops"] == "":  # every round of the cell failed: nothing to draw
            continue
        iops = real(path, r, "iops")
        mib = real(path, r, "bw_mib_s")
        cells.append((r["test"], whole(path, r, "numjobs"), r["variant"], iops,
                      real(path, r, "iops_min"), real(path, r, "iops_max"),
                      mib / iops if iops else 0.0))
    if not cells:
        die(f"{path}: no row with a result")
    return cells


def fs_style(variant):
    base = variant.removesuffix("+uring")
    return dict(color=FS_VARIANT_COLOR.get(base, "tab:brown"),
                linestyle="--" if variant.endswith("+uring") else "-")


def plot_fs(path, outdir, title=None):
    cells = fs_cells(path)
    variants = list(dict.fromkeys(c[2] for c in cells))  # the CSV's order
    pread = [c for c in cells if c[0].startswith("pread16-")]
    if pread:
        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        for v in variants:
            pts = sorted((c[1], c[3], c[4], c[5]) for c in pread if c[2] == v)
            if not pts:
                continue
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                        marker="o", capsize=3, label=v, **fs_style(v))
        lows = [c[4] for c in pread if c[4] > 0]
        if lows and max(c[5] for c in pread) > 20 * min(lows):
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c[1] for c in pread}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("fio jobs (threads, one fd each)")
        ax.set_ylabel("reads/s")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_title(title or "fio: 16-byte pread at offset 0 through each variant\n"
                     "mean of the rounds, bars: min-max; dashed: over io_uring")
        fig.tight_layout()
        save(fig, outdir, "fs_bench_pread16")
    tests = [t for t in FS_THROUGHPUT if any(c[0] == t for c in cells)]
    if tests:
        fig, axes = plt.subplots(1, len(tests), figsize=(4.4 * len(tests), 0.9 +
                                 0.32 * len(variants)), squeeze=False)
        for ax, t in zip(axes.flat, tests):
            what, unit, k, in_bytes = FS_THROUGHPUT[t]
            sel = [c for c in cells if c[0] == t]
            sel.sort(key=lambda c: variants.index(c[2]))
            scale = [k * (c[6] if in_bytes else 1) for c in sel]
            y = range(len(sel))
            x = [c[3] * s for c, s in zip(sel, scale)]
            ax.barh(y, x, xerr=[[(c[3] - c[4]) * s for c, s in zip(sel, scale)],
                                [(c[5] - c[3]) * s for c, s in zip(sel, scale)]],
                    color=[fs_style(c[2])["color"] for c in sel], capsize=3,
                    alpha=0.85)
            for bar, c in zip(ax.patches, sel):
                if c[2].endswith("+uring"):
                    bar.set_hatch("//")
            ax.set_yticks(list(y))
            ax.set_yticklabels([c[2] for c in sel], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(unit)
            ax.set_title(what)
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(title or "fio through each variant (mean of the rounds, bars: min-max; "
                     "hatched: over io_uring)", fontsize=10)
        fig.tight_layout()
        save(fig, outdir, "fs_bench_throughput")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("pread", help="norefs_pread_scaling --csv output")
    p.add_argument("csv")
    p.add_argument("outdir")
    p.add_argument("--title")
    p.set_defaults(func=plot_pread)
    p = sub.add_parser("punch", help="norefs_punch_wait --samples-csv (and --csv) output")
    p.add_argument("samples", metavar="SAMPLES_CSV")
    p.add_argument("outdir")
    p.add_argument("--summary", metavar="CSV", help="norefs_punch_wait --csv: the bars")
    p.add_argument("--variant", help="variant to draw over time (default: the first)")
    p.add_argument("--gp", type=int, metavar="US",
                   help="gp interval to draw over time (default: the first)")
    p.add_argument("--title")
    p.set_defaults(func=plot_punch)
    p = sub.add_parser("fs", help="tools/bench/fs_bench.sh's fs_bench.csv")
    p.add_argument("csv", metavar="FS_BENCH_CSV")
    p.add_argument("outdir")
    p.add_argument("--title")
    p.set_defaults(func=lambda a: plot_fs(a.csv, a.outdir, a.title))
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
