"""Training the selector (pacml/adaptive/train.py): the teacher search, the fit, the lookup, the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pacml.adaptive.selector import (
    CONDITION_FEATURES,
    RULE_FEATURES,
    SelectorWeights,
    load_adaptive,
    save_adaptive,
)
from pacml.adaptive.train import (
    AdaptiveTrainConfig,
    baseline_regrets,
    fit,
    neighbour_table,
    selector_regret,
    teacher_search,
    teacher_search_full,
    train,
)
from pacml.agent.env import compose_sim_config
from pacml.runfiles import write_metrics_csv
from simulator.build import build_simulation
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible, ParaMax
from tests.pacml.adaptive.helpers import SHORT, _agent, _mlp


def test_time_scales_resize_a_training_mix() -> None:
    """``workload.time_scales`` (a resized copy of each graph of a mix): the graphs' step times are
    the factors times the originals'."""
    from pacml.adaptive.train import AdaptiveTrainConfig, condition_overrides

    over = condition_overrides(AdaptiveTrainConfig(core_frac=0.5), 0)
    graphs = next(o for o in over if o.startswith("workload.graphs=")).split("=", 1)[1].strip("[]").split(",")
    extra = f"workload.time_scales=[{','.join(f'{0.5 + 0.3 * k:.2f}' for k in range(len(graphs)))}]"
    over = [*over, extra]
    cfg = compose_sim_config([*over, "progress=false"])
    plain = compose_sim_config([*[o for o in over if o != extra], "progress=false"])
    scales = [float(x) for x in extra.split("=", 1)[1].strip("[]").split(",")]
    from simulator.build import build_workload

    got = build_workload(cfg).training_graphs
    want = build_workload(plain).training_graphs
    assert [g.step_time_s for g in got] == pytest.approx([f * g.step_time_s for f, g in zip(scales, want, strict=True)], rel=1e-12)
    assert len({g.fingerprint for g in got} | {g.fingerprint for g in want}) == 2 * len(want)


@pytest.mark.parametrize("block_search", [0, 64])
def test_teacher_search_matches_the_heuristic_runs(block_search) -> None:
    over = [*SHORT, "horizon_s=30000"]
    res = teacher_search(over, [7, 8], samples_per_episode=5, block_search=block_search)
    assert res["blocking"].shape == (len(res["rules"]), 2) and res["conditions"].shape == (10, CONDITION_FEATURES)
    cfg = compose_sim_config(over)
    for label, pol in (("min_feasible(4)", MinFeasible(4, block_search=block_search)),
                       ("para_max(16)", ParaMax(16, block_search=block_search))):
        i = res["rules"].index(label)
        for j, seed in enumerate((7, 8)):
            sim = build_simulation(cfg, seed=seed)
            while (job := sim.next_job()) is not None:
                sim.apply(pol.decide(job, sim.state()))
            assert res["blocking"][i, j] == sim.finalize().summary["blocking_rate"], (label, seed)


def test_oracle_rule_is_the_teacher_searchs_best_rule() -> None:
    from pacml.adaptive.train import oracle_rule

    over = [*SHORT, "horizon_s=30000"]
    for block_search in (0, 64):
        res = teacher_search(over, [7, 8], samples_per_episode=1, block_search=block_search)
        got = oracle_rule(over, [7, 8], block_search)
        best = int(np.argmin(res["blocking"].mean(axis=1)))
        assert got["rule"] == res["rules"][best] and got["per_seed"] == res["blocking"][best].tolist()
        assert got["rules"][got["rule"]] == min(got["rules"].values()) and set(got["rules"]) == set(res["rules"])


def test_block_placed_rules_rank_differently_in_the_teacher_search() -> None:
    """Placement is part of a rule: on beta B at the paper's load min_feasible(8) in blocks blocks
    fewer jobs than with first fit, and there it beats para_max (BENCHMARKS §10)."""
    over = ["scenario=paper", "beta=B", "horizon_s=300000", "progress=false"]  # 300 jobs
    # Seeds 1-8 in pairs: first fit 0.28-0.34, in blocks 0.22-0.24, para_max 0.25-0.27.
    plain, blocks = (teacher_search(over, [1, 2], samples_per_episode=2, block_search=b) for b in (0, 64))
    assert plain["rules"] == blocks["rules"]
    np.testing.assert_array_equal(plain["conditions"], blocks["conditions"])  # arrivals only
    mean = {b: dict(zip(r["rules"], r["blocking"].mean(axis=1), strict=True))
            for b, r in ((0, plain), (64, blocks))}
    assert mean[64]["min_feasible(8)"] < mean[0]["min_feasible(8)"] - 0.02
    assert mean[64]["min_feasible(8)"] < mean[64]["para_max(16)"] - 0.01


