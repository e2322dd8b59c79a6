#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tools/plot.py — the project's one plotting path: PNG and SVG from the
tools' CSV output (Debian's python3-matplotlib, installed by
tools/setup-deps.sh).

  tools/plot.py pread CSV OUTDIR [--title T]
      norefs_pread_scaling --csv: reads/s against threads, one line per read
      path (min-max of the rounds as error bars), one panel per read size
      and variant (shared page / private pages).

Writes OUTDIR/<kind>.png and OUTDIR/<kind>.svg and prints their paths.
Exits 2 with a message on bad input (missing columns, no rows).
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

PATH_ORDER = ["noref", "stackcopy", "ref-fetchadd", "ref"]


def die(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_rows(path, needed):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        die(f"{path}: {e.strerror}")
    if not rows:
        die(f"{path}: no rows")
    missing = [c for c in needed if c not in rows[0]]
    if missing:
        die(f"{path}: missing columns {', '.join(missing)} (not a CSV of this tool?)")
    return rows


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return float("nan")


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
    cols = 2 if len(panels) in (2, 4) else min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
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
            ax.errorbar(t, y, yerr=[lo, hi], marker="o", capsize=3, label=path)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("pread", help="norefs_pread_scaling --csv output")
    p.add_argument("csv")
    p.add_argument("outdir")
    p.add_argument("--title")
    p.set_defaults(func=plot_pread)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
