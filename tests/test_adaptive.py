"""The adaptive agent (pacml/adaptive.py): rules, condition features, the selector, training."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pacml.adaptive import (
    CONDITION_FEATURES,
    RULE_FEATURES,
    AdaptivePolicy,
    ConditionTracker,
    Rule,
    SelectorWeights,
    load_adaptive,
    rule_candidates,
    rule_features,
    sample_condition,
    save_adaptive,
    teacher_search,
)
from pacml.adaptive_train import AdaptiveTrainConfig, baseline_regrets, fit, train
from pacml.env import compose_sim_config
from simulator.build import build_simulation, build_topology
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible, ParaMax
from simulator.policy import Decision

SHORT = ["scenario=paper", "beta=B", "horizon_s=60000", "progress=false"]


class _Prefer:
    """Stand-in selector weights that score one rule's feature row 1 and every other 0."""

    def __init__(self, label: str, topology) -> None:
        rules = rule_candidates(topology)
        self.row = rule_features(rules[[r.label for r in rules].index(label)], topology)

    def scores(self, cond, rules):
        return np.all(rules == self.row, axis=1).astype(float)


def test_rule_candidates_cover_every_offered_degree() -> None:
    small = build_topology(compose_sim_config(["scenario=paper"]))
    assert [r.label for r in rule_candidates(small)] == [
        "para_max(16)", *(f"min_feasible({k})" for k in small.degrees)]
    big = build_topology(compose_sim_config(["scenario=paper", "cluster=ramp512"]))
    labels = [r.label for r in rule_candidates(big)]
    assert labels[:2] == ["para_max(16)", "para_max(64)"] and len(labels) == 2 + len(big.degrees)
    # Size-independent: the same rule has the same log-degree feature on both clusters.
    assert rule_features(Rule("min_feasible", 4), small)[1] == rule_features(Rule("min_feasible", 4), big)[1]


def test_rules_decide_as_the_heuristics_they_name() -> None:
    cfg = compose_sim_config(SHORT)
    sim = build_simulation(cfg, seed=3)
    heuristics = {Rule("min_feasible", 4): MinFeasible(4), Rule("min_feasible", 1): MinFeasible(1),
                  Rule("para_max", 16): ParaMax(16)}
    n = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        for rule, heuristic in heuristics.items():
            assert rule.degree(state) == heuristic.decide(job, state).degree
        sim.apply(Decision(Rule("min_feasible", 6).degree(state)))
        n += 1
    assert n > 30


def test_condition_features_know_the_load_and_ignore_decisions() -> None:
    cfg = compose_sim_config([*SHORT, "mean_interarrival_s=500", "horizon_s=40000"])
    topo = build_topology(cfg)
    feats = []
    for degree_rule in (Rule("min_feasible", 1), Rule("para_max", 16)):
        sim = build_simulation(cfg, seed=5)
        tracker = ConditionTracker()
        seqs = []
        while (job := sim.next_job()) is not None:
            tracker.observe(job)
            seqs.append(job.sequential_jct_s)
            sim.apply(Decision(degree_rule.degree(sim.state())))
        feats.append(tracker.features(topo))
    assert np.array_equal(feats[0], feats[1])  # the policy's decisions do not enter
    f = feats[0]
    assert f.shape == (CONDITION_FEATURES,)
    # Fixed arrivals: no burstiness; load = mean sequential JCT / gap / servers (last 64 jobs).
    assert f[6] == pytest.approx(0.0, abs=1e-9)
    load = np.mean(seqs[-64:]) / 500.0 / topo.num_servers
    assert f[5] == pytest.approx(np.log10(load) / 2.0, rel=1e-5)


def test_selector_picks_its_rule_and_then_behaves_exactly_like_it() -> None:
    cfg = compose_sim_config(SHORT)
    topo = build_topology(cfg)
    for label, heuristic in (("min_feasible(6)", MinFeasible(6)), ("para_max(16)", ParaMax(16))):
        policy = AdaptivePolicy(weights=_Prefer(label, topo))
        blocking = []
        for pol in (policy, heuristic):
            sim = build_simulation(cfg, seed=11)
            pol.reset(11)
            while (job := sim.next_job()) is not None:
                sim.apply(pol.decide(job, sim.state()))
            blocking.append(sim.finalize().summary["blocking_rate"])
        assert blocking[0] == blocking[1]
        assert set(policy.chosen) == {label}


