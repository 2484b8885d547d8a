"""Seed aggregation: Student-t confidence intervals against hand-computed values."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.stats import STAT_COLUMNS, aggregate, t_confidence_interval

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
        "blocking_rate": [1.0, 2.0, 3.0, 0.5],
        "mean_jct_s": [10.0, 10.0, float("nan"), 4.0],
    })
    table = aggregate(runs, ["policy", "beta"], ["blocking_rate", "mean_jct_s"])
    assert list(table.columns) == ["policy", "beta", "metric", *STAT_COLUMNS]
    assert len(table) == 4
    a = table[(table["policy"] == "a") & (table["metric"] == "blocking_rate")].iloc[0]
    assert (a["mean"], a["std"], a["n"]) == (2.0, 1.0, 3)
    assert a["ci_low"] == pytest.approx(2.0 - T_975[2] / math.sqrt(3))
    assert a["ci_high"] == pytest.approx(2.0 + T_975[2] / math.sqrt(3))
    jct = table[(table["policy"] == "a") & (table["metric"] == "mean_jct_s")].iloc[0]
    assert (jct["mean"], jct["std"], jct["n"], jct["ci_low"]) == (10.0, 0.0, 2, 10.0)
    b = table[(table["policy"] == "b") & (table["metric"] == "blocking_rate")].iloc[0]
    assert b["mean"] == 0.5 and b["n"] == 1
    assert math.isnan(b["std"]) and math.isnan(b["ci_low"]) and math.isnan(b["ci_high"])


def test_aggregate_keeps_missing_group_values_as_a_group() -> None:
    runs = pd.DataFrame({"policy": ["a", "a"], "experiment": [None, None], "x": [1.0, 3.0]})
    table = aggregate(runs, ["policy", "experiment"], ["x"])
    assert len(table) == 1 and table.loc[0, "mean"] == 2.0 and table.loc[0, "n"] == 2
