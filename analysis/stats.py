"""Aggregate runs across seeds: mean, standard deviation and Student-t confidence intervals."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

STAT_COLUMNS = ("mean", "std", "n", "ci_low", "ci_high")
"""Columns that :func:`aggregate` adds after the group and ``metric`` columns."""


def t_confidence_interval(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and Student-t confidence half-width of ``values`` (NaNs ignored).

    Args:
        values: Independent samples, e.g. one metric over seeds.
        confidence: Two-sided coverage.

    Returns:
        ``(mean, half_width)``; the half-width is NaN for fewer than two samples, and both are
        NaN for none.
    """
    x = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    sem = x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(stats.t.ppf((1 + confidence) / 2, x.size - 1) * sem)


def aggregate(runs: pd.DataFrame, by: Sequence[str], metrics: Sequence[str],
              confidence: float = 0.95) -> pd.DataFrame:
    """Tidy statistics of each metric per group of ``by`` columns (e.g. across seeds).

    Args:
        runs: One row per run (:func:`analysis.runs.load_sweep`).
        by: Config columns to group on; missing values form their own group.
        metrics: Numeric columns to summarise; NaNs are left out of ``n``.
        confidence: Two-sided coverage of ``ci_low``..``ci_high``.

    Returns:
        One row per group and metric: the ``by`` columns, ``metric``, then
        :data:`STAT_COLUMNS` (``std`` and the interval are NaN when ``n < 2``).
    """
    rows = []
    for key, group in runs.groupby(list(by), dropna=False, sort=True):
        for metric in metrics:
            values = pd.to_numeric(group[metric], errors="coerce").dropna()
            mean, half = t_confidence_interval(values, confidence)
            rows.append({**dict(zip(by, key, strict=True)), "metric": metric, "mean": mean,
                         "std": float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                         "n": len(values), "ci_low": mean - half, "ci_high": mean + half})
    return pd.DataFrame(rows, columns=[*by, "metric", *STAT_COLUMNS])