def test_checkpoint_roundtrip_and_bad_files(tmp_path) -> None:
    rng = np.random.default_rng(0)
    width = CONDITION_FEATURES + RULE_FEATURES
    w = SelectorWeights([(rng.normal(size=(8, width)), rng.normal(size=8)), (rng.normal(size=(1, 8)), rng.normal(size=1))])
    path = save_adaptive(tmp_path / "a.npz", w, {"x": 1})
    back, meta = load_adaptive(path)
    cond = rng.normal(size=CONDITION_FEATURES).astype(np.float32)
    rules = rng.normal(size=(5, RULE_FEATURES)).astype(np.float32)
    assert np.array_equal(back.scores(cond, rules), w.scores(cond, rules)) and meta["x"] == 1
    old = save_adaptive(tmp_path / "old.npz", SelectorWeights([(np.zeros((1, width - 2)), np.zeros(1))]), {})
    with pytest.raises(ConfigError, match="retrain it"):
        load_adaptive(old)
    (tmp_path / "bad.npz").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read adaptive checkpoint"):
        load_adaptive(tmp_path / "bad.npz")
    with pytest.raises(ConfigError, match="no adaptive checkpoint"):
        AdaptivePolicy("no/such/run")


def test_sampled_conditions_build_and_are_reproducible() -> None:
    draws = [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    assert draws == [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    for over in draws:
        topo = build_topology(compose_sim_config(over))
        assert 32 <= topo.num_servers <= 512
        assert not any(g in o for o in over for g in ("densenet121", "inception_v3", "resnet50", "resnext50"))


def test_teacher_search_matches_the_heuristic_runs() -> None:
    over = [*SHORT, "horizon_s=30000"]
    res = teacher_search(over, [7, 8], samples_per_episode=5)
    assert res["blocking"].shape == (len(res["rules"]), 2) and res["conditions"].shape == (10, CONDITION_FEATURES)
    cfg = compose_sim_config(over)
    i = res["rules"].index("min_feasible(4)")
    for j, seed in enumerate((7, 8)):
        sim = build_simulation(cfg, seed=seed)
        pol = MinFeasible(4)
        while (job := sim.next_job()) is not None:
            sim.apply(pol.decide(job, sim.state()))
        assert res["blocking"][i, j] == sim.finalize().summary["blocking_rate"]


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
def test_fit_learns_which_rule_a_condition_needs(tmp_path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    train_set, val_set = _synthetic_results(40, rng), _synthetic_results(20, rng)
    cfg = AdaptiveTrainConfig(seed=seed, epochs=150, hidden=16)
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
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()}
    again = train(cfg, tmp_path, progress=False)  # resume: nothing new to simulate
    assert again["conditions"] == 3
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()} == stamp


@pytest.mark.parametrize(("override", "message"), [
    ("adaptive.workers=0", "field 'adaptive.workers'"),
    ("+adaptive.nope=1", "field 'adaptive.nope': unknown key"),
    ("resume=/no/such/run", "field 'resume': no pacml-train-adaptive run"),
])
def test_console_command_bad_input_is_one_line(tmp_path, override: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-c", "from pacml.adaptive_train import main; main()", override,
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pacml-train-adaptive: error: {message}") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("cluster", ["ramp32", "ramp512"])
def test_shipped_adaptive_agent_loads_and_acts(cluster: str) -> None:
    """The shipped agent holds its training record and decides a short episode on any cluster with
    rules that cluster offers."""
    from pacml.policy import SHIPPED_DIR

    for file in ("adaptive.npz", "train_config.yaml", "metrics.csv", "train_summary.json"):
        assert (SHIPPED_DIR / "paper_adaptive" / file).is_file(), file
    policy = AdaptivePolicy("paper_adaptive")
    assert policy.meta["conditions"] > 100
    gap = 1000.0 if cluster == "ramp32" else 62.5
    cfg = compose_sim_config(["scenario=paper", "beta=C", f"cluster={cluster}", f"mean_interarrival_s={gap}",
                              f"horizon_s={60 * gap}", "progress=false"])
    result = build_simulation(cfg, seed=0).run(policy)
    topo = build_topology(cfg)
    # A short episode's start is noisy (the condition estimate has few arrivals): only a sanity bound.
    assert result.summary["num_jobs_arrived"] >= 50 and result.summary["blocking_rate"] < 0.75
    assert set(policy.chosen) <= {r.label for r in rule_candidates(topo)}
