"""The tables of ``experiment=pipeline_hetero`` (results/sim/pipeline_hetero_tables.md; BENCHMARKS.md §11): blocking rate and throughput per cluster, stage placer, rule and beta.

Each cell is the mean +- standard error over seeds; a rule's cell adds, in brackets, its paired
difference from ``min_feasible`` on the same cluster, placer, beta and seed (mean +- standard
error of the per-seed differences). Nothing but seeds is averaged: every other differing key
(``analysis.runs.group_columns``) is a row or a column.

Usage: python benchmarks/sim/pipeline_hetero_table.py outputs/pipeline_hetero
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from analysis.runs import group_columns, held_fixed, load_sweep

BASE = "min_feasible"
ROWS = ("cluster", "sim.pipeline.stage_placer", "policy")
METRICS = (("blocking_rate", "Blocking rate", 1.0, 4), ("demand_throughput_Bps", "Throughput (1e9 B/s)", 1e9, 2))


def _se(values: pd.Series) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")


def table(runs: pd.DataFrame, metric: str, scale: float, digits: int) -> str:
    """One markdown table of ``metric``: a row per setting but beta (cluster, placer, rule, and any
    other differing key), a column per beta."""
    fixed = held_fixed(runs)
    runs = runs.assign(**{k: fixed.get(k) for k in (*ROWS, "policy.block_search") if k not in runs})
    rows = [*ROWS, *(k for k in group_columns(runs) if k not in (*ROWS, "beta"))]
    betas = sorted(runs["beta"].unique())
    by = runs.set_index([*rows, "beta", "seed"])[metric].sort_index() / scale
    out = [f"| {' | '.join(rows)} | block_search | " + " | ".join(f"beta {b}" for b in betas) + " |",
           "|" + "---|" * (len(rows) + 1 + len(betas))]
    for key, group in runs.groupby(rows, sort=True, dropna=False):
        base_key = tuple(BASE if k == "policy" else v for k, v in zip(rows, key, strict=True))
        cells = []
        for beta in betas:
            mine = by.loc[(*key, beta)]
            cell = f"{mine.mean():.{digits}f} ± {_se(mine):.{digits}f}"
            if base_key != key and (*base_key, beta) in by.index:
                diff = (mine - by.loc[(*base_key, beta)]).dropna()  # paired by seed
                cell += f" ({diff.mean():+.{digits}f} ± {_se(diff):.{digits}f})"
            cells.append(cell)
        block = group["policy.block_search"].iloc[0]
        out.append(f"| {' | '.join(map(str, key))} | {'-' if pd.isna(block) else int(block)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the tables of the sweep given on the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir")
    args = p.parse_args(argv)
    runs = load_sweep(args.sweep_dir)
    if runs.empty:
        print(f"pipeline_hetero_table: no runs under {args.sweep_dir}", file=sys.stderr)
        return 2
    for metric, title, scale, digits in METRICS:
        print(f"{title} (n = {runs['seed'].nunique()} seeds: {', '.join(map(str, sorted(runs['seed'].unique())))})\n")
        print(table(runs, metric, scale, digits), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