def test_window_changes_the_features_not_the_blocking_and_travels_with_the_checkpoint(tmp_path) -> None:
    over = [*SHORT, "horizon_s=30000"]
    short, long = (teacher_search(over, [7], samples_per_episode=10, window=w) for w in (4, 64))
    assert np.array_equal(short["blocking"], long["blocking"])
    assert not np.allclose(short["conditions"], long["conditions"])  # same samples, other estimates
    weights = SelectorWeights([(np.zeros((2, CONDITION_FEATURES + RULE_FEATURES)), np.zeros(2)),
                               (np.zeros((1, 2)), np.zeros(1))])
    save_adaptive(tmp_path / "adaptive.npz", weights, {"train_config": {"window": 4}})
    assert _agent(tmp_path / "adaptive.npz").tracker.window == 4
    save_adaptive(tmp_path / "adaptive.npz", weights, {"train_config": {}})  # trained before the option
    assert _agent(tmp_path / "adaptive.npz").tracker.window == 64


@pytest.mark.parametrize("over", [
    [*SHORT, "beta=D", "horizon_s=40000"],  # paper accounting: jobs running at the horizon are blocked
    [*SHORT, "beta=A", "arrivals=poisson", "mean_interarrival_s=600", "horizon_s=40000"],
    ["scenario=physical", "beta=D", "horizon_s=200", "progress=false"],  # drain accounting, block placement
])
def test_teacher_search_equals_one_simulation_per_rule(over) -> None:
    fast, full = teacher_search(over, [5, 6], samples_per_episode=4), teacher_search_full(over, [5, 6], samples_per_episode=4)
    if over[0] == "scenario=paper":  # placed in blocks, too (physical already places in blocks)
        np.testing.assert_array_equal(teacher_search(over, [5, 6], samples_per_episode=4, block_search=64)["blocking"],
                                      teacher_search_full(over, [5, 6], samples_per_episode=4, block_search=64)["blocking"])
    assert fast["rules"] == full["rules"]
    np.testing.assert_array_equal(fast["blocking"], full["blocking"])
    np.testing.assert_array_equal(fast["conditions"], full["conditions"])
    assert len(set(np.round(fast["blocking"][:, 0], 6))) > 1  # the rules differ here, so equality means something
    # The share blocked for running at the horizon (paper accounting only) agrees too, and is part of the blocking.
    np.testing.assert_allclose(fast["end_blocking"], full["end_blocking"], rtol=0, atol=1e-12)
    horizon = [float(o.split("=")[1]) for o in over if o.startswith("horizon_s=")][-1]
    assert fast["horizon_s"] == full["horizon_s"] == horizon
    assert np.all(fast["end_blocking"] <= fast["blocking"])
    assert (fast["end_blocking"].max() > 0) == ("scenario=paper" in over)


