"""benchmarks/pipeline/calibrate.py (scenario=pipeline's load calibration): it runs every combination
and picks the least blocking; the scenario's load is the one BENCHMARKS.md reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def calibrate():
    spec = importlib.util.spec_from_file_location("_calibrate", ROOT / "benchmarks" / "pipeline" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_combination_runs_and_the_best_is_the_least(calibrate) -> None:
    rows = calibrate.calibrate(["ramp32"], ["D"], [2.0], [0, 1], ["pipedream"])
    names = [r["combination"] for r in rows]
    assert len(names) == len(set(names)) == 8  # 3 rules x block_search 0/64, para_min, sequential
    assert {n.split("/")[0] for n in names} == set(calibrate.RULES)
    best = calibrate.best_rows(rows)
    assert len(best) == 1 and best[0]["blocking"] == min(sum(r["runs"]) / 2 for r in rows)
    sequential = next(r for r in rows if r["combination"].startswith("sequential"))
    assert min(sequential["runs"]) > 0.9  # one server meets no target below beta 1


def test_held_out_seeds_are_refused(calibrate, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["calibrate.py", "--seeds", "0,100"])
    with pytest.raises(SystemExit, match="held out"):
        calibrate.main()


@pytest.mark.parametrize("cluster", ["ramp32", "ramp32_hetero"])
def test_the_scenario_load_is_the_calibrated_one(calibrate, cluster: str) -> None:
    # Each calibrated cluster's shipped load (conf/pipeline_cluster/) is one whose best rows in the
    # committed calibration.json lie in the band at betas A, C and D (B is out of reach); the
    # scenario's own default is ramp32's. ramp32_3gen's load is not calibrated (BENCHMARKS.md §11).
    load = yaml.safe_load((ROOT / "conf" / "pipeline_cluster" / f"{cluster}.yaml").read_text())["mean_interarrival_s"]
    results = json.loads((ROOT / "benchmarks" / "results" / "pipeline" / "calibration.json").read_text())
    best = {b["beta"]: b["blocking"] for b in results["best"] if b["cluster"] == cluster and b["load"] == load}
    assert set(best) == {"A", "B", "C", "D"}, f"{cluster} at {load} s is not in calibration.json"
    low, high = calibrate.BAND
    assert all(low <= best[beta] <= high for beta in "ACD"), best
    if cluster == "ramp32":
        scenario = yaml.safe_load((ROOT / "conf" / "scenario" / "pipeline.yaml").read_text())
        assert scenario["mean_interarrival_s"] == load
