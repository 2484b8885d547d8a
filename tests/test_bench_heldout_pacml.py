"""The held-out benchmark's pre-registration and statistics (benchmarks/adaptive/bench_heldout_pacml.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pacml.adaptive.conditions import EVAL_SEEDS, GRID, VALIDATION_SEEDS_RANGE
from pacml.agent.env import TRAIN_SEED_LOW

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("_bench_heldout_pacml", ROOT / "benchmarks" / "adaptive" / "bench_heldout_pacml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_heldout_seeds_and_conditions_are_used_nowhere_else(bench) -> None:
    low, high = VALIDATION_SEEDS_RANGE
    for seed in bench.HELDOUT_SEEDS:
        assert seed not in EVAL_SEEDS and not low <= seed < high and seed < TRAIN_SEED_LOW and seed > 2
    assert len(set(bench.HELDOUT_SEEDS)) == 10
    assert all(low <= s < high for s in bench.SELECTION_SEEDS)  # the single rule is chosen on validation seeds
    grid_names = {c.name for c in GRID}
    grid_overrides = {c.overrides for c in GRID}
    for cond in bench.HELDOUT:
        assert cond.name not in grid_names and cond.overrides not in grid_overrides
        assert not any("hetero" in o for o in cond.overrides)  # homogeneous clusters only


def test_single_rule_is_the_lowest_mean_over_conditions_first_on_a_tie(bench) -> None:
    rules = bench.SINGLE_RULE_CANDIDATES
    means = {"a": dict.fromkeys(rules, 0.75), "b": dict.fromkeys(rules, 0.75)}  # binary fractions: exact means
    means["a"]["min_feasible(8)"], means["b"]["min_feasible(8)"] = 0.25, 0.75  # mean 0.5
    means["a"]["min_feasible(4)"], means["b"]["min_feasible(4)"] = 0.5, 0.5  # mean 0.5, earlier in the list
    assert bench.choose_single_rule(means) == "min_feasible(4)"
    means["b"]["min_feasible(8)"] = 0.625
    assert bench.choose_single_rule(means) == "min_feasible(8)"


def test_summary_pairs_by_seed_against_the_block_placed_oracle_and_the_single_rule(bench) -> None:
    cond = bench.HELDOUT[0]
    seeds = bench.HELDOUT_SEEDS
    rules = {"teacher": {}, "selection": {"rule": "min_feasible(4)"}}
    blocks = {"para_max(16)": [0.5] * 10, "min_feasible(4)": [0.30] * 10, "min_feasible(8)": [0.20] * 10}
    first_fit = {"para_max(16)": [0.5] * 10, "min_feasible(4)": [0.35] * 10, "min_feasible(8)": [0.25] * 10}
    for block_search, table in ((bench.BLOCK_SEARCH, blocks), (0, first_fit)):
        rules["teacher"][json.dumps([cond.name, list(cond.overrides), list(seeds), block_search])] = {"rules": table}
    agent = [0.21] * 9 + [0.20]
    results = {"episodes": {bench.Episode(cond.name, cond.overrides, *bench.AGENT, s).key: {"blocking_rate": v}
                            for s, v in zip(seeds, agent, strict=True)}}
    row = bench.summarise(results, rules)["sets"]["heldout"]["conditions"][cond.name]
    assert row["oracle_rule"] == "min_feasible(8)"
    assert row["vs_oracle"]["mean"] == pytest.approx(0.009)
    assert (row["vs_oracle"]["better"], row["vs_oracle"]["worse"], row["vs_oracle"]["tied"]) == (0, 9, 1)
    assert row["vs_single"]["mean"] == pytest.approx(-0.091) and row["vs_single"]["better"] == 10
    assert row["single_blocks_vs_first_fit"]["mean"] == pytest.approx(-0.05)
    average = bench.summarise(results, rules)["sets"]["heldout"]["average"]
    assert (average["vs_oracle"]["lost"], average["vs_single"]["won"]) == (1, 1)