def _synthetic_results(n: int, rng: np.random.Generator) -> list[dict]:
    """Conditions whose best rule is rule 0 when condition feature 5 is high, else rule 2."""
    out = []
    rule_feats = np.random.default_rng(99).normal(size=(4, RULE_FEATURES)).astype(np.float32)  # same rules everywhere
    for _ in range(n):
        high = rng.random() < 0.5
        blocking = np.array([0.1, 0.2, 0.3, 0.25])[:, None] if high else np.array([0.3, 0.2, 0.1, 0.25])[:, None]
        conds = rng.normal(scale=0.1, size=(6, CONDITION_FEATURES)).astype(np.float32)
        conds[:, 5] += 1.0 if high else -1.0
        out.append({"blocking": blocking.repeat(2, axis=1), "rule_features": rule_feats, "conditions": conds,
                    "rules": ["a", "b", "c", "d"]})
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_neighbour_selector_learns_which_rule_a_condition_needs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    train_set, val_set = _synthetic_results(40, rng), _synthetic_results(20, rng)
    cfg = AdaptiveTrainConfig(neighbours=10)
    weights = SelectorWeights(_mlp(), None, neighbour_table(train_set, cfg))
    # The best single rule ("b") has regret 0.1 on every condition; the lookup must find the switch.
    # Fifteen of the 16 features are noise and dilute the distance: over seeds 0-59 its regret was
    # 0.007 on average and 0.032 at worst.
    assert baseline_regrets(val_set)["b"] == pytest.approx(0.1)
    assert selector_regret(weights, val_set) < 0.045
    assert selector_regret(SelectorWeights(_mlp()), val_set) > 0.05  # a constant score: 0.06-0.16


@pytest.mark.parametrize(("seed", "batch_rows"), [(0, 20000), (1, 20000), (2, 20000), (0, 60), (1, 60)])
def test_fit_learns_which_rule_a_condition_needs(tmp_path, seed: int, batch_rows: int) -> None:
    rng = np.random.default_rng(seed)
    train_set, val_set = _synthetic_results(40, rng), _synthetic_results(20, rng)  # 240 training rows
    cfg = AdaptiveTrainConfig(seed=seed, epochs=150, hidden=16, batch_rows=batch_rows)
    weights, stats = fit(cfg, train_set, val_set, tmp_path, deadline=float("inf"))
    # The best single rule ("b") has regret 0.1 on every condition; the fit must find the switch.
    assert baseline_regrets(val_set)["b"] == pytest.approx(0.1)
    assert stats["val_regret"] < 0.02
    r = val_set[0]
    pick = int(np.argmax(weights.scores(r["conditions"][0], r["rule_features"])))
    assert r["blocking"][pick, 0] == r["blocking"][:, 0].min()


def test_train_end_to_end_and_resume(tmp_path) -> None:
    cfg = AdaptiveTrainConfig(num_conditions=3, seeds_per_condition=1, jobs_per_episode=25, workers=1, epochs=10,
                              hidden=8, val_every=3)
    summary = train(cfg, tmp_path, progress=False)
    assert summary["conditions"] == 3 and (tmp_path / "adaptive.npz").is_file()
    assert load_adaptive(tmp_path / "adaptive.npz")[0].neighbours is None and "val_regret_mlp" not in summary
    reference = load_adaptive(tmp_path / "adaptive.npz")[0].reference  # for policy.shadow_novelty
    assert reference is not None and reference.shape[1] == CONDITION_FEATURES and len(reference) > 0
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()}
    again = train(cfg, tmp_path, progress=False)  # resume: nothing new to simulate
    assert again["conditions"] == 3
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()} == stamp


