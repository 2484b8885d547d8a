"""Aggregate runs across seeds: mean, standard deviation and Student-t confidence intervals.

An interval is given only from :data:`MIN_SEEDS_FOR_INTERVAL` seeds or more (from two, the
Student-t half-width is 12.7 standard errors: it says nothing), and a metric with natural bounds
(a rate lies in [0, 1], a count or a time is not negative) has its interval clipped to them
(:func:`metric_bounds`): the true mean lies inside the bounds, so clipping keeps the coverage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

STAT_COLUMNS = ("mean", "std", "n", "ci_low", "ci_high")
"""Columns that :func:`aggregate` adds after the group and ``metric`` columns."""

MIN_SEEDS_FOR_INTERVAL = 3
"""Fewest samples (seeds) from which :func:`aggregate` gives a confidence interval."""

RATE_METRICS = ("blocking_rate", "acceptance_rate", "mean_server_utilisation", "mean_compute_utilisation")
"""Metrics that are fractions, in [0, 1]."""

_NON_NEGATIVE = re.compile(r"^(num_|mean_)|(_Bps|_s|_per_s)$")
"""Metrics that cannot be negative: counts, means of non-negative quantities, rates and times."""


def metric_bounds(metric: str) -> tuple[float, float]:
    """The natural bounds of a ``summary.json`` metric: ``(0, 1)`` for a rate
    (:data:`RATE_METRICS`), ``(0, inf)`` for a count, time, throughput or mean of such, else
    unbounded."""
    if metric in RATE_METRICS:
        return 0.0, 1.0
    if _NON_NEGATIVE.search(metric):
        return 0.0, math.inf
    return -math.inf, math.inf


def interval_note(confidence: float = 0.95) -> str:
    """How :func:`aggregate`'s intervals are made, for captions and legends."""
    return (f"{confidence:.0%} Student-t CI over seeds, only where n ≥ {MIN_SEEDS_FOR_INTERVAL}, "
            "clipped to [0, 1] for rates")


def interval_column(n: Iterable[int], confidence: float = 0.95) -> list[str]:
    """What each of :func:`aggregate`'s rows' interval is, from its ``n``: the ``interval`` column
    written beside the statistics in every CSV."""
    return [f"{confidence:.0%} Student-t over seeds" if k >= MIN_SEEDS_FOR_INTERVAL
            else f"none (n < {MIN_SEEDS_FOR_INTERVAL})" for k in n]


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
              confidence: float = 0.95, min_n: int = MIN_SEEDS_FOR_INTERVAL) -> pd.DataFrame:
    """Tidy statistics of each metric per group of ``by`` columns (e.g. across seeds).

    Args:
        runs: One row per run (:func:`analysis.runs.load_sweep`).
        by: Config columns to group on; missing values form their own group.
        metrics: Numeric columns to summarise; NaNs are left out of ``n``.
        confidence: Two-sided coverage of ``ci_low``..``ci_high``.
        min_n: Fewest values that get an interval.

    Returns:
        One row per group and metric: the ``by`` columns, ``metric``, then
        :data:`STAT_COLUMNS` (``std`` is NaN when ``n < 2``, the interval when ``n < min_n``;
        the interval is clipped to :func:`metric_bounds`).
    """
    rows = []
    for key, group in runs.groupby(list(by), dropna=False, sort=True):
        for metric in metrics:
            values = pd.to_numeric(group[metric], errors="coerce").dropna()
            mean, half = t_confidence_interval(values, confidence)
            if len(values) < min_n:
                half = math.nan
            low, high = metric_bounds(metric)
            rows.append({**dict(zip(by, key, strict=True)), "metric": metric, "mean": mean,
                         "std": float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                         "n": len(values), "ci_low": max(mean - half, low) if not math.isnan(half) else math.nan,
                         "ci_high": min(mean + half, high) if not math.isnan(half) else math.nan})
    return pd.DataFrame(rows, columns=[*by, "metric", *STAT_COLUMNS])
