"""Seed aggregation: Student-t confidence intervals against hand-computed values."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.stats import (
    MIN_SEEDS_FOR_INTERVAL,
    STAT_COLUMNS,
    aggregate,
    metric_bounds,
    t_confidence_interval,
)

# Two-sided 95% Student-t quantiles t(0.975, df) from standard tables.
T_975 = {1: 12.706204736174698, 2: 4.302652729911275}


def test_interval_of_three_values() -> None:
    # mean 2, sample std 1, standard error 1/sqrt(3)
    mean, half = t_confidence_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(T_975[2] / math.sqrt(3))
    assert half == pytest.approx(2.4841377, abs=1e-6)


def test_interval_of_two_values_and_other_coverage() -> None:
    # mean 0.25, sample std 0.05*sqrt(2), standard error 0.05
    mean, half = t_confidence_interval([0.2, 0.3])
    assert mean == pytest.approx(0.25) and half == pytest.approx(0.05 * T_975[1])
    _, half_90 = t_confidence_interval([0.2, 0.3], confidence=0.90)
    assert half_90 == pytest.approx(0.05 * 6.313751514675043)


def test_one_value_has_no_interval_and_none_has_no_mean() -> None:
    mean, half = t_confidence_interval([0.7])
    assert mean == 0.7 and math.isnan(half)
    assert all(math.isnan(x) for x in t_confidence_interval([]))
    assert t_confidence_interval([1.0, float("nan"), 3.0]) == t_confidence_interval([1.0, 3.0])


def test_aggregate_gives_a_tidy_table_per_group_and_metric() -> None:
    runs = pd.DataFrame({
        "policy": ["a", "a", "a", "b"],
        "beta": ["A", "A", "A", "A"],
        "seed": [0, 1, 2, 0],
        "score": [1.0, 2.0, 3.0, 0.5],
        "mean_jct_s": [10.0, 10.0, float("nan"), 4.0],
    })
    table = aggregate(runs, ["policy", "beta"], ["score", "mean_jct_s"])
    assert list(table.columns) == ["policy", "beta", "metric", *STAT_COLUMNS]
    assert len(table) == 4
    a = table[(table["policy"] == "a") & (table["metric"] == "score")].iloc[0]
    assert (a["mean"], a["std"], a["n"]) == (2.0, 1.0, 3)
    assert a["ci_low"] == pytest.approx(2.0 - T_975[2] / math.sqrt(3))
    assert a["ci_high"] == pytest.approx(2.0 + T_975[2] / math.sqrt(3))
    # Two seeds: a mean and a std, but no interval (a t half-width from two values says nothing).
    jct = table[(table["policy"] == "a") & (table["metric"] == "mean_jct_s")].iloc[0]
    assert (jct["mean"], jct["std"], jct["n"]) == (10.0, 0.0, 2)
    assert math.isnan(jct["ci_low"]) and math.isnan(jct["ci_high"])
    b = table[(table["policy"] == "b") & (table["metric"] == "score")].iloc[0]
    assert b["mean"] == 0.5 and b["n"] == 1
    assert math.isnan(b["std"]) and math.isnan(b["ci_low"]) and math.isnan(b["ci_high"])


def test_intervals_only_from_three_seeds() -> None:
    """'Mean degree 10.05 ± 75.62' from two seeds: the mean, n = 2 and no interval."""
    two = pd.DataFrame({"policy": ["p", "p"], "mean_degree": [4.1, 16.0]})
    row = aggregate(two, ["policy"], ["mean_degree"]).iloc[0]
    assert row["mean"] == pytest.approx(10.05) and row["n"] == 2
    assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])
    three = pd.DataFrame({"policy": ["p"] * 3, "mean_degree": [4.0, 10.0, 16.0]})
    row = aggregate(three, ["policy"], ["mean_degree"]).iloc[0]
    assert row["ci_high"] - row["mean"] == pytest.approx(T_975[2] * 6.0 / math.sqrt(3))
    assert MIN_SEEDS_FOR_INTERVAL == 3


def test_rate_intervals_stay_within_zero_and_one() -> None:
    """Blocking 0.0, 0.0, 0.3: the t interval is [-0.27, 0.57]; a rate's is clipped to [0, 1]."""
    runs = pd.DataFrame({"policy": ["p"] * 3, "blocking_rate": [0.0, 0.0, 0.3],
                         "acceptance_rate": [1.0, 1.0, 0.7], "demand_throughput_Bps": [0.0, 0.0, 3e7],
                         "score": [0.0, 0.0, 0.3]})
    table = aggregate(runs, ["policy"], ["blocking_rate", "acceptance_rate", "demand_throughput_Bps", "score"])
    half = T_975[2] * 0.3 / math.sqrt(3) / math.sqrt(3)  # std = 0.3/sqrt(3)
    rows = table.set_index("metric")
    assert rows.loc["blocking_rate", "ci_low"] == 0.0
    assert rows.loc["blocking_rate", "ci_high"] == pytest.approx(0.1 + half)
    assert rows.loc["acceptance_rate", "ci_high"] == 1.0
    assert rows.loc["acceptance_rate", "ci_low"] == pytest.approx(0.9 - half)
    assert rows.loc["demand_throughput_Bps", "ci_low"] == 0.0  # a throughput is not negative
    assert rows.loc["score", "ci_low"] == pytest.approx(0.1 - half)  # an unknown metric is not clipped
    assert 0.1 - half < 0
    assert metric_bounds("blocking_rate") == (0.0, 1.0)
    assert metric_bounds("mean_jct_s") == (0.0, math.inf)
    assert metric_bounds("score") == (-math.inf, math.inf)


def test_aggregate_keeps_missing_group_values_as_a_group() -> None:
    runs = pd.DataFrame({"policy": ["a", "a"], "experiment": [None, None], "x": [1.0, 3.0]})
    table = aggregate(runs, ["policy", "experiment"], ["x"])
    assert len(table) == 1 and table.loc[0, "mean"] == 2.0 and table.loc[0, "n"] == 2


def test_interval_column_says_where_there_is_no_interval() -> None:
    from analysis.stats import interval_column

    assert interval_column([1, 2, 3, 10]) == ["none (n < 3)", "none (n < 3)", "95% Student-t over seeds",
                                              "95% Student-t over seeds"]
    assert interval_column([5], confidence=0.9) == ["90% Student-t over seeds"]