def test_refit_fits_on_another_runs_search_with_new_fit_settings(tmp_path) -> None:
    from omegaconf import OmegaConf

    from pacml.adaptive.selector import load_adaptive
    from pacml.adaptive.train import train_from_config

    source, refit = tmp_path / "source", tmp_path / "refit"
    base = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")
    base.pop("hydra")
    base.progress = False
    base.adaptive.update({"num_conditions": 3, "seeds_per_condition": 1, "jobs_per_episode": 25, "workers": 1,
                          "epochs": 10, "hidden": 8, "val_every": 3})
    train_from_config(base, source)
    stamp = {p.name: p.stat().st_mtime_ns for p in (source / "conditions").iterdir()}
    again = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")  # the defaults, as composed
    again.pop("hydra")
    again.progress = False
    again.refit = str(source)
    again.adaptive.update({"hidden": 4, "epochs": 12, "neighbours": 5})
    summary = train_from_config(again, refit, ["refit=x", "adaptive.hidden=4", "adaptive.epochs=12",
                                               "adaptive.neighbours=5"])
    assert summary["conditions"] == 3 and summary["refit_of"] == str(source)
    table = load_adaptive(refit / "adaptive.npz")[0].neighbours  # the lookup, fitted on the source's search
    assert table is not None and table.k == 5 and len(table.regret) == 2  # the 2 training conditions
    assert summary["val_regret"] >= 0.0 and summary["val_regret_mlp"] >= 0.0
    assert not (refit / "conditions").exists()  # nothing simulated
    assert {p.name: p.stat().st_mtime_ns for p in (source / "conditions").iterdir()} == stamp
    saved = OmegaConf.load(refit / "train_config.yaml")
    assert saved.refit == str(source)
    # The source's settings (search and fit), then the fit settings given on the command line.
    assert (saved.adaptive.num_conditions, saved.adaptive.val_every) == (3, 3)
    assert (saved.adaptive.hidden, saved.adaptive.epochs) == (4, 12)
    # Resuming the refit keeps its own fit settings (not the source's).
    resume = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")
    resume.pop("hydra")
    resume.resume = str(refit)
    train_from_config(resume, refit, [f"resume={refit}"])
    saved = OmegaConf.load(refit / "train_config.yaml")
    assert (saved.adaptive.hidden, saved.adaptive.epochs, saved.refit) == (4, 12, str(source))
    # A run saved with a retired setting resumes without it at the value that turned it off, and not
    # at any other (pacml/checkpoints/physical_adaptive_knn/train_config.yaml holds them, off).
    for key, off, on in (("tune_neighbours", False, True), ("label_horizon_s", None, 1.0e6),
                           ("jobs_per_server", 0, 4.0), ("minibatch_rows", None, 2000), ("size_spread_frac", 0.0, 1.0)):
        saved.adaptive[key] = off
        OmegaConf.save(saved, refit / "train_config.yaml")
        train_from_config(resume, refit, [f"resume={refit}"])
        saved.adaptive[key] = on
        OmegaConf.save(saved, refit / "train_config.yaml")
        with pytest.raises(ConfigError, match=f"adaptive.{key}.*retired"):
            train_from_config(resume, refit, [f"resume={refit}"])
        saved.adaptive.pop(key)
    assert load_adaptive(refit / "adaptive.npz")[0].layers[0][0].shape[0] == 4
    weights, _ = load_adaptive(refit / "adaptive.npz")
    assert weights.layers[0][0].shape[0] == 4  # the refit's own network


@pytest.mark.parametrize(("override", "message"), [
    ("adaptive.workers=0", "field 'adaptive.workers'"),
    ("+adaptive.nope=1", "field 'adaptive.nope': unknown key"),
    ("resume=/no/such/run", "field 'resume': no pacml train-adaptive run"),
    ("refit=/no/such/run", "field 'refit': no pacml train-adaptive teacher search"),
    ("adaptive.minibatch_rows=2000", "field 'adaptive.minibatch_rows': was retired"),
    ("adaptive.neighbours=0", "field 'adaptive.neighbours'"),
    ("refit=SOURCE adaptive.seed=3", "field 'adaptive.seed': a refit reuses"),
    ("adaptive.block_search=-1", "field 'adaptive.block_search'"),
    ("refit=SOURCE adaptive.block_search=64", "field 'adaptive.block_search': a refit reuses"),
])
def test_console_command_bad_input_is_one_line(tmp_path, override: str, message: str) -> None:
    source = tmp_path / "source"
    (source / "conditions").mkdir(parents=True)
    (source / "train_config.yaml").write_text("adaptive: {}\n")
    (source / "conditions" / "0000.npz").write_bytes(b"")
    args = override.replace("SOURCE", str(source)).split()
    proc = subprocess.run([sys.executable, "-c", "from pacml.adaptive.train import main; main()", *args,
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pacml train-adaptive: error: {message}") and proc.stderr.count("\n") == 1


def test_a_metrics_file_without_rows_still_names_its_columns(tmp_path) -> None:
    # A fit stopped before its first logged epoch writes the header alone (as the DictWriter did).
    write_metrics_csv(tmp_path / "m.csv", [], columns=("epoch", "loss", "train_regret", "val_regret"))
    assert (tmp_path / "m.csv").read_text().splitlines() == ["epoch,loss,train_regret,val_regret"]
    write_metrics_csv(tmp_path / "m.csv", [{"b": 1, "a": 2}], sort_columns=True, columns=("z",))
    assert (tmp_path / "m.csv").read_text().splitlines() == ["a,b", "2,1"]
