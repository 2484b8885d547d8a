"""Planner distillation: demonstrations are the planner's own episode, imitation keeps the best."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pacml.agent.env import TRAIN_SEED_LOW, compose_sim_config
from pacml.agent.policy import PacMLBetaPolicy
from pacml.critic.distill import DISTILL_SEED_BASE, DistillConfig, collect, load_demos
from simulator.build import build_simulation
from simulator.policies.lookahead import RolloutLookahead

# 50 arrivals of the paper scenario (beta D): the cluster fills up and the planner has choices.
SHORT = ["scenario=paper", "beta=D", "horizon_s=50000"]
SMALL = {"checkpoint": "paper_betaD", "episodes": 2, "workers": 1, "window_jobs": 20, "num_futures": 4,
             "eval_seeds": [500000]}


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("distill")
    cfg = DistillConfig(**SMALL)
    paths = collect(compose_sim_config(SHORT), cfg, out, progress=False)
    return out, cfg, paths


def test_demonstrations_are_the_planners_episode(demos) -> None:
    """Recorded actions are the planner's: replaying the planner in the simulator on the same
    seed blocks the same jobs, and every changed action beat the agent's by the margin."""
    out, cfg, paths = demos
    assert len(paths) == 2 and DISTILL_SEED_BASE >= TRAIN_SEED_LOW
    sim_cfg = compose_sim_config(SHORT)
    logged = {int(r["seed"]): r["blocking_rate"] for r in map(json.loads, (out / "demos.jsonl").read_text().splitlines())}
    for path in paths:
        seed = int(path.stem.split("_")[1])
        data = dict(np.load(path))
        n = len(data["action"])
        assert all(len(v) == n for v in data.values())
        assert data["mask"][np.arange(n), data["action"]].all()  # only valid actions
        planner = RolloutLookahead(PacMLBetaPolicy("paper_betaD"), window_jobs=20, num_futures=4, margin_jobs=0.25)
        result = build_simulation(sim_cfg, seed=seed).run(planner)
        assert result.summary["num_decisions"] == n
        assert result.summary["blocked_by_reason"]["rejected"] == int((data["action"] == 0).sum())
        assert result.summary["blocking_rate"] == logged[seed]
        assert planner.stats["changed"] == int((data["action"] != data["agent_action"]).sum())
        changed = np.flatnonzero(data["action"] != data["agent_action"])
        for i in changed:
            scores = data["scores"][i]
            assert scores[data["action"][i]] < scores[data["agent_action"][i]] - 0.25
        # Scores exist exactly for the feasible degrees (and reject) of planned decisions.
        planned = ~np.isnan(data["scores"]).all(axis=1)
        assert (np.isnan(data["scores"][planned]) == ~data["mask"][planned]).all()
    assert planner.stats["changed"] > 0 or len(changed) == 0


def test_collection_resumes_without_redoing_episodes(demos) -> None:
    out, cfg, paths = demos
    before = {p: p.stat().st_mtime_ns for p in paths}
    again = collect(compose_sim_config(SHORT), cfg, out, progress=False)
    assert sorted(again) == sorted(paths)
    assert {p: p.stat().st_mtime_ns for p in again} == before


def test_no_demonstrations_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no demonstration"):
        load_demos([])


def test_existing_demonstrations_skip_collection(demos, tmp_path) -> None:
    from pacml.critic.distill import distill

    out, _, paths = demos
    cfg = DistillConfig(**{**SMALL, "critic_epochs": 1, "demos_dir": str(out / "demos")})
    summary = distill(compose_sim_config(SHORT), cfg, tmp_path, progress=False)
    assert summary["episodes"] == len(paths) and not (tmp_path / "demos").exists()
    with pytest.raises(ValueError, match="no demonstration shards"):
        distill(compose_sim_config(SHORT), DistillConfig(**{**SMALL, "demos_dir": str(tmp_path)}), tmp_path,
                progress=False)


@pytest.mark.parametrize(("override", "message"), [
    ("distill.checkpoint=nope", "field 'distill.checkpoint': no policy checkpoint at 'nope'"),
    ("+distill.nope=1", "field 'distill.nope': unknown key"),
])
def test_console_command_bad_input_is_one_line(tmp_path, override: str, message: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "from pacml.critic.distill import main; main()", override,
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"pacml distill: error: {message}") and proc.stderr.count("\n") == 1
